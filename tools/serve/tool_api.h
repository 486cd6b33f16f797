// Tool calls in /v1/chat/completions, OpenAI's way: the request's `tools`,
// `tool_choice` and `parallel_tool_calls`, the `tool_calls` of assistant
// messages and the `tool_call_id`/`name` of tool messages in the history,
// all checked (a bad field is an ApiError(400) naming it), and the ids
// given to the calls a reply makes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/chat/chat_template.h"
#include "runtime/chat/tool_calls.h"
#include "tools/serve/openai_api.h"

namespace tandem::serve {

enum class ToolChoice { Auto, None, Required, Named };

struct ToolRequest {
    // The tools as the client wrote them (keys in its order: the template
    // prints them for the model); null when none were given.
    nlohmann::ordered_json tools;
    std::vector<std::string> names;  // each tool's function name
    ToolChoice choice = ToolChoice::Auto;
    std::string named;               // the function of a Named choice
    bool parallel = true;            // parallel_tool_calls
    // Whether the reply is searched for calls: tools were given and
    // tool_choice is not "none" (as llama-server: with "none" the tools are
    // still shown to the template, and the reply is all content).
    bool active() const { return !tools.is_null() && choice != ToolChoice::None; }
};

// OpenAI's (and Anthropic's) rule for a tool's name: 1 to 64 of
// a-z, A-Z, 0-9, _ and -.
bool valid_function_name(const std::string& s);

// Reads tools, tool_choice and parallel_tool_calls from the request body
// (`raw_body` its text, parsed again for the tools' key order). ApiError(400)
// naming the field: tools not an array of {type: "function", function:
// {name, description?, parameters?}}, a name that is not 1-64 of
// [a-zA-Z0-9_-] or is repeated, parameters not a JSON Schema object,
// tool_choice not "auto"/"none"/"required"/{type: "function", function:
// {name}} or naming no tool, "required" or a named function without tools.
ToolRequest parse_tool_request(const nlohmann::json& body, const std::string& raw_body);

// The tool fields of messages[i] (`field` is "messages[i]"): an assistant's
// tool_calls ([{id, type: "function", function: {name, arguments}}], the
// arguments JSON text, or an object taken as its JSON), a tool message's
// tool_call_id and name. ApiError(400) naming the field when one is bad.
void read_message_tools(const nlohmann::json& message, const std::string& field, chat::Message& out);

// Refuses (ApiError 400) what cannot be served: tools active with a
// template that writes no calls Tandem knows (param "tools"; the message
// says to send `none_choice`, the route's spelling of tool_choice none).
// tool_choice "required" or a named function is served by holding the
// reply to runtime/chat/tool_grammar.h's grammar (completions.cpp).
void check_tool_support(const ToolRequest& r, chat::ToolFormat format,
                        std::string_view none_choice = "tool_choice \"none\"");

// A reply's calls as the answer shows them, whole or as they stream: the
// first only when parallel_tool_calls is false, and an id for each the
// model gave none (Mistral's templates take 9 letters and digits, others
// `prefix` and 24, drawn from `seed`: one per request; OpenAI's ids start
// "call_", Anthropic's "toolu_").
class CallTaker {
public:
    CallTaker(bool parallel, chat::ToolFormat format, uint64_t seed, std::string prefix = "call_")
        : parallel_(parallel), format_(format), seed_(seed), prefix_(std::move(prefix)) {}
    // The next calls of the reply, those taken, with their ids.
    std::vector<chat::ToolCall> take(std::span<const chat::ToolCall> calls);
    size_t taken() const { return taken_; }  // OpenAI's `index` of the next one

private:
    bool parallel_;
    chat::ToolFormat format_;
    uint64_t seed_;
    std::string prefix_;
    size_t seen_ = 0, taken_ = 0;
};

// An id for call `index` of a reply: `length` letters and digits drawn from
// `seed` and the index.
std::string call_id(uint64_t seed, size_t index, size_t length);

// A streamed chat chunk whose delta holds `calls` (OpenAI's streaming
// shape: {index, id, type, function: {name, arguments}} each), numbered
// from first_index.
nlohmann::json tool_calls_chunk(const ResponseIds& ids, std::span<const chat::ToolCall> calls, size_t first_index);

}  // namespace tandem::serve
