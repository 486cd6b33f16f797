#include "runtime/scheduler/session.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "kernels_cpu/attention.h"
#include "kernels_cpu/elementwise.h"
#include "kernels_cpu/thread_pool.h"
#include "runtime/common/error.h"
#include "runtime/kv_cache/kv_cache.h"

namespace tandem {
namespace {

using model::GlobalTensor;
using model::LayerTensor;

cpu::WeightView weight_view(const gguf::File& file, const gguf::TensorInfo& t) {
    cpu::WeightView w;
    w.type = t.type;
    w.data = file.tensor_data(t).data();
    w.n_cols = t.shape.empty() ? 1 : t.shape[0];
    w.n_rows = t.n_rows();
    w.row_stride_bytes = *quant::row_bytes(t.type, w.n_cols);
    return w;
}

// Norm weights and RoPE factors are small; a float copy frees the kernels
// from caring whether the file stored them as F32 or F16.
std::vector<float> float_vector(const gguf::File& file, const gguf::TensorInfo* t) {
    if (!t) return {};
    std::vector<float> v(static_cast<size_t>(t->n_elements));
    const auto bytes = file.tensor_data(*t);
    const int64_t row = t->row_length();
    for (int64_t r = 0; r < t->n_rows(); ++r) {
        quant::dequantize_row(t->type, bytes.data() + r * *quant::row_bytes(t->type, row), v.data() + r * row, row);
    }
    return v;
}

struct LayerWeights {
    cpu::WeightView q, k, v, o, gate, up, down;
    std::vector<float> attn_norm, q_norm, k_norm, attn_post_norm, ffn_norm, ffn_post_norm;
    bool sliding_window = false;
    float rope_base = 10000.0f;
};

}  // namespace

struct Session::Impl {
    const gguf::File& file;
    const model::ModelSpec& spec;
    const model::HParams& hp;
    SessionOptions opt;
    cpu::SimdLevel level;
    cpu::ThreadPool pool;
    std::vector<LayerWeights> layers;
    std::vector<LayerKvCache> kv;
    const gguf::TensorInfo* token_embd = nullptr;
    cpu::WeightView head;
    std::vector<float> output_norm;
    std::vector<float> rope_freqs;
    int64_t n_past = 0;

    // Scratch for one micro-batch.
    std::vector<float> x, cur, q, k, v, attn, ffn_gate, ffn_up, logits_in;
    std::vector<int32_t> pos;

    Impl(const gguf::File& f, const model::ModelSpec& s, const SessionOptions& o)
        : file(f),
          spec(s),
          hp(s.hp),
          opt(o),
          level(o.simd_from_env ? cpu::simd_level_from_env() : cpu::best_simd_level()),
          pool(o.n_threads) {
        if (file.header_only()) {
            throw Error(fmt::format("{}: this file was written by `tandem synth --header-only` and holds no weights; "
                                    "it can be planned but not run",
                                    file.name()));
        }
        if (opt.n_ctx <= 0) opt.n_ctx = std::min<int64_t>(hp.n_ctx_train, 4096);
        if (opt.n_ubatch <= 0) throw Error(fmt::format("micro-batch size must be positive, found {}", opt.n_ubatch));
        opt.n_ubatch = std::min(opt.n_ubatch, opt.n_ctx);
        bind_weights();
        const quant::Type cache_type = model::cache_quant_type(opt.cache_type);
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            const int64_t cells = model::kv_cells_for_layer(spec, il, opt.n_ctx, opt.n_ubatch);
            if (!quant::row_bytes(cache_type, hp.head_dim_k) || !quant::row_bytes(cache_type, hp.head_dim_v)) {
                throw Error(fmt::format("cache type {} needs head sizes that are multiples of {}, the model has {}",
                                        quant::traits(cache_type).name, quant::traits(cache_type).block_elems,
                                        hp.head_dim_k));
            }
            kv.emplace_back(cache_type, cells, hp.k_dim(), hp.v_dim());
        }
        const size_t ub = static_cast<size_t>(opt.n_ubatch);
        x.resize(ub * hp.n_embd);
        cur.resize(ub * hp.n_embd);
        q.resize(ub * hp.q_dim());
        k.resize(ub * hp.k_dim());
        v.resize(ub * hp.v_dim());
        attn.resize(ub * std::max(hp.out_dim(), hp.n_embd));
        ffn_gate.resize(ub * hp.n_ff);
        ffn_up.resize(ub * hp.n_ff);
        pos.resize(ub);
    }

    void bind_weights() {
        token_embd = spec.get(GlobalTensor::TokenEmbd);
        head = weight_view(file, spec.output_head());
        output_norm = float_vector(file, spec.get(GlobalTensor::OutputNorm));
        rope_freqs = float_vector(file, spec.get(GlobalTensor::RopeFreqs));
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            const model::LayerSpec& ls = spec.layers[static_cast<size_t>(il)];
            LayerWeights w;
            w.q = weight_view(file, *ls.get(LayerTensor::AttnQ));
            w.k = weight_view(file, *ls.get(LayerTensor::AttnK));
            w.v = weight_view(file, *ls.get(LayerTensor::AttnV));
            w.o = weight_view(file, *ls.get(LayerTensor::AttnOutput));
            w.gate = weight_view(file, *ls.get(LayerTensor::FfnGate));
            w.up = weight_view(file, *ls.get(LayerTensor::FfnUp));
            w.down = weight_view(file, *ls.get(LayerTensor::FfnDown));
            w.attn_norm = float_vector(file, ls.get(LayerTensor::AttnNorm));
            w.q_norm = float_vector(file, ls.get(LayerTensor::AttnQNorm));
            w.k_norm = float_vector(file, ls.get(LayerTensor::AttnKNorm));
            w.attn_post_norm = float_vector(file, ls.get(LayerTensor::AttnPostNorm));
            w.ffn_norm = float_vector(file, ls.get(LayerTensor::FfnNorm));
            w.ffn_post_norm = float_vector(file, ls.get(LayerTensor::FfnPostNorm));
            w.sliding_window = ls.sliding_window;
            w.rope_base = static_cast<float>(ls.rope_base);
            layers.push_back(std::move(w));
        }
    }

    void matmul(const cpu::WeightView& w, const float* in, int64_t n_tokens, float* out) {
        cpu::matmul(w, in, w.n_cols, n_tokens, out, w.n_rows, pool, level);
    }

    void run_layer(int64_t il, int64_t n) {
        const LayerWeights& w = layers[static_cast<size_t>(il)];
        const float eps = static_cast<float>(hp.rms_eps);
        const int64_t E = hp.n_embd;

        cpu::rms_norm_rows(x.data(), w.attn_norm.data(), cur.data(), E, n, eps);
        matmul(w.q, cur.data(), n, q.data());
        matmul(w.k, cur.data(), n, k.data());
        matmul(w.v, cur.data(), n, v.data());
        if (!w.q_norm.empty()) cpu::rms_norm_rows(q.data(), w.q_norm.data(), q.data(), hp.head_dim_k, n * hp.n_head, eps);
        if (!w.k_norm.empty()) {
            cpu::rms_norm_rows(k.data(), w.k_norm.data(), k.data(), hp.head_dim_k, n * hp.n_head_kv, eps);
        }
        cpu::RopeParams rope;
        rope.mode = spec.arch->rope_style == model::RopeStyle::Neox ? cpu::RopeMode::Neox : cpu::RopeMode::Norm;
        rope.n_rot = hp.n_rot;
        rope.freq_base = w.rope_base;
        rope.freq_scale = static_cast<float>(hp.rope_freq_scale);
        rope.freq_factors = rope_freqs.empty() ? nullptr : rope_freqs.data();
        for (int64_t t = 0; t < n; ++t) {
            cpu::rope_heads(q.data() + t * hp.q_dim(), hp.n_head, hp.head_dim_k, pos[static_cast<size_t>(t)], rope);
            cpu::rope_heads(k.data() + t * hp.k_dim(), hp.n_head_kv, hp.head_dim_k, pos[static_cast<size_t>(t)], rope);
        }
        LayerKvCache& cache = kv[static_cast<size_t>(il)];
        for (int64_t t = 0; t < n; ++t) {
            cache.store(pos[static_cast<size_t>(t)], k.data() + t * hp.k_dim(), v.data() + t * hp.v_dim());
        }
        cpu::AttentionShape shape;
        shape.n_head = hp.n_head;
        shape.n_head_kv = hp.n_head_kv;
        shape.head_dim_k = hp.head_dim_k;
        shape.head_dim_v = hp.head_dim_v;
        shape.window = w.sliding_window ? hp.sliding_window : 0;
        const float head_scale =
            1.0f / std::sqrt(static_cast<float>(spec.arch->query_scale_by_embd_per_head ? hp.n_embd / hp.n_head
                                                                                        : hp.head_dim_k));
        shape.scale = head_scale;
        cpu::attention(q.data(), pos.data(), n, shape, cache.view(), attn.data(), pool, level);
        matmul(w.o, attn.data(), n, cur.data());
        if (!w.attn_post_norm.empty()) cpu::rms_norm_rows(cur.data(), w.attn_post_norm.data(), cur.data(), E, n, eps);
        cpu::add(x.data(), cur.data(), n * E);

        cpu::rms_norm_rows(x.data(), w.ffn_norm.data(), cur.data(), E, n, eps);
        matmul(w.gate, cur.data(), n, ffn_gate.data());
        matmul(w.up, cur.data(), n, ffn_up.data());
        if (spec.arch->ffn_activation == model::FfnActivation::Silu) {
            cpu::swiglu(ffn_gate.data(), ffn_up.data(), ffn_gate.data(), n * hp.n_ff);
        } else {
            cpu::geglu(ffn_gate.data(), ffn_up.data(), ffn_gate.data(), n * hp.n_ff);
        }
        matmul(w.down, ffn_gate.data(), n, cur.data());
        if (!w.ffn_post_norm.empty()) cpu::rms_norm_rows(cur.data(), w.ffn_post_norm.data(), cur.data(), E, n, eps);
        cpu::add(x.data(), cur.data(), n * E);
    }

    void embed(std::span<const int32_t> tokens) {
        const auto bytes = file.tensor_data(*token_embd);
        const uint64_t row = *quant::row_bytes(token_embd->type, hp.n_embd);
        for (size_t t = 0; t < tokens.size(); ++t) {
            quant::dequantize_row(token_embd->type, bytes.data() + static_cast<uint64_t>(tokens[t]) * row,
                                  x.data() + t * hp.n_embd, hp.n_embd);
        }
        if (spec.arch->scale_embeddings) {
            cpu::scale(x.data(), static_cast<int64_t>(tokens.size()) * hp.n_embd,
                       std::sqrt(static_cast<float>(hp.n_embd)));
        }
    }

    // Logits of rows [first, first + count) of the current micro-batch.
    void output(int64_t first, int64_t count, float* out) {
        const float eps = static_cast<float>(hp.rms_eps);
        float* normed = cur.data();
        cpu::rms_norm_rows(x.data() + first * hp.n_embd, output_norm.data(), normed, hp.n_embd, count, eps);
        cpu::matmul(head, normed, hp.n_embd, count, out, hp.n_vocab, pool, level);
        if (hp.final_logit_softcap > 0.0) {
            cpu::softcap(out, count * hp.n_vocab, static_cast<float>(hp.final_logit_softcap));
        }
    }

    void eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) {
        const int64_t n_tokens = static_cast<int64_t>(tokens.size());
        if (n_tokens == 0) throw Error("eval: no tokens to evaluate");
        if (n_past + n_tokens > opt.n_ctx) {
            throw Error(fmt::format("context full: {} tokens already in a context of {}, {} more do not fit; use a "
                                    "larger -c",
                                    n_past, opt.n_ctx, n_tokens));
        }
        for (int32_t id : tokens) {
            if (id < 0 || id >= hp.n_vocab) {
                throw Error(fmt::format("token id {} is outside the vocabulary [0, {})", id, hp.n_vocab));
            }
        }
        logits.resize(static_cast<size_t>((all_logits ? n_tokens : 1) * hp.n_vocab));
        for (int64_t start = 0; start < n_tokens; start += opt.n_ubatch) {
            const int64_t n = std::min(opt.n_ubatch, n_tokens - start);
            for (int64_t t = 0; t < n; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>(n_past + t);
            embed(tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(n)));
            for (int64_t il = 0; il < hp.n_layer; ++il) run_layer(il, n);
            if (all_logits) {
                output(0, n, logits.data() + start * hp.n_vocab);
            } else if (start + n == n_tokens) {
                output(n - 1, 1, logits.data());
            }
            n_past += n;
        }
    }
};

Session::Session(const gguf::File& file, const model::ModelSpec& spec, const SessionOptions& options)
    : impl_(std::make_unique<Impl>(file, spec, options)) {}

Session::~Session() = default;

void Session::eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) {
    impl_->eval(tokens, all_logits, logits);
}

void Session::reset() {
    impl_->n_past = 0;
    for (auto& c : impl_->kv) c.clear();
}

int64_t Session::n_past() const { return impl_->n_past; }
int64_t Session::n_ctx() const { return impl_->opt.n_ctx; }
int64_t Session::n_vocab() const { return impl_->hp.n_vocab; }
int Session::n_threads() const { return impl_->pool.size(); }
cpu::SimdLevel Session::simd_level() const { return impl_->level; }

uint64_t Session::weight_bytes_per_token() const {
    const auto& spec = impl_->spec;
    uint64_t total = model::output_weight_bytes(spec);
    for (int64_t il = 0; il < spec.hp.n_layer; ++il) total += model::layer_weight_bytes(spec, il);
    total += *quant::row_bytes(impl_->token_embd->type, spec.hp.n_embd);
    return total;
}

uint64_t Session::kv_cache_bytes() const {
    uint64_t total = 0;
    for (const auto& c : impl_->kv) total += c.bytes();
    return total;
}

}  // namespace tandem
