// Ollama's routes (ollama_api.h): requests read into the OpenAI routes'
// GenerationParams and chat messages, run through the same pieces
// (completions.h), and answered in Ollama's shapes.
#include "tools/serve/ollama_api.h"

#include <sys/stat.h>

#include <ctime>
#include <memory>

#include <fmt/format.h>
#include <httplib.h>

#include "runtime/engine/sequence_state.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/quant/quant_mix.h"
#include "tools/serve/completions.h"
#include "tools/serve/http_util.h"

namespace tandem::serve {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// The API level whose routes these follow (docs/api.md as of Ollama 0.5,
// with structured outputs); apps compare it before using a feature.
constexpr const char* kOllamaVersion = "0.5.0";

std::string parameter_size(uint64_t n) {
    const double d = static_cast<double>(n);
    if (n >= 1000000000ull) return fmt::format("{:.1f}B", d / 1e9);
    if (n >= 1000000ull) return fmt::format("{:.0f}M", d / 1e6);
    if (n >= 1000ull) return fmt::format("{:.0f}K", d / 1e3);
    return std::to_string(n);
}

// A field that must be absent, null or empty: what it asks for is not
// supported (yet); ApiError(400) says so.
void refuse_nonempty(const Fields& f, const char* key, const std::string& why) {
    const json* v = f.find(key);
    if (!v) return;
    const bool empty = v->is_string() ? v->get_ref<const std::string&>().empty()
                                      : (v->is_array() || v->is_object()) && v->empty();
    if (!empty) throw ApiError(400, fmt::format("'{}': {}", f.name(key), why), f.name(key));
}

// What both routes take besides their prompt: `options`, `stream`
// (default true) and `format`.
GenerationParams ollama_params(const Fields& top, uint64_t default_seed) {
    static const json kNoOptions = json::object();
    const json* options = top.find("options");
    if (options && !options->is_object()) top.bad("options", "an object", *options);
    if (const json* model = top.find("model"); model && !model->is_string()) top.bad("model", "a string", *model);
    const Fields o(options ? *options : kNoOptions, "options.");
    GenerationParams p;
    p.sampling = read_sampling(o, default_seed);
    if (auto n = o.integer("num_predict", -2, int64_t{1} << 31)) {
        if (*n == 0) {
            throw ApiError(400,
                           "'options.num_predict': expected -1 (no limit), -2 (until the context is full) or a count "
                           ">= 1, found 0",
                           "options.num_predict");
        }
        p.max_tokens = *n < 0 ? std::nullopt : std::optional<int64_t>(*n);
    }
    p.stop = o.strings("stop", 16);
    p.stream = top.boolean("stream", true);
    refuse_nonempty(top, "format",
                    "structured output (\"json\" or a JSON schema) is not supported yet: ask for JSON in the prompt "
                    "and leave format out");
    return p;
}

constexpr const char* kNoImages = "images are not supported: the server runs text models";

int64_t nanoseconds(double ms) { return static_cast<int64_t>(ms * 1e6); }

// The last object: done, why, and the counts and durations (nanoseconds).
json answer_done(const std::string& model, bool chat, const ChatReply& reply, const Event& last,
                 Clock::time_point start) {
    json j = ollama_answer(model, chat, reply.content, reply.reasoning);
    const Usage& u = last.usage;
    j["done"] = true;
    j["done_reason"] = last.finish_reason;
    j["total_duration"] = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
    j["load_duration"] = 0;  // loaded at start
    j["prompt_eval_count"] = u.prompt_tokens;
    j["prompt_eval_duration"] = nanoseconds(u.prompt_ms);
    j["eval_count"] = u.completion_tokens;
    j["eval_duration"] = nanoseconds(u.generation_ms);
    return j;
}

std::string ndjson(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"; }

// harmony: split the reply as chat_reply does (its tool calls are not
// shown).
StreamFormat ollama_stream(const std::string& model, bool chat, bool harmony, Clock::time_point start) {
    StreamFormat f;
    f.content_type = "application/x-ndjson";
    f.harmony = harmony;
    f.piece = [model, chat](const StreamPiece& p) {
        json j = ollama_answer(model, chat, p.split.content, p.split.reasoning);
        j["done"] = false;
        return ndjson(j);
    };
    f.tail = [model, chat, start](const Event& last, const auto&) {
        if (const auto failed = failure_of(last)) return ndjson({{"error", failed->what()}});
        return ndjson(answer_done(model, chat, {}, last, start));
    };
    return f;
}

void generate(ServerState& state, bool chat, const httplib::Request& req, httplib::Response& res) {
    const Clock::time_point start = Clock::now();
    const LoadedModel& m = state.model;
    const json body = parse_body(req.body);
    const OllamaRequest r =
        chat ? parse_ollama_chat(body, state.draw_seed()) : parse_ollama_generate(body, state.draw_seed());
    if (r.load_only) {
        json j = ollama_answer(m.name, chat, "", "");
        j["done"] = true;
        j["done_reason"] = "load";
        set_json(res, 200, j);
        return;
    }
    const bool templated = !r.raw;
    const std::string prompt = templated ? chat_prompt(m, r.messages) : r.raw_prompt;
    GenerationRequest g = generation_request(m, prompt_tokens(m, prompt, true), r.params, templated);
    g.client_gone = state.watch_client(req);  // a client that leaves frees its slot, streamed or not
    std::shared_ptr<void> answering = state.answer_token();
    std::shared_ptr<Job> job = m.scheduler->submit(std::move(g));
    if (r.params.stream) {
        answer_stream(std::move(answering), job, ollama_stream(m.name, chat, templated && m.harmony, start), res);
        return;
    }
    const WholeAnswer a = wait_whole(*job);
    if (const auto failed = failure_of(a.last)) throw *failed;
    const ChatReply reply = templated ? chat_reply(m, a.text) : ChatReply{a.text, {}, {}};
    set_json(res, 200, answer_done(m.name, chat, reply, a.last, start));
}

json details(const ModelFacts& f) {
    return {{"parent_model", ""},
            {"format", "gguf"},
            {"family", f.family},
            {"families", json::array({f.family})},
            {"parameter_size", f.parameter_size},
            {"quantization_level", f.quantization_level}};
}

json tags(const LoadedModel& m) {
    const ModelFacts& f = m.facts;
    return {{"models", json::array({{{"name", m.name},
                                     {"model", m.name},
                                     {"modified_at", f.modified_at},
                                     {"size", f.size},
                                     {"digest", f.digest},
                                     {"details", details(f)}}})}};
}

// Minimal: the details, the architecture, the parameter count and the
// context a request gets (a slot's), and the chat template's source.
json show(const LoadedModel& m, const json& body) {
    const Fields top(body);
    (void)top.string("model");
    (void)top.string("name");  // its older spelling
    const ModelFacts& f = m.facts;
    return {{"modelfile", ""},
            {"parameters", ""},
            {"template", m.chat_template->source()},
            {"details", details(f)},
            {"model_info",
             {{"general.architecture", f.family},
              {"general.parameter_count", f.parameter_count},
              {f.family + ".context_length", m.scheduler->n_ctx_slot()}}},
            {"capabilities", m.harmony ? json::array({"completion", "thinking"}) : json::array({"completion"})},
            {"modified_at", f.modified_at}};
}

}  // namespace

json ollama_answer(const std::string& model, bool chat, const std::string& text, const std::string& thinking) {
    json j{{"model", model}, {"created_at", rfc3339(std::chrono::system_clock::now())}};
    json& at = chat ? j["message"] : j;
    if (chat) at["role"] = "assistant";
    at[chat ? "content" : "response"] = text;
    if (!thinking.empty()) at["thinking"] = thinking;
    return j;
}

std::string rfc3339(std::chrono::system_clock::time_point t) {
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
    const int64_t secs = ns >= 0 ? ns / 1000000000 : (ns - 999999999) / 1000000000;
    const std::time_t tt = static_cast<std::time_t>(secs);
    std::tm tm{};
    gmtime_r(&tt, &tm);
    return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                       tm.tm_hour, tm.tm_min, tm.tm_sec, ns - secs * 1000000000);
}

ModelFacts model_facts(const gguf::File& file) {
    ModelFacts f;
    f.family = file.architecture();
    for (const gguf::TensorInfo& t : file.tensors()) f.parameter_count += t.n_elements;
    f.parameter_size = parameter_size(f.parameter_count);
    if (const auto ft = file.find_uint("general.file_type")) f.quantization_level = quant::file_type_name(*ft);
    f.size = file.file_size();
    struct stat st {};
    if (::stat(file.name().c_str(), &st) == 0) {
        f.modified_at = rfc3339(std::chrono::system_clock::time_point(
            std::chrono::duration_cast<std::chrono::system_clock::duration>(
                std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec))));
    }
    // The slot files' fingerprint (tensor layout, the first bytes of each
    // tensor) and the size: cheap, and it changes with the weights.
    const ModelFingerprint fp = model_fingerprint(file, 0);
    f.digest = fmt::format("{:016x}{:016x}{:016x}{:016x}", fp.layout_hash, fp.weights_hash, fp.n_tensors, f.size);
    return f;
}

OllamaRequest parse_ollama_chat(const json& body, uint64_t default_seed) {
    const Fields top(body);
    OllamaRequest r;
    r.params = ollama_params(top, default_seed);
    refuse_nonempty(top, "tools", "tool calling is not supported yet");
    const json* messages = top.find("messages");
    if (messages && !messages->is_array()) top.bad("messages", "an array of {role, content} objects", *messages);
    if (!messages || messages->empty()) {
        r.load_only = true;
        return r;
    }
    for (size_t i = 0; i < messages->size(); ++i) {
        if ((*messages)[i].is_object()) refuse_nonempty(Fields((*messages)[i], fmt::format("messages[{}].", i)), "images", kNoImages);
    }
    r.messages = parse_messages(body);
    return r;
}

OllamaRequest parse_ollama_generate(const json& body, uint64_t default_seed) {
    const Fields top(body);
    OllamaRequest r;
    r.params = ollama_params(top, default_seed);
    refuse_nonempty(top, "images", kNoImages);
    refuse_nonempty(top, "suffix", "fill-in-the-middle is not supported");
    refuse_nonempty(top, "template",
                    "Ollama's Go templates are not supported: the model's own chat template is used, or send the "
                    "prompt already templated with raw: true");
    refuse_nonempty(top, "context", "a context from an earlier answer is not supported: send the conversation to /api/chat");
    r.raw = top.boolean("raw", false);
    const std::optional<std::string> system = top.string("system");
    const std::string prompt = top.string("prompt").value_or("");
    if (r.raw && system && !system->empty()) {
        throw ApiError(400, "'system': a raw prompt is sent as is; put the system text in it, or leave raw out", "system");
    }
    if (prompt.empty()) {
        r.load_only = true;
        return r;
    }
    if (r.raw) {
        r.raw_prompt = prompt;
        return r;
    }
    if (system && !system->empty()) r.messages.push_back({"system", *system});
    r.messages.push_back({"user", prompt});
    return r;
}

void add_ollama_routes(httplib::Server& server, ServerState& state) {
    server.Get("/api/version", guarded(state, [](const httplib::Request&, httplib::Response& res) {
                   set_json(res, 200, {{"version", kOllamaVersion}});
               }));
    server.Get("/api/tags", guarded(state, [&state](const httplib::Request&, httplib::Response& res) {
                   set_json(res, 200, tags(state.model));
               }));
    server.Post("/api/show", guarded(state, [&state](const httplib::Request& req, httplib::Response& res) {
                    set_json(res, 200, show(state.model, parse_body(req.body)));
                }));
    server.Post("/api/chat", guarded(state, [&state](const httplib::Request& req, httplib::Response& res) {
                    generate(state, true, req, res);
                }));
    server.Post("/api/generate", guarded(state, [&state](const httplib::Request& req, httplib::Response& res) {
                    generate(state, false, req, res);
                }));
}

}  // namespace tandem::serve
