// Anthropic's content blocks both ways, for /v1/messages (anthropic_api.h):
// a request's conversation (system, messages of text, tool_use and
// tool_result blocks, tools, tool_choice) read into the chat messages and
// the OpenAI-shaped ToolRequest the chat completions route uses, and an
// answer's text and tool calls written as content blocks, whole or as
// streamed events.
//
// The mapping:
//   tools [{name, description?, input_schema, type?: "custom"}]
//       -> [{type: "function", function: {name, description?, parameters: input_schema}}]
//   tool_choice {type: "auto" | "any" | "tool" (name) | "none", disable_parallel_tool_use?}
//       -> auto | required | named | none, parallel = !disable_parallel_tool_use
//   an assistant's {type: "tool_use", id, name, input}
//       -> a tool call {id, name, arguments: input's JSON text}
//   a user's {type: "tool_result", tool_use_id, content?, is_error?}
//       -> a "tool" message {tool_call_id, name: the tool_use's, content} (its
//          text prefixed "Error: " when is_error), before the turn's text
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/chat/chat_template.h"
#include "tools/serve/tool_api.h"

namespace tandem::serve {

// What the prompt is made of: the messages (the system text first, when
// given) and the tools, as the chat template takes them.
struct Conversation {
    std::vector<chat::Message> messages;
    std::string prefill;  // a last assistant turn of text: the reply goes on from it
    ToolRequest tools;
};

// Reads system, messages, tools and tool_choice; `raw_body` is the body's
// text, read again for the order of the input schemas' keys (the template
// prints them); empty: body's own (sorted) order. ApiError(400) naming the
// field: content not a string or an array of blocks, a block type other
// than text (and tool_use in an assistant turn, tool_result in a user's),
// a tool_result answering no earlier tool_use, a last assistant turn with
// tool_use blocks, a tool other than a custom one, a bad or repeated tool
// name, an input_schema that is not an object schema, a tool_choice
// naming no tool or forcing a call without tools.
Conversation parse_conversation(const nlohmann::json& body, std::string_view raw_body = {});

// A call's arguments as a tool_use block's `input`: the object they are
// the JSON text of; arguments that are not one (a model's slip) are kept
// whole as {"arguments": their text}.
nlohmann::json tool_input(const std::string& arguments);
// {type: "tool_use", id, name, input}.
nlohmann::json tool_use_block(const chat::ToolCall& call);
// An answer's content: a text block (when there is text, or nothing else),
// then a tool_use block for each call.
nlohmann::json content_blocks(const std::string& text, std::span<const chat::ToolCall> calls);

// The content blocks of a streamed answer as Anthropic's events
// (content_block_start, content_block_delta, content_block_stop), each
// block numbered in order: text opens a text block when none is open, a
// call closes it and is a tool_use block of its own (started with an
// empty input, its arguments in one input_json_delta), finish() closes
// the last block (and gives an empty text block when there was none).
class BlockEvents {
public:
    explicit BlockEvents(CallTaker taker) : taker_(std::move(taker)) {}
    std::string open_text();  // a text block now (the route opens one at once when no tools are offered)
    std::string text(const std::string& delta);
    std::string calls(std::span<const chat::ToolCall> calls);  // as the parser completes them; ids given here
    std::string finish();
    bool called() const { return taker_.taken() > 0; }

private:
    std::string close_text();
    CallTaker taker_;
    int64_t next_ = 0;  // the next block's index
    bool text_open_ = false;
};

}  // namespace tandem::serve
