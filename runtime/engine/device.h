// What a device does for the session and the layer executor
// (runtime/engine/executor.h), in three interfaces: it stores the tensors
// placed on it and one micro-batch of named activation buffers
// (DeviceStorage), holds the K/V rows of the layers placed on it (DeviceKv;
// the cells' bookkeeping is the engine's), and runs ops on them
// (DeviceOps). A device knows no layer
// and no architecture: the op list says which op runs, on which weight,
// from which buffer into which. Every byte it allocates is reserved in its
// ledger first.
//
// Implementations: CpuDevice (the host, cpu_device.h), StandInDevice (the
// "cpu2" stand-in accelerator, which owns uploaded copies and has a
// capacity, stand_in_device.h), and the CUDA device (runtime/engine_cuda,
// behind the same calls).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels_cpu/moe.h"
#include "runtime/engine/kv_cells.h"
#include "runtime/common/memory_ledger.h"
#include "runtime/engine/sequence_state.h"
#include "runtime/engine/weight_stream.h"
#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"

namespace tandem {

// The activation buffers of one micro-batch (model::Act, with their one
// width table), the same on every device. Rows are tokens.
using model::Act;
using model::act_name;
using model::act_width;
using model::kActCount;
using model::RowView;

// A tensor's values as floats, whatever the file stores (norm weights and
// RoPE factors: small, read by every layer, kept as floats on each device).
std::vector<float> tensor_floats(const gguf::File& file, const gguf::TensorInfo& t);

// What a device holds for tensor t in `held` (a map keyed by the tensor);
// a checked failure names the op when the placement put it elsewhere.
template <class Map>
const typename Map::mapped_type& held_tensor(const Map& held, const gguf::TensorInfo* t, const char* op) {
    const auto it = held.find(t);
    TANDEM_CHECK(it != held.end(), std::string(op) + ": the weight is not on this device");
    return it->second;
}

struct DeviceConfig {
    int64_t n_ctx = 0;
    int64_t n_ubatch = 0;
    model::CacheType cache_type = model::kCacheF16;
    // An accelerator calls this with the bytes of each tensor as it is
    // copied to the device, the host as it copies a matrix out of the
    // mapping (copy_host_weights): a progress bar's feed; may be empty.
    std::function<void(uint64_t)> on_upload;
    // The host's ledger, where an accelerator records the pinned host
    // buffers it stages uploads through; may be null (then unrecorded).
    MemoryLedger* host_ledger = nullptr;
    // The host copies its weight matrices out of the mapped file into
    // memory it owns (runtime/engine/host_weight_arena.h: faster to
    // stream); false multiplies them from the mapping.
    bool copy_host_weights = false;
    // The host multiplies prompt batches of float weights through OpenBLAS
    // where the build links it; false keeps llama.cpp's CPU-backend bits at
    // every batch size (SessionOptions::cpu_blas).
    bool cpu_blas = true;
};

// YaRN's fields as cpu::RopeParams has them (ext_factor 0: none); the
// executor works out the correction dims once for every device.
struct RopeOp {
    bool neox = false;
    int64_t n_rot = 0;
    float freq_base = 10000.0f;
    float freq_scale = 1.0f;
    float ext_factor = 0.0f;
    float attn_factor = 1.0f;
    float corr_dims[2] = {0.0f, 0.0f};
};

struct AttentionOp {
    int64_t n_head = 0, n_head_kv = 0, head_dim_k = 0, head_dim_v = 0;
    int64_t window = 0;  // sliding window; 0: none
    float scale = 1.0f;  // applied to each Q.K (1 when Q was scaled before)
    float softcap = 0.0f;  // scores become softcap * tanh(score / softcap); 0: off
    // One logit per query head that joins each softmax row's sum (gpt-oss),
    // a vector this device holds; null: none.
    const gguf::TensorInfo* sinks = nullptr;
    // V is K's first head_dim_v floats (MLA): the cache stores K alone.
    bool v_in_k = false;
};

// The router's choice from Router: softmax over the n_expert logits, or a
// sigmoid of each; the n_used largest kept (largest first), chosen after
// adding `bias` (a weight this device holds; null: none) but weighted
// without it; the weights divided by their sum when normalize, then times
// scale (kernels_cpu/moe.h).
struct MoeRouteOp {
    int64_t n_expert = 0, n_used = 0;
    bool normalize = true;
    bool sigmoid = false;
    bool softmax_of_chosen = false;  // the largest logits, weighted by a softmax over them alone (gpt-oss)
    const gguf::TensorInfo* bias = nullptr;
    float scale = 1.0f;
    int64_t n_groups = 0, n_groups_used = 0;  // group-limited choice (cpu::RouteParams)
};
// The kernels' parameters for op, with the bias as the device holds it.
cpu::RouteParams route_params(const MoeRouteOp& op, const float* bias);

// Products with the experts Route chose. in_per_slot: `in` holds a row per
// (token, slot) (the experts' hidden rows); else a row per token shared by
// its slots. sum_slots: the output is a row per token, the sum over slots
// of weight * product (in slot order); else a row per (token, slot).
struct ExpertOp {
    int64_t n_used = 0;
    bool in_per_slot = false;
    bool sum_slots = false;
};

// One product of a shared input: out = in x w. For the experts, bias
// (a vector this device holds, one row per expert; null: none) is added to
// each (token, slot) product, the row of its expert, before the route's
// weight (gpt-oss).
struct MatmulOut {
    const gguf::TensorInfo* w = nullptr;
    Act out = Act::Cur;
    const gguf::TensorInfo* bias = nullptr;
};

// What a device stores: the weights placed on it, its K/V caches' rows and
// one micro-batch of activation buffers, each reserved in its ledger
// before it is allocated. The session loads through this half.
class DeviceStorage {
public:
    virtual ~DeviceStorage() = default;

    virtual const std::string& name() const = 0;
    virtual bool is_accelerator() const = 0;
    virtual const MemoryLedger& ledger() const = 0;
    // Calls so far that made the host wait for this device (or copied
    // through pageable memory), where the device can count them: the CUDA
    // emulator does (emu::host_waits), other devices do not.
    virtual std::optional<uint64_t> host_waits() const { return std::nullopt; }
    // The most device memory this device's allocations held at once since
    // it opened, where the allocator can tell (the CUDA emulator); a test
    // holds it against the planner's bytes.
    virtual std::optional<uint64_t> peak_bytes() const { return std::nullopt; }

    // ---- loading (each throws OutOfDeviceMemory when the device is full)
    // A weight matrix, kept in its GGUF blocks.
    virtual void load_matrix(const gguf::TensorInfo& t) = 0;
    // A norm vector, kept as floats whatever the file stored.
    virtual void load_vector(const gguf::TensorInfo& t) = 0;
    // Layer il's K/V rows, one per cell of `cells`: the session's
    // bookkeeping of the layer's cache (which position and sequences each
    // cell holds), which it alone changes; the device reads it to attend.
    // It must outlive the device.
    virtual void load_kv(int64_t il, const KvCells& cells) = 0;
    // The activation buffers of one micro-batch (Logits only with_logits).
    virtual void allocate_workspace(bool with_logits) = 0;
    // Returns once every upload started so far has landed.
    virtual void finish_loading() {}

    // An accelerator that can multiply matrices it does not hold reserves
    // what streaming layers [first_layer, n_layer) costs it
    // (model::stream_bytes) and returns the stream, owned by the device;
    // nullptr when it cannot stream. Throws OutOfDeviceMemory (then nothing
    // stays reserved).
    virtual WeightStream* enable_weight_stream(int64_t /*first_layer*/) { return nullptr; }
};

// The K/V rows a device holds, per layer (the cells are the engine's, see
// load_kv): what saving and restoring a sequence copies.
class DeviceKv {
public:
    virtual ~DeviceKv() = default;
    virtual uint64_t kv_bytes() const = 0;
    // Layer il's rows of `cells`, in that order, as stored (copied to the
    // host), with their positions and cells.
    virtual KvSeqRows kv_read_rows(int64_t il, std::span<const int64_t> cells) const = 0;
    // Row i of `rows` into layer il's cells[i] (copied to the device).
    // Throws Error for rows of another size.
    virtual void kv_write_rows(int64_t il, std::span<const int64_t> cells, const KvSeqRows& rows) = 0;
};

// What a device runs: activations in and out through host floats, and the
// ops over its buffers and the weights it holds. The executor
// (executor.h) sees a device only through this half.
class DeviceOps {
public:
    virtual ~DeviceOps() = default;

    // ---- activations, through host floats: the first n_floats of buffer a.
    virtual void write_act(Act a, const float* host, int64_t n_floats) = 0;
    virtual void read_act(Act a, float* host, int64_t n_floats) = 0;
    // The buffer itself when it is host memory (the CPU devices), else null.
    virtual float* host_act(Act /*a*/) { return nullptr; }

    // ---- ops (n: tokens in the micro-batch)
    // y's rows = RMSNorm(x's rows) * w, `rows` rows (views of one len: a
    // token's row, a head, a part of a row). y may be x, with the same view.
    virtual void rms_norm(Act x, RowView xv, const gguf::TensorInfo& w, Act y, RowView yv, int64_t rows,
                          float eps) = 0;
    // Each out = in x its weight, for n tokens: products of one input in
    // one call (one quantization of the input on the CPU).
    virtual void matmul(std::span<const MatmulOut> outs, Act in, int64_t n) = 0;
    // Rotates each token's n_heads rows of a (v: row t * n_heads + h is
    // token t's head h) by the token's position.
    virtual void rope(Act a, RowView v, int64_t n_heads, std::span<const int32_t> pos, const RopeOp& op) = 0;
    // Stores K and V of each token in layer il's cell cells[t] (where the
    // session placed its position pos[t] of sequence seq[t]), then Attn =
    // attention of Q over the cells of the token's own sequence (causal,
    // within the window).
    virtual void attention(int64_t il, std::span<const int32_t> cells, std::span<const int32_t> pos,
                           std::span<const int32_t> seq, const AttentionOp& op) = 0;
    // The experts' products: each token's rows times the 3-D weights'
    // slices Route names for it (a weight's expert e is rows [e * r, (e+1)
    // * r) of its 3-D tensor, r = rows per expert). Tokens are grouped by
    // expert, so each expert's slice is read once per call.
    virtual void matmul_experts(std::span<const MatmulOut> outs, Act in, const ExpertOp& op, int64_t n) = 0;
    // Route = the router's choice for each of n tokens from Router.
    virtual void moe_route(const MoeRouteOp& op, int64_t n) = 0;
    // a's rows (len floats) += the vector b (a bias).
    virtual void add_vector(Act a, const gguf::TensorInfo& b, int64_t len, int64_t rows) = 0;
    // dst's rows = src's rows (views of one len), `rows` rows.
    virtual void copy_rows(Act src, RowView sv, Act dst, RowView dv, int64_t rows) = 0;
    // Per-head products (MLA's k_b and v_b): out's row t * n_heads + h =
    // slice h of the 3-D weight (rows [h * r, (h + 1) * r), r = its rows /
    // n_heads) x in's row t * n_heads + h, for n tokens. iv.len is the
    // weight's row length, ov.len its r.
    virtual void matmul_heads(const MatmulOut& o, Act in, RowView iv, RowView ov, int64_t n_heads, int64_t n) = 0;
    // Gate = act(Gate) * Up, row by row (n rows of n_ff).
    virtual void glu(model::FfnActivation act, int64_t n_ff, int64_t n) = 0;
    // y += x over rows of len floats.
    virtual void add(Act y, Act x, int64_t len, int64_t rows) = 0;
    virtual void scale(Act a, int64_t n_floats, float s) = 0;
    virtual void softcap(Act a, int64_t n_floats, float cap) = 0;
    // Each block of `block` floats (a power of two) of a's first n_floats
    // times the orthonormal Walsh-Hadamard matrix, as ggml's fast transform
    // computes it (cpu::hadamard_blocks): the attention rotation of a
    // quantized cache (model::KvRotation).
    virtual void hadamard(Act a, int64_t n_floats, int64_t block) = 0;

    // While on, matmuls give every token the bits a one-token batch gets
    // (Session::eval_batch_single_order); devices without batch-dependent
    // orders ignore it.
    virtual void set_single_token_order(bool /*on*/) {}
};

// A device is the three: CpuDevice, StandInDevice and the CUDA device
// implement them together.
class Device : public DeviceStorage, public DeviceKv, public DeviceOps {};

}  // namespace tandem
