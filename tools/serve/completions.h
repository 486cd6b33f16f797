// What the generation routes share (completions.cpp): a prompt becomes
// tokens and a GenerationRequest, a job's events become the answer, whole
// or streamed, in the route's own format (OpenAI's here, Ollama's in
// ollama_api.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <httplib.h>

#include "runtime/chat/chat_template.h"
#include "runtime/serving/scheduler.h"
#include "tools/serve/openai_api.h"
#include "tools/serve/server_state.h"

namespace tandem::serve {

// The messages through the model's chat template, with the generation
// prompt; ApiError(400) when the template refuses them.
std::string chat_prompt(const LoadedModel& m, const std::vector<chat::Message>& messages);
// The prompt's tokens; ApiError(400) when they cannot fit a slot.
std::vector<int32_t> prompt_tokens(const LoadedModel& m, const std::string& text, bool parse_special);
// chat: also stops at the template's end-of-turn markers.
GenerationRequest generation_request(const LoadedModel& m, std::vector<int32_t> tokens, const GenerationParams& p,
                                     bool chat);

// Waits for the job's last event; the text is all the events' together.
struct WholeAnswer {
    std::string text;
    Event last;
};
WholeAnswer wait_whole(Job& job);

// A job that ended in error (500) or was cancelled by the server stopping
// (503): what to answer. nullopt: it finished ("stop" or "length").
std::optional<ApiError> failure_of(const Event& last);

// How a route writes a streamed answer: `head` once before anything else
// (may be empty), `piece` for each piece of text, `tail` for the last
// event (its finish and usage, or failure_of it).
struct StreamFormat {
    std::string content_type;
    std::function<std::string()> head;
    std::function<std::string(const std::string& text)> piece;
    std::function<std::string(const Event& last)> tail;
};
// Streams the job's events as `format` writes them, holding `answering`
// until the last byte is out; a client that goes away cancels the job.
void answer_stream(std::shared_ptr<void> answering, std::shared_ptr<Job> job, StreamFormat format,
                   httplib::Response& res);

}  // namespace tandem::serve
