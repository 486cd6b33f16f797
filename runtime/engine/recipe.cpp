#include "runtime/engine/recipe.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>

#include "runtime/common/error.h"

namespace tandem {

using model::LayerTensor;

LayerRecipe::LayerRecipe(const model::ModelSpec& spec, const Placement& placement, std::vector<Device*> devices)
    : spec_(spec), hp_(spec.hp), placement_(placement), devices_(std::move(devices)) {
    TANDEM_CHECK(!devices_.empty() && devices_[kHostDevice]->host_act(Act::X), "the recipe needs the host first");
    valid_.fill(1u << kHostDevice);
}

void LayerRecipe::x_written_on(int device) { wrote(Act::X, device); }

// ---- one layer: the whole forward pass of every architecture ------------
void LayerRecipe::layer(int64_t il, const RecipeBatch& b) {
    const model::LayerSpec& L = spec_.layers.at(static_cast<size_t>(il));
    const int64_t n = b.n, E = hp_.n_embd;
    const float base = static_cast<float>(L.rope_base);

    // Attention block: x += post_norm(o(attention(rope(q, k), v)))
    norm(L.get(LayerTensor::AttnNorm), Act::X, Act::Cur, E, n);
    if (L.get(LayerTensor::AttnQkv)) {
        static constexpr LayerTensor qkv[] = {LayerTensor::AttnQkv};
        static constexpr Act fused[] = {Act::Fused};
        matmul(il, qkv, fused, Act::Cur, b);
        split(Act::Fused, {{Act::Q, hp_.q_dim()}, {Act::K, hp_.k_dim()}, {Act::V, hp_.v_dim()}}, n);
    } else {
        static constexpr LayerTensor qkv[] = {LayerTensor::AttnQ, LayerTensor::AttnK, LayerTensor::AttnV};
        static constexpr Act qkv_out[] = {Act::Q, Act::K, Act::V};
        matmul(il, qkv, qkv_out, Act::Cur, b);
    }
    if (const auto* bq = L.get(LayerTensor::AttnQBias)) add_bias(bq, Act::Q, n);
    if (const auto* bk = L.get(LayerTensor::AttnKBias)) add_bias(bk, Act::K, n);
    if (const auto* bv = L.get(LayerTensor::AttnVBias)) add_bias(bv, Act::V, n);
    if (const auto* qn = L.get(LayerTensor::AttnQNorm)) norm(qn, Act::Q, Act::Q, hp_.head_dim_k, n, hp_.n_head);
    if (const auto* kn = L.get(LayerTensor::AttnKNorm)) norm(kn, Act::K, Act::K, hp_.head_dim_k, n, hp_.n_head_kv);
    rope(Act::Q, hp_.n_head, b, base);
    rope(Act::K, hp_.n_head_kv, b, base);
    attention(il, b);
    static constexpr LayerTensor o[] = {LayerTensor::AttnOutput};
    static constexpr Act to_cur[] = {Act::Cur};
    matmul(il, o, to_cur, Act::Attn, b);
    if (const auto* pn = L.get(LayerTensor::AttnPostNorm)) norm(pn, Act::Cur, Act::Cur, E, n);
    residual(Act::X, Act::Cur, n);

    // FFN block: x += post_norm(down(act(gate) * up)), or the same summed
    // over the experts the router chose, weighted.
    norm(L.get(LayerTensor::FfnNorm), Act::X, Act::Cur, E, n);
    if (L.has_experts()) {
        experts(il, b);
    } else {
        if (L.get(LayerTensor::FfnGateUp)) {
            static constexpr LayerTensor gate_up[] = {LayerTensor::FfnGateUp};
            static constexpr Act fused[] = {Act::Fused};
            matmul(il, gate_up, fused, Act::Cur, b);
            split(Act::Fused, {{Act::Gate, hp_.n_ff}, {Act::Up, hp_.n_ff}}, n);
        } else {
            static constexpr LayerTensor gate_up[] = {LayerTensor::FfnGate, LayerTensor::FfnUp};
            static constexpr Act gate_up_out[] = {Act::Gate, Act::Up};
            matmul(il, gate_up, gate_up_out, Act::Cur, b);
        }
        glu(hp_.n_ff, n, n);
        static constexpr LayerTensor down[] = {LayerTensor::FfnDown};
        matmul(il, down, to_cur, Act::Gate, b);
    }
    if (const auto* pn = L.get(LayerTensor::FfnPostNorm)) norm(pn, Act::Cur, Act::Cur, E, n);
    residual(Act::X, Act::Cur, n);
}

// Mixture of experts: the router's logits where the router is, the choice
// where the gate experts are, then each product on its weight's device.
void LayerRecipe::experts(int64_t il, const RecipeBatch& b) {
    const model::LayerSpec& L = spec_.layers.at(static_cast<size_t>(il));
    static constexpr LayerTensor router[] = {LayerTensor::FfnGateInp};
    static constexpr Act to_router[] = {Act::Router};
    matmul(il, router, to_router, Act::Cur, b);
    const int d = placement_.of(L.get(LayerTensor::FfnGateExps));
    need(Act::Router, d, b.n);
    on(d).moe_route(MoeRouteOp{hp_.n_expert, hp_.n_expert_used, spec_.arch->moe_normalize_weights}, b.n);
    wrote(Act::Route, d);
    static constexpr LayerTensor gate_up[] = {LayerTensor::FfnGateExps, LayerTensor::FfnUpExps};
    static constexpr Act gate_up_out[] = {Act::Gate, Act::Up};
    matmul_experts(il, gate_up, gate_up_out, Act::Cur, ExpertOp{hp_.n_expert_used, false, false}, b.n);
    // Row by row per (token, slot), as llama.cpp applies it to each expert's rows.
    glu(hp_.n_ff_exp, b.n * hp_.n_expert_used, b.n);
    static constexpr LayerTensor down[] = {LayerTensor::FfnDownExps};
    static constexpr Act to_cur[] = {Act::Cur};
    matmul_experts(il, down, to_cur, Act::Gate, ExpertOp{hp_.n_expert_used, true, true}, b.n);
}

void LayerRecipe::layers(const RecipeBatch& b) {
    for (int64_t il = 0; il < hp_.n_layer; ++il) layer(il, b);
}

void LayerRecipe::output(int64_t first, int64_t count, float* logits) {
    norm(spec_.get(model::GlobalTensor::OutputNorm), Act::X, Act::Cur, hp_.n_embd, count, 1, first);
    const int d = placement_.head;
    need(Act::Cur, d, count);
    const MatmulOut head{&spec_.output_head(), Act::Logits};
    on(d).matmul(std::span(&head, 1), Act::Cur, count);
    const int64_t n_floats = count * hp_.n_vocab;
    if (hp_.final_logit_softcap > 0.0) on(d).softcap(Act::Logits, n_floats, static_cast<float>(hp_.final_logit_softcap));
    wrote(Act::Logits, d);
    if (d != kHostDevice) {
        bytes_moved_ += static_cast<uint64_t>(n_floats) * sizeof(float);
        ++crossings_;
    }
    on(d).read_act(Act::Logits, logits, n_floats);
}

// ---- the ops ---------------------------------------------------------------
void LayerRecipe::norm(const gguf::TensorInfo* w, Act x, Act y, int64_t len, int64_t n, int64_t heads,
                       int64_t x_row0) {
    TANDEM_CHECK(w != nullptr, "norm without a weight");
    const int d = placement_.of(w);
    need(x, d, x_row0 + n);
    on(d).rms_norm(x, x_row0 * heads, *w, y, len, n * heads, static_cast<float>(hp_.rms_eps));
    wrote(y, d);
}

void LayerRecipe::matmul(int64_t il, std::span<const LayerTensor> roles, std::span<const Act> outs, Act in,
                         const RecipeBatch& b) {
    const model::LayerSpec& L = spec_.layers.at(static_cast<size_t>(il));
    // Products of one input grouped by device: one call per device.
    for_each_device(il, roles, outs, [&](int d, std::span<const MatmulOut> group) {
        need(in, d, b.n);
        if (d == kHostDevice && b.stream && il >= b.stream_first && model::is_streamed(roles[0])) {
            Device& host = on(kHostDevice);
            for (size_t i = 0; i < roles.size(); ++i) {
                if (placement_.of(L.get(roles[i])) != d) continue;
                b.stream->matmul(il, roles[i], host.host_act(in), b.n, host.host_act(outs[i]));
            }
        } else {
            on(d).matmul(group, in, b.n);
        }
    });
}

void LayerRecipe::matmul_experts(int64_t il, std::span<const LayerTensor> roles, std::span<const Act> outs, Act in,
                                 const ExpertOp& op, int64_t n) {
    for_each_device(il, roles, outs, [&](int d, std::span<const MatmulOut> group) {
        need(in, d, n);  // a token's row holds all its slots
        need(Act::Route, d, n);
        on(d).matmul_experts(group, in, op, n);
    });
}

void LayerRecipe::for_each_device(int64_t il, std::span<const LayerTensor> roles, std::span<const Act> outs,
                                  const std::function<void(int, std::span<const MatmulOut>)>& fn) {
    const model::LayerSpec& L = spec_.layers.at(static_cast<size_t>(il));
    for (int d = 0; d < static_cast<int>(devices_.size()); ++d) {
        MatmulOut group[3];
        size_t count = 0;
        for (size_t i = 0; i < roles.size(); ++i) {
            const gguf::TensorInfo* w = L.get(roles[i]);
            if (placement_.of(w) == d) group[count++] = {w, outs[i]};
        }
        if (count == 0) continue;
        fn(d, std::span<const MatmulOut>(group, count));
        for (size_t i = 0; i < count; ++i) wrote(group[i].out, d);
    }
}

void LayerRecipe::split(Act fused, std::initializer_list<std::pair<Act, int64_t>> parts, int64_t n) {
    const int d = home(fused);
    int64_t width = 0;
    for (const auto& part : parts) width += part.second;
    int64_t col = 0;
    for (const auto& [a, w] : parts) {
        on(d).copy_cols(fused, width, col, a, w, n);
        wrote(a, d);
        col += w;
    }
}

void LayerRecipe::add_bias(const gguf::TensorInfo* bias, Act a, int64_t n) {
    const int d = placement_.of(bias);
    need(a, d, n);
    on(d).add_vector(a, *bias, act_width(hp_, a), n);
    wrote(a, d);
}

void LayerRecipe::glu(int64_t len, int64_t rows, int64_t n) {
    const int g = home(Act::Gate);
    need(Act::Up, g, n);
    on(g).glu(spec_.arch->ffn_activation, len, rows);
    wrote(Act::Gate, g);
}

void LayerRecipe::rope(Act a, int64_t n_heads, const RecipeBatch& b, float base) {
    RopeOp op;
    op.neox = spec_.arch->rope_style == model::RopeStyle::Neox;
    op.n_rot = hp_.n_rot;
    op.freq_base = base;
    op.freq_scale = static_cast<float>(hp_.rope_freq_scale);
    const int d = home(a);
    on(d).rope(a, n_heads, hp_.head_dim_k, b.pos, op);
    wrote(a, d);
}

void LayerRecipe::attention(int64_t il, const RecipeBatch& b) {
    const int d = placement_.kv.at(static_cast<size_t>(il));
    for (const Act a : {Act::Q, Act::K, Act::V}) need(a, d, b.n);
    AttentionOp op;
    op.n_head = hp_.n_head;
    op.n_head_kv = hp_.n_head_kv;
    op.head_dim_k = hp_.head_dim_k;
    op.head_dim_v = hp_.head_dim_v;
    op.window = spec_.layers.at(static_cast<size_t>(il)).sliding_window ? hp_.sliding_window : 0;
    op.softcap = static_cast<float>(hp_.attn_logit_softcap);
    op.scale = 1.0f / std::sqrt(static_cast<float>(spec_.arch->query_scale_by_embd_per_head ? hp_.n_embd / hp_.n_head
                                                                                           : hp_.head_dim_k));
    // Gemma scales Q before attention, as llama.cpp's graph (see arch.h).
    if (spec_.arch->scale_query_before_attention) {
        on(d).scale(Act::Q, b.n * hp_.q_dim(), op.scale);
        op.scale = 1.0f;
    }
    on(d).attention(il, b.pos, b.seq, op);
    wrote(Act::Attn, d);
}

void LayerRecipe::residual(Act y, Act x, int64_t n) {
    const int d = home(x);
    need(y, d, n);
    on(d).add(y, x, hp_.n_embd, n);
    wrote(y, d);
}

void LayerRecipe::need(Act a, int d, int64_t rows) {
    const unsigned holders = valid_[static_cast<size_t>(a)];
    if (holders & (1u << d)) return;
    const int src = (holders & (1u << kHostDevice)) ? kHostDevice : std::countr_zero(holders);
    const int64_t n_floats = rows * act_width(hp_, a);
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
    valid_[static_cast<size_t>(a)] |= 1u << d;
}

}  // namespace tandem
