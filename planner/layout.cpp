#include "planner/layout.h"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/model/device_layout.h"
#include "runtime/quant/quant_types.h"

namespace tandem::planner::detail {
namespace {

using model::GlobalTensor;
using model::LayerTensor;

// Session's defaults and clamps, so the plan describes the same run.
int64_t effective_ctx(const model::ModelSpec& spec, int64_t n_ctx) {
    if (n_ctx < 0) throw Error(fmt::format("context size: expected a value >= 0 (0: the model's), found {}", n_ctx));
    return n_ctx > 0 ? n_ctx : std::min<int64_t>(spec.hp.n_ctx_train, 4096);
}

const Mode& mode_at(const Layout& l, int64_t il) { return il < l.k ? *l.lo : *l.hi; }

Share layout_share(const Tables& t, const Layout& l, int d);

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

// The hand-overs of one layer as the executor runs its op list, on the
// device each op runs on: a product call per group of products of one
// input on one device (a batch: one per dense matrix, one per expert
// matrix and expert), and the ops over rows with the elements each passes
// over per token. Attention is counted by the KV cache's layers.
void count_layer_ops(const model::LayerSpec& ls, const std::function<int(LayerTensor)>& device_of,
                     std::array<Share, kDevices>& layer) {
    for (const model::LayerOp& op : ls.ops) {
        if (op.kind == model::OpKind::HeadMatmul) {  // a product per head (matmul_heads)
            Share& s = layer[static_cast<size_t>(device_of(op.weight[0]))];
            s.batch_calls += op.rows;
            s.calls += op.rows;
        } else if (op.is_product()) {
            bool on[kDevices] = {false, false};
            for (const LayerTensor r : op.weights()) {
                const int d = device_of(r);
                on[d] = true;
                Share& s = layer[static_cast<size_t>(d)];
                (op.kind == model::OpKind::ExpertMatmul ? s.expert_mats : s.batch_calls) += 1;
            }
            for (int d = 0; d < kDevices; ++d) layer[static_cast<size_t>(d)].calls += on[d] ? 1 : 0;
        } else if (op.kind != model::OpKind::Attention) {
            Share& s = layer[static_cast<size_t>(device_of(op.at))];
            s.row_ops += 1;
            s.row_op_elems += static_cast<uint64_t>(op.elems());
        }
    }
}

// The executor's moves over one layer with the hidden state entering on
// `entry`: every buffer a layer reads but X is written in it first.
LayerMoves layer_moves(const model::WorkspaceWidths& w, const model::LayerSpec& ls,
                       const std::function<int(LayerTensor)>& device_of, int entry) {
    model::Residency where(entry);
    LayerMoves m;
    const auto run_on = [&](const model::LayerOp& op, int d) {
        std::array<model::Act, 3> room;
        for (const model::Act a : op.inputs(room)) {
            if (where.need(a, d) < 0) continue;
            m.count += 1;
            m.bytes += static_cast<uint64_t>(w.act[static_cast<size_t>(a)]) * sizeof(float);
        }
    };
    for (const model::LayerOp& op : ls.ops) {
        if (op.is_product()) {
            for (int d = 0; d < kDevices; ++d) {
                bool here = false;
                for (size_t i = 0; i < op.weights().size(); ++i) {
                    if (device_of(op.weight[i]) != d) continue;
                    if (!here) run_on(op, d);
                    here = true;
                    where.wrote(op.out[i], d);
                }
            }
        } else {
            const int d = device_of(op.at);
            run_on(op, d);
            for (const model::Act a : op.outs()) where.wrote(a, d);
        }
    }
    m.exit = where.holds(model::Act::X, kHostDevice) ? kHostDevice : kAccelDevice;
    return m;
}

}  // namespace

Share& Share::operator+=(const Share& o) {
    weights += o.weights;
    read += o.read;
    params += o.params;
    kv += o.kv;
    kv_read += o.kv_read;
    kv_layers += o.kv_layers;
    for (int i = 0; i < kTypeSlots; ++i) {
        const auto k = static_cast<size_t>(i);
        dense_params_by[k] += o.dense_params_by[k];
        expert_params_by[k] += o.expert_params_by[k];
    }
    calls += o.calls;
    batch_calls += o.batch_calls;
    expert_mats += o.expert_mats;
    row_ops += o.row_ops;
    row_op_elems += o.row_op_elems;
    streamed_mats += o.streamed_mats;
    return *this;
}

Share Share::operator+(const Share& o) const {
    Share s = *this;
    s += o;
    return s;
}

Share Share::operator-(const Share& o) const {
    Share s;
    s.weights = weights - o.weights;
    s.read = read - o.read;
    s.params = params - o.params;
    s.kv = kv - o.kv;
    s.kv_read = kv_read - o.kv_read;
    s.kv_layers = kv_layers - o.kv_layers;
    for (int i = 0; i < kTypeSlots; ++i) {
        const auto k = static_cast<size_t>(i);
        s.dense_params_by[k] = dense_params_by[k] - o.dense_params_by[k];
        s.expert_params_by[k] = expert_params_by[k] - o.expert_params_by[k];
    }
    s.calls = calls - o.calls;
    s.batch_calls = batch_calls - o.batch_calls;
    s.expert_mats = expert_mats - o.expert_mats;
    s.row_ops = row_ops - o.row_ops;
    s.row_op_elems = row_op_elems - o.row_op_elems;
    s.streamed_mats = streamed_mats - o.streamed_mats;
    return s;
}

Share range_share(const Layout& l, int d, int64_t from, int64_t to) {
    const int64_t k = std::clamp<int64_t>(l.k, from, to);
    return l.lo->sum(d, from, k) + l.hi->sum(d, k, to);
}

namespace {
Share layout_share(const Tables& t, const Layout& l, int d) { return range_share(l, d, 0, t.n_layer); }
}  // namespace

int Tables::slot_of(quant::Type type, int64_t row_cols) const {
    for (size_t i = 0; i < types.size(); ++i) {
        if (types[i] == type && cols[i] == row_cols) return static_cast<int>(i);
    }
    return kTypeSlots - 1;
}

Share Mode::sum(int d, int64_t from, int64_t to) const {
    return prefix[static_cast<size_t>(to)][static_cast<size_t>(d)] -
           prefix[static_cast<size_t>(from)][static_cast<size_t>(d)];
}

Tables make_tables(const model::ModelSpec& spec, int64_t n_ctx_in, int64_t n_ubatch, model::CacheType cache_type,
                   int64_t n_seq) {
    const model::HParams& hp = spec.hp;
    if (n_ubatch <= 0) throw Error(fmt::format("micro-batch size: expected a positive value, found {}", n_ubatch));
    if (n_seq <= 0) throw Error(fmt::format("sequences: expected a positive count, found {}", n_seq));
    model::check_cache_type(hp, cache_type);
    Tables t;
    t.n_layer = hp.n_layer;
    t.n_ctx = effective_ctx(spec, n_ctx_in);
    t.n_ubatch = std::min(n_ubatch, t.n_ctx);
    const auto n = static_cast<size_t>(hp.n_layer);
    t.weights.assign(n + 1, 0);
    t.stream_weights.assign(n + 1, 0);
    t.stream_io.assign(n + 1, 0);
    // Decode reads the cache up to the current position; at the average
    // position of a full context that is half of it.
    const int64_t avg_ctx = std::max<int64_t>(1, t.n_ctx / 2);
    for (size_t il = 0; il < n; ++il) {
        const auto i = static_cast<int64_t>(il);
        t.weights[il + 1] = t.weights[il] + model::layer_weight_bytes(spec, i);
        t.kv.push_back(model::kv_bytes_for_layer(spec, i, t.n_ctx, t.n_ubatch, cache_type, n_seq));
        t.kv_read.push_back(model::kv_bytes_for_layer(spec, i, avg_ctx, t.n_ubatch, cache_type));
        uint64_t io = 0, streamed = 0;
        for (const LayerTensor role : model::kStreamedMatrices) {
            const auto* m = spec.layers[il].get(role);
            if (!m) continue;
            io += static_cast<uint64_t>(m->row_length() + m->n_rows()) * sizeof(float);
            streamed += m->n_bytes;
        }
        t.stream_weights[il + 1] = t.stream_weights[il] + streamed;
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
    t.attn_flops_per_pos = 2.0 * static_cast<double>(hp.q_dim() + hp.out_dim());
    t.n_head = hp.n_head;
    t.head_dim = hp.head_dim_k;
    t.n_embd = hp.n_embd;
    t.n_expert = hp.n_expert;
    t.n_expert_used = hp.n_expert_used;
    // A slot per weight type and row width, in the order met (the last
    // slot takes the rest).
    const auto add_slot = [&](const gguf::TensorInfo& w) {
        if (t.slot_of(w.type, w.row_length()) == kTypeSlots - 1 && t.types.size() < static_cast<size_t>(kTypeSlots)) {
            t.types.push_back(w.type);
            t.cols.push_back(w.row_length());
        }
    };
    add_slot(spec.output_head());
    t.head_slot = t.slot_of(spec.output_head().type, spec.output_head().row_length());
    for (const model::LayerSpec& ls : spec.layers) {
        for (const gguf::TensorInfo* w : ls.tensors) {
            if (w) add_slot(*w);
        }
    }
    t.hidden_bytes = static_cast<uint64_t>(hp.n_embd) * sizeof(float);
    t.logits_bytes = static_cast<uint64_t>(hp.n_vocab) * sizeof(float);
    return t;
}

void trim_for_stage(Tables& t, const model::ModelSpec& spec, bool embeds, bool outputs) {
    if (!embeds) {
        t.host_fixed -= model::token_embd_bytes(spec);
        t.embd_row_bytes = 0;
        t.tied = false;  // a tied head is then a table of its own here
    }
    if (!outputs) {
        t.head_bytes = 0;
        t.norm_bytes = 0;
        t.head_params = 0;
        t.logits_bytes = 0;
        t.tied = false;
    }
}

Mode make_mode(const model::ModelSpec& spec, const Tables& t,
               const std::function<int(int64_t il, LayerTensor role)>& device_of,
               const std::function<int(int64_t il)>& kv_of) {
    Mode m;
    m.prefix.assign(static_cast<size_t>(t.n_layer) + 1, {});
    const model::WorkspaceWidths widths = model::workspace_widths(spec.hp);
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
            const auto slot = static_cast<size_t>(t.slot_of(w->type, w->row_length()));
            (is_expert_role(role) ? s.expert_params_by : s.dense_params_by)[slot] +=
                static_cast<uint64_t>(w->n_elements);
            if (model::is_streamed(role)) s.streamed_mats += 1;
        }
        // The cache with K's product, as place_tensors puts it, unless kv_of says.
        const auto at = [&](LayerTensor role, int fallback) {
            return role != LayerTensor::Count && ls.get(role) ? device_of(il, role) : fallback;
        };
        const int kv_device = kv_of ? kv_of(il) : at(ls.k_writer(), at(LayerTensor::AttnNorm, kHostDevice));
        const auto op_device = [&](LayerTensor role) {
            return role == model::kWithCache ? kv_device : device_of(il, role);
        };
        count_layer_ops(ls, op_device, layer);
        Share& kv = layer[static_cast<size_t>(kv_device)];
        kv.kv += t.kv[static_cast<size_t>(il)];
        kv.kv_read += t.kv_read[static_cast<size_t>(il)];
        kv.kv_layers += 1;
        m.moves.push_back(
            {layer_moves(widths, ls, op_device, kHostDevice), layer_moves(widths, ls, op_device, kAccelDevice)});
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
    // Several accelerators count as one here (planner/device_split.h
    // parts them).
    const auto one = [](int d) { return std::min(d, kAccelDevice); };
    return make_mode(
        spec, t, [&](int64_t il, LayerTensor role) { return one(p.of(spec.layers[static_cast<size_t>(il)].get(role))); },
        [&](int64_t il) { return one(p.kv.at(static_cast<size_t>(il))); });
}

// As Session: an accelerator is used only when it holds something or
// streams; then it holds its RoPE factors, what the layout puts there, one
// micro-batch of activations (with logits when it runs the head) when it
// holds anything, the stream's slots and buffers when layers are left on
// the host to stream, and in any case the GEMM tile its batched products
// dequantize into. The host holds the embeddings (the lookup runs there),
// its RoPE factors, the rest, and the head when it stays (a tied head is
// the embedding itself, counted once), and for an accelerator in use its
// pinned upload buffers.
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
        f.ram.staging = model::kAcceleratorStagingBytes;
    }
    f.ram.weights = t.host_fixed + host.weights + (l.norm == kHostDevice ? t.norm_bytes : 0) +
                    (l.head == kHostDevice && !t.tied ? t.head_bytes : 0);
    f.ram.kv = host.kv;
    f.ram.compute = model::compute_bytes(spec, t.n_ubatch, l.head == kHostDevice);
    return f;
}

// The hidden state starts on the host (the embedding lookup) and goes
// through each layer's moves (layer_moves: the executor's, from the op
// list); then to the output norm's device, the head's, and the logits to
// the host.
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
        const LayerMoves& m = mode_at(l, il).moves[static_cast<size_t>(il)][static_cast<size_t>(x)];
        c.count += m.count;
        c.bytes += m.bytes;
        x = m.exit;
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

}  // namespace tandem::planner::detail
