#include "runtime/engine/executor.h"

#include <cmath>

#include "kernels_cpu/elementwise.h"
#include "runtime/common/error.h"

namespace tandem {

using model::LayerTensor;
using model::OpKind;

LayerExecutor::LayerExecutor(const model::ModelSpec& spec, const Placement& placement, std::vector<DeviceOps*> devices,
                             model::KvRotation rotation)
    : spec_(spec), hp_(spec.hp), placement_(placement), devices_(std::move(devices)),
      widths_(model::workspace_widths(spec.hp)), rotation_(rotation) {
    TANDEM_CHECK(!devices_.empty() && devices_[kHostDevice]->host_act(Act::X), "the executor needs the host first");
}

void LayerExecutor::x_written_on(int device) { where_.wrote(Act::X, device); }

void LayerExecutor::layers(const RecipeBatch& b) {
    const int64_t end = b.end_layer < 0 ? hp_.n_layer : b.end_layer;
    for (int64_t il = b.first_layer; il < end; ++il) {
        for (const Op& op : spec_.layers[static_cast<size_t>(il)].ops) run(il, op, b);
    }
}

int LayerExecutor::device_of(int64_t il, const Op& op) const {
    if (op.at == model::kWithCache) return placement_.kv.at(static_cast<size_t>(il));
    return placement_.of(spec_.layers[static_cast<size_t>(il)].get(op.at));
}

// ---- one op ------------------------------------------------------------------
void LayerExecutor::run(int64_t il, const Op& op, const RecipeBatch& b) {
    if (op.is_product()) return matmul(il, op, b);
    const model::LayerSpec& L = spec_.layers[static_cast<size_t>(il)];
    const int d = device_of(il, op);
    const int64_t n = b.n;
    std::array<Act, 3> room;
    for (const Act a : op.inputs(room)) need(a, d, n);
    DeviceOps& dev = on(d);
    switch (op.kind) {
        case OpKind::Norm: norm(il, op, d, n); break;
        case OpKind::Route: dev.moe_route(route_op(L, op), n); break;
        case OpKind::Split: dev.copy_rows(op.in, op.in_view(), op.out[0], op.out_view(), n * op.rows); break;
        case OpKind::AddBias: dev.add_vector(op.out[0], *L.get(op.weight[0]), op.len, n); break;
        case OpKind::Rope: rope(il, op, d, b); break;
        case OpKind::Attention: attention(il, op, d, b); break;
        case OpKind::Glu: dev.glu(spec_.arch->ffn_activation, op.len, n * op.rows); break;
        case OpKind::Add: dev.add(op.out[0], op.in, op.len, n); break;
        case OpKind::Matmul:
        case OpKind::ExpertMatmul:
        case OpKind::HeadMatmul:
        case OpKind::Count: TANDEM_CHECK(false, "the executor has no op " + std::string(model::op_name(op.kind)));
    }
    for (const Act a : op.outs()) where_.wrote(a, d);
}

MoeRouteOp LayerExecutor::route_op(const model::LayerSpec& L, const Op& op) const {
    MoeRouteOp r;
    r.n_expert = hp_.n_expert;
    r.n_used = hp_.n_expert_used;
    r.normalize = hp_.expert_weights_norm;
    r.sigmoid = hp_.sigmoid_gating();
    r.softmax_of_chosen = hp_.softmax_of_chosen();
    r.bias = op.weight[0] != model::kNoTensor ? L.get(op.weight[0]) : nullptr;
    r.scale = static_cast<float>(hp_.expert_weights_scale);
    r.n_groups = hp_.n_expert_groups;
    r.n_groups_used = hp_.n_expert_groups_used;
    return r;
}

void LayerExecutor::norm(int64_t il, const Op& op, int d, int64_t n) {
    const gguf::TensorInfo* w = spec_.layers[static_cast<size_t>(il)].get(op.weight[0]);
    on(d).rms_norm(op.in, op.in_view(), *w, op.out[0], op.in_view(), n * op.rows, static_cast<float>(hp_.rms_eps));
}

// Products of one input grouped by device: one call per device.
void LayerExecutor::matmul(int64_t il, const Op& op, const RecipeBatch& b) {
    const model::LayerSpec& L = spec_.layers[static_cast<size_t>(il)];
    if (op.kind == OpKind::HeadMatmul) {
        const gguf::TensorInfo* w = L.get(op.weight[0]);
        const int d = placement_.of(w);
        need(op.in, d, b.n);
        if (b.observer != nullptr) observe_heads(op, *w, d, b);
        on(d).matmul_heads(MatmulOut{w, op.out[0]}, op.in, op.in_view(), op.out_view(), op.rows, b.n);
        where_.wrote(op.out[0], d);
        return;
    }
    const auto roles = op.weights();
    const auto outs = op.outs();
    for (int d = 0; d < static_cast<int>(devices_.size()); ++d) {
        MatmulOut group[3];
        size_t count = 0;
        for (size_t i = 0; i < roles.size(); ++i) {
            const gguf::TensorInfo* w = L.get(roles[i]);
            const model::LayerTensor bias = op.bias[i];
            if (placement_.of(w) == d) group[count++] = {w, outs[i], bias != model::kNoTensor ? L.get(bias) : nullptr};
        }
        if (count == 0) continue;
        std::array<Act, 3> room;
        for (const Act a : op.inputs(room)) need(a, d, b.n);
        const std::span<const MatmulOut> products(group, count);
        if (b.observer != nullptr) observe(op, products, d, b);
        if (op.kind == OpKind::ExpertMatmul) {
            on(d).matmul_experts(products, op.in, ExpertOp{hp_.n_expert_used, op.in_per_slot, op.sum_slots}, b.n);
        } else if (d == kHostDevice && b.stream && il >= b.stream_first && model::is_streamed(roles[0])) {
            DeviceOps& host = on(kHostDevice);
            for (size_t i = 0; i < roles.size(); ++i) {
                if (placement_.of(L.get(roles[i])) != d) continue;
                b.stream->matmul(il, roles[i], host.host_act(op.in), b.n, host.host_act(outs[i]));
            }
        } else {
            on(d).matmul(products, op.in, b.n);
        }
        for (const MatmulOut& p : products) where_.wrote(p.out, d);
    }
}

// Dense: each weight sees the n input rows. Experts: each (token, slot)
// row is shown with the expert Route chose for it, slot-major as llama.cpp's
// MUL_MAT_ID walks its ids (a row per token shared by its slots unless
// in_per_slot).
void LayerExecutor::observe(const Op& op, std::span<const MatmulOut> products, int d, const RecipeBatch& b) {
    const int64_t n_in = products[0].w->row_length();
    const int64_t rows_in = op.kind == OpKind::ExpertMatmul && op.in_per_slot ? b.n * hp_.n_expert_used : b.n;
    const float* x = host_floats(op.in, d, rows_in * n_in, observed_x_);
    if (op.kind != OpKind::ExpertMatmul) {
        for (const MatmulOut& p : products) b.observer->on_matmul(*p.w, -1, x, b.n, n_in);
        return;
    }
    const int64_t k = hp_.n_expert_used;
    const float* route = host_floats(Act::Route, d, b.n * k * 2, observed_route_);
    for (const MatmulOut& p : products) {
        for (int64_t slot = 0; slot < k; ++slot) {
            for (int64_t t = 0; t < b.n; ++t) {
                const int64_t r = t * k + slot;
                const auto expert = static_cast<int64_t>(route[2 * r]);
                b.observer->on_matmul(*p.w, expert, x + (op.in_per_slot ? r : t) * n_in, 1, n_in);
            }
        }
    }
}

// Each head's rows of the micro-batch, packed, as llama.cpp's MUL_MAT of
// a 3-D weight shows slice h its rows.
void LayerExecutor::observe_heads(const Op& op, const gguf::TensorInfo& w, int d, const RecipeBatch& b) {
    const model::RowView v = op.in_view();
    const int64_t width = op.rows * v.stride;
    const float* x = host_floats(op.in, d, b.n * width, observed_x_);
    observed_heads_.resize(static_cast<size_t>(b.n * v.len));
    for (int64_t h = 0; h < op.rows; ++h) {
        for (int64_t t = 0; t < b.n; ++t) {
            const float* row = x + t * width + v.col0 + h * v.stride;
            std::copy(row, row + v.len, observed_heads_.begin() + t * v.len);
        }
        b.observer->on_head_matmul(w, h, observed_heads_.data(), b.n, v.len);
    }
}

const float* LayerExecutor::host_floats(Act a, int d, int64_t n_floats, std::vector<float>& room) {
    if (const float* p = on(d).host_act(a)) return p;
    room.resize(static_cast<size_t>(n_floats));
    on(d).read_act(a, room.data(), n_floats);
    return room.data();
}

void LayerExecutor::rope(int64_t il, const Op& op, int d, const RecipeBatch& b) {
    RopeOp rope;
    rope.neox = spec_.arch->rope_style == model::RopeStyle::Neox;
    rope.n_rot = hp_.n_rot;
    rope.freq_base = static_cast<float>(spec_.layers[static_cast<size_t>(il)].rope_base);
    rope.freq_scale = static_cast<float>(hp_.rope_freq_scale);
    rope.ext_factor = static_cast<float>(hp_.rope_ext_factor);
    rope.attn_factor = static_cast<float>(hp_.rope_attn_factor);
    if (rope.ext_factor != 0.0f) {
        cpu::rope_yarn_corr_dims(rope.n_rot, hp_.rope_n_ctx_orig, rope.freq_base, static_cast<float>(hp_.rope_beta_fast),
                                 static_cast<float>(hp_.rope_beta_slow), rope.corr_dims);
    }
    on(d).rope(op.out[0], op.in_view(), op.rows, b.pos, rope);
}

void LayerExecutor::attention(int64_t il, const Op& recipe_op, int d, const RecipeBatch& b) {
    AttentionOp op;
    if (recipe_op.weight[0] != model::kNoTensor) op.sinks = spec_.layers[static_cast<size_t>(il)].get(recipe_op.weight[0]);
    op.n_head = hp_.n_head;
    op.n_head_kv = hp_.n_head_kv;
    op.head_dim_k = hp_.head_dim_k;
    op.head_dim_v = hp_.head_dim_v;
    op.window = spec_.layers.at(static_cast<size_t>(il)).sliding_window ? hp_.sliding_window : 0;
    op.softcap = static_cast<float>(hp_.attn_logit_softcap);
    op.v_in_k = recipe_op.v_in_k;
    op.scale = hp_.attn_scale > 0.0
                   ? static_cast<float>(hp_.attn_scale)
                   : 1.0f / std::sqrt(static_cast<float>(spec_.arch->query_scale_by_embd_per_head ? hp_.n_embd / hp_.n_head
                                                                                                 : hp_.head_dim_k));
    // Gemma scales Q before attention, as llama.cpp's graph (see arch.h).
    if (spec_.arch->scale_query_before_attention) {
        on(d).scale(Act::Q, b.n * hp_.q_dim(), op.scale);
        op.scale = 1.0f;
    }
    // A quantized cache stores K and V rotated (model::KvRotation): Q turns
    // with K, so Q.K is unchanged, and the output turns back.
    if (rotation_.k > 0) {
        on(d).hadamard(Act::Q, b.n * hp_.q_dim(), rotation_.k);
        on(d).hadamard(Act::K, b.n * hp_.k_dim(), rotation_.k);
    }
    if (rotation_.v > 0) on(d).hadamard(Act::V, b.n * hp_.kv_v_dim(), rotation_.v);
    on(d).attention(il, b.cells[static_cast<size_t>(il)], b.pos, b.seq, op);
    if (rotation_.v > 0) on(d).hadamard(Act::Attn, b.n * hp_.n_head * hp_.head_dim_v, rotation_.v);
}

const float* LayerExecutor::x_on_host(int64_t n) {
    need(Act::X, kHostDevice, n);
    return on(kHostDevice).host_act(Act::X);
}

// ---- the head ----------------------------------------------------------------
int LayerExecutor::final_norm(int64_t first, int64_t count) {
    const gguf::TensorInfo* norm = spec_.get(model::GlobalTensor::OutputNorm);
    TANDEM_CHECK(norm != nullptr, "output norm without a weight");
    const int nd = placement_.of(norm);
    need(Act::X, nd, first + count);
    const int64_t E = hp_.n_embd;
    on(nd).rms_norm(Act::X, {first * E, E, E}, *norm, Act::Cur, RowView::packed(E), count,
                    static_cast<float>(hp_.rms_eps));
    where_.wrote(Act::Cur, nd);
    return nd;
}

void LayerExecutor::output(int64_t first, int64_t count, float* logits, ActivationObserver* observer) {
    final_norm(first, count);
    const int d = placement_.head;
    need(Act::Cur, d, count);
    const MatmulOut head{&spec_.output_head(), Act::Logits};
    if (observer != nullptr) {
        const int64_t E = hp_.n_embd;
        observer->on_matmul(*head.w, -1, host_floats(Act::Cur, d, count * E, observed_x_), count, E);
    }
    on(d).matmul(std::span(&head, 1), Act::Cur, count);
    const int64_t n_floats = count * hp_.n_vocab;
    if (hp_.final_logit_softcap > 0.0) on(d).softcap(Act::Logits, n_floats, static_cast<float>(hp_.final_logit_softcap));
    where_.wrote(Act::Logits, d);
    if (d != kHostDevice) {
        bytes_moved_ += static_cast<uint64_t>(n_floats) * sizeof(float);
        ++crossings_;
    }
    on(d).read_act(Act::Logits, logits, n_floats);
}

void LayerExecutor::hidden(int64_t first, int64_t count, float* out) {
    const int nd = final_norm(first, count);
    const int64_t n_floats = count * hp_.n_embd;
    if (nd != kHostDevice) {
        bytes_moved_ += static_cast<uint64_t>(n_floats) * sizeof(float);
        ++crossings_;
    }
    on(nd).read_act(Act::Cur, out, n_floats);
}

void LayerExecutor::need(Act a, int d, int64_t rows) {
    const int src = where_.need(a, d);
    if (src < 0) return;
    const int64_t n_floats = rows * widths_.act[static_cast<size_t>(a)];
    if (float* from = on(src).host_act(a)) {
        on(d).write_act(a, from, n_floats);
    } else if (float* to = on(d).host_act(a)) {
        on(src).read_act(a, to, n_floats);
    } else {
        staging_.resize(static_cast<size_t>(n_floats));
        on(src).read_act(a, staging_.data(), n_floats);
        on(d).write_act(a, staging_.data(), n_floats);
    }
    bytes_moved_ += static_cast<uint64_t>(n_floats) * sizeof(float);
    ++crossings_;
}

}  // namespace tandem
