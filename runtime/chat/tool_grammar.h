// Where a grammar holds generation to a tool call (tool_choice "required"
// or a named function): the GBNF text (llama.cpp's syntax) of "one call, or
// several with parallel calls, in this template family's format, to these
// tools". tandem serve compiles it and masks the sampler with it
// (tools/serve/grammar_request.h's tool_choice_grammar).
//
// Each tool's arguments are the rule `args-I`: given a JSON-Schema-to-GBNF
// converter (grammar::json_schema_rules), the tool's `parameters` schema;
// without one, or for a tool without parameters, any JSON object (the call
// then always parses).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "runtime/chat/chat_template.h"
#include "runtime/chat/tool_calls.h"

namespace tandem::chat {

// GBNF rules defining `rule` as the JSON text `schema` allows (the rules it
// needs besides may use `rule` as a prefix of their names).
using SchemaRules = std::function<std::string(const nlohmann::ordered_json& schema, const std::string& rule)>;

// The grammar's text, rule `root` first. tools: OpenAI's list; only: the
// one function allowed ("" for any of them); parallel: one call or more.
// Throws tandem::Error for a format with no calls (ToolFormat::None).
std::string tool_call_grammar(const ChatTemplate& t, const nlohmann::ordered_json& tools, std::string_view only,
                              bool parallel, const SchemaRules& schema_rules = {});

}  // namespace tandem::chat
