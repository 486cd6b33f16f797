// The planner's arithmetic over placements, internal to planner/. A
// placement is a Layout: layers [0, k) placed one way (a Mode), layers
// [k, n_layer) another, and a device for the output norm and the head.
// (a) is all-on-the-accelerator below k and all-on-the-host above; (b) and
// (c) are FFN (experts) on the host below k and all-on-the-accelerator
// above; the user's -ot rules give the two modes of place_tensors at
// -ngl n_layer + 1 and -ngl 0. Each mode keeps prefix sums over layers of
// what each device holds, so that trying every k costs O(n_layer) in all:
// a 70B plan over a grid of capacities must stay well under 100 ms.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "planner/planner.h"

namespace tandem::planner::detail {

inline constexpr int kDevices = 2;  // kHostDevice, kAccelDevice
// Weight types and row widths a model's tables tell apart (Tables::types
// and cols: a product's rate depends on both); a model with more pairs
// shares the last slot, at the rate of the pair that slot was given.
inline constexpr int kTypeSlots = 12;

// What layers put on one device: bytes held, bytes one token's decode reads
// (of experts only the used share), weights multiplied per token, and their
// KV caches (bytes held, bytes read at the average position, layers). For
// the cost model, per weight type slot: the weights of the dense and of
// the expert matrices (all experts'); and the work handed over: products
// (a decode step: calls, one per group of products of one input on one
// device; a batch: batch_calls, one per dense matrix, and one per expert
// matrix (expert_mats) and expert the batch uses; a per-head product, MLA's
// k_b and v_b, one of each per head), ops over rows (norms,
// RoPE, adds, the activation; a decode step runs them on the calling
// thread) and the matrices weight streaming would multiply one by one.
struct Share {
    uint64_t weights = 0, read = 0, params = 0, kv = 0, kv_read = 0, kv_layers = 0;
    std::array<uint64_t, kTypeSlots> dense_params_by{}, expert_params_by{};
    uint64_t calls = 0, batch_calls = 0, expert_mats = 0, row_ops = 0, streamed_mats = 0;
    uint64_t row_op_elems = 0;  // per token: the elements the row ops pass over
    Share& operator+=(const Share& o);
    Share operator-(const Share& o) const;
    Share operator+(const Share& o) const;
};

// The activation moves of one layer (the executor's, counted by walking
// its op list) when the hidden state enters on a given device: how many,
// their bytes per token, and the device the hidden state leaves on.
struct LayerMoves {
    int64_t count = 0;
    uint64_t bytes = 0;
    int exit = kHostDevice;
};

// One way to place every layer.
struct Mode {
    std::vector<std::array<Share, kDevices>> prefix;  // [il][d]: layers [0, il) on device d
    std::vector<std::array<LayerMoves, kDevices>> moves;  // [il][entry device]
    std::vector<uint8_t> host_streamable;  // every streamed matrix of the layer is on the host
    Share sum(int d, int64_t from, int64_t to) const;
};

// Everything about the model a placement needs, computed once per plan.
struct Tables {
    int64_t n_layer = 0;
    int64_t n_ctx = 0;
    int64_t n_ubatch = 0;
    // Per layer, independent of placement: [il] is the sum over [0, il)
    // of all weights, of the streamed matrices' (what streaming a layer
    // moves: not its experts, which the host multiplies, nor its norms)
    // and, per token, of the floats a streamed layer's products send to
    // the accelerator and back.
    std::vector<uint64_t> weights, stream_weights, stream_io;
    std::vector<uint64_t> kv, kv_read;  // per layer (not summed): bytes held and read at the average position
    // [d]: what streaming layers [d, n_layer) reserves on the accelerator.
    std::vector<uint64_t> stream;
    uint64_t gemm_tile = 0;       // the accelerator's GEMM tile, once it is used
    uint64_t norm_bytes = 0;      // the output norm
    uint64_t head_bytes = 0;      // the head (token_embd when tied)
    bool tied = false;            // the head is the embedding, already on the host
    uint64_t rope_bytes = 0;      // RoPE factors: every backend in use keeps its own copy
    uint64_t host_fixed = 0;      // token_embd + RoPE factors: always on the host
    uint64_t embd_row_bytes = 0;  // one embedding row, read per token
    uint64_t head_params = 0;
    double attn_flops_per_token = 0;  // per layer, at the average prompt position
    uint64_t hidden_bytes = 0;        // one token's hidden state as floats
    uint64_t logits_bytes = 0;        // one token's logits as floats
    uint64_t output_bytes() const { return norm_bytes + head_bytes; }
    // The cost model's: the weight type and row width (columns) of each
    // slot, the head's slot and the numbers attention and the experts'
    // batches need.
    std::vector<quant::Type> types;
    std::vector<int64_t> cols;
    int head_slot = 0;
    double attn_flops_per_pos = 0;  // per layer and token, per cached position attended
    int64_t n_head = 0, head_dim = 0;  // query heads and their (K) dimension
    int64_t n_embd = 0;                // the row a decode step's ops run over
    int64_t n_expert = 0, n_expert_used = 0;
    // The slot of a matrix of this type and row width (make_tables gave
    // every pair of the model one, up to kTypeSlots).
    int slot_of(quant::Type type, int64_t row_cols) const;
};

// n_seq: sequences side by side (each keeps a window in a sliding-window layer).
Tables make_tables(const model::ModelSpec& spec, int64_t n_ctx, int64_t n_ubatch, model::CacheType cache_type,
                   int64_t n_seq = 1);

// The tables of a pipeline stage that lacks the embedding (its lookup and
// table) or the head (its norm, matrix and logits): those count nothing.
void trim_for_stage(Tables& t, const model::ModelSpec& spec, bool embeds, bool outputs);

// A mode from the device of each layer tensor and of each layer's KV
// cache (kv_of; by default with attn_k, as place_tensors puts it).
Mode make_mode(const model::ModelSpec& spec, const Tables& t,
               const std::function<int(int64_t il, model::LayerTensor role)>& device_of,
               const std::function<int(int64_t il)>& kv_of = {});
// A mode from a resolved placement (its KV devices as it says).
Mode mode_of(const model::ModelSpec& spec, const Tables& t, const Placement& p);

// Which roles a class of the candidates moves to the host.
using model::is_expert_role;
using model::is_ffn_role;

struct Layout {
    const Mode* lo = nullptr;  // layers [0, k)
    const Mode* hi = nullptr;  // layers [k, n_layer)
    int64_t k = 0;
    int norm = kHostDevice;  // the output norm
    int head = kHostDevice;  // the output head
};

// What a layout costs each device, exactly as the Session reserves it.
struct Footprint {
    DeviceBytes vram, ram;
    bool streams = false;      // weight streaming is on
    int64_t stream_first = 0;  // the first layer it streams
    uint64_t stream_bytes = 0;
};

// want_stream: the session would stream if some layer is left on the host
// (an accelerator, --stream on, micro-batches long enough).
Footprint footprint(const model::ModelSpec& spec, const Tables& t, const Layout& l, bool want_stream);

struct Speeds {
    double cpu_gbps, gpu_gbps, pcie_gbps, cpu_gflops, gpu_gflops;
    KernelCosts host, dev;  // as PlanInputs gave them
    int64_t stream_min_batch = 32;
};

// Activations crossing between the devices per token: how many hand-overs
// and their bytes (with and without the logits, which prefill moves once
// per micro-batch, not per token).
struct Crossings {
    int64_t count = 0;
    uint64_t bytes = 0;
    uint64_t logits_bytes = 0;
};
Crossings crossings(const Tables& t, const Layout& l);

// Share of layers [from, to) on device d under the layout.
Share range_share(const Layout& l, int d, int64_t from, int64_t to);

Prediction predict(const Tables& t, const Layout& l, const Footprint& f, const Speeds& v);

// Seconds of one evaluated batch of n tokens at positions [pos0, pos0 + n)
// of one sequence, with the last token's logits when `logits`
// (cost_model.cpp). Weight streaming (f.streams) applies to batches of at
// least v.stream_min_batch tokens.
double batch_seconds(const Tables& t, const Layout& l, const Footprint& f, const Speeds& v, int64_t n, int64_t pos0,
                     bool logits = true);

// Decode bytes read per token on each device ([kHostDevice], [kAccelDevice]),
// weights and KV caches.
std::array<uint64_t, kDevices> decode_reads(const Tables& t, const Layout& l);

}  // namespace tandem::planner::detail
