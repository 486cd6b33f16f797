#include "tools/serve/grammar_request.h"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/chat/tool_grammar.h"
#include "runtime/grammar/json_schema.h"
#include "tools/serve/openai_api.h"

namespace tandem::serve {

namespace {

using ojson = nlohmann::ordered_json;

std::string kind_of(const ojson& v) {
    if (v.is_string()) return "a string";
    if (v.is_object()) return "an object";
    if (v.is_array()) return "an array";
    if (v.is_boolean()) return "a boolean";
    if (v.is_number()) return "a number";
    return "null";
}

std::shared_ptr<const grammar::Grammar> from_schema(const ojson& schema, const std::string& field) {
    try {
        return grammar::compile_json_schema(schema);
    } catch (const grammar::SchemaError& e) {
        throw ApiError(400, fmt::format("'{}': {}", field, e.what()), e.path().empty() ? field : field + "." + e.path());
    } catch (const grammar::GrammarError& e) {
        throw ApiError(400, fmt::format("'{}': the schema gives a grammar the matcher refuses: {}", field, e.what()), field);
    }
}

std::shared_ptr<const grammar::Grammar> from_response_format(const ojson& rf) {
    if (!rf.is_object()) {
        throw ApiError(400, fmt::format("'response_format': expected an object with a type, found {}", kind_of(rf)),
                       "response_format");
    }
    const auto type = rf.find("type");
    if (type == rf.end() || !type->is_string()) {
        throw ApiError(400, "'response_format.type': expected \"text\", \"json_object\" or \"json_schema\"",
                       "response_format.type");
    }
    const std::string t = type->get<std::string>();
    if (t == "text") return nullptr;
    if (t == "json_object") {
        const auto schema = rf.find("schema");  // llama-server's extension
        if (schema != rf.end() && !schema->is_null()) return from_schema(*schema, "response_format.schema");
        return grammar::compile_grammar(grammar::json_object_gbnf());
    }
    if (t != "json_schema") {
        throw ApiError(400,
                       fmt::format("'response_format.type': expected \"text\", \"json_object\" or \"json_schema\", "
                                   "found \"{}\"",
                                   t),
                       "response_format.type");
    }
    if (const auto schema = rf.find("schema"); schema != rf.end()) return from_schema(*schema, "response_format.schema");
    const auto js = rf.find("json_schema");
    if (js == rf.end() || !js->is_object()) {
        throw ApiError(400, "'response_format.json_schema': expected an object with name and schema",
                       "response_format.json_schema");
    }
    const auto schema = js->find("schema");
    // OpenAI's schema is optional: without one, any JSON object.
    if (schema == js->end() || schema->is_null()) return grammar::compile_grammar(grammar::json_object_gbnf());
    return from_schema(*schema, "response_format.json_schema.schema");
}

}  // namespace

std::shared_ptr<const grammar::Grammar> request_grammar(const std::string& raw_body) {
    const ojson body = ojson::parse(raw_body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) return nullptr;  // parse_body has answered this already
    const auto given = [&](const char* key) {
        const auto it = body.find(key);
        return it != body.end() && !it->is_null() ? &*it : nullptr;
    };
    const ojson* gbnf = given("grammar");
    const ojson* schema = given("json_schema");
    const ojson* rf = given("response_format");
    const bool rf_constrains = rf && !(rf->is_object() && rf->value("type", "") == "text");
    if ((gbnf != nullptr) + (schema != nullptr) + rf_constrains > 1) {
        throw ApiError(400, "give one of 'grammar', 'json_schema' and 'response_format', not several",
                       gbnf ? "grammar" : "json_schema");
    }
    if (gbnf) {
        if (!gbnf->is_string()) {
            throw ApiError(400, fmt::format("'grammar': expected GBNF text (a string), found {}", kind_of(*gbnf)), "grammar");
        }
        if (gbnf->get<std::string>().empty()) return nullptr;  // llama-server's "no grammar"
        try {
            return grammar::compile_grammar(gbnf->get<std::string>());
        } catch (const grammar::GrammarError& e) {
            throw ApiError(400, fmt::format("'grammar': {}", e.what()), "grammar");
        }
    }
    if (schema) return from_schema(*schema, "json_schema");
    if (rf) return from_response_format(*rf);
    return nullptr;
}

constexpr const char* kTopChoices[] = {"anyOf", "oneOf", "enum", "const", "$ref"};

std::shared_ptr<const grammar::Grammar> tool_choice_grammar(const chat::ChatTemplate& t, const ojson& tools,
                                                            std::string_view only, bool parallel) {
    // The tools whose schemas are followed keep their parameters; the
    // others lose them here, and tool_call_grammar gives them any object.
    ojson held = tools;
    for (size_t i = 0; i < held.size(); ++i) {
        ojson& fn = held[i]["function"];
        const auto params = fn.find("parameters");
        if (params == fn.end() || (!only.empty() && fn.value("name", "") != only)) continue;
        // The reply parser takes a call's arguments only as an object: a
        // schema whose top is a choice (anyOf, enum, a $ref) gives any
        // object, one without a type is read as an object.
        const bool choice = std::any_of(std::begin(kTopChoices), std::end(kTopChoices),
                                        [&](const char* k) { return params->contains(k); });
        if (!params->is_object() || choice) {
            fn.erase("parameters");
            continue;
        }
        if (!params->contains("type")) (*params)["type"] = "object";
        const std::string field = fmt::format("tools[{}].function.parameters", i);
        const bool strict = fn.value("strict", false);
        try {
            grammar::compile_json_schema(*params);  // a GrammarError too (a $ref cycle that consumes nothing)
        } catch (const grammar::SchemaError& e) {
            if (strict) {
                throw ApiError(400, fmt::format("'{}': {}", field, e.what()), e.path().empty() ? field : field + "." + e.path());
            }
            fn.erase("parameters");
        } catch (const grammar::GrammarError& e) {
            if (strict) throw ApiError(400, fmt::format("'{}': the schema gives a grammar the matcher refuses: {}", field, e.what()), field);
            fn.erase("parameters");
        }
    }
    return grammar::compile_grammar(chat::tool_call_grammar(t, held, only, parallel, grammar::json_schema_rules));
}

}  // namespace tandem::serve
