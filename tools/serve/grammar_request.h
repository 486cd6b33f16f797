// A request's output constraint: llama-server's `grammar` (GBNF text) and
// `json_schema` (a JSON Schema), or OpenAI's `response_format` ({"type":
// "text"}, {"type": "json_object"}, {"type": "json_schema", "json_schema":
// {"name", "schema", "strict"}}; llama-server's "schema" beside "type" is
// read too). At most one of them.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "runtime/chat/chat_template.h"
#include "runtime/grammar/grammar.h"

namespace tandem::serve {

// The compiled grammar the request asks for (nullptr: free text). Reads
// the raw body again with its keys in order, so a schema's properties are
// generated in the order the client wrote them. ApiError(400) naming the
// field (param) for a bad grammar, an unsupported schema keyword (with
// where it stands) or more than one constraint.
std::shared_ptr<const grammar::Grammar> request_grammar(const std::string& raw_body);

// tool_choice "required" or a named function (`only`; "" for any tool):
// the reply is a call (or several, `parallel`) in the template's format
// (runtime/chat/tool_grammar.h), each call's arguments held to its tool's
// `parameters` schema (runtime/grammar/json_schema.h). A schema the
// converter refuses: with the tool's "strict": true, ApiError(400) naming
// tools[i].function.parameters and where in it; without, that tool's
// arguments are any JSON object (as before schemas were followed). So are
// those of a schema whose top is anyOf, oneOf, enum, const or a $ref (the
// arguments must be an object); one without a type is read as an object.
std::shared_ptr<const grammar::Grammar> tool_choice_grammar(const chat::ChatTemplate& t,
                                                            const nlohmann::ordered_json& tools, std::string_view only,
                                                            bool parallel);

}  // namespace tandem::serve
