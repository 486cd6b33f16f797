// The routes besides completions: /health, /v1/models, /metrics (Prometheus
// text), /tokenize, /detokenize, /slots and a slot's save and restore.
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "runtime/common/atomic_file.h"
#include "runtime/common/error.h"
#include "tools/serve/http_util.h"
#include "tools/serve/openai_api.h"
#include "tools/serve/server_state.h"

namespace tandem::serve {
namespace {

using nlohmann::json;

std::string metrics_text(const ServerState& state) {
    const SchedulerStats s = state.model.scheduler->stats();
    int64_t busy = 0;
    for (const SlotInfo& slot : s.slots) busy += slot.busy ? 1 : 0;
    std::string out;
    auto metric = [&out](const char* name, const char* type, const char* help, double value) {
        out += fmt::format("# HELP tandem:{} {}\n# TYPE tandem:{} {}\ntandem:{} {}\n", name, help, name, type, name, value);
    };
    metric("prompt_tokens_total", "counter", "Prompt tokens evaluated (cached ones not counted).",
           static_cast<double>(s.prompt_tokens));
    metric("tokens_predicted_total", "counter", "Tokens generated.", static_cast<double>(s.generated_tokens));
    metric("prompt_seconds_total", "counter", "Seconds of steps that evaluated prompt tokens.", s.prompt_seconds);
    metric("tokens_predicted_seconds_total", "counter", "Seconds of steps that only generated.", s.generation_seconds);
    metric("prompt_tokens_seconds", "gauge", "Prompt tokens per second, on average.",
           s.prompt_seconds > 0 ? static_cast<double>(s.prompt_tokens) / s.prompt_seconds : 0.0);
    metric("predicted_tokens_seconds", "gauge", "Generated tokens per second over decode-only steps, on average.",
           s.generation_seconds > 0 ? static_cast<double>(s.generated_tokens) / s.generation_seconds : 0.0);
    metric("requests_processing", "gauge", "Requests running in a slot.", static_cast<double>(s.running));
    metric("requests_deferred", "gauge", "Requests queued for a slot.", static_cast<double>(s.queued));
    metric("requests_done_total", "counter", "Requests finished.", static_cast<double>(s.requests_done));
    metric("draft_tokens_total", "counter", "Speculative draft tokens checked (--spec-ngram or -md).",
           static_cast<double>(s.draft_proposed));
    metric("draft_tokens_accepted_total", "counter", "Of those, kept.", static_cast<double>(s.draft_accepted));
    metric("pipeline_overlapped_steps_total", "counter",
           "Steps submitted while another was in flight (--pipeline: stages working at once).",
           static_cast<double>(s.overlapped_steps));
    metric("slots_busy", "gauge", "Slots serving a request.", static_cast<double>(busy));
    metric("slots_total", "gauge", "Slots (--parallel).", static_cast<double>(s.slots.size()));
    metric("kv_cache_tokens", "gauge", "KV cache positions held, over all slots.", static_cast<double>(s.kv_cells_used));
    metric("http_requests_total", "counter", "HTTP requests to the API routes.",
           static_cast<double>(state.requests_total.load()));
    metric("http_requests_rejected_total", "counter", "API requests answered with a 4xx error.",
           static_cast<double>(state.requests_rejected.load()));
    return out;
}

const json& field(const json& body, const char* key, const char* expected) {
    const auto it = body.find(key);
    if (it == body.end()) throw ApiError(400, fmt::format("'{}': missing; expected {}", key, expected), key);
    return *it;
}

bool flag(const json& body, const char* key, bool fallback) {
    const auto it = body.find(key);
    if (it == body.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) throw ApiError(400, fmt::format("'{}': expected true or false", key), key);
    return it->get<bool>();
}

void tokenize(const ServerState& state, const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    const json& content = field(body, "content", "a string");
    if (!content.is_string()) throw ApiError(400, "'content': expected a string", "content");
    const Tokenizer& tok = *state.model.tokenizer;
    const bool add_special = flag(body, "add_special", false);
    const bool parse_special = flag(body, "parse_special", true);
    const bool with_pieces = flag(body, "with_pieces", false);
    const std::vector<int32_t> ids =
        tok.encode(content.get<std::string>(), add_special && tok.add_bos_by_default(), parse_special);
    json tokens = json::array();
    for (int32_t id : ids) {
        if (with_pieces) tokens.push_back({{"id", id}, {"piece", tok.token_to_piece(id)}});
        else tokens.push_back(id);
    }
    set_json(res, 200, {{"tokens", tokens}});
}

void detokenize(const ServerState& state, const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    const json& tokens = field(body, "tokens", "an array of token ids");
    if (!tokens.is_array()) throw ApiError(400, "'tokens': expected an array of token ids", "tokens");
    const Tokenizer& tok = *state.model.tokenizer;
    std::vector<int32_t> ids;
    for (size_t i = 0; i < tokens.size(); ++i) {
        const json& t = tokens[i];
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.n_vocab()) {
            throw ApiError(400, fmt::format("'tokens[{}]': expected a token id in [0, {}), found {}", i, tok.n_vocab(), t.dump()),
                           "tokens");
        }
        ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    set_json(res, 200, {{"content", tok.decode(ids)}});
}

json slots_json(const ServerState& state) {
    const SchedulerStats s = state.model.scheduler->stats();
    json out = json::array();
    for (const SlotInfo& slot : s.slots) {
        out.push_back({{"id", slot.id}, {"is_processing", slot.busy}, {"n_ctx", state.model.scheduler->n_ctx_slot()},
                       {"n_cached", slot.cached_tokens}});
    }
    return out;
}

// A slot file's name: one plain name inside --slot-save-path, nothing that
// could climb out of it or be hidden.
std::filesystem::path slot_file(const ServerState& state, const json& body) {
    if (state.config.slot_save_path.empty()) {
        throw ApiError(400, "slot save and restore are off: start the server with --slot-save-path DIR");
    }
    const json& name = field(body, "filename", "a file name");
    if (!name.is_string()) throw ApiError(400, "'filename': expected a string", "filename");
    const std::string n = name.get<std::string>();
    const bool plain = !n.empty() && n.size() <= 200 && n[0] != '.' &&
                       n.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
                           std::string::npos;
    if (!plain) {
        throw ApiError(400,
                       fmt::format("'filename': expected a plain name of letters, digits, '.', '_' and '-' (not "
                                   "starting with '.'), found \"{}\"",
                                   n),
                       "filename");
    }
    return std::filesystem::path(state.config.slot_save_path) / n;
}

void slot_action(ServerState& state, const httplib::Request& req, httplib::Response& res) {
    const std::string& id_text = req.matches[1];
    int32_t id = -1;
    if (id_text.size() < 4) id = std::stoi(id_text);
    if (id < 0 || id >= state.model.scheduler->n_slots()) {
        throw ApiError(404, fmt::format("no slot {}: the slots are 0..{}", id_text, state.model.scheduler->n_slots() - 1),
                       "id_slot", "not_found_error");
    }
    const std::string action = req.get_param_value("action");
    const json body = parse_body(req.body.empty() ? std::string("{}") : req.body);
    if (action != "save" && action != "restore") {
        throw ApiError(400, fmt::format("'action': expected save or restore, found \"{}\"", action), "action");
    }
    const std::filesystem::path path = slot_file(state, body);
    size_t n_tokens = 0;
    uint64_t n_bytes = 0;
    std::string why;
    if (action == "save") {
        std::vector<uint8_t> blob;
        why = state.model.scheduler->save_slot(id, blob, n_tokens);
        if (why.empty()) {
            AtomicFile out(path);
            out.write(blob.data(), blob.size());
            out.commit();
            n_bytes = blob.size();
        }
    } else {
        std::error_code ec;
        const uintmax_t size = std::filesystem::file_size(path, ec);
        if (ec) {
            throw ApiError(400, fmt::format("cannot read slot file '{}': {}", path.filename().string(), ec.message()),
                           "filename");
        }
        if (size > state.model.max_slot_file_bytes) {
            throw ApiError(400, fmt::format("slot file '{}' has {} bytes; a slot's state takes at most {}",
                                            path.filename().string(), size, state.model.max_slot_file_bytes),
                           "filename");
        }
        std::vector<uint8_t> blob(size);
        std::ifstream in(path, std::ios::binary);
        if (!in.read(reinterpret_cast<char*>(blob.data()), static_cast<std::streamsize>(size))) {
            throw ApiError(400, fmt::format("cannot read slot file '{}'", path.filename().string()), "filename");
        }
        why = state.model.scheduler->restore_slot(id, blob, n_tokens);
        if (!why.empty()) why = fmt::format("slot file '{}': {}", path.filename().string(), why);
        n_bytes = size;
    }
    if (!why.empty()) {
        const bool busy = why.find("busy") != std::string::npos;
        throw ApiError(busy ? 409 : 400, why, "filename");
    }
    json out{{"id_slot", id}, {"filename", path.filename().string()}};
    if (action == "save") out.update({{"n_saved", n_tokens}, {"n_written", n_bytes}});
    else out.update({{"n_restored", n_tokens}, {"n_read", n_bytes}});
    set_json(res, 200, out);
}

}  // namespace

void add_admin_routes(httplib::Server& server, ServerState& state) {
    server.Get("/health", [&state](const httplib::Request&, httplib::Response& res) {
        if (state.ready.load()) set_json(res, 200, {{"status", "ok"}});
        else set_json(res, 503, error_body("Loading model", "unavailable_error", "", 503));
    });
    const auto models = guarded(state, [&state](const httplib::Request&, httplib::Response& res) {
        set_json(res, 200,
                 {{"object", "list"},
                  {"data", json::array({{{"id", state.model.name}, {"object", "model"}, {"created", 0},
                                         {"owned_by", "tandem"}}})}});
    });
    server.Get("/v1/models", models);
    server.Get("/models", models);
    server.Get("/metrics", [&state](const httplib::Request&, httplib::Response& res) {
        res.set_content(metrics_text(state), "text/plain; version=0.0.4");
    });
    server.Post("/tokenize", guarded(state, [&state](const httplib::Request& req, httplib::Response& res) {
                    tokenize(state, req, res);
                }));
    server.Post("/detokenize", guarded(state, [&state](const httplib::Request& req, httplib::Response& res) {
                    detokenize(state, req, res);
                }));
    server.Get("/slots", guarded(state, [&state](const httplib::Request&, httplib::Response& res) {
                   set_json(res, 200, slots_json(state));
               }));
    server.Post(R"(/slots/(\d+))", guarded(state, [&state](const httplib::Request& req, httplib::Response& res) {
                    slot_action(state, req, res);
                }));
}

}  // namespace tandem::serve
