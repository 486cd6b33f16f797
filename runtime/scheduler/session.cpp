#include "runtime/scheduler/session.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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

// Where a layer's weights, KV cache and activations live. The host reads
// weights straight from the mapping; an accelerator holds its own copy,
// uploaded once, and its own activation buffers.
struct Device {
    MemoryLedger ledger;
    bool accelerator = false;
    std::vector<std::vector<uint8_t>> uploads;  // weight bytes copied to the device
    std::vector<LedgerReservation> reservations;

    Device(std::string name, std::optional<uint64_t> capacity, bool accel)
        : ledger(std::move(name), capacity), accelerator(accel) {}

    void reserve(MemoryCategory c, uint64_t bytes, const std::string& what) {
        reservations.emplace_back(ledger, c, bytes, what);
    }

    // A weight matrix as this device sees it: the mapping itself on the
    // host, an uploaded copy on an accelerator. Bytes stay in GGUF blocks.
    cpu::WeightView weights(const gguf::File& file, const gguf::TensorInfo& t) {
        reserve(MemoryCategory::Weights, t.n_bytes, fmt::format("tensor '{}'", t.name));
        const auto bytes = file.tensor_data(t);
        const uint8_t* data = bytes.data();
        if (accelerator) {
            uploads.emplace_back(bytes.begin(), bytes.end());
            data = uploads.back().data();
        }
        cpu::WeightView w;
        w.type = t.type;
        w.data = data;
        w.n_cols = t.shape.empty() ? 1 : t.shape[0];
        w.n_rows = t.n_rows();
        w.row_stride_bytes = *quant::row_bytes(t.type, w.n_cols);
        return w;
    }

    // Norm weights and RoPE factors are small; a float copy frees the
    // kernels from caring whether the file stored them as F32 or F16.
    std::vector<float> floats(const gguf::File& file, const gguf::TensorInfo* t) {
        if (!t) return {};
        reserve(MemoryCategory::Weights, t->n_bytes, fmt::format("tensor '{}'", t->name));
        std::vector<float> v(static_cast<size_t>(t->n_elements));
        const auto bytes = file.tensor_data(*t);
        const int64_t row = t->row_length();
        const uint64_t row_bytes = *quant::row_bytes(t->type, row);
        for (int64_t r = 0; r < t->n_rows(); ++r) {
            quant::dequantize_row(t->type, bytes.data() + r * row_bytes, v.data() + r * row, row);
        }
        return v;
    }
};

struct LayerWeights {
    Device* device = nullptr;
    cpu::WeightView q, k, v, o, gate, up, down;
    std::vector<float> attn_norm, q_norm, k_norm, attn_post_norm, ffn_norm, ffn_post_norm;
    bool sliding_window = false;
    float rope_base = 10000.0f;
};

// Activations of one micro-batch on one device.
struct Workspace {
    std::vector<float> x, cur, q, k, v, attn, ffn_gate, ffn_up, logits;
};

}  // namespace

struct Session::Impl {
    const gguf::File& file;
    const model::ModelSpec& spec;
    const model::HParams& hp;
    SessionOptions opt;
    cpu::SimdLevel level;
    cpu::ThreadPool pool;
    Device host{"cpu", std::nullopt, false};
    std::unique_ptr<Device> accel;
    int64_t n_device_layers = 0;
    bool output_on_device = false;
    std::vector<LayerWeights> layers;
    std::vector<LayerKvCache> kv;
    const gguf::TensorInfo* token_embd = nullptr;
    cpu::WeightView head;
    std::vector<float> output_norm;
    std::vector<float> rope_freqs;  // kept on the host; both devices read it (a few hundred floats)
    Workspace host_ws, accel_ws;
    std::vector<int32_t> pos;
    int64_t n_past = 0;

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
        choose_devices();
        bind_weights();
        allocate_kv();
        allocate_workspace(host, host_ws, !output_on_device);
        if (accel) allocate_workspace(*accel, accel_ws, output_on_device);
        pos.resize(static_cast<size_t>(opt.n_ubatch));
    }

    void choose_devices() {
        if (opt.device.empty()) {
            if (opt.n_gpu_layers > 0) {
                throw Error(fmt::format("-ngl {} asks for layers on an accelerator, but none is available",
                                        opt.n_gpu_layers));
            }
            return;
        }
        if (opt.device != "cpu2") {
            throw Error(fmt::format("--device: expected cpu2 (the stand-in accelerator), found '{}'", opt.device));
        }
        if (opt.n_gpu_layers < 0) throw Error(fmt::format("-ngl: expected a value >= 0, found {}", opt.n_gpu_layers));
        accel = std::make_unique<Device>(opt.device, opt.device_capacity, true);
        n_device_layers = std::min(opt.n_gpu_layers, hp.n_layer);
        output_on_device = opt.n_gpu_layers > hp.n_layer;
    }

    Device& layer_device(int64_t il) { return il < n_device_layers ? *accel : host; }

    void bind_weights() {
        token_embd = spec.get(GlobalTensor::TokenEmbd);
        // The embedding lookup runs on the host, as in llama.cpp; a tied head
        // on the accelerator uploads its own copy of the same tensor.
        host.reserve(MemoryCategory::Weights, token_embd->n_bytes, "tensor 'token_embd.weight'");
        rope_freqs = host.floats(file, spec.get(GlobalTensor::RopeFreqs));
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            const model::LayerSpec& ls = spec.layers[static_cast<size_t>(il)];
            Device& d = layer_device(il);
            LayerWeights w;
            w.device = &d;
            w.q = d.weights(file, *ls.get(LayerTensor::AttnQ));
            w.k = d.weights(file, *ls.get(LayerTensor::AttnK));
            w.v = d.weights(file, *ls.get(LayerTensor::AttnV));
            w.o = d.weights(file, *ls.get(LayerTensor::AttnOutput));
            w.gate = d.weights(file, *ls.get(LayerTensor::FfnGate));
            w.up = d.weights(file, *ls.get(LayerTensor::FfnUp));
            w.down = d.weights(file, *ls.get(LayerTensor::FfnDown));
            w.attn_norm = d.floats(file, ls.get(LayerTensor::AttnNorm));
            w.q_norm = d.floats(file, ls.get(LayerTensor::AttnQNorm));
            w.k_norm = d.floats(file, ls.get(LayerTensor::AttnKNorm));
            w.attn_post_norm = d.floats(file, ls.get(LayerTensor::AttnPostNorm));
            w.ffn_norm = d.floats(file, ls.get(LayerTensor::FfnNorm));
            w.ffn_post_norm = d.floats(file, ls.get(LayerTensor::FfnPostNorm));
            w.sliding_window = ls.sliding_window;
            w.rope_base = static_cast<float>(ls.rope_base);
            layers.push_back(std::move(w));
        }
        Device& out = output_on_device ? *accel : host;
        output_norm = out.floats(file, spec.get(GlobalTensor::OutputNorm));
        if (out.accelerator || !spec.tied_output()) {
            head = out.weights(file, spec.output_head());
        } else {
            head = host_view(spec.output_head());  // the tied embedding, already counted
        }
    }

    cpu::WeightView host_view(const gguf::TensorInfo& t) {
        cpu::WeightView w;
        w.type = t.type;
        w.data = file.tensor_data(t).data();
        w.n_cols = t.shape.empty() ? 1 : t.shape[0];
        w.n_rows = t.n_rows();
        w.row_stride_bytes = *quant::row_bytes(t.type, w.n_cols);
        return w;
    }

    void allocate_kv() {
        const quant::Type cache_type = model::cache_quant_type(opt.cache_type);
        if (!quant::row_bytes(cache_type, hp.head_dim_k) || !quant::row_bytes(cache_type, hp.head_dim_v)) {
            throw Error(fmt::format("cache type {} needs head sizes that are multiples of {}, the model has {}",
                                    quant::traits(cache_type).name, quant::traits(cache_type).block_elems,
                                    hp.head_dim_k));
        }
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            const uint64_t bytes = model::kv_bytes_for_layer(spec, il, opt.n_ctx, opt.n_ubatch, opt.cache_type);
            layer_device(il).reserve(MemoryCategory::KvCache, bytes, fmt::format("the KV cache of layer {}", il));
            kv.emplace_back(cache_type, model::kv_cells_for_layer(spec, il, opt.n_ctx, opt.n_ubatch), hp.k_dim(),
                            hp.v_dim());
        }
    }

    void allocate_workspace(Device& d, Workspace& ws, bool needs_logits) {
        const size_t ub = static_cast<size_t>(opt.n_ubatch);
        d.reserve(MemoryCategory::Compute, model::compute_bytes(spec, opt.n_ubatch, needs_logits),
                  "activations of one micro-batch");
        ws.x.resize(ub * hp.n_embd);
        ws.cur.resize(ub * hp.n_embd);
        ws.q.resize(ub * hp.q_dim());
        ws.k.resize(ub * hp.k_dim());
        ws.v.resize(ub * hp.v_dim());
        ws.attn.resize(ub * std::max(hp.out_dim(), hp.n_embd));
        ws.ffn_gate.resize(ub * hp.n_ff);
        ws.ffn_up.resize(ub * hp.n_ff);
        if (needs_logits) ws.logits.resize(ub * hp.n_vocab);
    }

    void matmul(const cpu::WeightView& w, const float* in, int64_t n_tokens, float* out) {
        cpu::matmul(w, in, w.n_cols, n_tokens, out, w.n_rows, pool, level);
    }

    void run_layer(int64_t il, int64_t n, Workspace& ws) {
        const LayerWeights& w = layers[static_cast<size_t>(il)];
        const float eps = static_cast<float>(hp.rms_eps);
        const int64_t E = hp.n_embd;

        cpu::rms_norm_rows(ws.x.data(), w.attn_norm.data(), ws.cur.data(), E, n, eps);
        matmul(w.q, ws.cur.data(), n, ws.q.data());
        matmul(w.k, ws.cur.data(), n, ws.k.data());
        matmul(w.v, ws.cur.data(), n, ws.v.data());
        if (!w.q_norm.empty()) {
            cpu::rms_norm_rows(ws.q.data(), w.q_norm.data(), ws.q.data(), hp.head_dim_k, n * hp.n_head, eps);
        }
        if (!w.k_norm.empty()) {
            cpu::rms_norm_rows(ws.k.data(), w.k_norm.data(), ws.k.data(), hp.head_dim_k, n * hp.n_head_kv, eps);
        }
        cpu::RopeParams rope;
        rope.mode = spec.arch->rope_style == model::RopeStyle::Neox ? cpu::RopeMode::Neox : cpu::RopeMode::Norm;
        rope.n_rot = hp.n_rot;
        rope.freq_base = w.rope_base;
        rope.freq_scale = static_cast<float>(hp.rope_freq_scale);
        rope.freq_factors = rope_freqs.empty() ? nullptr : rope_freqs.data();
        for (int64_t t = 0; t < n; ++t) {
            const int32_t p = pos[static_cast<size_t>(t)];
            cpu::rope_heads(ws.q.data() + t * hp.q_dim(), hp.n_head, hp.head_dim_k, p, rope);
            cpu::rope_heads(ws.k.data() + t * hp.k_dim(), hp.n_head_kv, hp.head_dim_k, p, rope);
        }
        LayerKvCache& cache = kv[static_cast<size_t>(il)];
        for (int64_t t = 0; t < n; ++t) {
            cache.store(pos[static_cast<size_t>(t)], ws.k.data() + t * hp.k_dim(), ws.v.data() + t * hp.v_dim());
        }
        cpu::AttentionShape shape;
        shape.n_head = hp.n_head;
        shape.n_head_kv = hp.n_head_kv;
        shape.head_dim_k = hp.head_dim_k;
        shape.head_dim_v = hp.head_dim_v;
        shape.window = w.sliding_window ? hp.sliding_window : 0;
        shape.scale = 1.0f / std::sqrt(static_cast<float>(spec.arch->query_scale_by_embd_per_head ? hp.n_embd / hp.n_head
                                                                                                  : hp.head_dim_k));
        cpu::attention(ws.q.data(), pos.data(), n, shape, cache.view(), ws.attn.data(), pool, level);
        matmul(w.o, ws.attn.data(), n, ws.cur.data());
        if (!w.attn_post_norm.empty()) {
            cpu::rms_norm_rows(ws.cur.data(), w.attn_post_norm.data(), ws.cur.data(), E, n, eps);
        }
        cpu::add(ws.x.data(), ws.cur.data(), n * E);

        cpu::rms_norm_rows(ws.x.data(), w.ffn_norm.data(), ws.cur.data(), E, n, eps);
        matmul(w.gate, ws.cur.data(), n, ws.ffn_gate.data());
        matmul(w.up, ws.cur.data(), n, ws.ffn_up.data());
        if (spec.arch->ffn_activation == model::FfnActivation::Silu) {
            cpu::swiglu(ws.ffn_gate.data(), ws.ffn_up.data(), ws.ffn_gate.data(), n * hp.n_ff);
        } else {
            cpu::geglu(ws.ffn_gate.data(), ws.ffn_up.data(), ws.ffn_gate.data(), n * hp.n_ff);
        }
        matmul(w.down, ws.ffn_gate.data(), n, ws.cur.data());
        if (!w.ffn_post_norm.empty()) {
            cpu::rms_norm_rows(ws.cur.data(), w.ffn_post_norm.data(), ws.cur.data(), E, n, eps);
        }
        cpu::add(ws.x.data(), ws.cur.data(), n * E);
    }

    void embed(std::span<const int32_t> tokens, Workspace& ws) {
        const auto bytes = file.tensor_data(*token_embd);
        const uint64_t row = *quant::row_bytes(token_embd->type, hp.n_embd);
        for (size_t t = 0; t < tokens.size(); ++t) {
            quant::dequantize_row(token_embd->type, bytes.data() + static_cast<uint64_t>(tokens[t]) * row,
                                  ws.x.data() + t * hp.n_embd, hp.n_embd);
        }
        if (spec.arch->scale_embeddings) {
            cpu::scale(ws.x.data(), static_cast<int64_t>(tokens.size()) * hp.n_embd,
                       std::sqrt(static_cast<float>(hp.n_embd)));
        }
    }

    // Logits of rows [first, first + count) of the micro-batch into out.
    void output(Workspace& ws, int64_t first, int64_t count, float* out) {
        const float eps = static_cast<float>(hp.rms_eps);
        cpu::rms_norm_rows(ws.x.data() + first * hp.n_embd, output_norm.data(), ws.cur.data(), hp.n_embd, count, eps);
        matmul(head, ws.cur.data(), count, ws.logits.data());
        if (hp.final_logit_softcap > 0.0) {
            cpu::softcap(ws.logits.data(), count * hp.n_vocab, static_cast<float>(hp.final_logit_softcap));
        }
        // The hand-back of the logits (a copy from the device's buffer).
        std::memcpy(out, ws.logits.data(), static_cast<size_t>(count * hp.n_vocab) * sizeof(float));
    }

    static void hand_over(const Workspace& from, Workspace& to, int64_t n, int64_t n_embd) {
        std::memcpy(to.x.data(), from.x.data(), static_cast<size_t>(n * n_embd) * sizeof(float));
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
            // Embed on the host; layers [0, n_device_layers) on the device,
            // the rest on the host: the hidden state crosses once each way.
            embed(tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(n)), host_ws);
            Workspace* ws = &host_ws;
            if (n_device_layers > 0) {
                hand_over(host_ws, accel_ws, n, hp.n_embd);
                ws = &accel_ws;
            }
            for (int64_t il = 0; il < hp.n_layer; ++il) {
                if (il == n_device_layers && ws != &host_ws) {
                    hand_over(accel_ws, host_ws, n, hp.n_embd);
                    ws = &host_ws;
                }
                run_layer(il, n, *ws);
            }
            if (ws != &host_ws && !output_on_device) {  // every layer on the device, the head on the host
                hand_over(accel_ws, host_ws, n, hp.n_embd);
                ws = &host_ws;
            }
            if (all_logits) {
                output(*ws, 0, n, logits.data() + start * hp.n_vocab);
            } else if (start + n == n_tokens) {
                output(*ws, n - 1, 1, logits.data());
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
int64_t Session::n_device_layers() const { return impl_->n_device_layers; }
bool Session::output_on_device() const { return impl_->output_on_device; }

const std::string& Session::layer_device(int64_t il) const {
    TANDEM_CHECK(il >= 0 && il < impl_->hp.n_layer, "layer index out of range");
    return il < impl_->n_device_layers ? impl_->accel->ledger.device() : impl_->host.ledger.device();
}

std::vector<const MemoryLedger*> Session::ledgers() const {
    std::vector<const MemoryLedger*> out{&impl_->host.ledger};
    if (impl_->accel) out.push_back(&impl_->accel->ledger);
    return out;
}

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
