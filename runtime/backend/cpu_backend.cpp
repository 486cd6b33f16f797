#include "runtime/backend/cpu_backend.h"

#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <span>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "kernels_cpu/attention.h"
#include "kernels_cpu/elementwise.h"
#include "runtime/backend/host_weight_arena.h"
#include "runtime/common/error.h"
#include "runtime/kv_cache/kv_cache.h"

namespace tandem {
namespace {

using model::GlobalTensor;
using model::LayerTensor;

using HostLayerTensors = LayerTensors<cpu::WeightView, std::vector<float>>;

struct LayerWeights : HostLayerTensors {
    std::unique_ptr<LayerKvCache> kv;
};

// Activations of one micro-batch.
struct Workspace {
    std::vector<float> x, cur, q, k, v, attn, ffn_gate, ffn_up, logits;
};

// The stand-in's weight stream: two slots it owns, filled from the mapping
// as a GPU's would be over PCIe, and its own copies of each product's input
// and output, all reserved as the CUDA backend reserves them, so the
// accounting and the prefetch order run for real. The product is the host's
// kernel, so streaming changes no bit.
class StandInStream final : public DoubleBufferedStream {
public:
    StandInStream(const gguf::File& file, const model::ModelSpec& spec, int64_t first_layer, int64_t n_ubatch,
                  MemoryLedger& ledger, cpu::ThreadPool& pool, cpu::SimdLevel level)
        : DoubleBufferedStream(spec, first_layer),
          file_(file),
          reservation_(ledger, MemoryCategory::Compute, model::stream_bytes(spec, first_layer, n_ubatch),
                       "weight stream slots and buffers"),
          pool_(pool),
          level_(level) {
        for (auto& slot : slots_) slot.resize(model::stream_shape(spec, first_layer).slot_bytes);
    }

protected:
    void begin_upload(int slot, const gguf::TensorInfo& t) override {
        const auto bytes = file_.tensor_data(t);
        std::memcpy(slots_[slot].data(), bytes.data(), bytes.size());
    }

    void multiply(int slot, const gguf::TensorInfo& t, const float* x, int64_t n_tokens, float* y) override {
        const int64_t cols = t.row_length(), rows = t.n_rows();
        x_.assign(x, x + n_tokens * cols);
        y_.resize(static_cast<size_t>(n_tokens * rows));
        const cpu::WeightView w{t.type, slots_[slot].data(), rows, cols, *quant::row_bytes(t.type, cols)};
        cpu::matmul(w, x_.data(), cols, n_tokens, y_.data(), rows, pool_, level_);
        std::memcpy(y, y_.data(), y_.size() * sizeof(float));
    }

private:
    const gguf::File& file_;
    LedgerReservation reservation_;
    cpu::ThreadPool& pool_;
    cpu::SimdLevel level_;
    std::vector<uint8_t> slots_[2];
    std::vector<float> x_, y_;
};

}  // namespace

struct CpuBackend::Impl {
    MemoryLedger ledger;
    bool accelerator;
    const gguf::File& file;
    const model::ModelSpec& spec;
    const model::HParams& hp;
    BackendConfig config;
    cpu::ThreadPool& pool;
    cpu::SimdLevel level;
    std::vector<std::vector<uint8_t>> uploads;  // weight bytes copied to this device
    HostWeightArena host_copies;                // the host's matrices, when config.copy_host_weights
    std::vector<LedgerReservation> reservations;
    std::map<int64_t, LayerWeights> layers;
    std::vector<float> rope_freqs;
    std::vector<float> output_norm;
    cpu::WeightView head;
    bool has_output = false;
    Workspace ws;
    std::unique_ptr<StandInStream> stream;
    bool gemm_tile_reserved = false;

    Impl(std::string name, bool accel, std::optional<uint64_t> capacity, const gguf::File& f,
         const model::ModelSpec& s, const BackendConfig& c, cpu::ThreadPool& p, cpu::SimdLevel l)
        : ledger(std::move(name), capacity),
          accelerator(accel),
          file(f),
          spec(s),
          hp(s.hp),
          config(c),
          pool(p),
          level(l) {
        // RoPE factors (a few hundred floats) are read by every layer; each
        // device keeps its own.
        rope_freqs = floats(spec.get(GlobalTensor::RopeFreqs));
    }

    void reserve(MemoryCategory c, uint64_t bytes, const std::string& what) {
        reservations.emplace_back(ledger, c, bytes, what);
    }

    // Rows of t.row_length() elements in t's blocks, starting at data.
    static cpu::WeightView view_of(const gguf::TensorInfo& t, const uint8_t* data) {
        return cpu::WeightView{t.type, data, t.n_rows(), t.row_length(), *quant::row_bytes(t.type, t.row_length())};
    }

    // The host's bytes of t: a copy in its arena when it copies its
    // matrices (reported to on_upload), else the mapping itself.
    const uint8_t* host_bytes(const gguf::TensorInfo& t) {
        const auto bytes = file.tensor_data(t);
        if (!config.copy_host_weights) return bytes.data();
        const uint8_t* data = host_copies.copy(bytes, &pool);
        if (config.on_upload) config.on_upload(t.n_bytes);
        return data;
    }

    // A weight matrix as this device sees it: host_bytes on the host, an
    // uploaded copy on an accelerator. Bytes stay in GGUF blocks.
    cpu::WeightView weights(const gguf::TensorInfo& t) {
        reserve(MemoryCategory::Weights, t.n_bytes, fmt::format("tensor '{}'", t.name));
        if (!accelerator) return view_of(t, host_bytes(t));
        const auto bytes = file.tensor_data(t);
        uploads.emplace_back(bytes.begin(), bytes.end());
        if (config.on_upload) config.on_upload(t.n_bytes);
        return view_of(t, uploads.back().data());
    }

    // Norm weights and RoPE factors are small; a float copy frees the
    // kernels from caring whether the file stored them as F32 or F16.
    std::vector<float> floats(const gguf::TensorInfo* t) {
        if (!t) return {};
        reserve(MemoryCategory::Weights, t->n_bytes, fmt::format("tensor '{}'", t->name));
        std::vector<float> v(static_cast<size_t>(t->n_elements));
        const auto bytes = file.tensor_data(*t);
        const int64_t row = t->row_length();
        const uint64_t row_bytes = *quant::row_bytes(t->type, row);
        for (int64_t r = 0; r < t->n_rows(); ++r) {
            quant::dequantize_row(t->type, bytes.data() + r * row_bytes, v.data() + r * row, row);
        }
        if (accelerator && config.on_upload) config.on_upload(t->n_bytes);
        return v;
    }

    void load_layer(int64_t il) {
        TANDEM_CHECK(il >= 0 && il < hp.n_layer && !layers.count(il), "load_layer: bad or repeated layer");
        LayerWeights w;
        static_cast<HostLayerTensors&>(w) = bind_layer_tensors<cpu::WeightView, std::vector<float>>(
            spec, il, [this](const gguf::TensorInfo& t) { return weights(t); },
            [this](const gguf::TensorInfo* t) { return floats(t); });
        const uint64_t kv_bytes = model::kv_bytes_for_layer(spec, il, config.n_ctx, config.n_ubatch, config.cache_type);
        reserve(MemoryCategory::KvCache, kv_bytes, fmt::format("the KV cache of layer {}", il));
        w.kv = std::make_unique<LayerKvCache>(model::cache_quant_type(config.cache_type),
                                              model::kv_cells_for_layer(spec, il, config.n_ctx, config.n_ubatch),
                                              hp.k_dim(), hp.v_dim());
        layers.emplace(il, std::move(w));
    }

    void load_output() {
        output_norm = floats(spec.get(GlobalTensor::OutputNorm));
        const gguf::TensorInfo& t = spec.output_head();
        if (!accelerator && spec.tied_output()) {
            // The tied head is the embedding table the host already counts
            // (a copy, when the host copies its matrices, for the same
            // reason: every decode step streams all of it).
            head = view_of(t, host_bytes(t));
        } else {
            head = weights(t);
        }
        has_output = true;
    }

    // An accelerator's batched products dequantize into a GEMM tile
    // (kernels_cuda/device_matmul.h); the stand-in reserves it as a GPU
    // does, once however it is used, so its ledger is a GPU's.
    void reserve_gemm_tile() {
        if (!accelerator || gemm_tile_reserved) return;
        reserve(MemoryCategory::Compute, model::gemm_tile_bytes(spec), "the GEMM dequantization tile");
        gemm_tile_reserved = true;
    }

    void allocate_workspace(bool with_logits) {
        reserve_gemm_tile();
        const size_t ub = static_cast<size_t>(config.n_ubatch);
        reserve(MemoryCategory::Compute, model::compute_bytes(spec, config.n_ubatch, with_logits),
                "activations of one micro-batch");
        ws.x.resize(ub * hp.n_embd);
        ws.cur.resize(ub * hp.n_embd);
        ws.q.resize(ub * hp.q_dim());
        ws.k.resize(ub * hp.k_dim());
        ws.v.resize(ub * hp.v_dim());
        ws.attn.resize(ub * std::max(hp.out_dim(), hp.n_embd));
        ws.ffn_gate.resize(ub * hp.n_ff);
        ws.ffn_up.resize(ub * hp.n_ff);
        if (with_logits) ws.logits.resize(ub * hp.n_vocab);
    }

    void matmul(const cpu::WeightView& w, const float* in, int64_t n_tokens, float* out) {
        cpu::matmul(w, in, w.n_cols, n_tokens, out, w.n_rows, pool, level);
    }

    // fn(begin, end) over rows [0, n_rows) of a per-row operation (norms,
    // RoPE, residual adds, the FFN activation), split over the threads for
    // a batch: single-threaded they were ~8% of a 512-token prompt's time
    // with the second core idle. Rows are independent, so the split moves
    // no bits. A few rows (a decode step) stay on the calling thread.
    void for_rows(int64_t n_rows, const std::function<void(int64_t, int64_t)>& fn) {
        constexpr int64_t kRowsPerThreadMin = 4;
        if (n_rows < 2 * kRowsPerThreadMin) {
            fn(0, n_rows);
        } else {
            pool.parallel_for(n_rows, kRowsPerThreadMin, fn);
        }
    }
    void norm_rows(const float* x, const float* w, float* y, int64_t len, int64_t n_rows, float eps) {
        for_rows(n_rows, [&](int64_t b, int64_t e) { cpu::rms_norm_rows(x + b * len, w, y + b * len, len, e - b, eps, level); });
    }
    void add_rows(float* y, const float* x, int64_t len, int64_t n_rows) {
        for_rows(n_rows, [&](int64_t b, int64_t e) { cpu::add(y + b * len, x + b * len, (e - b) * len); });
    }

    // stream: multiply the layer's matrices on the accelerator (null: here).
    void run_layer(int64_t il, std::span<const int32_t> pos, WeightStream* stream) {
        const auto it = layers.find(il);
        TANDEM_CHECK(it != layers.end(), "run_layer: layer not loaded on this backend");
        const LayerWeights& w = it->second;
        const auto n = static_cast<int64_t>(pos.size());
        const float eps = static_cast<float>(hp.rms_eps);
        const int64_t E = hp.n_embd;
        auto mm = [&](LayerTensor role, const cpu::WeightView& m, const float* in, float* out) {
            if (stream) {
                stream->matmul(il, role, in, n, out);
            } else {
                matmul(m, in, n, out);
            }
        };

        // Products of one input: without streaming, one call (one
        // quantization of the input, one meeting of the threads per step).
        auto mm_shared = [&](std::initializer_list<std::tuple<LayerTensor, const cpu::WeightView*, float*>> outs,
                             const float* in) {
            if (stream) {
                for (const auto& [role, m, out] : outs) mm(role, *m, in, out);
                return;
            }
            std::array<cpu::MatmulTarget, 3> targets{};
            size_t count = 0;
            for (const auto& [role, m, out] : outs) targets[count++] = {m, out};
            cpu::matmul_shared_input(std::span(targets.data(), count), in, n, pool, level);
        };

        norm_rows(ws.x.data(), w.attn_norm.data(), ws.cur.data(), E, n, eps);
        mm_shared({{LayerTensor::AttnQ, &w.q, ws.q.data()},
                   {LayerTensor::AttnK, &w.k, ws.k.data()},
                   {LayerTensor::AttnV, &w.v, ws.v.data()}},
                  ws.cur.data());
        if (!w.q_norm.empty()) {
            norm_rows(ws.q.data(), w.q_norm.data(), ws.q.data(), hp.head_dim_k, n * hp.n_head, eps);
        }
        if (!w.k_norm.empty()) {
            norm_rows(ws.k.data(), w.k_norm.data(), ws.k.data(), hp.head_dim_k, n * hp.n_head_kv, eps);
        }
        cpu::RopeParams rope;
        rope.mode = spec.arch->rope_style == model::RopeStyle::Neox ? cpu::RopeMode::Neox : cpu::RopeMode::Norm;
        rope.n_rot = hp.n_rot;
        rope.freq_base = w.rope_base;
        rope.freq_scale = static_cast<float>(hp.rope_freq_scale);
        rope.freq_factors = rope_freqs.empty() ? nullptr : rope_freqs.data();
        for_rows(n, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t) {
                const int32_t p = pos[static_cast<size_t>(t)];
                cpu::rope_heads(ws.q.data() + t * hp.q_dim(), hp.n_head, hp.head_dim_k, p, rope, level);
                cpu::rope_heads(ws.k.data() + t * hp.k_dim(), hp.n_head_kv, hp.head_dim_k, p, rope, level);
            }
        });
        for (int64_t t = 0; t < n; ++t) {
            w.kv->store(pos[static_cast<size_t>(t)], ws.k.data() + t * hp.k_dim(), ws.v.data() + t * hp.v_dim());
        }
        cpu::AttentionShape shape;
        shape.n_head = hp.n_head;
        shape.n_head_kv = hp.n_head_kv;
        shape.head_dim_k = hp.head_dim_k;
        shape.head_dim_v = hp.head_dim_v;
        shape.window = w.sliding_window ? hp.sliding_window : 0;
        shape.scale = 1.0f / std::sqrt(static_cast<float>(spec.arch->query_scale_by_embd_per_head ? hp.n_embd / hp.n_head
                                                                                                  : hp.head_dim_k));
        if (spec.arch->scale_query_before_attention) {
            cpu::scale(ws.q.data(), n * hp.q_dim(), shape.scale);
            shape.scale = 1.0f;
        }
        cpu::attention(ws.q.data(), pos.data(), n, shape, w.kv->view(), ws.attn.data(), pool, level);
        mm(LayerTensor::AttnOutput, w.o, ws.attn.data(), ws.cur.data());
        if (!w.attn_post_norm.empty()) {
            norm_rows(ws.cur.data(), w.attn_post_norm.data(), ws.cur.data(), E, n, eps);
        }
        add_rows(ws.x.data(), ws.cur.data(), E, n);

        norm_rows(ws.x.data(), w.ffn_norm.data(), ws.cur.data(), E, n, eps);
        mm_shared({{LayerTensor::FfnGate, &w.gate, ws.ffn_gate.data()}, {LayerTensor::FfnUp, &w.up, ws.ffn_up.data()}},
                  ws.cur.data());
        // One call per token row, as ggml applies its activation row by row
        // (SwiGLU's 16-element groups and expf tail are counted per row).
        const bool silu = spec.arch->ffn_activation == model::FfnActivation::Silu;
        for_rows(n, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t) {
                float* g = ws.ffn_gate.data() + t * hp.n_ff;
                const float* u = ws.ffn_up.data() + t * hp.n_ff;
                if (silu) {
                    cpu::swiglu(g, u, g, hp.n_ff, level);
                } else {
                    cpu::geglu(g, u, g, hp.n_ff, level);
                }
            }
        });
        mm(LayerTensor::FfnDown, w.down, ws.ffn_gate.data(), ws.cur.data());
        if (!w.ffn_post_norm.empty()) {
            norm_rows(ws.cur.data(), w.ffn_post_norm.data(), ws.cur.data(), E, n, eps);
        }
        add_rows(ws.x.data(), ws.cur.data(), E, n);
    }

    void run_output(int64_t first, int64_t count, float* out) {
        TANDEM_CHECK(has_output && !ws.logits.empty(), "run_output: the head is not on this backend");
        const float eps = static_cast<float>(hp.rms_eps);
        norm_rows(ws.x.data() + first * hp.n_embd, output_norm.data(), ws.cur.data(), hp.n_embd, count, eps);
        matmul(head, ws.cur.data(), count, ws.logits.data());
        if (hp.final_logit_softcap > 0.0) {
            cpu::softcap(ws.logits.data(), count * hp.n_vocab, static_cast<float>(hp.final_logit_softcap));
        }
        std::memcpy(out, ws.logits.data(), static_cast<size_t>(count * hp.n_vocab) * sizeof(float));
    }

    void embed(std::span<const int32_t> tokens) {
        const gguf::TensorInfo* embd = spec.get(GlobalTensor::TokenEmbd);
        const auto bytes = file.tensor_data(*embd);
        const uint64_t row = *quant::row_bytes(embd->type, hp.n_embd);
        for_rows(static_cast<int64_t>(tokens.size()), [&](int64_t begin, int64_t end) {
            for (int64_t t = begin; t < end; ++t) {
                quant::dequantize_row(embd->type, bytes.data() + static_cast<uint64_t>(tokens[static_cast<size_t>(t)]) * row,
                                      ws.x.data() + t * hp.n_embd, hp.n_embd);
            }
        });
        if (spec.arch->scale_embeddings) {
            cpu::scale(ws.x.data(), static_cast<int64_t>(tokens.size()) * hp.n_embd,
                       std::sqrt(static_cast<float>(hp.n_embd)));
        }
    }
};

CpuBackend::CpuBackend(std::string name, bool accelerator, std::optional<uint64_t> capacity, const gguf::File& file,
                       const model::ModelSpec& spec, const BackendConfig& config, cpu::ThreadPool& pool,
                       cpu::SimdLevel level)
    : impl_(std::make_unique<Impl>(std::move(name), accelerator, capacity, file, spec, config, pool, level)) {}

CpuBackend::~CpuBackend() = default;

const std::string& CpuBackend::name() const { return impl_->ledger.device(); }
bool CpuBackend::is_accelerator() const { return impl_->accelerator; }
const MemoryLedger& CpuBackend::ledger() const { return impl_->ledger; }
MemoryLedger& CpuBackend::mutable_ledger() { return impl_->ledger; }
void CpuBackend::load_layer(int64_t il) { impl_->load_layer(il); }
void CpuBackend::load_output() { impl_->load_output(); }
void CpuBackend::allocate_workspace(bool with_logits) { impl_->allocate_workspace(with_logits); }

void CpuBackend::set_hidden(const float* host, int64_t n) {
    std::memcpy(impl_->ws.x.data(), host, static_cast<size_t>(n * impl_->hp.n_embd) * sizeof(float));
}

void CpuBackend::get_hidden(float* host, int64_t n) const {
    std::memcpy(host, impl_->ws.x.data(), static_cast<size_t>(n * impl_->hp.n_embd) * sizeof(float));
}

void CpuBackend::run_layer(int64_t il, std::span<const int32_t> pos) { impl_->run_layer(il, pos, nullptr); }

void CpuBackend::run_layer_streamed(int64_t il, std::span<const int32_t> pos, WeightStream& stream) {
    impl_->run_layer(il, pos, &stream);
}

WeightStream* CpuBackend::enable_weight_stream(int64_t first_layer) {
    if (!impl_->accelerator) return nullptr;  // the host multiplies what it holds
    if (!impl_->stream) {
        impl_->reserve_gemm_tile();
        impl_->stream = std::make_unique<StandInStream>(impl_->file, impl_->spec, first_layer, impl_->config.n_ubatch,
                                                        impl_->ledger, impl_->pool, impl_->level);
    }
    return impl_->stream.get();
}

uint64_t CpuBackend::streamed_uploads() const { return impl_->stream ? impl_->stream->uploads() : 0; }
void CpuBackend::run_output(int64_t first, int64_t count, float* host_logits) {
    impl_->run_output(first, count, host_logits);
}

void CpuBackend::clear_kv() {
    for (auto& [il, w] : impl_->layers) w.kv->clear();
}

uint64_t CpuBackend::kv_bytes() const {
    uint64_t total = 0;
    for (const auto& [il, w] : impl_->layers) total += w.kv->bytes();
    return total;
}

void CpuBackend::embed(std::span<const int32_t> tokens) { impl_->embed(tokens); }

void CpuBackend::account_token_embd() {
    const gguf::TensorInfo* embd = impl_->spec.get(GlobalTensor::TokenEmbd);
    impl_->reserve(MemoryCategory::Weights, embd->n_bytes, "tensor 'token_embd.weight'");
}

}  // namespace tandem
