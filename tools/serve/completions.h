// What the generation routes share (completions.cpp): a prompt becomes
// tokens and a GenerationRequest, a job's events become the answer, whole
// or streamed, in the route's own format (OpenAI's here, Ollama's in
// ollama_api.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <httplib.h>

#include "runtime/chat/chat_template.h"
#include "runtime/chat/reply_parser.h"
#include "runtime/sampler/logprobs.h"
#include "runtime/serving/scheduler.h"
#include "tools/serve/openai_api.h"
#include "tools/serve/server_state.h"
#include "tools/serve/tool_api.h"

namespace tandem::serve {

// The messages through the model's chat template, with the generation
// prompt (and the request's tools, when given); ApiError(400) when the
// template refuses them.
std::string chat_prompt(const LoadedModel& m, const std::vector<chat::Message>& messages,
                        const nlohmann::ordered_json& tools = nullptr);
// The prompt's tokens; ApiError(400) when they cannot fit a slot.
std::vector<int32_t> prompt_tokens(const LoadedModel& m, const std::string& text, bool parse_special);
// chat: also stops at the template's end-of-turn markers. ApiError(400)
// for a logit_bias id past the vocabulary.
GenerationRequest generation_request(const LoadedModel& m, std::vector<int32_t> tokens, const GenerationParams& p,
                                     bool chat);

// tool_choice "required" or a named function (with tools active): the
// grammar that holds the reply to a call in the template's format, each
// call's arguments any JSON object; null for any other choice.
std::shared_ptr<const grammar::Grammar> forced_call_grammar(const LoadedModel& m, const ToolRequest& tools);

// A reply to a templated prompt as the routes show it: for a model whose
// replies are harmony's, split into reasoning, content and tool calls;
// otherwise content and the calls of convention `calls` (None: all
// content). The calls have no ids yet.
ChatReply chat_reply(const LoadedModel& m, const std::string& text, chat::ToolFormat calls = chat::ToolFormat::None);

// Waits for the job's last event; the text and logprobs are all the
// events' together.
struct WholeAnswer {
    std::string text;
    std::vector<TokenLogprobs> logprobs;
    Event last;
};
WholeAnswer wait_whole(Job& job);
// The same for each of a job's n choices (GenerationRequest::n), by index.
std::vector<WholeAnswer> wait_choices(Job& job, int32_t n);
// A request's usage over its choices' last events: the prompt counted
// once (the first's), the completion tokens summed, the slowest
// generation.
Usage choices_usage(std::span<const Event> lasts);

// A job that ended in error (500) or was cancelled by the server stopping
// (503): what to answer. nullopt: it finished ("stop" or "length").
std::optional<ApiError> failure_of(const Event& last);

// One step of a streamed answer: the event's text (split as chat_reply
// does into reasoning, content and the tool calls it completes) and its
// tokens' logprobs (when asked, tokens that add no text included).
struct StreamPiece {
    int32_t index;  // the choice
    const std::string& text;
    const chat::ReplyParser::Delta& split;
    std::span<const TokenLogprobs> logprobs;
};

// How a route writes a streamed answer: `head` once before anything else
// (may be empty), `piece` for each step that adds text, calls or logprobs,
// `tail` for each choice's last event (its finish and usage, or
// failure_of it) with all that choice's tool calls, and `end` (may be
// empty) once after every choice's tail, with their last events by index.
struct StreamFormat {
    std::string content_type;
    int32_t choices = 1;                          // GenerationRequest::n
    bool harmony = false;                         // split the text as chat_reply does
    chat::ToolFormat calls = chat::ToolFormat::None;  // and look for these calls
    std::function<std::string()> head;
    std::function<std::string(const StreamPiece& piece)> piece;
    std::function<std::string(const Event& last, const std::vector<chat::ToolCall>& calls)> tail;
    std::function<std::string(const std::vector<Event>& lasts)> end;
};
// Streams the job's events as `format` writes them, holding `answering`
// until the last byte is out; a client that goes away cancels the job.
void answer_stream(std::shared_ptr<void> answering, std::shared_ptr<Job> job, StreamFormat format,
                   httplib::Response& res);

}  // namespace tandem::serve
