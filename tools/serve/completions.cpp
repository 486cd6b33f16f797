// POST /v1/chat/completions and /v1/completions: a request becomes tokens
// (through the model's chat template for chat), waits for a slot, and its
// events are answered as one JSON body or as server-sent events. The
// pieces the Ollama routes share are declared in completions.h.
#include "tools/serve/completions.h"

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

using nlohmann::json;

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
    const int32_t n_vocab = m.tokenizer->n_vocab();
    for (const auto& [id, bias] : p.sampling.logit_bias) {
        if (id >= n_vocab) {
            throw ApiError(400, fmt::format("'logit_bias': token {} is past the vocabulary ({} tokens)", id, n_vocab),
                           "logit_bias");
        }
    }
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

std::string chat_prompt(const LoadedModel& m, const std::vector<chat::Message>& messages) {
    chat::TemplateInputs in;
    in.bos_token = m.bos_text;
    in.eos_token = m.eos_text;
    in.add_generation_prompt = true;
    in.tokenizer_adds_bos = m.add_bos;
    try {
        return m.chat_template->render(messages, in);
    } catch (const Error& e) {
        throw ApiError(400, fmt::format("the model's chat template refused the messages: {}", e.what()), "messages");
    }
}

ChatReply chat_reply(const LoadedModel& m, const std::string& text) {
    if (!m.harmony) return {text, {}, {}};
    chat::HarmonyParser p;
    p.push(text, true);
    return {p.content(), p.reasoning(), p.tool_calls()};
}

WholeAnswer wait_whole(Job& job) {
    WholeAnswer a;
    while (true) {
        std::optional<Event> e = job.next(std::chrono::milliseconds(1000));
        if (!e) continue;
        a.text += e->text;
        a.logprobs.insert(a.logprobs.end(), e->logprobs.begin(), e->logprobs.end());
        if (!e->done) continue;
        a.last = std::move(*e);
        return a;
    }
}

std::optional<ApiError> failure_of(const Event& last) {
    if (last.finish_reason == "error") return ApiError(500, last.error, "", "server_error");
    if (last.finish_reason == "cancelled") return ApiError(503, "the server is stopping", "", "unavailable_error");
    return std::nullopt;
}

namespace {

// A stream's state between calls of the content provider.
struct StreamState {
    std::shared_ptr<void> answering;  // ServerState::answer_token, released once the response is written
    std::shared_ptr<Job> job;
    StreamFormat format;
    std::optional<chat::HarmonyParser> harmony;  // format.harmony
    bool started = false;
};

bool send(httplib::DataSink& sink, const std::string& s) { return s.empty() || sink.write(s.data(), s.size()); }

// One call of httplib's chunked provider: waits briefly for events and
// sends them. false stops the response (the client went away).
bool stream_some(StreamState& st, httplib::DataSink& sink) {
    if (!st.started) {
        st.started = true;
        if (st.format.head && !send(sink, st.format.head())) return false;
    }
    std::optional<Event> e = st.job->next(std::chrono::milliseconds(200));
    if (!e) return true;  // httplib checks the socket and calls again
    chat::HarmonyParser::Delta d;
    if (st.harmony) {
        d = st.harmony->push(e->text, e->done);
    } else {
        d.content = e->text;
    }
    if ((!d.empty() || !e->logprobs.empty()) && !send(sink, st.format.piece({e->text, d, e->logprobs}))) return false;
    if (!e->done) return true;
    static const std::vector<chat::HarmonyParser::ToolCall> kNoCalls;
    if (!send(sink, st.format.tail(*e, st.harmony ? st.harmony->tool_calls() : kNoCalls))) return false;
    sink.done();
    return true;
}

}  // namespace

void answer_stream(std::shared_ptr<void> answering, std::shared_ptr<Job> job, StreamFormat format,
                   httplib::Response& res) {
    auto st = std::make_shared<StreamState>();
    st->answering = std::move(answering);
    st->job = std::move(job);
    st->format = std::move(format);
    if (st->format.harmony) st->harmony.emplace();
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        st->format.content_type,
        [st](size_t, httplib::DataSink& sink) {
            const bool ok = stream_some(*st, sink);
            if (!ok) st->job->cancel();  // frees the slot at the next step
            return ok;
        },
        [st](bool) { st->job->cancel(); });
}

namespace {

enum class Kind { Chat, Completion };

std::string new_id(ServerState& state, Kind kind) {
    return fmt::format("{}-{:016x}", kind == Kind::Chat ? "chatcmpl" : "cmpl", state.draw_seed());
}

// How an answer shows logprobs: whether asked, and where completions'
// text_offset starts (the prompt's characters).
struct LogprobsOut {
    const LoadedModel* model = nullptr;
    Kind kind = Kind::Chat;
    bool asked = false;
    int64_t offset = 0;
};

// An answer's logprobs as its kind shows them (null when not asked);
// moves completions' text_offset past them.
json logprobs_json(LogprobsOut& lo, std::span<const TokenLogprobs> lps) {
    if (!lo.asked) return nullptr;
    const TokenPiece piece = [m = lo.model](int32_t id) { return m->tokenizer->token_to_piece(id); };
    return lo.kind == Kind::Chat ? chat_logprobs(lps, piece) : completion_logprobs(lps, piece, lo.offset);
}

StreamFormat openai_stream(const ResponseIds& ids, LogprobsOut lo, bool include_usage) {
    const Kind kind = lo.kind;
    StreamFormat f;
    f.content_type = "text/event-stream";
    f.harmony = kind == Kind::Chat && lo.model->harmony;
    if (kind == Kind::Chat) f.head = [ids] { return sse(chat_chunk(ids, "assistant", std::string(), std::nullopt)); };
    // Each chunk carries its tokens' logprobs (a chunk's text may then be
    // empty); a chat chunk of reasoning alone has no content.
    f.piece = [ids, lo](const StreamPiece& p) mutable {
        const json lps = logprobs_json(lo, p.logprobs);
        const auto& d = p.split;
        return sse(lo.kind == Kind::Chat
                       ? chat_chunk(ids, std::nullopt,
                                    d.content.empty() && !d.reasoning.empty() ? std::nullopt : std::optional(d.content),
                                    std::nullopt, lps, d.reasoning)
                       : completion_chunk(ids, p.text, std::nullopt, lps));
    };
    f.tail = [ids, kind, include_usage](const Event& e, const std::vector<chat::HarmonyParser::ToolCall>& calls) {
        std::string out;
        if (const auto failed = failure_of(e)) {
            out = sse(error_body(failed->what(), failed->type, "", failed->status));
        } else {
            std::string finish = e.finish_reason;
            if (!calls.empty() && finish == "stop") {
                json chunk = chat_chunk(ids, std::nullopt, std::nullopt, std::nullopt);
                chunk["choices"][0]["delta"]["tool_calls"] = tool_calls_delta(ChatReply{{}, {}, calls}, ids.id);
                out = sse(chunk);
                finish = "tool_calls";
            }
            out += sse(kind == Kind::Chat ? chat_chunk(ids, std::nullopt, std::nullopt, finish)
                                          : completion_chunk(ids, "", finish));
            if (include_usage) {
                out += sse(usage_chunk(ids, kind == Kind::Chat ? "chat.completion.chunk" : "text_completion", e.usage));
            }
        }
        return out + "data: [DONE]\n\n";
    };
    return f;
}

void handle(ServerState& state, Kind kind, const httplib::Request& req, httplib::Response& res) {
    const LoadedModel& m = state.model;
    const json body = parse_body(req.body);
    GenerationRequest g;
    GenerationParams params;
    LogprobsOut lo{&m, kind};
    if (kind == Kind::Chat) {
        const ChatRequest r = parse_chat_request(body, state.draw_seed());
        params = r.params;
        g = generation_request(m, prompt_tokens(m, chat_prompt(m, r.messages), true), params, true);
    } else {
        const CompletionRequest r = parse_completion_request(body, state.draw_seed());
        params = r.params;
        g = generation_request(m, prompt_tokens(m, r.prompt, true), params, false);
        lo.offset = utf8_chars(r.prompt);
    }
    lo.asked = params.logprobs;
    ResponseIds ids{new_id(state, kind), m.name,
                    std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count()};
    g.client_gone = state.watch_client(req);  // a client that leaves frees its slot, streamed or not
    std::shared_ptr<void> answering = state.answer_token();
    std::shared_ptr<Job> job = m.scheduler->submit(std::move(g));
    if (params.stream) {
        answer_stream(std::move(answering), job, openai_stream(ids, lo, params.include_usage), res);
        return;
    }
    const WholeAnswer a = wait_whole(*job);
    if (const auto failed = failure_of(a.last)) throw *failed;
    const json logprobs = logprobs_json(lo, a.logprobs);
    set_json(res, 200,
             kind == Kind::Chat
                 ? chat_response(ids, chat_reply(m, a.text), a.last.finish_reason, a.last.usage, logprobs)
                 : completion_response(ids, a.text, a.last.finish_reason, a.last.usage, logprobs));
}

}  // namespace

void add_completion_routes(httplib::Server& server, ServerState& state) {
    // llama-server's: the prompt a chat request becomes, without running it.
    server.Post("/apply-template", guarded(state, [&state](const httplib::Request& req, httplib::Response& res) {
                    const ChatRequest r = parse_chat_request(parse_body(req.body), 0);
                    set_json(res, 200, {{"prompt", chat_prompt(state.model, r.messages)}});
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
