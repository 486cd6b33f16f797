// JSON Schema -> GBNF, for OpenAI's response_format json_schema (and
// llama.cpp's -j/--json-schema). Covers what OpenAI's structured outputs
// document, except the keywords listed as refused below:
//
//  - type: object, array, string, integer, number, boolean, null, or a
//    list of them; no type: any JSON value (or what properties/items say);
//  - object: properties (emitted in the schema's order), required (the
//    others may be left out), additionalProperties false or absent (no
//    other keys, as llama.cpp reads an absent one), true or a schema;
//  - array: items, minItems, maxItems;
//  - string: minLength, maxLength, format date, time, date-time, uuid,
//    ipv4, email;
//  - enum, const, anyOf, oneOf (as anyOf: exclusivity is not enforced),
//    $ref to "#", "#/$defs/..." or "#/definitions/..." (recursion allowed);
//  - annotations ignored: title, description, $schema, $id, $comment,
//    default, examples, deprecated, readOnly, writeOnly, strict.
//
// Refused, by name, with where they stand: every other keyword, among them
// pattern, minimum, maximum, exclusiveMinimum, exclusiveMaximum,
// multipleOf, allOf, not, if/then/else, patternProperties,
// propertyNames, minProperties, maxProperties, uniqueItems, contains,
// prefixItems, and other string formats.
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

// GBNF for any JSON object (response_format json_object).
std::string json_object_gbnf();

struct Grammar;
// json_schema_to_gbnf, compiled (a $ref cycle that consumes nothing, such
// as a definition that is only a $ref to itself, is a GrammarError).
std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::ordered_json& schema);

}  // namespace tandem::grammar
