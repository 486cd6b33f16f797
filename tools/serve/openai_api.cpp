#include "tools/serve/openai_api.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "tools/serve/tool_api.h"

namespace tandem::serve {

using nlohmann::json;

namespace {

std::string type_name(const json& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "a boolean";
    if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_array()) return "an array";
    return "an object";
}

// Text content: a string, or OpenAI's array of parts of which the text
// ones are joined.
std::string content_text(const json& v, const std::string& field) {
    const Fields top(v);
    if (v.is_string()) return v.get<std::string>();
    if (v.is_array()) {
        std::string out;
        for (size_t i = 0; i < v.size(); ++i) {
            const json& part = v[i];
            const std::string f = fmt::format("{}[{}]", field, i);
            if (!part.is_object()) top.bad(f, "a content part object", part);
            const auto type = part.find("type");
            if (type == part.end() || !type->is_string()) top.bad(f + ".type", "a string", type == part.end() ? json() : *type);
            if (*type != "text") {
                throw ApiError(400, fmt::format("'{}.type': only \"text\" parts are supported, found \"{}\"", f,
                                                type->get<std::string>()),
                               f + ".type");
            }
            const auto text = part.find("text");
            if (text == part.end() || !text->is_string()) top.bad(f + ".text", "a string", text == part.end() ? json() : *text);
            out += text->get<std::string>();
        }
        return out;
    }
    top.bad(field, "a string or an array of text parts", v);
}

// A bias: a number in [-100, 100], or llama-server's false (a ban).
float bias_value(const Fields& f, const json& v, const std::string& key) {
    if (v.is_boolean() && !v.get<bool>()) return kBanBias;
    if (!v.is_number()) f.bad(key, "a number in [-100, 100]", v);
    const double b = v.get<double>();
    if (!(b >= -100.0 && b <= 100.0)) {
        throw ApiError(400, fmt::format("'{}': expected a number in [-100, 100], found {}", f.name(key), b),
                       f.name(key));
    }
    return static_cast<float>(b);
}

// OpenAI's {"token id": bias}, or llama-server's [[id, bias], ...].
std::vector<std::pair<int32_t, float>> logit_bias(const Fields& f) {
    std::vector<std::pair<int32_t, float>> out;
    const json* v = f.find("logit_bias");
    if (!v) return out;
    const auto bad_id = [&f](const std::string& key) {
        throw ApiError(400, fmt::format("'{}': expected token ids (integers >= 0) as keys, found \"{}\"",
                                        f.name("logit_bias"), key),
                       f.name("logit_bias"));
    };
    if (v->is_object()) {
        for (const auto& [key, b] : v->items()) {
            if (key.empty() || key.size() > 9 || key.find_first_not_of("0123456789") != std::string::npos) bad_id(key);
            out.emplace_back(std::stoi(key), bias_value(f, b, fmt::format("logit_bias.{}", key)));
        }
    } else if (v->is_array()) {
        for (size_t i = 0; i < v->size(); ++i) {
            const json& pair = (*v)[i];
            const std::string key = fmt::format("logit_bias[{}]", i);
            if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() || pair[0].get<int64_t>() < 0 ||
                pair[0].get<int64_t>() > (int64_t{1} << 30)) {
                f.bad(key, "a [token id, bias] pair", pair);
            }
            out.emplace_back(pair[0].get<int32_t>(), bias_value(f, pair[1], key));
        }
    } else {
        f.bad("logit_bias", "an object mapping token ids to biases", *v);
    }
    return out;
}

GenerationParams generation_params(const json& body, uint64_t default_seed) {
    const Fields f(body);
    GenerationParams p;
    p.sampling = read_sampling(f, default_seed);
    // max_tokens, its newer name, and llama-server's n_predict.
    for (const char* key : {"max_tokens", "max_completion_tokens", "n_predict"}) {
        if (auto v = f.integer(key, key == std::string("n_predict") ? -1 : 1, int64_t{1} << 31)) {
            p.max_tokens = *v < 0 ? std::nullopt : std::optional<int64_t>(*v);
        }
    }
    // Any integer here: check_choices says what the server takes.
    if (auto n = f.integer("n", std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max())) p.n = *n;
    p.stop = f.strings("stop", 16);
    p.stream = f.boolean("stream", false);
    if (const json* so = f.find("stream_options")) {
        if (!so->is_object()) f.bad("stream_options", "an object", *so);
        p.include_usage = Fields(*so, "stream_options.").boolean("include_usage", false);
    }
    p.cache_prompt = f.boolean("cache_prompt", true);
    p.ignore_eos = f.boolean("ignore_eos", false);
    p.sampling.logit_bias = logit_bias(f);
    return p;
}

constexpr int64_t kMaxTopLogprobs = 20;  // OpenAI's limit for top_logprobs

// Chat: logprobs true or false, top_logprobs 0..20 (only with logprobs).
void chat_logprobs_params(const Fields& f, GenerationParams& p) {
    p.logprobs = f.boolean("logprobs", false);
    if (auto n = f.integer("top_logprobs", 0, kMaxTopLogprobs)) {
        if (!p.logprobs) {
            throw ApiError(400, fmt::format("'{}': needs 'logprobs': true", f.name("top_logprobs")),
                           f.name("top_logprobs"));
        }
        p.top_logprobs = static_cast<int32_t>(*n);
    }
}

// Completions: logprobs, an integer 0..20 (the top count), turns them on.
void completion_logprobs_params(const Fields& f, GenerationParams& p) {
    if (auto n = f.integer("logprobs", 0, kMaxTopLogprobs)) {
        p.logprobs = true;
        p.top_logprobs = static_cast<int32_t>(*n);
    }
}

json logprob_entry(const TokenLogprob& t, const std::string& text) {
    json bytes = json::array();
    for (char c : text) bytes.push_back(static_cast<int>(static_cast<unsigned char>(c)));
    return json{{"token", text}, {"logprob", t.logprob}, {"bytes", std::move(bytes)}};
}

json choice_usage(const Usage& u) { return usage_json(u); }

}  // namespace

json error_body(const std::string& message, const std::string& type, const std::string& param, int status) {
    return json{{"error",
                 {{"message", message},
                  {"type", type},
                  {"param", param.empty() ? json() : json(param)},
                  {"code", status}}}};
}

json parse_body(const std::string& body) {
    json j = json::parse(body, nullptr, false);
    if (j.is_discarded()) throw ApiError(400, "the request body is not valid JSON");
    if (!j.is_object()) throw ApiError(400, fmt::format("the request body: expected a JSON object, found {}", type_name(j)));
    return j;
}

const json* Fields::find(const char* key) const {
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
}

void Fields::bad(const std::string& key, const std::string& expected, const json& found) const {
    const std::string field = name(key);
    throw ApiError(400, fmt::format("'{}': expected {}, found {}", field, expected, type_name(found)), field);
}

double Fields::number(const char* key, double lo, double hi, double fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number()) bad(key, fmt::format("a number in [{}, {}]", lo, hi), *v);
    const double d = v->get<double>();
    if (!(d >= lo && d <= hi)) {
        throw ApiError(400, fmt::format("'{}': expected a number in [{}, {}], found {}", name(key), lo, hi, d), name(key));
    }
    return d;
}

std::optional<int64_t> Fields::integer(const char* key, int64_t lo, int64_t hi) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    const bool integral = v->is_number_integer() || v->is_number_unsigned() ||
                          (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>());
    if (!integral) bad(key, fmt::format("an integer in [{}, {}]", lo, hi), *v);
    const double d = v->get<double>();
    if (!(d >= static_cast<double>(lo) && d <= static_cast<double>(hi))) {
        throw ApiError(400, fmt::format("'{}': expected an integer in [{}, {}], found {}", name(key), lo, hi, v->dump()),
                       name(key));
    }
    return v->is_number_unsigned() ? static_cast<int64_t>(v->get<uint64_t>()) : v->get<int64_t>();
}

bool Fields::boolean(const char* key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) bad(key, "true or false", *v);
    return v->get<bool>();
}

std::optional<std::string> Fields::string(const char* key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) bad(key, "a string", *v);
    return v->get<std::string>();
}

std::vector<std::string> Fields::strings(const char* key, size_t max) const {
    std::vector<std::string> out;
    const json* v = find(key);
    if (!v) return out;
    if (v->is_string()) {
        out.push_back(v->get<std::string>());
    } else if (v->is_array()) {
        if (v->size() > max) {
            throw ApiError(400, fmt::format("'{}': expected at most {} strings, found {}", name(key), max, v->size()),
                           name(key));
        }
        for (size_t i = 0; i < v->size(); ++i) {
            if (!(*v)[i].is_string()) bad(fmt::format("{}[{}]", key, i), "a string", (*v)[i]);
            out.push_back((*v)[i].get<std::string>());
        }
    } else {
        bad(key, "a string or an array of strings", *v);
    }
    return out;
}

SamplerParams read_sampling(const Fields& f, uint64_t default_seed) {
    // llama-server's sampling defaults (temperature 0.8, top-k 40, top-p
    // 0.95, min-p 0.05) unless the request says otherwise.
    SamplerParams s;
    s.temperature = static_cast<float>(f.number("temperature", 0.0, 2.0, s.temperature));
    s.top_p = static_cast<float>(f.number("top_p", 0.0, 1.0, s.top_p));
    if (s.top_p <= 0.0f) {
        throw ApiError(400, fmt::format("'{}': expected a number in (0, 1], found 0", f.name("top_p")), f.name("top_p"));
    }
    s.min_p = static_cast<float>(f.number("min_p", 0.0, 0.999, s.min_p));
    if (auto k = f.integer("top_k", 0, 1 << 20)) s.top_k = static_cast<int32_t>(*k);
    s.repeat_penalty = static_cast<float>(f.number("repeat_penalty", 0.01, 10.0, s.repeat_penalty));
    // -1: every token the slot holds (as llama-server and Ollama read it).
    if (auto n = f.integer("repeat_last_n", -1, 1 << 20)) s.repeat_last_n = *n < 0 ? (1 << 20) : static_cast<int32_t>(*n);
    s.presence_penalty = static_cast<float>(f.number("presence_penalty", -2.0, 2.0, 0.0));
    s.frequency_penalty = static_cast<float>(f.number("frequency_penalty", -2.0, 2.0, 0.0));
    const auto seed = f.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
    s.seed = seed ? static_cast<uint64_t>(*seed) : default_seed;
    return s;
}

std::vector<chat::Message> parse_messages(const json& body) {
    std::vector<chat::Message> out;
    const auto it = body.find("messages");
    const Fields top(body);
    if (it == body.end()) throw ApiError(400, "'messages': missing; expected an array of {role, content} objects", "messages");
    if (!it->is_array()) top.bad("messages", "an array of {role, content} objects", *it);
    if (it->empty()) throw ApiError(400, "'messages': expected at least one message, found an empty array", "messages");
    for (size_t i = 0; i < it->size(); ++i) {
        const json& m = (*it)[i];
        const std::string f = fmt::format("messages[{}]", i);
        if (!m.is_object()) top.bad(f, "an object with role and content", m);
        const auto role = m.find("role");
        if (role == m.end()) throw ApiError(400, fmt::format("'{}.role': missing", f), f + ".role");
        if (!role->is_string()) top.bad(f + ".role", "a string", *role);
        const std::string rs = role->get<std::string>();
        if (rs != "system" && rs != "user" && rs != "assistant" && rs != "developer" && rs != "tool") {
            throw ApiError(400,
                           fmt::format("'{}.role': expected system, user, assistant, developer or tool, found \"{}\"",
                                       f, rs),
                           f + ".role");
        }
        chat::Message msg;
        msg.role = rs == "developer" ? "system" : rs;  // OpenAI's newer name for the system role
        const auto content = m.find("content");
        if (content == m.end() || content->is_null()) {
            if (rs != "assistant") throw ApiError(400, fmt::format("'{}.content': missing", f), f + ".content");
        } else {
            msg.content = content_text(*content, f + ".content");
        }
        read_message_tools(m, f, msg);
        out.push_back(std::move(msg));
    }
    return out;
}

ChatRequest parse_chat_request(const json& body, uint64_t default_seed) {
    ChatRequest r;
    r.messages = parse_messages(body);
    r.params = generation_params(body, default_seed);
    chat_logprobs_params(Fields(body), r.params);
    return r;
}

void check_choices(int64_t n, int32_t n_slots) {
    if (n < 1 || n > n_slots) {
        throw ApiError(400,
                       fmt::format("'n': expected 1..{} choices (one per slot; the server runs {} slots: --parallel), "
                                   "found {}",
                                   n_slots, n_slots, n),
                       "n");
    }
}

CompletionRequest parse_completion_request(const json& body, uint64_t default_seed) {
    CompletionRequest r;
    const auto it = body.find("prompt");
    if (it == body.end()) throw ApiError(400, "'prompt': missing; expected a string", "prompt");
    if (it->is_string()) {
        r.prompt = it->get<std::string>();
    } else if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
        r.prompt = (*it)[0].get<std::string>();
    } else if (it->is_array()) {
        throw ApiError(400, fmt::format("'prompt': expected one string, found an array of {}", it->size()), "prompt");
    } else {
        Fields(body).bad("prompt", "a string", *it);
    }
    r.params = generation_params(body, default_seed);
    completion_logprobs_params(Fields(body), r.params);
    return r;
}

json usage_json(const Usage& u) {
    return json{{"prompt_tokens", u.prompt_tokens},
                {"completion_tokens", u.completion_tokens},
                {"total_tokens", u.prompt_tokens + u.completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json tool_calls_delta(std::span<const chat::ToolCall> calls, size_t first_index) {
    json out = json::array();
    for (size_t i = 0; i < calls.size(); ++i) {
        const auto& c = calls[i];
        out.push_back({{"index", first_index + i},
                       {"id", c.id},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    return out;
}

json chat_message(const ChatReply& reply) {
    json m = {{"role", "assistant"}};
    // OpenAI's shape: content null beside tool calls with no text.
    m["content"] = reply.content.empty() && !reply.tool_calls.empty() ? json() : json(reply.content);
    if (!reply.reasoning.empty()) m["reasoning_content"] = reply.reasoning;
    if (!reply.tool_calls.empty()) {
        json calls = tool_calls_delta(reply.tool_calls);
        for (auto& c : calls) c.erase("index");
        m["tool_calls"] = std::move(calls);
    }
    return m;
}

json chat_choice(int32_t index, const ChatReply& reply, const std::string& finish_reason, const json& logprobs) {
    const std::string finish = finish_reason == "stop" && !reply.tool_calls.empty() ? "tool_calls" : finish_reason;
    return json{{"index", index}, {"message", chat_message(reply)}, {"logprobs", logprobs}, {"finish_reason", finish}};
}

json chat_response(const ResponseIds& ids, json choices, const Usage& u) {
    return json{{"id", ids.id},
                {"object", "chat.completion"},
                {"created", ids.created},
                {"model", ids.model},
                {"choices", std::move(choices)},
                {"usage", choice_usage(u)},
                {"timings", {{"prompt_ms", u.prompt_ms}, {"predicted_ms", u.generation_ms}}}};
}

json chat_response(const ResponseIds& ids, const ChatReply& reply, const std::string& finish_reason, const Usage& u,
                   const json& logprobs) {
    return chat_response(ids, json::array({chat_choice(0, reply, finish_reason, logprobs)}), u);
}

json chat_chunk(const ResponseIds& ids, const std::optional<std::string>& role, const std::optional<std::string>& content,
                const std::optional<std::string>& finish_reason, const json& logprobs, const std::string& reasoning) {
    json delta = json::object();
    if (role) delta["role"] = *role;
    if (content) delta["content"] = *content;
    if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
    return json{{"id", ids.id},
                {"object", "chat.completion.chunk"},
                {"created", ids.created},
                {"model", ids.model},
                {"choices", json::array({{{"index", 0},
                                          {"delta", delta},
                                          {"logprobs", logprobs},
                                          {"finish_reason", finish_reason ? json(*finish_reason) : json()}}})}};
}

json completion_choice(int32_t index, const std::string& text, const std::string& finish_reason, const json& logprobs) {
    return json{{"index", index}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", finish_reason}};
}

json completion_response(const ResponseIds& ids, json choices, const Usage& u) {
    return json{{"id", ids.id},
                {"object", "text_completion"},
                {"created", ids.created},
                {"model", ids.model},
                {"choices", std::move(choices)},
                {"usage", choice_usage(u)}};
}

json completion_response(const ResponseIds& ids, const std::string& text, const std::string& finish_reason,
                         const Usage& u, const json& logprobs) {
    return completion_response(ids, json::array({completion_choice(0, text, finish_reason, logprobs)}), u);
}

json completion_chunk(const ResponseIds& ids, const std::string& text, const std::optional<std::string>& finish_reason,
                      const json& logprobs) {
    return json{{"id", ids.id},
                {"object", "text_completion"},
                {"created", ids.created},
                {"model", ids.model},
                {"choices", json::array({{{"index", 0},
                                          {"text", text},
                                          {"logprobs", logprobs},
                                          {"finish_reason", finish_reason ? json(*finish_reason) : json()}}})}};
}

json usage_chunk(const ResponseIds& ids, const std::string& object, const Usage& u) {
    return json{{"id", ids.id},
                {"object", object},
                {"created", ids.created},
                {"model", ids.model},
                {"choices", json::array()},
                {"usage", usage_json(u)},
                {"timings", {{"prompt_ms", u.prompt_ms}, {"predicted_ms", u.generation_ms}}}};
}

json chat_logprobs(std::span<const TokenLogprobs> lps, const TokenPiece& piece) {
    json content = json::array();
    for (const TokenLogprobs& t : lps) {
        json entry = logprob_entry(t.chosen, piece(t.chosen.id));
        json top = json::array();
        for (const TokenLogprob& alt : t.top) top.push_back(logprob_entry(alt, piece(alt.id)));
        entry["top_logprobs"] = std::move(top);
        content.push_back(std::move(entry));
    }
    return json{{"content", std::move(content)}, {"refusal", nullptr}};
}

int64_t utf8_chars(std::string_view s) {
    return std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

json completion_logprobs(std::span<const TokenLogprobs> lps, const TokenPiece& piece, int64_t& offset) {
    json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
    for (const TokenLogprobs& t : lps) {
        const std::string text = piece(t.chosen.id);
        tokens.push_back(text);
        token_logprobs.push_back(t.chosen.logprob);
        json alts = json::object();
        for (const TokenLogprob& alt : t.top) {
            const std::string a = piece(alt.id);
            if (!alts.contains(a)) alts[a] = alt.logprob;  // two tokens of one text: the likelier
        }
        top.push_back(std::move(alts));
        offsets.push_back(offset);
        offset += utf8_chars(text);
    }
    return json{{"tokens", std::move(tokens)},
                {"token_logprobs", std::move(token_logprobs)},
                {"top_logprobs", std::move(top)},
                {"text_offset", std::move(offsets)}};
}

std::string sse(const json& j) {
    // Invalid UTF-8 (a model can emit it) is replaced rather than thrown on.
    return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace tandem::serve
