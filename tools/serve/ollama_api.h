// Ollama's API (https://github.com/ollama/ollama/blob/main/docs/api.md) on
// the same scheduler as the OpenAI routes, for apps built on Ollama:
// GET /api/tags, GET /api/version, POST /api/show, POST /api/chat and
// POST /api/generate. Chat messages go through the chat template as the
// OpenAI route renders them (completions.h); `options` map onto the
// sampler (temperature, top_p, top_k, min_p, seed, num_predict, stop,
// repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty; the
// others are ignored). A harmony model's (gpt-oss's) reply to a templated
// prompt is split as the OpenAI route splits it: its final text as the
// content (`message.content`, `response`), its reasoning as `thinking`, its
// tool calls dropped. Answers stream by default as newline-delimited JSON;
// errors are {"error": "..."}.
// Refused with a 400 naming the field: `format` (structured output),
// `images`, `tools`, `suffix`, `template`, `context`, and `system` with
// `raw`.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/chat/chat_template.h"
#include "tools/serve/openai_api.h"
#include "tools/serve/server_state.h"

namespace tandem::gguf {
class File;
}

namespace tandem::serve {

// What /api/tags says of the file: architecture, parameter count, file
// type, size, modification time and a fingerprint of its tensors.
ModelFacts model_facts(const gguf::File& file);

// {model, created_at, message {role, content} (chat) or response}: the
// start of every answer; a harmony reply's reasoning beside the text as
// Ollama's `thinking` (omitted when empty).
nlohmann::json ollama_answer(const std::string& model, bool chat, const std::string& text,
                             const std::string& thinking);

// "2024-05-01T12:34:56.123456789Z".
std::string rfc3339(std::chrono::system_clock::time_point t);

struct OllamaRequest {
    // /api/chat's messages; /api/generate's system and prompt as a chat
    // (unless raw).
    std::vector<chat::Message> messages;
    std::string raw_prompt;  // /api/generate with raw: true, tokenized as is
    bool raw = false;
    // No messages, or no prompt: Ollama's "load the model" request, answered
    // at once with done_reason "load".
    bool load_only = false;
    GenerationParams params;  // stream defaults to true
};

// Throw ApiError(400) naming the field.
OllamaRequest parse_ollama_chat(const nlohmann::json& body, uint64_t default_seed);
OllamaRequest parse_ollama_generate(const nlohmann::json& body, uint64_t default_seed);

}  // namespace tandem::serve
