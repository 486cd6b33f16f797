// Anthropic's Messages API (POST /v1/messages) on the scheduler and chat
// template the OpenAI routes use: `messages` (user and assistant turns, a
// string or text blocks each), `system` (a string or text blocks),
// `max_tokens` (required, as Anthropic requires it), `temperature` (0..1,
// default 1), `top_p`, `top_k`, `stop_sequences`, `stream`. A last
// assistant turn is a prefill: the reply continues it. The answer is a
// message with one text block, `stop_reason` "end_turn", "max_tokens" or
// "stop_sequence" (with the `stop_sequence` that ended it), and `usage`
// {input_tokens, output_tokens}; streamed, Anthropic's server-sent events
// (message_start, content_block_start, ping, content_block_delta,
// content_block_stop, message_delta, message_stop). Errors are
// {"type": "error", "error": {"type", "message"}}.
// Refused with a 400 naming the field: `tools`, `tool_choice`, `thinking`
// other than disabled, content blocks other than text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/chat/chat_template.h"
#include "runtime/serving/scheduler.h"
#include "tools/serve/openai_api.h"

namespace tandem::serve {

// {"type": "error", "error": {"type", "message"}}, the type Anthropic's
// name for the HTTP status (invalid_request_error, authentication_error,
// not_found_error, request_too_large, overloaded_error, api_error...).
nlohmann::json anthropic_error(int status, const std::string& message);

struct MessagesRequest {
    std::vector<chat::Message> messages;  // the system text first, when given
    std::string prefill;                  // a last assistant turn: the reply goes on from it
    std::vector<std::string> stop_sequences;
    GenerationParams params;              // max_tokens always set; stop holds stop_sequences
};

// Throws ApiError(400) naming the field.
MessagesRequest parse_messages_request(const nlohmann::json& body, uint64_t default_seed);

// Why a message ended, as Anthropic says it, from its job's last event:
// "max_tokens" for a length limit, "stop_sequence" (and which) when one of
// the request's stop sequences ended it, else "end_turn".
struct StopReason {
    std::string reason;
    nlohmann::json sequence;  // the stop sequence, or null
};
StopReason stop_reason(const Event& last, const std::vector<std::string>& stop_sequences);

// The whole answer.
nlohmann::json message_response(const std::string& id, const std::string& model, const std::string& text,
                                const StopReason& stop, const Usage& u);

// One server-sent event: "event: <data.type>\ndata: <json>\n\n".
std::string anthropic_event(const nlohmann::json& data);

}  // namespace tandem::serve
