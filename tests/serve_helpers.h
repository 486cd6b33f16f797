// What the scheduler and request tests share (test_serve.cpp,
// test_serve_spec.cpp, test_logprobs.cpp): a tiny model opened as the
// server opens it, a job's events collected, a greedy request, the plain
// greedy text a served request must give, and a request body's 400.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/sampler/sampler.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/test_paths.h"
#include "runtime/serving/scheduler.h"
#include "tools/serve/openai_api.h"

namespace tandem::testing {

// What the OpenAI routes' parsing says of a request body (chat or
// completions): its 400, or nothing when it is accepted.
inline std::optional<serve::ApiError> request_error(const nlohmann::json& body, bool chat) {
    try {
        if (chat) serve::parse_chat_request(body, 1);
        else serve::parse_completion_request(body, 1);
    } catch (const serve::ApiError& e) {
        EXPECT_EQ(e.status, 400);
        return e;
    }
    return std::nullopt;
}

struct ServeModel {
    explicit ServeModel(const std::filesystem::path& path = test_data("tiny-llama-Q4_K_M.gguf"))
        : file(gguf::File::open(path)), spec(model::load_model_spec(file)), tok(Tokenizer::from_gguf(file)) {}
    gguf::File file;
    model::ModelSpec spec;
    Tokenizer tok;

    // n_threads 0: the physical cores.
    std::unique_ptr<Session> session(int n_seq, int64_t n_ctx = 1024, int n_threads = 0) const {
        SessionOptions o;
        o.n_threads = n_threads;
        o.n_ctx = n_ctx;
        o.n_ubatch = 64;
        o.n_seq_max = n_seq;
        o.kv_per_sequence = true;  // as the server opens it
        o.cache_type = model::kCacheF16;
        return std::make_unique<Session>(file, spec, o);
    }
};

struct ServeResult {
    std::string text;
    serve::Event last;
};

inline ServeResult collect(const std::shared_ptr<serve::Job>& job) {
    ServeResult r;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
        auto e = job->next(std::chrono::milliseconds(100));
        if (!e) continue;
        r.text += e->text;
        if (e->done) {
            r.last = *e;
            return r;
        }
    }
    ADD_FAILURE() << "a job did not finish in 120 s";
    return r;
}

inline serve::GenerationRequest greedy_request(const std::vector<int32_t>& prompt, int64_t n) {
    serve::GenerationRequest g;
    g.prompt = prompt;
    g.sampling.temperature = 0;
    g.max_tokens = n;
    g.ignore_eos = true;
    return g;
}

// Greedy ids straight from a session, one token at a time, as text: the
// reference a served request must give.
inline std::string plain_greedy(const ServeModel& m, const std::vector<int32_t>& prompt, int n) {
    auto s = m.session(1);
    std::vector<float> logits;
    s->eval(prompt, false, logits);
    std::string text;
    for (int i = 0; i < n; ++i) {
        const int32_t t = argmax(logits);
        text += m.tok.token_to_piece(t);
        if (i + 1 < n) {
            const int32_t one[1] = {t};
            s->eval(one, false, logits);
        }
    }
    return text;
}

}  // namespace tandem::testing
