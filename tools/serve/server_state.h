// What the HTTP routes share: the loaded model (set once loading is done;
// until then every route but /health answers 503) and the server's flags.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "runtime/chat/chat_template.h"
#include "runtime/grammar/token_table.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/serving/scheduler.h"

namespace httplib {
class Server;
struct Request;
}

namespace tandem::serve {

struct ServeConfig {
    std::string host = "127.0.0.1";
    int port = 8080;
    std::string api_key;           // "": no key asked for
    std::vector<std::string> cors_origins;  // --cors-origin: empty, CORS off; "*" any origin
    std::string slot_save_path;    // "": slot save/restore refused
    size_t max_body_bytes = size_t{8} << 20;
    int http_threads = 32;      // --threads-http: request threads kept ready (more start as needed)
    int max_connections = 1024; // --max-connections: open at once (connections.h says what happens past it)
    int timeout_s = 30;         // --timeout: a request must arrive, and each write of its answer progress, within it
    bool embeddings = false;    // --embeddings: /v1/embeddings answers (else 501, as llama-server)
};

// What Ollama's /api/tags and /api/show say of the model file
// (ollama_api.h's model_facts reads them).
struct ModelFacts {
    std::string family;              // general.architecture
    uint64_t parameter_count = 0;    // elements of all tensors
    std::string parameter_size;      // "135M", "7.2B"
    std::string quantization_level;  // general.file_type's name ("Q4_K_M"), or the empty string
    uint64_t size = 0;               // bytes of the file
    std::string modified_at;         // its modification time, RFC 3339
    std::string digest;              // 64 hex digits: tandem's fingerprint of the file, not its SHA-256
};

// The model as the routes use it, complete before `ready` turns true.
struct LoadedModel {
    std::string name;  // the model file's name: /v1/models and every response's "model"
    const Tokenizer* tokenizer = nullptr;
    const chat::ChatTemplate* chat_template = nullptr;
    Scheduler* scheduler = nullptr;
    bool add_bos = false;
    std::string bos_text, eos_text;
    std::vector<std::string> end_of_turn_text;  // the template's end-of-turn markers
    std::vector<int32_t> end_of_turn_tokens;    // those of them that are single tokens
    bool harmony = false;  // replies in gpt-oss's harmony format: split into reasoning, content and tool calls
    uint64_t max_slot_file_bytes = 0;           // restore refuses larger files
    std::shared_ptr<const grammar::TokenTable> grammar_tokens;  // the vocabulary for grammars (grammar_tokens())
    Pooling pooling = Pooling::None;  // /v1/embeddings: --pooling, else the GGUF's <arch>.pooling_type
    int64_t n_embd = 0;               // the width of an embedding
    ModelFacts facts;
};

struct ServerState {
    ServeConfig config;
    LoadedModel model;
    std::atomic<bool> ready{false};
    // Set by SIGINT/SIGTERM: new requests get 503 while the running ones
    // finish (cmd_serve.cpp stops the scheduler, then waits for `answering`
    // to reach 0 before it closes the listener).
    std::atomic<bool> stopping{false};
    // Generation answers being written: a streamed one until its last chunk
    // and the chunked terminator are out (answer_token()).
    std::atomic<int64_t> answering{0};
    std::atomic<int64_t> requests_total{0};
    std::atomic<int64_t> requests_rejected{0};  // 4xx answers
    std::mutex rng_mu;
    std::mt19937_64 rng{std::random_device{}()};
    // What GenerationRequest::client_gone is for a request: whether the
    // client that sent it has gone (set by HttpServer; empty: unknown).
    std::function<std::function<bool()>(const httplib::Request&)> client_watch;

    // Held by a generation answer for as long as it is being written.
    std::shared_ptr<void> answer_token() {
        answering.fetch_add(1);
        return std::shared_ptr<void>(nullptr, [this](void*) { answering.fetch_sub(1); });
    }

    // The look at whether `req`'s client has gone, for its generation request.
    std::function<bool()> watch_client(const httplib::Request& req) const {
        return client_watch ? client_watch(req) : std::function<bool()>();
    }

    // A seed for a request that gives none.
    uint64_t draw_seed() {
        std::lock_guard lock(rng_mu);
        return rng();
    }
};

// The routes, by concern (completions.cpp, admin_routes.cpp, ollama_api.cpp,
// anthropic_api.cpp, embeddings.cpp).
void add_completion_routes(httplib::Server& server, ServerState& state);
void add_admin_routes(httplib::Server& server, ServerState& state);
void add_ollama_routes(httplib::Server& server, ServerState& state);
void add_anthropic_routes(httplib::Server& server, ServerState& state);
void add_embedding_routes(httplib::Server& server, ServerState& state);  // embeddings.h

}  // namespace tandem::serve
