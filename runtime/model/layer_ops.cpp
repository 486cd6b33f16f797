#include "runtime/model/layer_ops.h"

#include <algorithm>
#include <bit>

#include "runtime/common/error.h"
#include "runtime/model/model_spec.h"

namespace tandem::model {
namespace {

using T = LayerTensor;

// Writes one layer's list. Each op records the tensor whose device runs
// it; an op without a weight runs where its input was last written, so the
// writer keeps, per buffer, the tensor of the op that last wrote it.
class Recipe {
public:
    Recipe(const ModelSpec& spec, int64_t il) : hp_(spec.hp), L_(spec.layers.at(static_cast<size_t>(il))) {}

    bool has(T t) const { return L_.get(t) != nullptr; }

    // y = RMSNorm(x) * w over `rows` rows of len per token (stride apart; 0: packed).
    void norm(T w, Act x, Act y, int64_t len, int64_t rows = 1, int64_t stride = 0) {
        LayerOp op = make(OpKind::Norm, x, {y}, w);
        op.weight[0] = w;
        op.len = len;
        op.rows = rows;
        op.stride = stride;
        push(op);
    }
    void norm_if(T w, Act x, Act y, int64_t len, int64_t rows = 1) {
        if (has(w)) norm(w, x, y, len, rows);
    }
    // outs[i] = in x roles[i]; each product runs on its weight's device.
    void matmul(std::initializer_list<T> roles, std::initializer_list<Act> outs, Act in) {
        TANDEM_CHECK(roles.size() == outs.size() && roles.size() <= 3, "recipe: a product group of 1-3 weights");
        LayerOp op = make(OpKind::Matmul, in, {}, *roles.begin());
        std::copy(roles.begin(), roles.end(), op.weight.begin());
        std::copy(outs.begin(), outs.end(), op.out.begin());
        op.n_out = static_cast<int>(roles.size());
        push(op);
    }
    // biases[i]: role i's per-expert bias, used when the layer has it.
    void matmul_experts(std::initializer_list<T> roles, std::initializer_list<T> biases, std::initializer_list<Act> outs,
                        Act in, bool in_per_slot, bool sum_slots) {
        TANDEM_CHECK(biases.size() == roles.size(), "recipe: a bias role per expert product");
        matmul(roles, outs, in);
        LayerOp& op = ops_.back();
        op.kind = OpKind::ExpertMatmul;
        op.in_per_slot = in_per_slot;
        op.sum_slots = sum_slots;
        size_t i = 0;
        for (const T b : biases) op.bias[i++] = has(b) ? b : kNoTensor;
    }
    // The fused product's columns into the parts, in order.
    void split(Act fused, std::initializer_list<std::pair<Act, int64_t>> parts) {
        int64_t width = 0;
        for (const auto& part : parts) width += part.second;
        int64_t col = 0;
        for (const auto& [a, w] : parts) {
            copy(fused, {col, width, w}, a, RowView::packed(w), 1);
            col += w;
        }
    }
    // out's rows = in's rows, `rows` of each token. Into a part of out's
    // rows, where the rest was written (the executor moves whole buffers:
    // the two parts must meet on one device); else where in was.
    void copy(Act in, RowView from, Act out, RowView to, int64_t rows) {
        TANDEM_CHECK(from.len == to.len, "recipe: a copy between rows of one length");
        const bool part = to.col0 > 0 || to.stride > to.len;
        LayerOp op = make(OpKind::Split, in, {out}, part ? writer(out) : writer(in));
        set_rows(op, from, to, rows);
        push(op);
    }
    // out's row h = slice h of w x in's row h, for each token's `rows` rows.
    void matmul_heads(T w, Act in, RowView from, Act out, RowView to, int64_t rows) {
        LayerOp op = make(OpKind::HeadMatmul, in, {out}, w);
        op.weight[0] = w;
        set_rows(op, from, to, rows);
        op.out_len = to.len;
        push(op);
    }
    void add_bias_if(T b, Act a) {
        if (!has(b)) return;
        LayerOp op = make(OpKind::AddBias, a, {a}, b);
        op.weight[0] = b;
        op.len = act_width(hp_, a);
        push(op);
    }
    // Each token's `heads` rows of len (at col0, stride apart; 0: packed).
    void rope(Act a, int64_t heads, int64_t len, int64_t col0 = 0, int64_t stride = 0) {
        LayerOp op = row_op(OpKind::Rope, a, a, len, heads);
        op.col0 = col0;
        op.stride = stride;
        push(op);
    }
    // With the layer's sinks, when it has them.
    void attention(bool v_in_k = false) {
        LayerOp op = make(OpKind::Attention, Act::Q, {Act::Attn}, kWithCache);
        if (has(T::AttnSinks)) op.weight[0] = T::AttnSinks;
        op.v_in_k = v_in_k;
        push(op);
    }
    // Where its bias is (the choice needs it), else with the gate experts.
    void route() {
        const T bias = has(T::FfnExpProbsB) ? T::FfnExpProbsB : kNoTensor;
        LayerOp op = make(OpKind::Route, Act::Router, {Act::Route}, bias != kNoTensor ? bias : T::FfnGateExps);
        op.weight[0] = bias;
        op.len = hp_.n_expert;
        push(op);
    }
    void glu(int64_t len, int64_t rows) { push(row_op(OpKind::Glu, Act::Up, Act::Gate, len, rows)); }
    // y += x: where x was written.
    void add(Act y, Act x) {
        LayerOp op = row_op(OpKind::Add, x, y, hp_.n_embd, 1);
        push(op);
    }

    std::vector<LayerOp> take() { return std::move(ops_); }

private:
    // An op's input rows `from` and output rows `to`, `rows` of each token.
    static void set_rows(LayerOp& op, RowView from, RowView to, int64_t rows) {
        op.len = from.len;
        op.rows = rows;
        op.col0 = from.col0;
        op.stride = from.stride;
        op.out_col0 = to.col0;
        op.out_stride = to.stride;
    }
    static LayerOp make(OpKind kind, Act in, std::initializer_list<Act> outs, T at) {
        LayerOp op;
        op.kind = kind;
        op.in = in;
        std::copy(outs.begin(), outs.end(), op.out.begin());
        op.n_out = std::max<int>(1, static_cast<int>(outs.size()));
        op.at = at;
        return op;
    }
    // An op without weight, where `where`'s value was last written.
    LayerOp row_op(OpKind kind, Act in, Act out, int64_t len, int64_t rows) {
        const Act where = kind == OpKind::Add ? in : out;
        LayerOp op = make(kind, in, {out}, writer(where));
        op.len = len;
        op.rows = rows;
        return op;
    }
    T writer(Act a) const {
        const T t = writer_[static_cast<size_t>(a)];
        TANDEM_CHECK(t != T::Count, "recipe: a buffer read before any op wrote it");
        return t;
    }
    void push(const LayerOp& op) {
        ops_.push_back(op);
        for (int i = 0; i < op.n_out; ++i) {
            const auto a = static_cast<size_t>(op.out[static_cast<size_t>(i)]);
            writer_[a] = op.is_product() ? op.weight[static_cast<size_t>(i)] : op.at;
        }
    }

    const HParams& hp_;
    const LayerSpec& L_;
    std::vector<LayerOp> ops_;
    std::array<T, kActCount> writer_ = [] {
        std::array<T, kActCount> w{};
        w.fill(T::Count);
        w[static_cast<size_t>(Act::X)] = T::AttnNorm;  // the layer's input comes to its first op
        return w;
    }();
};

}  // namespace

// ---- one layer: the whole forward pass of every architecture ------------
std::vector<LayerOp> layer_ops(const ModelSpec& spec, int64_t il) {
    const HParams& hp = spec.hp;
    const LayerSpec& L = spec.layers.at(static_cast<size_t>(il));
    const int64_t E = hp.n_embd;
    Recipe r(spec, il);

    // Attention block: x += post_norm(o(attention(rope(q, k), v)))
    r.norm(T::AttnNorm, Act::X, Act::Cur, E);
    if (hp.mla()) {
        // Multi-head latent attention, absorbed (llama.cpp's deepseek2
        // graph): the cache row K = [norm(latent) | rope(k_pe)] meets each
        // head's query [k_b x q_nope | rope(q_pe)] as one KV head; V is the
        // latent, and v_b takes each head's output out of it.
        const int64_t rank = hp.n_lora_kv, rot = hp.n_rot, kh = hp.head_dim_k_mla, nope = kh - rot;
        const int64_t kd = hp.head_dim_k;  // rank + rot
        r.matmul({T::AttnQA, T::AttnKvAMqa}, {Act::QA, Act::K}, Act::Cur);
        r.norm(T::AttnQANorm, Act::QA, Act::QA, hp.n_lora_q);
        r.matmul({T::AttnQB}, {Act::QB}, Act::QA);
        r.norm(T::AttnKvANorm, Act::K, Act::K, rank, 1, kd);
        r.rope(Act::K, 1, rot, rank, kd);
        r.rope(Act::QB, hp.n_head, rot, nope, kh);
        r.matmul_heads(T::AttnKB, Act::QB, {0, kh, nope}, Act::Q, {0, kd, rank}, hp.n_head);
        r.copy(Act::QB, {nope, kh, rot}, Act::Q, {rank, kd, rot}, hp.n_head);
        r.attention(true);
        r.matmul_heads(T::AttnVB, Act::Attn, RowView::packed(rank), Act::QB, RowView::packed(hp.head_dim_v_mla),
                       hp.n_head);
        r.matmul({T::AttnOutput}, {Act::Cur}, Act::QB);
    } else {
        if (r.has(T::AttnQkv)) {
            r.matmul({T::AttnQkv}, {Act::Fused}, Act::Cur);
            r.split(Act::Fused, {{Act::Q, hp.q_dim()}, {Act::K, hp.k_dim()}, {Act::V, hp.v_dim()}});
        } else {
            r.matmul({T::AttnQ, T::AttnK, T::AttnV}, {Act::Q, Act::K, Act::V}, Act::Cur);
        }
        r.add_bias_if(T::AttnQBias, Act::Q);
        r.add_bias_if(T::AttnKBias, Act::K);
        r.add_bias_if(T::AttnVBias, Act::V);
        r.norm_if(T::AttnQNorm, Act::Q, Act::Q, hp.head_dim_k, hp.n_head);
        r.norm_if(T::AttnKNorm, Act::K, Act::K, hp.head_dim_k, hp.n_head_kv);
        r.rope(Act::Q, hp.n_head, hp.head_dim_k);
        r.rope(Act::K, hp.n_head_kv, hp.head_dim_k);
        r.attention();
        r.matmul({T::AttnOutput}, {Act::Cur}, Act::Attn);
    }
    r.add_bias_if(T::AttnOutputBias, Act::Cur);
    r.norm_if(T::AttnPostNorm, Act::Cur, Act::Cur, E);
    r.add(Act::X, Act::Cur);

    // FFN block: x += post_norm(down(act(gate) * up)), or the same summed
    // over the experts the router chose, weighted.
    r.norm(T::FfnNorm, Act::X, Act::Cur, E);
    if (L.has_experts()) {
        // The shared expert first, while Cur holds the FFN's input.
        const bool shared = r.has(T::FfnGateShexp);
        if (shared) {
            r.matmul({T::FfnGateShexp, T::FfnUpShexp}, {Act::Gate, Act::Up}, Act::Cur);
            r.glu(hp.n_ff_shexp(), 1);
            r.matmul({T::FfnDownShexp}, {Act::Shared}, Act::Gate);
        }
        // The router's logits where the router is, the choice where its
        // bias or the gate experts are, then each product on its weight's
        // device; the activation row by row per (token, slot), as llama.cpp
        // applies it to each expert's rows.
        r.matmul({T::FfnGateInp}, {Act::Router}, Act::Cur);
        r.add_bias_if(T::FfnGateInpBias, Act::Router);
        r.route();
        r.matmul_experts({T::FfnGateExps, T::FfnUpExps}, {T::FfnGateExpsBias, T::FfnUpExpsBias}, {Act::Gate, Act::Up},
                         Act::Cur, false, false);
        r.glu(hp.n_ff_exp, hp.n_expert_used);
        r.matmul_experts({T::FfnDownExps}, {T::FfnDownExpsBias}, {Act::Cur}, Act::Gate, true, true);
        if (shared) r.add(Act::Cur, Act::Shared);
    } else {
        if (r.has(T::FfnGateUp)) {
            r.matmul({T::FfnGateUp}, {Act::Fused}, Act::Cur);
            r.split(Act::Fused, {{Act::Gate, hp.n_ff}, {Act::Up, hp.n_ff}});
        } else {
            r.matmul({T::FfnGate, T::FfnUp}, {Act::Gate, Act::Up}, Act::Cur);
        }
        r.glu(hp.n_ff, 1);
        r.matmul({T::FfnDown}, {Act::Cur}, Act::Gate);
    }
    r.norm_if(T::FfnPostNorm, Act::Cur, Act::Cur, E);
    r.add(Act::X, Act::Cur);
    return r.take();
}

// ---- the records ------------------------------------------------------------
std::string_view op_name(OpKind k) {
    static constexpr std::string_view names[] = {"norm",     "matmul", "expert_matmul", "head_matmul",
                                                 "route",    "split",  "add_bias",      "rope",
                                                 "attention", "glu",   "add"};
    static_assert(std::size(names) == static_cast<size_t>(OpKind::Count));
    return names[static_cast<size_t>(k)];
}

std::span<const Act> LayerOp::inputs(std::array<Act, 3>& room) const {
    size_t n = 0;
    switch (kind) {
        case OpKind::ExpertMatmul: room = {in, Act::Route}; n = 2; break;  // a token's row holds all its slots
        case OpKind::Attention:
            room = {Act::Q, Act::K, Act::V};
            n = v_in_k ? 2 : 3;
            break;
        case OpKind::Glu: room = {Act::Gate, Act::Up}; n = 2; break;
        case OpKind::Add: room = {out[0], in}; n = 2; break;
        case OpKind::AddBias:
        case OpKind::Rope: room = {out[0]}; n = 1; break;
        default: room = {in}; n = 1; break;
    }
    return {room.data(), n};
}

// ---- buffers -------------------------------------------------------------------
std::string_view act_name(Act a) {
    static constexpr std::string_view names[] = {"x",     "cur",   "q",      "k",     "v",      "attn", "gate", "up",
                                                 "fused", "router", "route", "shared", "qa",   "qb",   "logits"};
    static_assert(std::size(names) == static_cast<size_t>(kActCount));
    return names[static_cast<size_t>(a)];
}

WorkspaceWidths workspace_widths(const HParams& hp) {
    WorkspaceWidths w;
    const auto set = [&](Act a, int64_t width) { w.act[static_cast<size_t>(a)] = width; };
    set(Act::X, hp.n_embd);
    set(Act::Cur, hp.n_embd);
    set(Act::Q, hp.q_dim());
    set(Act::K, hp.k_dim());
    set(Act::V, hp.kv_v_dim() > 0 ? hp.v_dim() : 0);
    set(Act::Attn, std::max(hp.out_dim(), hp.n_embd));
    set(Act::QA, hp.n_lora_q);
    set(Act::QB, hp.mla() ? std::max(hp.q_mla_dim(), hp.o_dim()) : 0);
    set(Act::Gate, hp.ffn_width());
    set(Act::Up, hp.ffn_width());
    set(Act::Fused, hp.fused_width);
    set(Act::Router, hp.n_expert);
    set(Act::Route, 2 * hp.n_expert_used);
    set(Act::Shared, hp.n_expert_shared > 0 ? hp.n_embd : 0);
    set(Act::Logits, hp.n_vocab);
    w.matmul_input = max_matmul_input(hp);
    if (hp.n_expert > 0) {
        // Per (token, slot) an input of n_embd and a product of n_ff_exp,
        // or the other way round; the index lists are 2 * n_used int32s,
        // given n_embd floats' room.
        w.expert_rows = hp.n_expert_used * (hp.n_ff_exp + std::max(hp.n_ff_exp, hp.n_embd));
        w.expert_index = hp.n_embd;
    }
    return w;
}

std::vector<int64_t> matmul_input_widths(const HParams& hp) {
    std::vector<int64_t> widths = {hp.n_embd, hp.out_dim(), hp.o_dim(), hp.n_ff, hp.n_ff_exp, hp.n_ff_shexp()};
    // MLA: q_b's input, v_b's (a head's latent) and k_b's (a head's nope query).
    if (hp.mla()) widths.insert(widths.end(), {hp.n_lora_q, hp.n_lora_kv, hp.head_dim_k_mla - hp.n_rot});
    return widths;
}

int64_t max_matmul_input(const HParams& hp) {
    const std::vector<int64_t> widths = matmul_input_widths(hp);
    return *std::max_element(widths.begin(), widths.end());
}

int64_t WorkspaceWidths::per_token(bool with_logits) const {
    int64_t sum = positions + matmul_input + expert_rows + expert_index;
    for (int a = 0; a < kActCount; ++a) {
        if (static_cast<Act>(a) != Act::Logits || with_logits) sum += act[static_cast<size_t>(a)];
    }
    return sum;
}

int64_t act_width(const HParams& hp, Act a) { return workspace_widths(hp).act.at(static_cast<size_t>(a)); }

// ---- residency -----------------------------------------------------------------
int Residency::need(Act a, int d) {
    unsigned& holders = valid_[static_cast<size_t>(a)];
    if (holders & (1u << d)) return -1;
    TANDEM_CHECK(holders != 0, "an activation needed before any device wrote it");
    holders |= 1u << d;
    return std::countr_zero(holders & ~(1u << d));  // the host (device 0) first
}

}  // namespace tandem::model
