// The OpenAI wire format: requests read from untrusted JSON, each field
// checked for type and range (a bad one is an ApiError naming it, answered
// with 400 and OpenAI's error object), and the response bodies and
// streaming chunks the official clients parse.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/chat/chat_template.h"
#include "runtime/chat/harmony.h"
#include "runtime/grammar/grammar.h"
#include "runtime/sampler/logprobs.h"
#include "runtime/sampler/sampler.h"
#include "runtime/serving/scheduler.h"

namespace tandem::serve {

// An HTTP error answer: status, message, and the request field at fault.
struct ApiError : std::runtime_error {
    ApiError(int status_, std::string message, std::string param_ = {},
             std::string type_ = "invalid_request_error")
        : std::runtime_error(std::move(message)), status(status_), param(std::move(param_)), type(std::move(type_)) {}
    int status;
    std::string param;
    std::string type;
};

// {"error": {"message", "type", "param", "code"}}.
nlohmann::json error_body(const std::string& message, const std::string& type, const std::string& param, int status);

// Parses a request body; throws ApiError(400) for bad JSON or an object
// that is not one.
nlohmann::json parse_body(const std::string& body);

// Typed, range-checked fields of one JSON object (a request body, or
// Ollama's "options" in one). A missing or null field gives the fallback;
// a wrong type or a value out of range is an ApiError(400) naming the
// field as prefix + key ("options.temperature").
class Fields {
public:
    explicit Fields(const nlohmann::json& object, std::string prefix = {})
        : object_(object), prefix_(std::move(prefix)) {}
    const nlohmann::json* find(const char* key) const;  // nullptr: missing or null
    std::string name(const std::string& key) const { return prefix_ + key; }
    double number(const char* key, double lo, double hi, double fallback) const;
    std::optional<int64_t> integer(const char* key, int64_t lo, int64_t hi) const;
    bool boolean(const char* key, bool fallback) const;
    std::optional<std::string> string(const char* key) const;
    // A string or an array of at most `max` strings.
    std::vector<std::string> strings(const char* key, size_t max) const;
    [[noreturn]] void bad(const std::string& key, const std::string& expected, const nlohmann::json& found) const;

private:
    const nlohmann::json& object_;
    std::string prefix_;
};

// The sampler's fields, where both APIs spell them alike: temperature,
// top_p, min_p, top_k, repeat_penalty, repeat_last_n, presence_penalty and
// frequency_penalty (in [-2, 2]), seed (default_seed when none is given).
// llama-server's defaults otherwise.
SamplerParams read_sampling(const Fields& f, uint64_t default_seed);

// What both completion routes take besides their prompt.
struct GenerationParams {
    SamplerParams sampling;
    std::optional<int64_t> max_tokens;
    int64_t n = 1;  // choices; check_choices holds it to the server's slots
    std::vector<std::string> stop;
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage
    bool cache_prompt = true;
    bool ignore_eos = false;
    // Chat's logprobs (a boolean) and top_logprobs (0..20), or completions'
    // logprobs (an integer 0..20: the top count): the chosen tokens'
    // logprobs, and this many alternatives for each.
    bool logprobs = false;
    int32_t top_logprobs = 0;
    // grammar, json_schema or response_format (grammar_request.h); null:
    // free text.
    std::shared_ptr<const grammar::Grammar> grammar;
};

struct ChatRequest {
    std::vector<chat::Message> messages;  // as the chat template takes them
    GenerationParams params;
};

struct CompletionRequest {
    std::string prompt;
    GenerationParams params;
};

// `messages` as the chat template takes them: ApiError(400) naming the
// field for a missing or empty array, an unknown role, content that is
// not text.
std::vector<chat::Message> parse_messages(const nlohmann::json& body);

// Throw ApiError(400) naming the field: a wrong type, a value out of
// range (presence_penalty and frequency_penalty in [-2, 2], logit_bias a
// map of token ids to [-100, 100] or llama-server's [[id, bias], ...],
// top_logprobs in 0..20 and only with logprobs true), an empty or missing
// `messages`, an unknown role.
ChatRequest parse_chat_request(const nlohmann::json& body, uint64_t default_seed);
// ApiError(400) naming `n` unless 1 <= n <= n_slots: each choice decodes
// in a slot of its own.
void check_choices(int64_t n, int32_t n_slots);
CompletionRequest parse_completion_request(const nlohmann::json& body, uint64_t default_seed);

// The response bodies.
struct ResponseIds {
    std::string id;     // "chatcmpl-..." / "cmpl-..."
    std::string model;
    int64_t created = 0;  // Unix seconds
};

nlohmann::json usage_json(const Usage& u);

// An assistant's reply as a chat answer shows it: its text, and for a
// model that separates them (gpt-oss's harmony) its reasoning
// (reasoning_content, as llama-server and DeepSeek's API name it) and its
// tool calls. A reply with tool calls finishes with "tool_calls".
struct ChatReply {
    std::string content;
    std::string reasoning;
    std::vector<chat::ToolCall> tool_calls;  // each with its id
};
// The message of a whole answer, and a streamed chunk's tool_calls delta
// (calls numbered from first_index: OpenAI's `index`).
nlohmann::json chat_message(const ChatReply& reply);
nlohmann::json tool_calls_delta(std::span<const chat::ToolCall> calls, size_t first_index = 0);

// One choice of an answer, numbered `index`; `logprobs` is null, or what
// chat_logprobs / completion_logprobs give.
nlohmann::json chat_choice(int32_t index, const ChatReply& reply, const std::string& finish_reason,
                           const nlohmann::json& logprobs = nullptr);
nlohmann::json completion_choice(int32_t index, const std::string& text, const std::string& finish_reason,
                                 const nlohmann::json& logprobs = nullptr);
// Whole answers of these choices, with the request's usage.
nlohmann::json chat_response(const ResponseIds& ids, nlohmann::json choices, const Usage& u);
nlohmann::json completion_response(const ResponseIds& ids, nlohmann::json choices, const Usage& u);
// An answer of one choice; `logprobs` is the choice's: null, or what
// chat_logprobs / completion_logprobs give.
nlohmann::json chat_response(const ResponseIds& ids, const ChatReply& reply, const std::string& finish_reason,
                             const Usage& u, const nlohmann::json& logprobs = nullptr);
// A streamed chunk: delta text (role set on the first), finish_reason on the
// last; reasoning as reasoning_content, when a delta has some.
nlohmann::json chat_chunk(const ResponseIds& ids, const std::optional<std::string>& role,
                          const std::optional<std::string>& content, const std::optional<std::string>& finish_reason,
                          const nlohmann::json& logprobs = nullptr, const std::string& reasoning = {});
nlohmann::json completion_response(const ResponseIds& ids, const std::string& text, const std::string& finish_reason,
                                   const Usage& u, const nlohmann::json& logprobs = nullptr);
nlohmann::json completion_chunk(const ResponseIds& ids, const std::string& text,
                                const std::optional<std::string>& finish_reason,
                                const nlohmann::json& logprobs = nullptr);

// A token's text (its bytes, maybe part of a UTF-8 character).
using TokenPiece = std::function<std::string(int32_t id)>;
// Chat's shape: {"content": [{token, logprob, bytes, top_logprobs: [{token,
// logprob, bytes}]}]}.
nlohmann::json chat_logprobs(std::span<const TokenLogprobs> lps, const TokenPiece& piece);
// The legacy completions shape: {tokens, token_logprobs, top_logprobs (a
// {token: logprob} object per token), text_offset}. text_offset counts
// characters from the start of the prompt (as OpenAI and llama-cpp-python):
// `offset` is where the first token starts, and is moved past the last.
nlohmann::json completion_logprobs(std::span<const TokenLogprobs> lps, const TokenPiece& piece, int64_t& offset);
// Characters (code points) in UTF-8 text: the bytes that start one.
int64_t utf8_chars(std::string_view s);
// The last chunk of a stream with stream_options.include_usage: no choices;
// `timings` as a whole chat answer has them (the chat page's tok/s).
nlohmann::json usage_chunk(const ResponseIds& ids, const std::string& object, const Usage& u);

// One server-sent event: "data: <json>\n\n".
std::string sse(const nlohmann::json& j);

}  // namespace tandem::serve
