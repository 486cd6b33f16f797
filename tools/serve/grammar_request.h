// A request's output constraint: llama-server's `grammar` (GBNF text) and
// `json_schema` (a JSON Schema), or OpenAI's `response_format` ({"type":
// "text"}, {"type": "json_object"}, {"type": "json_schema", "json_schema":
// {"name", "schema", "strict"}}; llama-server's "schema" beside "type" is
// read too). At most one of them.
#pragma once

#include <memory>
#include <string>

#include "runtime/grammar/grammar.h"

namespace tandem::serve {

// The compiled grammar the request asks for (nullptr: free text). Reads
// the raw body again with its keys in order, so a schema's properties are
// generated in the order the client wrote them. ApiError(400) naming the
// field (param) for a bad grammar, an unsupported schema keyword (with
// where it stands) or more than one constraint.
std::shared_ptr<const grammar::Grammar> request_grammar(const std::string& raw_body);

}  // namespace tandem::serve
