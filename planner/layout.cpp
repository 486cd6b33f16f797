#include "planner/layout.h"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/quant/quant_types.h"

namespace tandem::planner::detail {
namespace {

using model::GlobalTensor;
using model::LayerTensor;

uint64_t sum(const std::vector<uint64_t>& prefix, int64_t from, int64_t to) {
    return prefix[static_cast<size_t>(to)] - prefix[static_cast<size_t>(from)];
}

// Session's defaults and clamps, so the plan describes the same run.
int64_t effective_ctx(const model::ModelSpec& spec, int64_t n_ctx) {
    if (n_ctx < 0) throw Error(fmt::format("context size: expected a value >= 0 (0: the model's), found {}", n_ctx));
    return n_ctx > 0 ? n_ctx : std::min<int64_t>(spec.hp.n_ctx_train, 4096);
}

const Mode& mode_at(const Layout& l, int64_t il) { return il < l.k ? *l.lo : *l.hi; }

// Share of layers [from, to) on device d under the layout.
Share range_share(const Layout& l, int d, int64_t from, int64_t to) {
    const int64_t k = std::clamp<int64_t>(l.k, from, to);
    return l.lo->sum(d, from, k) + l.hi->sum(d, k, to);
}

Share layout_share(const Tables& t, const Layout& l, int d) { return range_share(l, d, 0, t.n_layer); }

// As Session::first_streamable_layer: the first layer from which every
// layer's streamed matrices are on the host (n_layer when none).
int64_t stream_first(const Tables& t, const Layout& l) {
    int64_t first = t.n_layer;
    for (int64_t il = t.n_layer - 1; il >= 0; --il) {
        if (!mode_at(l, il).host_streamable[static_cast<size_t>(il)]) break;
        first = il;
    }
    return first;
}

}  // namespace

Share& Share::operator+=(const Share& o) {
    weights += o.weights;
    read += o.read;
    params += o.params;
    kv += o.kv;
    kv_read += o.kv_read;
    kv_layers += o.kv_layers;
    return *this;
}

Share Share::operator+(const Share& o) const {
    Share s = *this;
    s += o;
    return s;
}

Share Share::operator-(const Share& o) const {
    return {weights - o.weights, read - o.read,       params - o.params,
            kv - o.kv,           kv_read - o.kv_read, kv_layers - o.kv_layers};
}

Share Mode::sum(int d, int64_t from, int64_t to) const {
    return prefix[static_cast<size_t>(to)][static_cast<size_t>(d)] -
           prefix[static_cast<size_t>(from)][static_cast<size_t>(d)];
}

bool is_ffn_role(LayerTensor r) {
    constexpr LayerTensor kFfn[] = {LayerTensor::FfnNorm,     LayerTensor::FfnGate,     LayerTensor::FfnUp,
                                    LayerTensor::FfnGateUp,   LayerTensor::FfnDown,     LayerTensor::FfnGateInp,
                                    LayerTensor::FfnGateExps, LayerTensor::FfnUpExps,   LayerTensor::FfnDownExps,
                                    LayerTensor::FfnPostNorm};
    return std::find(std::begin(kFfn), std::end(kFfn), r) != std::end(kFfn);
}

bool is_expert_role(LayerTensor r) {
    return r == LayerTensor::FfnGateExps || r == LayerTensor::FfnUpExps || r == LayerTensor::FfnDownExps;
}

Tables make_tables(const model::ModelSpec& spec, int64_t n_ctx_in, int64_t n_ubatch, model::CacheType cache_type) {
    const model::HParams& hp = spec.hp;
    if (n_ubatch <= 0) throw Error(fmt::format("micro-batch size: expected a positive value, found {}", n_ubatch));
    const quant::Type qt = model::cache_quant_type(cache_type);
    if (!quant::row_bytes(qt, hp.head_dim_k) || !quant::row_bytes(qt, hp.head_dim_v)) {
        throw Error(fmt::format("cache type {} needs head sizes that are multiples of {}, the model has {}",
                                cache_type_name(cache_type), quant::traits(qt).block_elems, hp.head_dim_k));
    }
    Tables t;
    t.n_layer = hp.n_layer;
    t.n_ctx = effective_ctx(spec, n_ctx_in);
    t.n_ubatch = std::min(n_ubatch, t.n_ctx);
    const auto n = static_cast<size_t>(hp.n_layer);
    t.weights.assign(n + 1, 0);
    t.stream_io.assign(n + 1, 0);
    // Decode reads the cache up to the current position; at the average
    // position of a full context that is half of it.
    const int64_t avg_ctx = std::max<int64_t>(1, t.n_ctx / 2);
    for (size_t il = 0; il < n; ++il) {
        const auto i = static_cast<int64_t>(il);
        t.weights[il + 1] = t.weights[il] + model::layer_weight_bytes(spec, i);
        t.kv.push_back(model::kv_bytes_for_layer(spec, i, t.n_ctx, t.n_ubatch, cache_type));
        t.kv_read.push_back(model::kv_bytes_for_layer(spec, i, avg_ctx, t.n_ubatch, cache_type));
        uint64_t io = 0;
        for (const LayerTensor role : model::kStreamedMatrices) {
            const auto* m = spec.layers[il].get(role);
            if (!m) continue;
            io += static_cast<uint64_t>(m->row_length() + m->n_rows()) * sizeof(float);
        }
        t.stream_io[il + 1] = t.stream_io[il] + io;
    }
    for (const model::StreamShape& shape : model::stream_shapes(spec)) {
        t.stream.push_back(model::stream_bytes(shape, t.n_ubatch));
    }
    t.gemm_tile = model::gemm_tile_bytes(spec);
    t.head_bytes = spec.output_head().n_bytes;
    if (const auto* norm = spec.get(GlobalTensor::OutputNorm)) t.norm_bytes = norm->n_bytes;
    t.tied = spec.tied_output();
    if (const auto* rf = spec.get(GlobalTensor::RopeFreqs)) t.rope_bytes = rf->n_bytes;
    t.host_fixed = model::token_embd_bytes(spec) + t.rope_bytes;
    if (const auto* te = spec.get(GlobalTensor::TokenEmbd)) {
        t.embd_row_bytes = quant::row_bytes(te->type, hp.n_embd).value_or(0);
    }
    t.head_params = static_cast<uint64_t>(spec.output_head().n_elements);
    // QK^T and the weighted sum of V: 2 FLOPs each per head dimension per
    // cached position, at the average prompt position.
    t.attn_flops_per_token = 2.0 * static_cast<double>(hp.q_dim() + hp.out_dim()) * static_cast<double>(avg_ctx);
    t.hidden_bytes = static_cast<uint64_t>(hp.n_embd) * sizeof(float);
    t.logits_bytes = static_cast<uint64_t>(hp.n_vocab) * sizeof(float);
    t.router_bytes = static_cast<uint64_t>(hp.n_expert) * sizeof(float);
    return t;
}

Mode make_mode(const model::ModelSpec& spec, const Tables& t,
               const std::function<int(int64_t il, LayerTensor role)>& device_of) {
    Mode m;
    m.prefix.assign(static_cast<size_t>(t.n_layer) + 1, {});
    for (int64_t il = 0; il < t.n_layer; ++il) {
        const model::LayerSpec& ls = spec.layers[static_cast<size_t>(il)];
        std::array<Share, kDevices> layer{};
        for (int r = 0; r < model::kLayerTensorCount; ++r) {
            const gguf::TensorInfo* w = ls.tensors[static_cast<size_t>(r)];
            if (!w) continue;
            const auto role = static_cast<LayerTensor>(r);
            Share& s = layer[static_cast<size_t>(device_of(il, role))];
            s.weights += w->n_bytes;
            s.read += model::token_share(spec, role, w->n_bytes);
            s.params += model::token_share(spec, role, static_cast<uint64_t>(w->n_elements));
        }
        const auto at = [&](LayerTensor role, int fallback) { return ls.get(role) ? device_of(il, role) : fallback; };
        LayerDevices d;
        d.attn = at(LayerTensor::AttnNorm, kHostDevice);
        d.ffn_norm = at(LayerTensor::FfnNorm, d.attn);
        d.experts = ls.has_experts();
        d.router = d.experts ? at(LayerTensor::FfnGateInp, d.ffn_norm) : d.ffn_norm;
        d.ffn = d.experts ? at(LayerTensor::FfnDownExps, d.router) : at(LayerTensor::FfnDown, d.ffn_norm);
        // The cache lives with K's product, as place_tensors puts it.
        Share& kv = layer[static_cast<size_t>(at(LayerTensor::AttnK, at(LayerTensor::AttnQkv, d.attn)))];
        kv.kv += t.kv[static_cast<size_t>(il)];
        kv.kv_read += t.kv_read[static_cast<size_t>(il)];
        kv.kv_layers += 1;
        m.devices.push_back(d);
        m.host_streamable.push_back(std::all_of(
            std::begin(model::kStreamedMatrices), std::end(model::kStreamedMatrices),
            [&](LayerTensor r) { return !ls.get(r) || device_of(il, r) == kHostDevice; }));
        for (int dev = 0; dev < kDevices; ++dev) {
            m.prefix[static_cast<size_t>(il) + 1][static_cast<size_t>(dev)] =
                m.prefix[static_cast<size_t>(il)][static_cast<size_t>(dev)] + layer[static_cast<size_t>(dev)];
        }
    }
    return m;
}

Mode mode_of(const model::ModelSpec& spec, const Tables& t, const Placement& p) {
    Mode m = make_mode(spec, t, [&](int64_t il, LayerTensor role) {
        return p.of(spec.layers[static_cast<size_t>(il)].get(role));
    });
    // The KV caches where the placement says (-nkvo moves them to the host).
    for (int64_t il = 0; il < t.n_layer; ++il) {
        const int from = p.of(spec.layers[static_cast<size_t>(il)].get(LayerTensor::AttnK));
        const int to = p.kv[static_cast<size_t>(il)];
        if (from == to) continue;
        Share moved;
        moved.kv = t.kv[static_cast<size_t>(il)];
        moved.kv_read = t.kv_read[static_cast<size_t>(il)];
        moved.kv_layers = 1;
        for (size_t j = static_cast<size_t>(il) + 1; j < m.prefix.size(); ++j) {
            m.prefix[j][static_cast<size_t>(from)] = m.prefix[j][static_cast<size_t>(from)] - moved;
            m.prefix[j][static_cast<size_t>(to)] += moved;
        }
    }
    return m;
}

// As Session: an accelerator is used only when it holds something or
// streams; then it holds its RoPE factors, what the layout puts there, one
// micro-batch of activations (with logits when it runs the head) when it
// holds anything, the stream's slots and buffers when layers are left on
// the host to stream, and in any case the GEMM tile its batched products
// dequantize into. The host holds the embeddings (the lookup runs there),
// its RoPE factors, the rest, and the head when it stays (a tied head is
// the embedding itself, counted once).
Footprint footprint(const model::ModelSpec& spec, const Tables& t, const Layout& l, bool want_stream) {
    const Share dev = layout_share(t, l, kAccelDevice);
    const Share host = layout_share(t, l, kHostDevice);
    Footprint f;
    f.stream_first = stream_first(t, l);
    f.streams = want_stream && f.stream_first < t.n_layer;
    const bool holds = dev.weights > 0 || dev.kv_layers > 0 || l.norm == kAccelDevice || l.head == kAccelDevice;
    if (holds || f.streams) {
        f.stream_bytes = f.streams ? t.stream[static_cast<size_t>(f.stream_first)] : 0;
        f.vram.weights = t.rope_bytes + dev.weights + (l.norm == kAccelDevice ? t.norm_bytes : 0) +
                         (l.head == kAccelDevice ? t.head_bytes : 0);
        f.vram.kv = dev.kv;
        f.vram.compute = (holds ? model::compute_bytes(spec, t.n_ubatch, l.head == kAccelDevice) : 0) +
                         f.stream_bytes + t.gemm_tile;
    }
    f.ram.weights = t.host_fixed + host.weights + (l.norm == kHostDevice ? t.norm_bytes : 0) +
                    (l.head == kHostDevice && !t.tied ? t.head_bytes : 0);
    f.ram.kv = host.kv;
    f.ram.compute = model::compute_bytes(spec, t.n_ubatch, l.head == kHostDevice);
    return f;
}

// The hidden state starts on the host (the embedding lookup) and goes
// where each part of each layer runs, as LayerRecipe::need moves it: to the
// attention norm's device, to the FFN norm's, the normed input to the
// router's and the experts' (with the router's logits), and back to where
// the FFN's last product is for the residual add; then to the output
// norm's device, the head's, and the logits to the host.
Crossings crossings(const Tables& t, const Layout& l) {
    Crossings c;
    int x = kHostDevice;
    const auto move_x = [&](int to) {
        if (x == to) return;
        ++c.count;
        c.bytes += t.hidden_bytes;
        x = to;
    };
    for (int64_t il = 0; il < t.n_layer; ++il) {
        const LayerDevices& d = mode_at(l, il).devices[static_cast<size_t>(il)];
        move_x(d.attn);
        move_x(d.ffn_norm);
        if (d.router != x) c.count += 1, c.bytes += t.hidden_bytes;
        if (d.ffn != d.router) {
            c.count += 1, c.bytes += d.experts ? t.router_bytes : 0;
            if (d.ffn != x) c.count += 1, c.bytes += t.hidden_bytes;
        }
        move_x(d.ffn);
    }
    move_x(l.norm);
    move_x(l.head);
    if (l.head != kHostDevice) {
        ++c.count;
        c.logits_bytes = t.logits_bytes;
    }
    return c;
}

std::array<uint64_t, kDevices> decode_reads(const Tables& t, const Layout& l) {
    std::array<uint64_t, kDevices> reads{};
    for (int d = 0; d < kDevices; ++d) {
        const Share s = layout_share(t, l, d);
        reads[static_cast<size_t>(d)] = s.read + s.kv_read + (l.norm == d ? t.norm_bytes : 0) +
                                        (l.head == d ? t.head_bytes : 0) + (d == kHostDevice ? t.embd_row_bytes : 0);
    }
    return reads;
}

// Decode: an additive roofline. Each device streams its weights and its
// share of the KV cache once per token at its memory bandwidth; the
// activations cross over PCIe, each crossing costing a fixed latency.
// Devices run one after the other, so the times add.
// Prefill: compute-bound. 2 FLOPs per weight per token plus attention at
// the average position, at each device's assumed GEMM rate; the head runs
// once per micro-batch; the hand-overs happen once per micro-batch.
// With weight streaming, the streamed layers' products run on the
// accelerator instead: each micro-batch brings their weights over PCIe once
// (or is bound by the accelerator's arithmetic, whichever is slower) and
// sends every product's input and output across; attention stays on the CPU.
Prediction predict(const Tables& t, const Layout& l, const Footprint& f, const Speeds& v) {
    const std::array<uint64_t, kDevices> reads = decode_reads(t, l);
    const Crossings c = crossings(t, l);
    const double pcie = v.pcie_gbps * 1e9;
    const double lat = static_cast<double>(c.count) * kHandOverLatencyS;
    const double tg_s = static_cast<double>(reads[kHostDevice]) / (v.cpu_gbps * 1e9) +
                        static_cast<double>(reads[kAccelDevice]) / (v.gpu_gbps * 1e9) +
                        static_cast<double>(c.bytes + c.logits_bytes) / pcie + lat;

    const Share host = layout_share(t, l, kHostDevice);
    const Share dev = layout_share(t, l, kAccelDevice);
    const double ub = static_cast<double>(t.n_ubatch);
    const double head_flops = 2.0 * static_cast<double>(t.head_params) / ub;
    double streamed_flops = 0.0, stream_s = 0.0;
    if (f.streams) {
        const int64_t s = f.stream_first;
        streamed_flops = 2.0 * static_cast<double>(range_share(l, kHostDevice, s, t.n_layer).params);
        stream_s = std::max(static_cast<double>(sum(t.weights, s, t.n_layer)) / ub / pcie,
                            streamed_flops / (v.gpu_gflops * 1e9)) +
                   static_cast<double>(sum(t.stream_io, s, t.n_layer)) / pcie;
    }
    const double host_flops = 2.0 * static_cast<double>(host.params) - streamed_flops +
                              t.attn_flops_per_token * static_cast<double>(host.kv_layers) +
                              (l.head == kHostDevice ? head_flops : 0.0);
    const double dev_flops = 2.0 * static_cast<double>(dev.params) +
                             t.attn_flops_per_token * static_cast<double>(dev.kv_layers) +
                             (l.head == kAccelDevice ? head_flops : 0.0);
    const double pp_s = host_flops / (v.cpu_gflops * 1e9) + dev_flops / (v.gpu_gflops * 1e9) + stream_s +
                        static_cast<double>(c.bytes) / pcie + lat / ub;
    return {tg_s > 0 ? 1.0 / tg_s : 0.0, pp_s > 0 ? 1.0 / pp_s : 0.0};
}

}  // namespace tandem::planner::detail
