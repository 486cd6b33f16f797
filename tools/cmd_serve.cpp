// `tandem serve`: an OpenAI-compatible HTTP server (tools/serve/) over one
// session whose --parallel slots decode together.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "tools/chat_model.h"
#include "tools/commands.h"
#include "tools/llama_flags.h"
#include "tools/serve/cors.h"
#include "tools/serve/http_server.h"
#include "tools/serve/ollama_api.h"
#include "runtime/serving/loader.h"
#include "runtime/serving/scheduler.h"
#include "tools/serve/server_state.h"
#include "runtime/serving/draft_model.h"
#include "runtime/serving/embedding.h"
#include "tools/spec_flags.h"
#include "tools/split.h"

namespace tandem::tools {
namespace {

struct ServeOptions : ChatModelFlags {
    serve::ServeConfig http;
    std::vector<std::string> cors_origin;  // --cors-origin as given
    int n_parallel = 4;
    bool verbose = false;
    SpecFlags spec;  // --spec-ngram or -md, and the --draft-* flags, per slot
    std::string pooling;  // --pooling; "": the model's
};

// The pooling /v1/embeddings uses, as llama.cpp chooses it: --pooling, else
// the file's <arch>.pooling_type, else none (llama.cpp's default for a
// model without the key: a plain decoder; its /v1/embeddings then refuses
// every request, as this one does). `why` says where it came from.
serve::Pooling embedding_pooling(const ServeOptions& o, const gguf::File& file, std::string& why) {
    if (!o.pooling.empty()) {
        why = "--pooling";
        return serve::parse_pooling(o.pooling);
    }
    const std::string key = file.get_string("general.architecture") + ".pooling_type";
    if (const auto value = file.find_uint(key)) {
        why = fmt::format("the model's {}", key);
        return serve::pooling_from_gguf(*value);
    }
    why = fmt::format("the model has no {}, as llama.cpp; give --pooling mean, cls or last", key);
    return serve::Pooling::None;
}

// The signal that asked the server to stop (0: none yet): written only by
// the handler below, the one place a signal may write to.
std::atomic<int> g_stop_signal{0};

extern "C" void on_stop_signal(int sig) { g_stop_signal.store(sig); }

// SIGINT and SIGTERM set g_stop_signal, whichever thread takes them (the
// BLAS library starts threads of its own), and a waiting thread stops the
// server in order: a request in flight gets its answer, a slot file being
// written is finished. During loading a signal ends the process at once.
class SignalWaiter {
public:
    SignalWaiter() {
        struct sigaction sa {};
        sa.sa_handler = on_stop_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, &old_int_);
        sigaction(SIGTERM, &sa, &old_term_);
        std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-answer is a failed write, not a dead server
        // SIGHUP (the terminal closed, a supervisor's "reload") changes
        // nothing: the server carries on, as llama-server does.
        struct sigaction ignore {};
        ignore.sa_handler = SIG_IGN;
        sigemptyset(&ignore.sa_mask);
        sigaction(SIGHUP, &ignore, &old_hup_);
    }
    ~SignalWaiter() {
        sigaction(SIGINT, &old_int_, nullptr);
        sigaction(SIGTERM, &old_term_, nullptr);
        sigaction(SIGHUP, &old_hup_, nullptr);
    }
    // Waits for a signal (its number), or until `give_up` turns true (0).
    static int wait(const std::atomic<bool>& give_up) {
        while (!give_up.load()) {
            if (const int sig = g_stop_signal.load(); sig != 0) return sig;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        return 0;
    }

private:
    struct sigaction old_int_ {}, old_term_ {}, old_hup_ {};
};

void serve_model(const ServeOptions& o) {
    if (o.http.port < 0 || o.http.port > 65535) {
        throw Error(fmt::format("--port: expected 0..65535, found {}", o.http.port));
    }
    if (o.http.timeout_s < 1) throw Error(fmt::format("--timeout: expected seconds >= 1, found {}", o.http.timeout_s));
    if (o.http.max_connections < 1) {
        throw Error(fmt::format("--max-connections: expected a count >= 1, found {}", o.http.max_connections));
    }
    if (o.http.http_threads < 0) {
        throw Error(fmt::format("--threads-http: expected a count >= 0, found {}", o.http.http_threads));
    }
    if (!o.pooling.empty()) serve::parse_pooling(o.pooling);  // a bad name is one line, before loading
    if (o.http.embeddings && o.pipeline) {
        throw Error("--embeddings: not supported with --pipeline (the last stage sends back logits only)");
    }
    if (!o.http.slot_save_path.empty() && !std::filesystem::is_directory(o.http.slot_save_path)) {
        throw Error(fmt::format("--slot-save-path: expected a folder, found '{}' (none there)", o.http.slot_save_path));
    }
    // What can be checked at once is, before the address is taken: a
    // missing model is one line, not a server that starts and then dies.
    serving::LoadRequest model_request;
    model_request.model_path = o.model;
    model_request.split.n_seq = o.n_parallel;
    model_request.validate();
    if (!o.chat_template.empty() && o.chat_template != "chatml" && !std::filesystem::is_regular_file(o.chat_template)) {
        throw Error(fmt::format("--chat-template: expected chatml or a file of Jinja text, found '{}' (no such file)",
                                o.chat_template));
    }
    if (!o.spec.model_draft.empty()) {
        if (!std::filesystem::is_regular_file(o.spec.model_draft)) {
            throw Error(fmt::format("--model-draft {}: expected a GGUF model file, found {}", o.spec.model_draft,
                                    std::filesystem::exists(o.spec.model_draft) ? "something else" : "nothing there"));
        }
        // Reads the two vocabularies only: a draft that cannot serve is one
        // line, before the address is taken.
        spec::check_draft_vocabulary(o.model, o.spec.model_draft);
    }
    SignalWaiter signals;
    serve::ServerState state;
    state.config = o.http;
    serve::HttpServer http(state);
    http.start();
    fmt::print(stderr, "tandem serve: listening on http://{}:{} (loading {})\n", o.http.host, http.port(), o.model);

    std::atomic<bool> loading{true};
    std::atomic<bool> failed{false};
    std::thread waiter([&] {
        const int sig = signals.wait(failed);
        if (sig == 0) return;
        if (loading.load()) {
            fmt::print(stderr, "\ntandem serve: stopped while loading ({})\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
            std::_Exit(130);
        }
    });
    std::unique_ptr<ChatModel> m;
    std::unique_ptr<spec::DraftModel> draft;
    serve::Pooling pooling = serve::Pooling::None;
    std::string pooling_why;
    try {
        check_spec_flags(o.spec);
        const std::unique_ptr<DraftHeader> draft_header = read_draft_header(o.spec);
        m = open_chat_model(o, o.n_parallel,
                            [&](SplitRequest& req) { request_draft(o.spec, draft_header.get(), req); });
        // The draft where the split placed it, a sequence per slot, with
        // the target's context, threads and cache type.
        draft = open_draft_model(o.spec, m->tokenizer, *m->session, m->session->n_ubatch(),
                                 split_request(o, m->session->n_ctx(), o.n_ubatch).cache_type, o.n_parallel,
                                 m->draft_placement);
        if (o.http.embeddings) pooling = embedding_pooling(o, m->file, pooling_why);
    } catch (...) {
        loading.store(false);
        failed.store(true);
        waiter.join();
        throw;
    }
    serve::SchedulerOptions so;
    so.n_slots = o.n_parallel;
    so.step_tokens = o.n_ubatch;
    so.spec_ngram = o.spec.ngram.value_or(0);
    so.draft_max = o.spec.draft_max;
    so.draft_min = o.spec.draft_min;
    so.draft_adaptive = !o.spec.fixed_length;
    so.draft = draft.get();
    serve::Scheduler scheduler(*m->session, m->tokenizer, so);
    serve::LoadedModel& lm = state.model;
    lm.name = std::filesystem::path(o.model).filename().string();
    lm.tokenizer = &m->tokenizer;
    lm.chat_template = &m->chat_template;
    lm.scheduler = &scheduler;
    lm.add_bos = m->tokenizer.add_bos_by_default();
    lm.bos_text = m->bos_text;
    lm.eos_text = m->eos_text;
    lm.end_of_turn_text = m->end_of_turn_text;
    lm.end_of_turn_tokens = m->end_of_turn_tokens;
    lm.harmony = m->chat_template.family() == "harmony";
    lm.max_slot_file_bytes = m->session->kv_cache_bytes() + (uint64_t{64} << 20);
    lm.grammar_tokens = tandem::grammar_tokens(m->tokenizer);
    lm.facts = serve::model_facts(m->file);
    lm.n_embd = m->session->n_embd();
    lm.pooling = pooling;
    scheduler.start();
    loading.store(false);
    state.ready.store(true);
    fmt::print(stderr, "tandem serve: {} slots of {} tokens; chat template: {} ({})\n", o.n_parallel,
               scheduler.n_ctx_slot(), m->template_origin, m->chat_template.family());
    if (o.http.embeddings) {
        fmt::print(stderr, "tandem serve: /v1/embeddings on: {} pooling ({}), vectors of {}\n",
                   serve::pooling_name(lm.pooling), pooling_why, lm.n_embd);
    }
    if (draft) {
        fmt::print(stderr, "tandem serve: draft model {} on the CPU, a sequence per slot, up to {} tokens a step\n",
                   o.spec.model_draft, o.spec.draft_max);
    }
    if (o.verbose) fmt::print(stderr, "{}\nplacement: {}\n", m->split_why, m->session->placement_summary());
    if (o.verbose && draft) {
        fmt::print(stderr, "{}\ndraft placement: {}\n", m->draft_why, draft->session().placement_summary());
    }
    fmt::print(stderr, "tandem serve: ready on http://{}:{}  (Ctrl-C stops)\n", o.http.host, http.port());
    waiter.join();
    // New requests get 503; running ones end with what they have
    // ("length"), and their answers are written out, chunked terminator
    // included, before the listener closes (it cuts any response still
    // being written). A client too slow to take its answer is waited for
    // kStopDrain at most.
    fmt::print(stderr, "tandem serve: stopping\n");
    state.stopping.store(true);
    scheduler.stop();
    constexpr auto kStopDrain = std::chrono::seconds(5);
    const auto drain_end = std::chrono::steady_clock::now() + kStopDrain;
    while (state.answering.load() > 0 && std::chrono::steady_clock::now() < drain_end) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    http.stop();
}

constexpr const char* kServeFooter = R"(Routes: OpenAI's POST /v1/chat/completions, /v1/completions (n up to
--parallel choices), GET /v1/models; Anthropic's POST /v1/messages (text
blocks, system, max_tokens, temperature, top_p, top_k, stop_sequences,
stream; tools refused);
POST /v1/embeddings (and /embeddings; with --embeddings, else 501);
Ollama's GET /api/tags, /api/version, POST /api/show, /api/chat,
/api/generate (streamed as newline-delimited JSON unless "stream": false;
"options" temperature, top_p, top_k, min_p, seed, num_predict, stop,
repeat_penalty, repeat_last_n, the others ignored; "format", "images",
"tools", "suffix", "template" and "context" refused with 400); GET /health,
/metrics, /slots, POST /tokenize, /detokenize, /apply-template,
/slots/ID?action=save|restore.

Embeddings (--embeddings): each input (a string, or token ids; a list of
either) is evaluated in a slot like a prompt, its final hidden states
(after the output norm) pooled by --pooling: mean over its tokens, cls (the
first token's), last (the last token's; Qwen3-Embedding's), as llama.cpp;
then scaled to unit length (a request's "embd_normalize" changes that, as
llama-server). Default pooling: the model's <arch>.pooling_type, else none,
as llama.cpp, which /v1/embeddings refuses (400): a plain decoder model
needs --pooling. "encoding_format": "float" or "base64". Chat requests are
served as before, side by side.

CORS (--cors-origin): a browser's preflight (OPTIONS) on any route gets 204
without asking for the API key; answers to an allowed origin carry
Access-Control-Allow-Origin. Other origins get no CORS headers.

Speculative decoding: each slot checks up to --draft-max tokens guessed
for it in the step that decodes its token, proposed by --spec-ngram [N]
(prompt lookup in the slot's own context, N = 3 when not given) or by
-md DRAFT.gguf (--model-draft: a smaller model with the same vocabulary,
loaded once on the CPU with a sequence per slot; it stops drafting before a
token it gives less than --draft-p-min). A greedy request (temperature 0)
keeps the drafts the model agrees with: the same text as without. A
sampling request goes through the standard accept/reject rule: the same
distribution as without (other draws for a given seed). --draft-min and
--draft-fixed work as for run. /metrics counts drafts proposed and kept.)";

}  // namespace

void add_serve_command(CLI::App& app) {
    auto opts = std::make_shared<ServeOptions>();
    CLI::App* cmd = app.add_subcommand("serve", "An OpenAI-compatible HTTP server with parallel slots");
    add_chat_model_flags(*cmd, *opts);
    cmd->add_option("--host", opts->http.host, "address to listen on")->capture_default_str();
    cmd->add_option("--port", opts->http.port, "port to listen on (0: any free port)")->capture_default_str();
    cmd->add_option("--parallel", opts->n_parallel, "slots: requests decoded together (-np)")->capture_default_str();
    cmd->add_option("--api-key", opts->http.api_key, "require 'Authorization: Bearer KEY' (or 'x-api-key: KEY') on every route but /health");
    cmd->add_option("--cors-origin", opts->cors_origin,
                    "let browser apps on ORIGIN (scheme://host[:port], or '*' for any) call the server: repeat it or "
                    "separate origins with commas (off without it)")
        ->type_name("ORIGIN")
        ->allow_extra_args(false);
    cmd->add_option("--slot-save-path", opts->http.slot_save_path,
                    "folder for POST /slots/ID?action=save|restore files (off without it)");
    cmd->add_option("--threads-http", opts->http.http_threads,
                    "request threads kept ready; more start as requests arrive, up to one per connection (idle "
                    "connections wait in one thread)")
        ->capture_default_str();
    cmd->add_option("--max-connections", opts->http.max_connections,
                    "connections open at once; past it the longest idle one is closed, or the new one gets 503")
        ->capture_default_str();
    cmd->add_option("--timeout", opts->http.timeout_s,
                    "seconds a request's headers and body may take to arrive (else 408), and each write of an "
                    "answer to make progress")
        ->capture_default_str();
    cmd->add_flag("--embedding,--embeddings", opts->http.embeddings,
                  "answer POST /v1/embeddings (-embd; without it 501, as llama-server)");
    cmd->add_option("--pooling", opts->pooling,
                    "embeddings' pooling: mean, cls, last or none (default: the model's <arch>.pooling_type, else "
                    "none, as llama.cpp)")
        ->type_name("TYPE");
    cmd->add_flag("--verbose", opts->verbose, "print the placement");
    add_spec_flags(*cmd, opts->spec);
    add_llama_compat_flags(*cmd, LlamaTool::Run);
    cmd->footer(std::string(kServeFooter) + "\n\n" + llama_spellings_help(*cmd));
    cmd->callback([opts] {
        // Checked before anything loads.
        opts->http.cors_origins = serve::parse_cors_origins(opts->cors_origin);
        const SpecFlags& f = opts->spec;
        check_spec_flags(f);
        if (f.ngram && (*f.ngram < 1 || f.draft_max < 1)) {
            throw Error(fmt::format("--spec-ngram {} --draft-max {}: expected values >= 1", *f.ngram, f.draft_max));
        }
        if (!f.model_draft.empty() && f.draft_max < 1) {
            throw Error(fmt::format("--model-draft with --draft-max {}: expected a value >= 1", f.draft_max));
        }
        if (f.enabled() && f.draft_max + 1 > opts->n_ubatch) {
            throw Error(fmt::format("--draft-max {} needs a micro-batch (-ub) of at least {} tokens, found {}",
                                    f.draft_max, f.draft_max + 1, opts->n_ubatch));
        }
        serve_model(*opts);
    });
}

}  // namespace tandem::tools
