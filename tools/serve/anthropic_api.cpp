// Anthropic's Messages API (anthropic_api.h): requests read into the OpenAI
// routes' GenerationParams and chat messages, run through the same pieces
// (completions.h), and answered in Anthropic's shapes.
#include "tools/serve/anthropic_api.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include <fmt/format.h>
#include <httplib.h>

#include "tools/serve/completions.h"
#include "tools/serve/http_util.h"

namespace tandem::serve {

using nlohmann::json;

namespace {

// Text blocks' texts joined: `v` must be a string or an array of
// {"type": "text", "text": ...}; any other block is refused by name.
std::string block_text(const Fields& f, const json& v, const std::string& field) {
    if (v.is_string()) return v.get<std::string>();
    if (!v.is_array()) f.bad(field, "a string or an array of text blocks", v);
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) {
        const json& block = v[i];
        const std::string b = fmt::format("{}[{}]", field, i);
        if (!block.is_object()) f.bad(b, "a content block object", block);
        const Fields bf(block, f.name(b) + ".");
        const std::optional<std::string> type = bf.string("type");
        if (!type) throw ApiError(400, fmt::format("'{}.type': missing; expected \"text\"", f.name(b)), f.name(b) + ".type");
        if (*type != "text") {
            throw ApiError(400,
                           fmt::format("'{}.type': only \"text\" blocks are supported, found \"{}\"", f.name(b), *type),
                           f.name(b) + ".type");
        }
        const std::optional<std::string> text = bf.string("text");
        if (!text) throw ApiError(400, fmt::format("'{}.text': missing; expected a string", f.name(b)), f.name(b) + ".text");
        out += *text;
    }
    return out;
}

// A field that must be absent, null or empty: what it asks for is not
// served on this route.
void refuse(const Fields& f, const char* key, const std::string& why) {
    const json* v = f.find(key);
    if (!v || ((v->is_array() || v->is_object()) && v->empty())) return;
    throw ApiError(400, fmt::format("'{}': {}", f.name(key), why), f.name(key));
}

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

json usage_of(const Usage& u) {
    return json{{"input_tokens", u.prompt_tokens}, {"output_tokens", u.completion_tokens}};
}

json message_head(const std::string& id, const std::string& model) {
    return json{{"id", id}, {"type", "message"}, {"role", "assistant"}, {"model", model}};
}

StreamFormat messages_stream(const std::string& id, const std::string& model, bool harmony, int64_t input_tokens,
                             std::vector<std::string> stop_sequences) {
    StreamFormat f;
    f.content_type = "text/event-stream";
    f.harmony = harmony;
    f.head = [id, model, input_tokens] {
        json message = message_head(id, model);
        message["content"] = json::array();
        message["stop_reason"] = nullptr;
        message["stop_sequence"] = nullptr;
        message["usage"] = {{"input_tokens", input_tokens}, {"output_tokens", 0}};
        return anthropic_event({{"type", "message_start"}, {"message", std::move(message)}}) +
               anthropic_event({{"type", "content_block_start"},
                                {"index", 0},
                                {"content_block", {{"type", "text"}, {"text", ""}}}}) +
               anthropic_event({{"type", "ping"}});
    };
    f.piece = [](const StreamPiece& p) {
        if (p.split.content.empty()) return std::string();
        return anthropic_event({{"type", "content_block_delta"},
                                {"index", 0},
                                {"delta", {{"type", "text_delta"}, {"text", p.split.content}}}});
    };
    f.tail = [stop_sequences = std::move(stop_sequences)](const Event& last, const auto&) {
        if (const auto failed = failure_of(last)) return anthropic_event(anthropic_error(failed->status, failed->what()));
        const StopReason stop = stop_reason(last, stop_sequences);
        return anthropic_event({{"type", "content_block_stop"}, {"index", 0}}) +
               anthropic_event({{"type", "message_delta"},
                                {"delta", {{"stop_reason", stop.reason}, {"stop_sequence", stop.sequence}}},
                                {"usage", {{"output_tokens", last.usage.completion_tokens}}}}) +
               anthropic_event({{"type", "message_stop"}});
    };
    return f;
}

void messages(ServerState& state, const httplib::Request& req, httplib::Response& res) {
    const LoadedModel& m = state.model;
    const MessagesRequest r = parse_messages_request(parse_body(req.body), state.draw_seed());
    const std::string prompt = chat_prompt(m, r.messages) + r.prefill;
    GenerationRequest g = generation_request(m, prompt_tokens(m, prompt, true), r.params, true);
    g.client_gone = state.watch_client(req);  // a client that leaves frees its slot, streamed or not
    const std::string id = fmt::format("msg_{:016x}", state.draw_seed());
    const auto input_tokens = static_cast<int64_t>(g.prompt.size());
    std::shared_ptr<void> answering = state.answer_token();
    std::shared_ptr<Job> job = m.scheduler->submit(std::move(g));
    if (r.params.stream) {
        answer_stream(std::move(answering), job, messages_stream(id, m.name, m.harmony, input_tokens, r.stop_sequences),
                      res);
        return;
    }
    const WholeAnswer a = wait_whole(*job);
    if (const auto failed = failure_of(a.last)) throw *failed;
    const ChatReply reply = chat_reply(m, a.text);
    set_json(res, 200, message_response(id, m.name, reply.content, stop_reason(a.last, r.stop_sequences), a.last.usage));
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

MessagesRequest parse_messages_request(const json& body, uint64_t default_seed) {
    const Fields f(body);
    MessagesRequest r;
    refuse(f, "tools", "tool use is not supported on /v1/messages (use /v1/chat/completions' tools)");
    refuse(f, "tool_choice", "tool use is not supported on /v1/messages (use /v1/chat/completions' tools)");
    if (const json* thinking = f.find("thinking")) {
        const bool off = thinking->is_object() && thinking->value("type", json()) == "disabled";
        if (!off) throw ApiError(400, "'thinking': extended thinking is not supported; leave it out", "thinking");
    }
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

    if (const json* system = f.find("system")) {
        const std::string text = block_text(f, *system, "system");
        if (!text.empty()) r.messages.push_back({"system", text});
    }
    const json* messages = f.find("messages");
    if (!messages) throw ApiError(400, "'messages': missing; expected an array of {role, content} objects", "messages");
    if (!messages->is_array()) f.bad("messages", "an array of {role, content} objects", *messages);
    if (messages->empty()) throw ApiError(400, "'messages': expected at least one message, found an empty array", "messages");
    for (size_t i = 0; i < messages->size(); ++i) {
        const json& m = (*messages)[i];
        const std::string field = fmt::format("messages[{}]", i);
        if (!m.is_object()) f.bad(field, "an object with role and content", m);
        const Fields mf(m, field + ".");
        const std::optional<std::string> role = mf.string("role");
        if (!role) throw ApiError(400, fmt::format("'{}.role': missing", field), field + ".role");
        if (*role != "user" && *role != "assistant") {
            throw ApiError(400,
                           fmt::format("'{}.role': expected \"user\" or \"assistant\" (the system text goes in "
                                       "'system'), found \"{}\"",
                                       field, *role),
                           field + ".role");
        }
        const json* content = mf.find("content");
        if (!content) throw ApiError(400, fmt::format("'{}.content': missing", field), field + ".content");
        r.messages.push_back({*role, block_text(f, *content, field + ".content")});
    }
    // A last assistant turn is the start of the reply (Anthropic's prefill):
    // it goes after the template's generation prompt.
    if (r.messages.back().role == "assistant") {
        r.prefill = std::move(r.messages.back().content);
        r.messages.pop_back();
        if (r.messages.empty() || r.messages.back().role == "system") {
            throw ApiError(400, "'messages': expected a user turn before the last assistant turn", "messages");
        }
    }
    return r;
}

StopReason stop_reason(const Event& last, const std::vector<std::string>& stop_sequences) {
    if (last.finish_reason == "length") return {"max_tokens", nullptr};
    if (!last.stop_string.empty() &&
        std::find(stop_sequences.begin(), stop_sequences.end(), last.stop_string) != stop_sequences.end()) {
        return {"stop_sequence", last.stop_string};
    }
    return {"end_turn", nullptr};
}

json message_response(const std::string& id, const std::string& model, const std::string& text, const StopReason& stop,
                      const Usage& u) {
    json j = message_head(id, model);
    j["content"] = json::array({{{"type", "text"}, {"text", text}}});
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
}

}  // namespace tandem::serve
