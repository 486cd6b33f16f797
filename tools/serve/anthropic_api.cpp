// Anthropic's Messages API (anthropic_api.h): requests read into the OpenAI
// routes' GenerationParams, chat messages and tools (anthropic_content.h),
// run through the same pieces (completions.h), and answered in Anthropic's
// shapes.
#include "tools/serve/anthropic_api.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include <fmt/format.h>
#include <httplib.h>

#include "tools/serve/completions.h"
#include "tools/serve/http_util.h"
#include "tools/serve/tool_api.h"

namespace tandem::serve {

using nlohmann::json;

namespace {

SamplerParams messages_sampling(const Fields& f, uint64_t default_seed) {
    // Anthropic's temperature (0..1, default 1); what it leaves unsaid is
    // llama-server's default, as on the other routes (top-k 40, top-p
    // 0.95, min-p 0.05).
    SamplerParams s;
    s.temperature = static_cast<float>(f.number("temperature", 0.0, 1.0, 1.0));
    s.top_p = static_cast<float>(f.number("top_p", 0.0, 1.0, s.top_p));
    if (s.top_p <= 0.0f) throw ApiError(400, "'top_p': expected a number in (0, 1], found 0", "top_p");
    if (auto k = f.integer("top_k", 0, 1 << 20)) s.top_k = static_cast<int32_t>(*k);
    s.seed = default_seed;
    return s;
}

constexpr size_t kMaxStopSequences = 64;

void reject_thinking(const Fields& f) {
    if (const json* thinking = f.find("thinking")) {
        const bool off = thinking->is_object() && thinking->value("type", json()) == "disabled";
        if (!off) throw ApiError(400, "'thinking': extended thinking is not supported; leave it out", "thinking");
    }
}

json usage_of(const Usage& u) {
    return json{{"input_tokens", u.prompt_tokens}, {"output_tokens", u.completion_tokens}};
}

json message_head(const std::string& id, const std::string& model) {
    return json{{"id", id}, {"type", "message"}, {"role", "assistant"}, {"model", model}};
}

StreamFormat messages_stream(const std::string& id, const std::string& model, bool harmony, int64_t input_tokens,
                             std::vector<std::string> stop_sequences, chat::ToolFormat calls, CallTaker taker) {
    StreamFormat f;
    f.content_type = "text/event-stream";
    f.harmony = harmony;
    f.calls = calls;
    auto blocks = std::make_shared<BlockEvents>(std::move(taker));
    // Without tools the text block opens at once (as Anthropic's own
    // streams); with them, what comes first may be a call.
    f.head = [id, model, input_tokens, blocks, eager = calls == chat::ToolFormat::None] {
        json message = message_head(id, model);
        message["content"] = json::array();
        message["stop_reason"] = nullptr;
        message["stop_sequence"] = nullptr;
        message["usage"] = {{"input_tokens", input_tokens}, {"output_tokens", 0}};
        return anthropic_event({{"type", "message_start"}, {"message", std::move(message)}}) +
               (eager ? blocks->open_text() : std::string()) + anthropic_event({{"type", "ping"}});
    };
    f.piece = [blocks](const StreamPiece& p) {
        std::string out = blocks->text(p.split.content);  // in this order: a call closes the text block
        return out + blocks->calls(p.split.calls);
    };
    f.tail = [blocks, stop_sequences = std::move(stop_sequences)](const Event& last, const auto&) {
        if (const auto failed = failure_of(last)) return anthropic_event(anthropic_error(failed->status, failed->what()));
        const StopReason stop = stop_reason(last, stop_sequences, blocks->called());
        return blocks->finish() +
               anthropic_event({{"type", "message_delta"},
                                {"delta", {{"stop_reason", stop.reason}, {"stop_sequence", stop.sequence}}},
                                {"usage", {{"output_tokens", last.usage.completion_tokens}}}}) +
               anthropic_event({{"type", "message_stop"}});
    };
    return f;
}

// The request's tools as the model's template can serve them; what
// /v1/messages and count_tokens both check.
chat::ToolFormat tool_calls_of(const LoadedModel& m, const ToolRequest& tools) {
    const chat::ToolFormat format = chat::tool_format(*m.chat_template);
    check_tool_support(tools, format, "tool_choice {\"type\": \"none\"}");
    return tools.active() ? format : chat::ToolFormat::None;
}

std::string conversation_prompt(const LoadedModel& m, const Conversation& c) {
    return chat_prompt(m, c.messages, c.tools.tools) + c.prefill;
}

void messages(ServerState& state, const httplib::Request& req, httplib::Response& res) {
    const LoadedModel& m = state.model;
    MessagesRequest r = parse_messages_request(parse_body(req.body), state.draw_seed(), req.body);
    const ToolRequest& tools = r.conversation.tools;
    const chat::ToolFormat calls = tool_calls_of(m, tools);
    r.params.grammar = forced_call_grammar(m, tools);  // tool_choice any or tool: a call in the template's format
    GenerationRequest g =
        generation_request(m, prompt_tokens(m, conversation_prompt(m, r.conversation), true), r.params, true);
    g.client_gone = state.watch_client(req);  // a client that leaves frees its slot, streamed or not
    const std::string id = fmt::format("msg_{:016x}", state.draw_seed());
    CallTaker taker(tools.parallel, calls, state.draw_seed(), "toolu_");
    const auto input_tokens = static_cast<int64_t>(g.prompt.size());
    std::shared_ptr<void> answering = state.answer_token();
    std::shared_ptr<Job> job = m.scheduler->submit(std::move(g));
    if (r.params.stream) {
        answer_stream(std::move(answering), job,
                      messages_stream(id, m.name, m.harmony, input_tokens, r.stop_sequences, calls, std::move(taker)),
                      res);
        return;
    }
    const WholeAnswer a = wait_whole(*job);
    if (const auto failed = failure_of(a.last)) throw *failed;
    const ChatReply reply = chat_reply(m, a.text, calls);
    const std::vector<chat::ToolCall> taken = taker.take(reply.tool_calls);
    set_json(res, 200,
             message_response(id, m.name, reply.content, stop_reason(a.last, r.stop_sequences, !taken.empty()),
                              a.last.usage, taken));
}

// The prompt's tokens as /v1/messages counts them (usage.input_tokens),
// without the slot's limit: a client asks to learn whether it fits.
void count_tokens(ServerState& state, const httplib::Request& req, httplib::Response& res) {
    const LoadedModel& m = state.model;
    const json body = parse_body(req.body);
    reject_thinking(Fields(body));
    const Conversation c = parse_conversation(body, req.body);
    tool_calls_of(m, c.tools);
    const std::vector<int32_t> tokens = m.tokenizer->encode(conversation_prompt(m, c), m.add_bos, true);
    set_json(res, 200, {{"input_tokens", tokens.size()}});
}

}  // namespace

json anthropic_error(int status, const std::string& message) {
    std::string type = status >= 500 ? "api_error" : "invalid_request_error";
    if (status == 401) type = "authentication_error";
    if (status == 403) type = "permission_error";
    if (status == 404) type = "not_found_error";
    if (status == 413) type = "request_too_large";
    if (status == 429) type = "rate_limit_error";
    if (status == 503 || status == 529) type = "overloaded_error";
    return json{{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
}

MessagesRequest parse_messages_request(const json& body, uint64_t default_seed, std::string_view raw_body) {
    const Fields f(body);
    MessagesRequest r;
    reject_thinking(f);
    (void)f.string("model");  // any name: the server runs one model
    if (!f.find("max_tokens")) {
        throw ApiError(400, "'max_tokens': missing; expected an integer >= 1 (the Messages API requires it)",
                       "max_tokens");
    }
    r.params.max_tokens = f.integer("max_tokens", 1, int64_t{1} << 31);
    r.params.sampling = messages_sampling(f, default_seed);
    r.params.stream = f.boolean("stream", false);
    if (const json* stops = f.find("stop_sequences")) {
        if (!stops->is_array()) f.bad("stop_sequences", "an array of strings", *stops);
        r.stop_sequences = f.strings("stop_sequences", kMaxStopSequences);
    }
    r.params.stop = r.stop_sequences;
    r.conversation = parse_conversation(body, raw_body);
    return r;
}

StopReason stop_reason(const Event& last, const std::vector<std::string>& stop_sequences, bool called) {
    if (last.finish_reason == "length") return {"max_tokens", nullptr};
    if (called) return {"tool_use", nullptr};
    if (!last.stop_string.empty() &&
        std::find(stop_sequences.begin(), stop_sequences.end(), last.stop_string) != stop_sequences.end()) {
        return {"stop_sequence", last.stop_string};
    }
    return {"end_turn", nullptr};
}

json message_response(const std::string& id, const std::string& model, const std::string& text, const StopReason& stop,
                      const Usage& u, std::span<const chat::ToolCall> calls) {
    json j = message_head(id, model);
    j["content"] = content_blocks(text, calls);
    j["stop_reason"] = stop.reason;
    j["stop_sequence"] = stop.sequence;
    j["usage"] = usage_of(u);
    return j;
}

std::string anthropic_event(const json& data) {
    // Invalid UTF-8 (a model can emit it) is replaced rather than thrown on.
    return fmt::format("event: {}\ndata: {}\n\n", data.value("type", std::string("message")),
                       data.dump(-1, ' ', false, json::error_handler_t::replace));
}

void add_anthropic_routes(httplib::Server& server, ServerState& state) {
    server.Post("/v1/messages", guarded(state, [&state](const httplib::Request& req, httplib::Response& res) {
                    messages(state, req, res);
                }));
    server.Post("/v1/messages/count_tokens",
                guarded(state, [&state](const httplib::Request& req, httplib::Response& res) {
                    count_tokens(state, req, res);
                }));
}

}  // namespace tandem::serve
