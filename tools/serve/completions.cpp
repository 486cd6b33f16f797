// POST /v1/chat/completions and /v1/completions: a request becomes tokens
// (through the model's chat template for chat), waits for a slot, and its
// events are answered as one JSON body or as server-sent events. The
// pieces the Ollama routes share are declared in completions.h.
#include "tools/serve/completions.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/grammar/grammar.h"
#include "tools/serve/grammar_request.h"
#include "tools/serve/http_util.h"
#include "tools/serve/openai_api.h"
#include "tools/serve/server_state.h"
#include "tools/serve/tool_api.h"

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
    if (p.grammar) g.sampling.grammar = std::make_shared<const SamplingGrammar>(SamplingGrammar{p.grammar, m.grammar_tokens});
    return g;
}

std::string chat_prompt(const LoadedModel& m, const std::vector<chat::Message>& messages,
                        const nlohmann::ordered_json& tools) {
    chat::TemplateInputs in;
    in.tools = tools;
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

std::shared_ptr<const grammar::Grammar> forced_call_grammar(const LoadedModel& m, const ToolRequest& tools) {
    if (!tools.active() || (tools.choice != ToolChoice::Required && tools.choice != ToolChoice::Named)) return nullptr;
    return tool_choice_grammar(*m.chat_template, tools.tools, tools.choice == ToolChoice::Named ? tools.named : "",
                               tools.parallel);
}

ChatReply chat_reply(const LoadedModel& m, const std::string& text, chat::ToolFormat calls) {
    chat::ReplyParser p(m.harmony, calls);
    p.push(text, true);
    return {p.content(), p.reasoning(), p.tool_calls()};
}

WholeAnswer wait_whole(Job& job) { return std::move(wait_choices(job, 1).front()); }

std::vector<WholeAnswer> wait_choices(Job& job, int32_t n) {
    std::vector<WholeAnswer> out(static_cast<size_t>(n));
    int32_t left = n;
    while (left > 0) {
        std::optional<Event> e = job.next(std::chrono::milliseconds(1000));
        if (!e || e->index < 0 || e->index >= n) continue;
        WholeAnswer& a = out[static_cast<size_t>(e->index)];
        a.text += e->text;
        a.logprobs.insert(a.logprobs.end(), e->logprobs.begin(), e->logprobs.end());
        if (!e->done) continue;
        a.last = std::move(*e);
        --left;
    }
    return out;
}

Usage choices_usage(std::span<const Event> lasts) {
    Usage u;
    if (lasts.empty()) return u;
    u = lasts.front().usage;
    for (const Event& e : lasts.subspan(1)) {
        u.completion_tokens += e.usage.completion_tokens;
        u.generation_ms = std::max(u.generation_ms, e.usage.generation_ms);
    }
    return u;
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
    std::vector<chat::ReplyParser> parsers;  // one per choice, as format says
    std::vector<Event> lasts;                // each choice's last event, once it came
    int32_t left = 0;                        // choices not yet ended
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
    if (e->index < 0 || e->index >= static_cast<int32_t>(st.parsers.size())) return true;
    chat::ReplyParser& parser = st.parsers[static_cast<size_t>(e->index)];
    const chat::ReplyParser::Delta d = parser.push(e->text, e->done);
    if ((!d.empty() || !e->logprobs.empty()) && !send(sink, st.format.piece({e->index, e->text, d, e->logprobs}))) {
        return false;
    }
    if (!e->done) return true;
    if (!send(sink, st.format.tail(*e, parser.tool_calls()))) return false;
    st.lasts[static_cast<size_t>(e->index)] = std::move(*e);
    if (--st.left > 0) return true;
    if (st.format.end && !send(sink, st.format.end(st.lasts))) return false;
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
    const int32_t n = std::max(st->format.choices, 1);
    for (int32_t i = 0; i < n; ++i) st->parsers.emplace_back(st->format.harmony, st->format.calls);
    st->lasts.resize(static_cast<size_t>(n));
    st->left = n;
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

// A chunk of choice `index` (the builders write 0).
json indexed(json chunk, int32_t index) {
    chunk["choices"][0]["index"] = index;
    return chunk;
}

// takers: one per choice (their count is the request's n).
StreamFormat openai_stream(const ResponseIds& ids, const LogprobsOut& lo, bool include_usage, chat::ToolFormat calls,
                           std::vector<CallTaker> takers) {
    const Kind kind = lo.kind;
    const auto n = static_cast<int32_t>(takers.size());
    StreamFormat f;
    f.content_type = "text/event-stream";
    f.choices = n;
    f.harmony = kind == Kind::Chat && lo.model->harmony;
    f.calls = calls;
    if (kind == Kind::Chat) {
        f.head = [ids, n] {
            std::string out;
            for (int32_t i = 0; i < n; ++i) out += sse(indexed(chat_chunk(ids, "assistant", std::string(), std::nullopt), i));
            return out;
        };
    }
    // Each chunk carries its tokens' logprobs (a chunk's text may then be
    // empty); a chat chunk of reasoning alone has no content. A call is
    // sent whole, in a chunk of its own, once its text is complete.
    f.piece = [ids, los = std::vector<LogprobsOut>(static_cast<size_t>(n), lo),
               takers = std::move(takers)](const StreamPiece& p) mutable {
        LogprobsOut& mine = los[static_cast<size_t>(p.index)];  // completions' text_offset runs per choice
        CallTaker& taker = takers[static_cast<size_t>(p.index)];
        const json lps = logprobs_json(mine, p.logprobs);
        const auto& d = p.split;
        if (mine.kind != Kind::Chat) return sse(indexed(completion_chunk(ids, p.text, std::nullopt, lps), p.index));
        std::string out;
        if (!d.content.empty() || !d.reasoning.empty() || !p.logprobs.empty()) {
            out = sse(indexed(chat_chunk(ids, std::nullopt,
                                         d.content.empty() && !d.reasoning.empty() ? std::nullopt
                                                                                    : std::optional(d.content),
                                         std::nullopt, lps, d.reasoning),
                              p.index));
        }
        const size_t first = taker.taken();
        const auto taken = taker.take(d.calls);
        if (!taken.empty()) out += sse(indexed(tool_calls_chunk(ids, taken, first), p.index));
        return out;
    };
    f.tail = [ids, kind](const Event& e, const std::vector<chat::ToolCall>& calls) {
        if (const auto failed = failure_of(e)) return sse(error_body(failed->what(), failed->type, "", failed->status));
        std::string finish = e.finish_reason;
        if (!calls.empty() && finish == "stop") finish = "tool_calls";
        return sse(indexed(kind == Kind::Chat ? chat_chunk(ids, std::nullopt, std::nullopt, finish)
                                              : completion_chunk(ids, "", finish),
                           e.index));
    };
    // The usage once, for all the choices, and one [DONE].
    f.end = [ids, kind, include_usage](const std::vector<Event>& lasts) {
        const bool failed = std::any_of(lasts.begin(), lasts.end(), [](const Event& e) { return failure_of(e).has_value(); });
        std::string out;
        if (include_usage && !failed) {
            out = sse(usage_chunk(ids, kind == Kind::Chat ? "chat.completion.chunk" : "text_completion",
                                  choices_usage(lasts)));
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
    chat::ToolFormat calls = chat::ToolFormat::None;
    bool parallel_calls = true;
    if (kind == Kind::Chat) {
        const ChatRequest r = parse_chat_request(body, state.draw_seed());
        const ToolRequest tools = parse_tool_request(body, req.body);
        const chat::ToolFormat format = chat::tool_format(*m.chat_template);
        check_tool_support(tools, format);
        if (tools.active()) calls = format;
        parallel_calls = tools.parallel;
        params = r.params;
        check_choices(params.n, m.scheduler->n_slots());
        params.grammar = request_grammar(req.body);
        // "required" or a named function: the reply is held to a call in
        // the template's format, its arguments to the tool's parameters.
        if (auto forced = forced_call_grammar(m, tools)) {
            if (params.grammar) {
                throw ApiError(400, "'tool_choice': a required or named call constrains the reply itself; it cannot "
                                    "be combined with grammar or response_format",
                               "tool_choice");
            }
            params.grammar = std::move(forced);
        }
        g = generation_request(m, prompt_tokens(m, chat_prompt(m, r.messages, tools.tools), true), params, true);
    } else {
        const CompletionRequest r = parse_completion_request(body, state.draw_seed());
        params = r.params;
        check_choices(params.n, m.scheduler->n_slots());
        params.grammar = request_grammar(req.body);
        g = generation_request(m, prompt_tokens(m, r.prompt, true), params, false);
        lo.offset = utf8_chars(r.prompt);
    }
    lo.asked = params.logprobs;
    const auto n = static_cast<int32_t>(params.n);
    // Each choice's calls get ids of their own.
    std::vector<CallTaker> takers;
    for (int32_t i = 0; i < n; ++i) takers.emplace_back(parallel_calls, calls, state.draw_seed());
    ResponseIds ids{new_id(state, kind), m.name,
                    std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count()};
    g.n = n;
    g.client_gone = state.watch_client(req);  // a client that leaves frees its slots, streamed or not
    std::shared_ptr<void> answering = state.answer_token();
    std::shared_ptr<Job> job = m.scheduler->submit(std::move(g));
    if (params.stream) {
        answer_stream(std::move(answering), job, openai_stream(ids, lo, params.include_usage, calls, std::move(takers)),
                      res);
        return;
    }
    const std::vector<WholeAnswer> answers = wait_choices(*job, n);
    std::vector<Event> lasts;
    for (const WholeAnswer& a : answers) {
        if (const auto failed = failure_of(a.last)) throw *failed;
        lasts.push_back(a.last);
    }
    json choices = json::array();
    for (int32_t i = 0; i < n; ++i) {
        const WholeAnswer& a = answers[static_cast<size_t>(i)];
        LogprobsOut choice_lo = lo;  // completions' text_offset: each choice from the prompt's end
        const json logprobs = logprobs_json(choice_lo, a.logprobs);
        if (kind == Kind::Completion) {
            choices.push_back(completion_choice(i, a.text, a.last.finish_reason, logprobs));
            continue;
        }
        ChatReply reply = chat_reply(m, a.text, calls);
        reply.tool_calls = takers[static_cast<size_t>(i)].take(reply.tool_calls);
        choices.push_back(chat_choice(i, reply, a.last.finish_reason, logprobs));
    }
    const Usage usage = choices_usage(lasts);
    set_json(res, 200, kind == Kind::Completion ? completion_response(ids, choices, usage)
                                                : chat_response(ids, choices, usage));
}

}  // namespace

void add_completion_routes(httplib::Server& server, ServerState& state) {
    // llama-server's: the prompt a chat request becomes, without running it.
    server.Post("/apply-template", guarded(state, [&state](const httplib::Request& req, httplib::Response& res) {
                    const json body = parse_body(req.body);
                    const ChatRequest r = parse_chat_request(body, 0);
                    const ToolRequest tools = parse_tool_request(body, req.body);
                    set_json(res, 200, {{"prompt", chat_prompt(state.model, r.messages, tools.tools)}});
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
