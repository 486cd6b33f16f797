// Anthropic's Messages API (POST /v1/messages) on the scheduler and chat
// template the OpenAI routes use: `messages` (user and assistant turns, a
// string or content blocks each: text, an assistant's tool_use, a user's
// tool_result), `system` (a string or text blocks), `tools` and
// `tool_choice` (anthropic_content.h maps them onto the chat completions
// route's tools), `max_tokens` (required, as Anthropic requires it),
// `temperature` (0..1, default 1), `top_p`, `top_k`, `stop_sequences`,
// `stream`. A last assistant turn is a prefill: the reply continues it.
// The answer is a message whose content is a text block and a tool_use
// block per call the model made, `stop_reason` "end_turn", "tool_use",
// "max_tokens" or "stop_sequence" (with the `stop_sequence` that ended
// it), and `usage` {input_tokens, output_tokens}; streamed, Anthropic's
// server-sent events (message_start, content_block_start, ping,
// content_block_delta with text_delta or input_json_delta,
// content_block_stop, message_delta, message_stop).
// POST /v1/messages/count_tokens takes the same body (max_tokens and the
// sampling fields aside) and answers {"input_tokens": N}, the prompt
// tokens /v1/messages would evaluate for it.
// Errors are {"type": "error", "error": {"type", "message"}}. Refused
// with a 400 naming the field: `thinking` other than disabled, content
// blocks other than those above, tools other than custom ones.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/chat/chat_template.h"
#include "runtime/serving/scheduler.h"
#include "tools/serve/anthropic_content.h"
#include "tools/serve/openai_api.h"

namespace tandem::serve {

// {"type": "error", "error": {"type", "message"}}, the type Anthropic's
// name for the HTTP status (invalid_request_error, authentication_error,
// not_found_error, request_too_large, overloaded_error, api_error...).
nlohmann::json anthropic_error(int status, const std::string& message);

struct MessagesRequest {
    Conversation conversation;  // messages, prefill and tools
    std::vector<std::string> stop_sequences;
    GenerationParams params;    // max_tokens always set; stop holds stop_sequences
};

// Throws ApiError(400) naming the field. raw_body: as parse_conversation.
MessagesRequest parse_messages_request(const nlohmann::json& body, uint64_t default_seed,
                                       std::string_view raw_body = {});

// Why a message ended, as Anthropic says it, from its job's last event:
// "max_tokens" for a length limit, "tool_use" when the reply made calls
// (`called`), "stop_sequence" (and which) when one of the request's stop
// sequences ended it, else "end_turn".
struct StopReason {
    std::string reason;
    nlohmann::json sequence;  // the stop sequence, or null
};
StopReason stop_reason(const Event& last, const std::vector<std::string>& stop_sequences, bool called = false);

// The whole answer: the text and the calls (with their ids) as content blocks.
nlohmann::json message_response(const std::string& id, const std::string& model, const std::string& text,
                                const StopReason& stop, const Usage& u, std::span<const chat::ToolCall> calls = {});

// One server-sent event: "event: <data.type>\ndata: <json>\n\n".
std::string anthropic_event(const nlohmann::json& data);

}  // namespace tandem::serve
