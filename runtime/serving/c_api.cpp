// The C API (tandem.h) over the serving library: a loaded model and the
// slot scheduler, one slot per sequence. Exceptions stop here: each entry
// point turns them into -1 or NULL and this thread's last error.
#include "runtime/serving/tandem.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/serving/embedding.h"
#include "runtime/serving/loader.h"
#include "runtime/serving/scheduler.h"

struct tandem_model {
    std::unique_ptr<tandem::serving::LoadedModel> loaded;
    std::unique_ptr<tandem::serve::Scheduler> scheduler;
};

namespace {

using tandem::Error;
using tandem::FieldError;

// The last failure of each thread, as errno is: a C caller's only way to
// the message, and no thread sees another's.
thread_local std::string t_last_error;

// The C fields' names for the library's: what a C caller set.
std::string c_field(std::string_view field) {
    if (field == "n_slots") return "n_seq";
    if (field == "vram") return "vram_bytes";
    return std::string(field);
}

// Runs fn, returning its value, or `failed` with the error recorded.
template <class T, class F>
T guarded(T failed, F&& fn) {
    try {
        T v = fn();
        t_last_error.clear();
        return v;
    } catch (const FieldError& e) {
        t_last_error = e.render(c_field);
    } catch (const std::bad_alloc&) {
        t_last_error = "out of host memory";
    } catch (const std::exception& e) {
        t_last_error = e.what();
    }
    return failed;
}

void require(const void* p, const char* what) {
    if (p == nullptr) throw Error(fmt::format("{}: expected a pointer, found NULL", what));
}

// The pooling a C caller named: one vector per sequence, so not "none".
tandem::serve::Pooling c_pooling(const char* name) {
    using tandem::serve::Pooling;
    const char* expected = "params->pooling: expected \"mean\", \"cls\" or \"last\"";
    if (name == nullptr) throw Error(fmt::format("{}, found NULL", expected));
    const std::string_view n(name);
    for (const Pooling p : {Pooling::Mean, Pooling::Cls, Pooling::Last}) {
        if (n == tandem::serve::pooling_name(p)) return p;
    }
    throw Error(fmt::format("{}, found \"{}\"", expected, n));
}

// The pooled, normalized embedding of tokens, written to out: a sequence's
// turn in the scheduler, as the server's /v1/embeddings takes.
int32_t embed(tandem_model* model, std::vector<int32_t> tokens, const tandem_embed_params& p, float* out,
              int32_t capacity) {
    const tandem::serve::Pooling pooling = c_pooling(p.pooling);
    // As the server's embd_normalize: past 64 the p-th powers overflow.
    if (p.normalize < -1 || p.normalize > 64) {
        throw Error(fmt::format("params->normalize: expected -1, 0 or a p-norm in 1..64, found {}", p.normalize));
    }
    const auto n_embd = static_cast<int32_t>(model->loaded->session->n_embd());
    if (capacity < n_embd) {
        throw Error(fmt::format("capacity: an embedding of this model needs {} floats, found room for {}", n_embd,
                                capacity));
    }
    require(out, "embedding");
    tandem::serve::GenerationRequest req;
    req.prompt = std::move(tokens);
    req.embed = pooling;
    req.cache_prompt = false;
    const std::shared_ptr<tandem::serve::Job> job = model->scheduler->submit(std::move(req));
    while (true) {
        const std::optional<tandem::serve::Event> e = job->next(std::chrono::milliseconds(100));
        if (!e || !e->done) continue;
        if (e->finish_reason == "error") throw Error(e->error);
        if (e->embedding.empty()) throw Error(fmt::format("the embedding ended \"{}\"", e->finish_reason));
        const std::vector<float> v = tandem::serve::normalize_embedding(e->embedding, p.normalize);
        std::copy(v.begin(), v.end(), out);
        return static_cast<int32_t>(v.size());
    }
}

}  // namespace

extern "C" {

tandem_open_params tandem_open_params_default(void) {
    tandem_open_params p{};
    p.n_seq = 1;
    p.n_gpu_layers = -1;
    return p;
}

tandem_generate_params tandem_generate_params_default(void) {
    tandem_generate_params p{};
    p.max_tokens = 128;
    p.temperature = 0.0f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.cache_prompt = 1;
    p.add_bos = 1;
    return p;
}

tandem_embed_params tandem_embed_params_default(void) {
    tandem_embed_params p{};
    p.pooling = "mean";
    p.normalize = 2;
    p.add_bos = 1;
    return p;
}

const char* tandem_last_error(void) { return t_last_error.c_str(); }

tandem_model* tandem_open(const tandem_open_params* params) {
    return guarded<tandem_model*>(nullptr, [&]() -> tandem_model* {
        require(params, "params");
        require(params->model_path, "params->model_path");
        tandem::serving::LoadRequest req;
        req.model_path = params->model_path;
        req.split.device = params->device != nullptr ? params->device : "";
        if (params->vram_bytes > 0) req.split.vram = {params->vram_bytes};
        if (params->n_gpu_layers >= 0) req.split.ngl = params->n_gpu_layers;
        // n_ctx is per sequence here and in total in the request: checked
        // before the product, so the message shows the value given.
        if (params->n_ctx < 0) {
            throw FieldError("n_ctx", fmt::format("{{n_ctx}}: expected 0 or more positions, found {}", params->n_ctx));
        }
        req.split.n_seq = params->n_seq;
        req.split.n_ctx = static_cast<int64_t>(params->n_ctx) * std::max(params->n_seq, 1);
        req.cache_per_sequence = true;  // a sequence's logits do not depend on the others'
        req.n_threads = params->n_threads;
        auto model = std::make_unique<tandem_model>();
        model->loaded = tandem::serving::load_model(req, [](const std::string&) {});
        tandem::serve::SchedulerOptions so;
        so.n_slots = params->n_seq;
        so.step_tokens = model->loaded->session->n_ubatch();
        model->scheduler = std::make_unique<tandem::serve::Scheduler>(*model->loaded->session,
                                                                      model->loaded->tokenizer, so);
        model->scheduler->start();
        return model.release();
    });
}

void tandem_close(tandem_model* model) {
    if (model == nullptr) return;
    if (model->scheduler) model->scheduler->stop();
    delete model;
}

int32_t tandem_n_ctx(const tandem_model* model) {
    return model != nullptr ? static_cast<int32_t>(model->scheduler->n_ctx_slot()) : -1;
}

int32_t tandem_n_seq(const tandem_model* model) { return model != nullptr ? model->scheduler->n_slots() : -1; }

int32_t tandem_n_vocab(const tandem_model* model) {
    return model != nullptr ? static_cast<int32_t>(model->loaded->session->n_vocab()) : -1;
}

int32_t tandem_n_embd(const tandem_model* model) {
    return model != nullptr ? static_cast<int32_t>(model->loaded->session->n_embd()) : -1;
}

int32_t tandem_tokenize(tandem_model* model, const char* text, int32_t add_bos, int32_t* tokens, int32_t capacity) {
    return guarded<int32_t>(-1, [&]() -> int32_t {
        require(model, "model");
        require(text, "text");
        if (capacity < 0) throw Error(fmt::format("capacity: expected 0 or more, found {}", capacity));
        if (capacity > 0) require(tokens, "tokens");
        const tandem::Tokenizer& tok = model->loaded->tokenizer;
        const std::vector<int32_t> ids = tok.encode(text, add_bos != 0 && tok.add_bos_by_default());
        std::copy_n(ids.begin(), std::min<size_t>(ids.size(), static_cast<size_t>(capacity)), tokens);
        return static_cast<int32_t>(ids.size());
    });
}

int32_t tandem_generate(tandem_model* model, const char* prompt, const tandem_generate_params* params,
                        tandem_text_callback callback, void* user_data, tandem_result* result) {
    return guarded<int32_t>(-1, [&]() -> int32_t {
        require(model, "model");
        require(prompt, "prompt");
        const tandem_generate_params p = params != nullptr ? *params : tandem_generate_params_default();
        const tandem::Tokenizer& tok = model->loaded->tokenizer;
        tandem::serve::GenerationRequest req;
        req.prompt = tok.encode(prompt, p.add_bos != 0 && tok.add_bos_by_default());
        req.sampling.temperature = p.temperature;
        req.sampling.top_k = p.top_k;
        req.sampling.top_p = p.top_p;
        req.sampling.min_p = p.min_p;
        req.sampling.repeat_penalty = p.repeat_penalty;
        req.sampling.seed = p.seed;
        req.max_tokens = p.max_tokens;
        req.ignore_eos = p.ignore_eos != 0;
        req.cache_prompt = p.cache_prompt != 0;
        const std::shared_ptr<tandem::serve::Job> job = model->scheduler->submit(std::move(req));
        while (true) {
            const std::optional<tandem::serve::Event> e = job->next(std::chrono::milliseconds(100));
            if (!e) continue;
            if (!e->text.empty() && callback != nullptr && !job->cancelled() &&
                callback(e->text.data(), e->text.size(), user_data) != 0) {
                job->cancel();
            }
            if (!e->done) continue;
            if (e->finish_reason == "error") throw Error(e->error);
            if (result != nullptr) {
                result->sequence = e->slot;
                result->prompt_tokens = static_cast<int32_t>(e->usage.prompt_tokens);
                result->cached_tokens = static_cast<int32_t>(e->usage.cached_tokens);
                result->completion_tokens = static_cast<int32_t>(e->usage.completion_tokens);
                std::memset(result->finish_reason, 0, sizeof(result->finish_reason));
                std::strncpy(result->finish_reason, e->finish_reason.c_str(), sizeof(result->finish_reason) - 1);
            }
            return 0;
        }
    });
}

int32_t tandem_embed(tandem_model* model, const char* text, const tandem_embed_params* params, float* embedding,
                     int32_t capacity) {
    return guarded<int32_t>(-1, [&]() -> int32_t {
        require(model, "model");
        require(text, "text");
        if (*text == '\0') throw Error("text: expected text, found an empty string");
        const tandem_embed_params p = params != nullptr ? *params : tandem_embed_params_default();
        // As llama-server tokenizes an embedding's input: special tokens
        // parsed, EOS after where the vocabulary asks (Qwen3-Embedding).
        const tandem::Tokenizer& tok = model->loaded->tokenizer;
        std::vector<int32_t> ids = tok.encode(text, p.add_bos != 0 && tok.add_bos_by_default(), true);
        if (tok.add_eos_by_default() && tok.eos() >= 0) ids.push_back(tok.eos());
        return embed(model, std::move(ids), p, embedding, capacity);
    });
}

int32_t tandem_embed_tokens(tandem_model* model, const int32_t* tokens, int32_t n_tokens,
                            const tandem_embed_params* params, float* embedding, int32_t capacity) {
    return guarded<int32_t>(-1, [&]() -> int32_t {
        require(model, "model");
        if (n_tokens < 1) throw Error(fmt::format("n_tokens: expected 1 or more, found {}", n_tokens));
        require(tokens, "tokens");
        const int32_t n_vocab = tandem_n_vocab(model);
        for (int32_t i = 0; i < n_tokens; ++i) {
            if (tokens[i] < 0 || tokens[i] >= n_vocab) {
                throw Error(fmt::format("tokens[{}]: expected a token id in [0, {}), found {}", i, n_vocab, tokens[i]));
            }
        }
        const tandem_embed_params p = params != nullptr ? *params : tandem_embed_params_default();
        return embed(model, std::vector<int32_t>(tokens, tokens + n_tokens), p, embedding, capacity);
    });
}

int64_t tandem_save_sequence(tandem_model* model, int32_t sequence, uint8_t* buffer, size_t size) {
    return guarded<int64_t>(-1, [&]() -> int64_t {
        require(model, "model");
        std::vector<uint8_t> state;
        size_t n_tokens = 0;
        const std::string why = model->scheduler->save_slot(sequence, state, n_tokens);
        if (!why.empty()) throw Error(why);
        if (state.size() <= size) {
            require(buffer, "buffer");
            std::memcpy(buffer, state.data(), state.size());
        }
        return static_cast<int64_t>(state.size());
    });
}

int32_t tandem_restore_sequence(tandem_model* model, int32_t sequence, const uint8_t* buffer, size_t size) {
    return guarded<int32_t>(-1, [&]() -> int32_t {
        require(model, "model");
        require(buffer, "buffer");
        size_t n_tokens = 0;
        const std::string why = model->scheduler->restore_slot(sequence, {buffer, size}, n_tokens);
        if (!why.empty()) throw Error(why);
        return static_cast<int32_t>(n_tokens);
    });
}

}  // extern "C"
