// JSON Schema -> GBNF, for OpenAI's response_format json_schema, tool
// parameters (runtime/chat/tool_grammar.h) and llama.cpp's -j/--json-schema.
// Covers what OpenAI's structured outputs document; everything the grammar
// accepts is valid under the schema (where a keyword cannot be matched
// exactly, the grammar takes a part of what it allows):
//
//  - type: object, array, string, integer, number, boolean, null, or a
//    list of them; no type: any JSON value (or what properties, items,
//    string or number keywords say);
//  - object: properties (emitted in the schema's order), required (the
//    others may be left out), additionalProperties false or absent (no
//    other keys, as llama.cpp reads an absent one), true or a schema;
//  - array: items, minItems, maxItems;
//  - string: one of minLength/maxLength, pattern (regex_gbnf.h: an
//    ECMAScript subset; an unanchored side takes any characters) or
//    format: date, time, date-time, duration, uuid, ipv4, ipv6 (full or
//    with "::" and at most six groups), email, hostname (labels of at most
//    30 characters, at most 8, the last starting with a letter);
//  - integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum, any
//    number within +-1e18 (rounded inward), as an exact digit grammar
//    (number_range.h); number: the same bounds when they are whole
//    numbers (no exponent then); multipleOf 1 for either (an integer);
//  - enum, const, anyOf, oneOf (as anyOf: exclusivity is not enforced),
//    $ref to "#", "#/$defs/..." or "#/definitions/..." (recursion allowed);
//  - annotations ignored: title, description, $schema, $id, $comment,
//    default, examples, deprecated, readOnly, writeOnly, strict.
//
// Refused, by name, with where they stand (SchemaError): every other
// keyword, among them allOf, not, if/then/else, patternProperties,
// propertyNames, minProperties, maxProperties, uniqueItems, contains,
// prefixItems; multipleOf other than 1; fractional bounds on a number
// (e.g. minimum 0.5; an integer takes them), draft 4's boolean
// exclusiveMinimum/exclusiveMaximum, bounds past +-1e18; other string
// formats; two of format, pattern and minLength/maxLength on one string;
// the regex features regex_gbnf.h lists (backreferences, lookaround, \b).
//
// Whitespace between tokens is limited (a space, or a line break and up to
// 20 spaces or tabs), numbers to 16 digits, so a model cannot fill its
// reply with blanks or digits.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/common/error.h"

namespace tandem::grammar {

// A schema the converter refuses: `path` is where ("properties.tags.items",
// "" for the top), the message names the keyword and that path.
class SchemaError : public Error {
public:
    SchemaError(std::string path, const std::string& message) : Error(message), path_(std::move(path)) {}
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

// GBNF whose root matches exactly the JSON texts (in the whitespace above)
// valid under `schema`. An ordered_json keeps the properties' order.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);

// The same rules with `rule` in place of root and the name of every other
// rule prefixed with "rule-" ("args-0", "args-0-space"): to sit inside a
// bigger grammar (a tool's arguments in a call).
std::string json_schema_rules(const nlohmann::ordered_json& schema, const std::string& rule);

// GBNF for any JSON object (response_format json_object).
std::string json_object_gbnf();

struct Grammar;
// json_schema_to_gbnf, compiled (a $ref cycle that consumes nothing, such
// as a definition that is only a $ref to itself, is a GrammarError).
std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::ordered_json& schema);

}  // namespace tandem::grammar
