// POST /v1/chat/completions and /v1/completions: a request becomes tokens
// (through the model's chat template for chat), waits for a slot, and its
// events are answered as one JSON body or as server-sent events.
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "tools/serve/http_util.h"
#include "tools/serve/openai_api.h"
#include "tools/serve/server_state.h"

namespace tandem::serve {
namespace {

using nlohmann::json;

enum class Kind { Chat, Completion };

std::string new_id(ServerState& state, Kind kind) {
    return fmt::format("{}-{:016x}", kind == Kind::Chat ? "chatcmpl" : "cmpl", state.draw_seed());
}

// The prompt's tokens; ApiError(400) when they cannot fit a slot.
std::vector<int32_t> prompt_tokens(const LoadedModel& m, const std::string& text, bool parse_special) {
    std::vector<int32_t> tokens = m.tokenizer->encode(text, m.add_bos, parse_special);
    const int64_t limit = m.scheduler->n_ctx_slot();
    if (tokens.empty()) throw ApiError(400, "the prompt gives no tokens", "prompt");
    if (static_cast<int64_t>(tokens.size()) >= limit) {
        throw ApiError(400,
                       fmt::format("the prompt has {} tokens but a slot's context holds {} (and one more for the "
                                   "reply); start the server with a larger -c or fewer --parallel slots",
                                   tokens.size(), limit),
                       "messages", "context_length_exceeded");
    }
    return tokens;
}

GenerationRequest generation_request(const LoadedModel& m, std::vector<int32_t> tokens, const GenerationParams& p,
                                     bool chat) {
    GenerationRequest g;
    const int64_t room = m.scheduler->n_ctx_slot() - static_cast<int64_t>(tokens.size());
    g.prompt = std::move(tokens);
    g.sampling = p.sampling;
    // max_tokens past the context is capped by it: generation then ends
    // with finish_reason "length".
    g.max_tokens = p.max_tokens ? std::min(*p.max_tokens, room) : -1;
    g.stop = p.stop;
    if (chat) {
        g.stop.insert(g.stop.end(), m.end_of_turn_text.begin(), m.end_of_turn_text.end());
        g.stop_tokens = m.end_of_turn_tokens;
    }
    g.cache_prompt = p.cache_prompt;
    g.ignore_eos = p.ignore_eos;
    g.logprobs = p.logprobs;
    g.top_logprobs = p.top_logprobs;
    return g;
}

// ApiError(400) for a logit_bias id past the vocabulary.
void check_bias_ids(const LoadedModel& m, const GenerationParams& p) {
    const int32_t n_vocab = m.tokenizer->n_vocab();
    for (const auto& [id, bias] : p.sampling.logit_bias) {
        if (id >= n_vocab) {
            throw ApiError(400, fmt::format("'logit_bias': token {} is past the vocabulary ({} tokens)", id, n_vocab),
                           "logit_bias");
        }
    }
}

// An answer's logprobs as its kind shows them (null when not asked);
// `offset`: completions' text_offset so far.
json logprobs_json(const LoadedModel& m, Kind kind, bool asked, std::span<const TokenLogprobs> lps, int64_t& offset) {
    if (!asked) return nullptr;
    const TokenPiece piece = [&m](int32_t id) { return m.tokenizer->token_to_piece(id); };
    return kind == Kind::Chat ? chat_logprobs(lps, piece) : completion_logprobs(lps, piece, offset);
}

std::string chat_prompt(const LoadedModel& m, const ChatRequest& r) {
    chat::TemplateInputs in;
    in.bos_token = m.bos_text;
    in.eos_token = m.eos_text;
    in.add_generation_prompt = true;
    in.tokenizer_adds_bos = m.add_bos;
    try {
        return m.chat_template->render(r.messages, in);
    } catch (const Error& e) {
        throw ApiError(400, fmt::format("the model's chat template refused the messages: {}", e.what()), "messages");
    }
}

// How an answer shows logprobs: whether asked, and where completions'
// text_offset starts (the prompt's characters).
struct LogprobsOut {
    bool asked = false;
    int64_t offset = 0;
};

// The whole reply as a chat answer shows it (split when the model's
// replies are harmony's).
ChatReply chat_reply(const LoadedModel& m, const std::string& text) {
    if (!m.harmony) return {text, {}, {}};
    chat::HarmonyParser p;
    p.push(text);
    p.finish();
    return {p.content(), p.reasoning(), p.tool_calls()};
}

void answer_whole(const ServerState& state, Kind kind, const ResponseIds& ids, const std::shared_ptr<Job>& job,
                  LogprobsOut lo, httplib::Response& res) {
    std::string text;
    std::vector<TokenLogprobs> lps;
    while (true) {
        std::optional<Event> e = job->next(std::chrono::milliseconds(1000));
        if (!e) continue;
        text += e->text;
        lps.insert(lps.end(), e->logprobs.begin(), e->logprobs.end());
        if (!e->done) continue;
        if (e->finish_reason == "error" || e->finish_reason == "cancelled") {
            const bool error = e->finish_reason == "error";
            set_json(res, error ? 500 : 503,
                     error_body(error ? e->error : "the server is stopping", error ? "server_error" : "unavailable_error",
                                "", error ? 500 : 503));
            return;
        }
        const json logprobs = logprobs_json(state.model, kind, lo.asked, lps, lo.offset);
        const json body = kind == Kind::Chat ? chat_response(ids, chat_reply(state.model, text), e->finish_reason,
                                                             e->usage, logprobs)
                                             : completion_response(ids, text, e->finish_reason, e->usage, logprobs);
        set_json(res, 200, body);
        return;
    }
}

// A stream's state between calls of the content provider.
struct StreamState {
    std::shared_ptr<void> answering;  // ServerState::answer_token, released once the response is written
    const LoadedModel* model = nullptr;
    LogprobsOut logprobs;
    std::shared_ptr<Job> job;
    ResponseIds ids;
    Kind kind = Kind::Chat;
    bool include_usage = false;
    bool sent_role = false;
    std::optional<chat::HarmonyParser> harmony;  // a chat of a harmony model
};

bool send(httplib::DataSink& sink, const std::string& s) { return sink.write(s.data(), s.size()); }

// One call of httplib's chunked provider: waits briefly for events and
// sends them. false stops the response (the client went away).
bool stream_some(StreamState& st, httplib::DataSink& sink) {
    if (st.kind == Kind::Chat && !st.sent_role) {
        st.sent_role = true;
        if (!send(sink, sse(chat_chunk(st.ids, "assistant", std::string(), std::nullopt)))) return false;
    }
    std::optional<Event> e = st.job->next(std::chrono::milliseconds(200));
    if (!e) return true;  // httplib checks the socket and calls again
    // Each chunk carries its tokens' logprobs (tokens that add no text
    // included: then with empty text).
    chat::HarmonyParser::Delta d;
    if (st.harmony) {
        d = st.harmony->push(e->text);
        if (e->done) {
            const auto rest = st.harmony->finish();
            d.reasoning += rest.reasoning;
            d.content += rest.content;
        }
    } else {
        d.content = e->text;
    }
    if (!d.empty() || !e->logprobs.empty()) {
        const json lps = logprobs_json(*st.model, st.kind, st.logprobs.asked, e->logprobs, st.logprobs.offset);
        const json chunk = st.kind == Kind::Chat
                               ? chat_chunk(st.ids, std::nullopt,
                                            d.content.empty() && !d.reasoning.empty() ? std::nullopt
                                                                                      : std::optional(d.content),
                                            std::nullopt, lps, d.reasoning)
                               : completion_chunk(st.ids, e->text, std::nullopt, lps);
        if (!send(sink, sse(chunk))) return false;
    }
    if (!e->done) return true;
    std::string finish = e->finish_reason;
    if (st.harmony && !st.harmony->tool_calls().empty() && finish == "stop") {
        const ChatReply calls{{}, {}, st.harmony->tool_calls()};
        json chunk = chat_chunk(st.ids, std::nullopt, std::nullopt, std::nullopt);
        chunk["choices"][0]["delta"]["tool_calls"] = tool_calls_delta(calls, st.ids.id);
        if (!send(sink, sse(chunk))) return false;
        finish = "tool_calls";
    }
    if (e->finish_reason == "error" || e->finish_reason == "cancelled") {
        const bool error = e->finish_reason == "error";
        send(sink, sse(error_body(error ? e->error : "the server is stopping", error ? "server_error" : "unavailable_error",
                                  "", error ? 500 : 503)));
    } else {
        const json last = st.kind == Kind::Chat ? chat_chunk(st.ids, std::nullopt, std::nullopt, finish)
                                                : completion_chunk(st.ids, "", finish);
        if (!send(sink, sse(last))) return false;
        if (st.include_usage) {
            const char* object = st.kind == Kind::Chat ? "chat.completion.chunk" : "text_completion";
            if (!send(sink, sse(usage_chunk(st.ids, object, e->usage)))) return false;
        }
    }
    if (!send(sink, "data: [DONE]\n\n")) return false;
    sink.done();
    return true;
}

void handle(ServerState& state, Kind kind, const httplib::Request& req, httplib::Response& res) {
    const LoadedModel& m = state.model;
    const json body = parse_body(req.body);
    GenerationRequest g;
    GenerationParams params;
    LogprobsOut lo;
    if (kind == Kind::Chat) {
        const ChatRequest r = parse_chat_request(body, state.draw_seed());
        params = r.params;
        check_bias_ids(m, params);
        g = generation_request(m, prompt_tokens(m, chat_prompt(m, r), true), params, true);
    } else {
        const CompletionRequest r = parse_completion_request(body, state.draw_seed());
        params = r.params;
        check_bias_ids(m, params);
        g = generation_request(m, prompt_tokens(m, r.prompt, true), params, false);
        lo.offset = utf8_chars(r.prompt);
    }
    lo.asked = params.logprobs;
    ResponseIds ids{new_id(state, kind), m.name,
                    std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count()};
    std::shared_ptr<void> answering = state.answer_token();
    std::shared_ptr<Job> job = m.scheduler->submit(std::move(g));
    if (!params.stream) {
        answer_whole(state, kind, ids, job, lo, res);
        return;
    }
    auto st = std::make_shared<StreamState>();
    st->answering = std::move(answering);
    st->job = job;
    st->model = &m;
    st->logprobs = lo;
    st->ids = std::move(ids);
    st->kind = kind;
    st->include_usage = params.include_usage;
    if (kind == Kind::Chat && m.harmony) st->harmony.emplace();
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [st](size_t, httplib::DataSink& sink) {
            const bool ok = stream_some(*st, sink);
            if (!ok) st->job->cancel();  // frees the slot at the next step
            return ok;
        },
        [st](bool) { st->job->cancel(); });
}

}  // namespace

void add_completion_routes(httplib::Server& server, ServerState& state) {
    // llama-server's: the prompt a chat request becomes, without running it.
    server.Post("/apply-template", guarded(state, [&state](const httplib::Request& req, httplib::Response& res) {
                    const ChatRequest r = parse_chat_request(parse_body(req.body), 0);
                    set_json(res, 200, {{"prompt", chat_prompt(state.model, r)}});
                }));
    for (const char* path : {"/v1/chat/completions", "/chat/completions"}) {
        server.Post(path, guarded(state, [&state](const httplib::Request& req, httplib::Response& res) {
                        handle(state, Kind::Chat, req, res);
                    }));
    }
    for (const char* path : {"/v1/completions", "/completions"}) {
        server.Post(path, guarded(state, [&state](const httplib::Request& req, httplib::Response& res) {
                        handle(state, Kind::Completion, req, res);
                    }));
    }
}

}  // namespace tandem::serve
