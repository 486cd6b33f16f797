// The layer, described once. The recipe (layer_ops.cpp) writes each
// layer's forward pass as a list of op records, once per model, from the
// architecture row and the tensors the file has. Three readers walk the
// same list:
//   - the engine's executor (runtime/engine/executor.h) runs each op on the
//     device of its tensor, moving activations between devices;
//   - the planner (planner/layout.cpp) counts each op's products, row
//     passes and activation crossings, and prices them;
//   - the workspace widths below size every device's activation buffers.
//
// An op reads and writes named activation buffers (Act), each a row per
// token of a fixed width. It runs on the device holding its `at` tensor
// (a weighted op's own weight; an op without weight runs where its input
// was last written, which the recipe works out as it writes the list), or
// on the device of the layer's K/V cache (attention).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/model/arch.h"
#include "runtime/model/hparams.h"

namespace tandem::model {

struct ModelSpec;
struct LayerSpec;

// The activation buffers of one micro-batch, the same on every device.
// Fused: the output of a fused product (Q|K|V, gate|up) before it is split.
// Router: one logit per expert. Route: per token, the chosen experts and
// their weights, (expert id, weight) pairs as floats. With experts, Gate
// and Up hold each used expert's hidden rows side by side. Shared: the
// shared experts' output, added to the routed experts' sum. With latent
// attention (MLA), QA holds the query's low-rank projection and QB q_b's
// per-head [nope | rope], later each head's value out of the latent.
enum class Act : int { X, Cur, Q, K, V, Attn, Gate, Up, Fused, Router, Route, Shared, QA, QB, Logits, Count };
inline constexpr int kActCount = static_cast<int>(Act::Count);
std::string_view act_name(Act a);

// ---- the one width table ---------------------------------------------------
// Floats per token of every buffer of one micro-batch, in the order a
// device carves them from one block: the Acts but Logits, then the
// scratch, then Logits (only with_logits). model::compute_bytes is this
// sum; the CPU device sizes its buffers and the CUDA device carves its
// block from it.
struct WorkspaceWidths {
    std::array<int64_t, kActCount> act{};
    int64_t positions = 1;     // a token's position (an int32 in a float's room)
    int64_t matmul_input = 0;  // a product's input as quantized (4 bytes an element bounds every format)
    int64_t expert_rows = 0;   // an expert call's gathered inputs and products side by side
    int64_t expert_index = 0;  // an expert call's two row index lists (int32s)
    int64_t per_token(bool with_logits) const;
};
WorkspaceWidths workspace_widths(const HParams& hp);
// The input widths of the products (what a device quantizes an input
// into), and the widest.
std::vector<int64_t> matmul_input_widths(const HParams& hp);
int64_t max_matmul_input(const HParams& hp);
int64_t act_width(const HParams& hp, Act a);

// ---- the op records ---------------------------------------------------------
// Rows a row op passes over in a buffer of a micro-batch: row r (over
// tokens and the rows of each token) is the floats [col0 + r * stride,
// + len). A token's rows packed: stride = len; a part of each row of
// width w: stride = w.
struct RowView {
    int64_t col0 = 0;
    int64_t stride = 0;
    int64_t len = 0;
    static RowView packed(int64_t len) { return {0, len, len}; }
};

enum class OpKind : uint8_t {
    Norm,          // out = RMSNorm(in) * weight over `rows` rows of len per token (in may be out)
    Matmul,        // out[i] = in x weight[i], one call per device for products of one input
    ExpertMatmul,  // the same with the experts Route chose (in_per_slot, sum_slots)
    // out's row h = slice h of the 3-D weight x in's row h, for each token's
    // `rows` rows (a head's each: MLA's k_b and v_b)
    HeadMatmul,
    Route,         // Route = the router's choice from Router (weight: the choice's bias, if any)
    Split,         // out's rows = in's rows (the columns of a fused product, a head's part)
    AddBias,       // out's rows of len += weight
    Rope,          // out's `rows` heads of len rotated by the token's position
    Attention,     // stores K and V in the layer's cache; Attn = attention of Q over it (weight: the sinks, if any)
    Glu,           // Gate = act(Gate) * Up over `rows` rows of len
    Add,           // out += in over rows of len (the residual)
    Count,
};
std::string_view op_name(OpKind k);

// `at` for an op that runs with the layer's K/V cache.
inline constexpr LayerTensor kWithCache = LayerTensor::Count;
// A weight slot an op leaves empty.
inline constexpr LayerTensor kNoTensor = LayerTensor::Count;

struct LayerOp {
    OpKind kind = OpKind::Norm;
    Act in = Act::Cur;
    std::array<Act, 3> out{};
    std::array<LayerTensor, 3> weight{kNoTensor, kNoTensor, kNoTensor};  // products: one per out; Norm, AddBias, Route, Attention (its sinks): [0]
    // ExpertMatmul: each product's per-expert bias (kNoTensor: none), added
    // to an expert's product before the route's weight; it lives with its
    // product's weight.
    std::array<LayerTensor, 3> bias{kNoTensor, kNoTensor, kNoTensor};
    int n_out = 1;
    LayerTensor at = kWithCache;  // the tensor whose device runs the op (products: each weight's)
    int64_t len = 0;              // floats of a row the op passes over
    int64_t rows = 1;             // rows per token
    // Where those rows are (Norm, Rope, Split, HeadMatmul's input): row i
    // of a token at col0 + i * stride of its row of rows * stride floats;
    // stride 0: len (packed). Split's and HeadMatmul's output rows likewise
    // at out_col0 + i * out_stride (HeadMatmul: out_len, its slice's rows).
    int64_t col0 = 0, stride = 0;
    int64_t out_col0 = 0, out_stride = 0, out_len = 0;
    bool in_per_slot = false, sum_slots = false;  // ExpertMatmul
    bool v_in_k = false;  // Attention: V is K's first head_dim_v floats (MLA: the cache holds no V)

    std::span<const Act> outs() const { return {out.data(), static_cast<size_t>(n_out)}; }
    std::span<const LayerTensor> weights() const { return {weight.data(), static_cast<size_t>(n_out)}; }
    RowView in_view() const { return {col0, stride > 0 ? stride : len, len}; }
    RowView out_view() const {
        const int64_t l = kind == OpKind::HeadMatmul ? out_len : len;
        return {out_col0, out_stride > 0 ? out_stride : l, l};
    }
    bool is_product() const {
        return kind == OpKind::Matmul || kind == OpKind::ExpertMatmul || kind == OpKind::HeadMatmul;
    }
    // Elements per token the op passes over (row ops; 0 for products and attention).
    int64_t elems() const { return is_product() || kind == OpKind::Attention ? 0 : len * rows; }
    // The buffers it reads, which must be on its device first (at most 3).
    std::span<const Act> inputs(std::array<Act, 3>& room) const;
};

// Layer il's ops in order: the whole forward pass of the layer.
std::vector<LayerOp> layer_ops(const ModelSpec& spec, int64_t il);

// ---- where each buffer's current value is ---------------------------------
// Which devices hold each buffer's current value, as the executor moves
// them and the planner counts the moves: an op on a device without one of
// its inputs has it copied there once; a write leaves the one copy.
class Residency {
public:
    // Every buffer on device d.
    explicit Residency(int d = 0) { valid_.fill(1u << d); }
    // Device d needs a: returns the device to copy it from, or -1 when d
    // holds it already; d holds it after.
    int need(Act a, int d);
    void wrote(Act a, int d) { valid_[static_cast<size_t>(a)] = 1u << d; }
    bool holds(Act a, int d) const { return (valid_[static_cast<size_t>(a)] >> d) & 1u; }

private:
    std::array<unsigned, kActCount> valid_{};
};

}  // namespace tandem::model
