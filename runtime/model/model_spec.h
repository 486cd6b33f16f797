// A model as the runtime sees it before any weight is touched: the
// architecture row, the hyperparameters, and for every layer the tensor
// info of each role, with shapes and types checked against the file. Sizes
// of weights and caches are computed here and only here: the loader
// allocates with them, the planner predicts with them.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/gguf/gguf_file.h"
#include "runtime/model/arch.h"
#include "runtime/model/hparams.h"
#include "runtime/model/layer_ops.h"
#include "runtime/quant/quant_types.h"

namespace tandem::model {

struct LayerSpec {
    std::array<const gguf::TensorInfo*, kLayerTensorCount> tensors{};  // nullptr: absent
    bool sliding_window = false;  // sees only the last hp.sliding_window positions
    double rope_base = 10000.0;
    std::vector<LayerOp> ops;  // the layer's forward pass (layer_ops.h), written once at load

    const gguf::TensorInfo* get(LayerTensor t) const { return tensors[static_cast<size_t>(t)]; }
    bool has_experts() const { return get(LayerTensor::FfnGateInp) != nullptr; }
    // The role whose product writes K, where the layer's cache goes:
    // attn_k, attn_qkv where K is fused in (Phi-3), or attn_kv_a_mqa (MLA's
    // latent); LayerTensor::Count for none.
    LayerTensor k_writer() const {
        for (const LayerTensor t : {LayerTensor::AttnK, LayerTensor::AttnQkv, LayerTensor::AttnKvAMqa}) {
            if (get(t)) return t;
        }
        return LayerTensor::Count;
    }
};

struct ModelSpec {
    const ArchSpec* arch = nullptr;
    HParams hp;
    std::vector<LayerSpec> layers;
    std::array<const gguf::TensorInfo*, kGlobalTensorCount> globals{};

    const gguf::TensorInfo* get(GlobalTensor t) const { return globals[static_cast<size_t>(t)]; }
    // output.weight, or token_embd.weight when the head is tied.
    const gguf::TensorInfo& output_head() const;
    bool tied_output() const { return get(GlobalTensor::Output) == nullptr; }
};

// Binds every tensor the architecture needs; throws tandem::Error naming the
// tensor for a missing required tensor, a wrong shape or a type the kernels
// cannot multiply, and naming the supported architectures for an unknown
// general.architecture. The File must outlive the spec.
ModelSpec load_model_spec(const gguf::File& file);

// ---- sizes ----------------------------------------------------------------
// The KV cache's element types, K and V chosen apart as llama.cpp's
// -ctk/-ctv: f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0 or q5_1. With
// latent attention (MLA) V is K's first floats, so the two must be equal.
struct CacheType {
    quant::Type k = quant::Type::F16;
    quant::Type v = quant::Type::F16;
    friend bool operator==(const CacheType&, const CacheType&) = default;
};
inline constexpr CacheType kCacheF16{};
inline constexpr CacheType kCacheQ8_0{quant::Type::Q8_0, quant::Type::Q8_0};

// The cache element types, in llama.cpp's order of its --cache-type-k help.
std::span<const quant::Type> cache_element_types();
// "q4_0" for Q4_0: llama.cpp's lower-case flag names.
std::string cache_element_name(quant::Type t);
// The type a flag's name gives; throws tandem::Error naming the flag, what
// was found and the names it takes.
quant::Type parse_cache_element(std::string_view flag, std::string_view name);
// "f16", or "q4_0/f16" (K/V) when they differ.
std::string cache_type_name(CacheType t);
// A saved sequence state's cache type word: K's type id, with V's id + 1
// in the upper half when it differs (so states of one type read as they did
// before K and V could differ), and the name of a word as found in a file.
uint32_t cache_type_code(CacheType t);
std::string cache_type_code_name(uint32_t code);
// Throws tandem::Error with one line when the model cannot use the cache
// type: a head size that is not a multiple of the type's block, or K and V
// types that differ under latent attention (V is part of K there).
void check_cache_type(const HParams& hp, CacheType type);

// Attention rotation, as llama.cpp (since April 2026, PR 21038) applies it
// to a quantized cache: Q and K, after RoPE, are multiplied block by block
// along each head by the orthonormal Walsh-Hadamard matrix H_k (k: the
// largest power of two >= 64 dividing the K head size); V by H_64 per
// 64-element block, and the attention output by H_64 again before the
// output projection (H is its own inverse). The dot products and the
// softmax are unchanged; the quantization error of K and V falls. 0: that
// side is not rotated (a float cache type, a head size that is not a
// multiple of 64, or latent attention, whose V is part of K).
struct KvRotation {
    int64_t k = 0;
    int64_t v = 0;
};
KvRotation kv_rotation(const HParams& hp, CacheType type);

// Bytes of all weights of layer il.
uint64_t layer_weight_bytes(const ModelSpec& spec, int64_t il);
// What one token's decode reads of layer il's weights, and the weights it
// multiplies: a mixture of experts reads only its expert_used_count of the
// expert_count experts (the router's choice; on average that share).
uint64_t layer_decode_bytes(const ModelSpec& spec, int64_t il);
uint64_t layer_active_params(const ModelSpec& spec, int64_t il);
// The share of `all` (bytes or elements of a tensor of that role) one
// token's decode uses: all of it, or of an expert tensor (a role whose rule
// has a per-expert third dimension) expert_used_count / expert_count.
uint64_t token_share(const ModelSpec& spec, LayerTensor role, uint64_t all);
// Sum over layer il's tensors t for which keep(t) holds of
// token_share(amount(t)): what one token's decode uses of them.
template <class Amount, class Keep>
uint64_t used_by_a_token_if(const ModelSpec& spec, int64_t il, Amount amount, Keep keep) {
    uint64_t total = 0;
    const auto& tensors = spec.layers.at(static_cast<size_t>(il)).tensors;
    for (size_t r = 0; r < tensors.size(); ++r) {
        const gguf::TensorInfo* t = tensors[r];
        if (t && keep(*t)) total += token_share(spec, static_cast<LayerTensor>(r), amount(*t));
    }
    return total;
}
// layer_decode_bytes of the tensors of layer il for which keep(tensor)
// holds (those placed on one device, say).
template <class Keep>
uint64_t layer_decode_bytes_if(const ModelSpec& spec, int64_t il, Keep keep) {
    return used_by_a_token_if(spec, il, [](const gguf::TensorInfo& t) { return t.n_bytes; }, keep);
}
// Bytes of the output norm and head (the head counted once even when tied).
uint64_t output_weight_bytes(const ModelSpec& spec);
uint64_t token_embd_bytes(const ModelSpec& spec);
// Cells layer il's KV cache has for a context of n_ctx (shared by every
// sequence, as llama.cpp's unified cache): all of them, or for
// sliding-window layers the window plus one micro-batch for each of n_seq
// sequences (at most n_ctx).
int64_t kv_cells_for_layer(const ModelSpec& spec, int64_t il, int64_t n_ctx, int64_t n_ubatch, int64_t n_seq = 1);
// The positions one sequence keeps in a sliding-window layer's ring (the
// window plus one micro-batch); 0 for a global layer.
int64_t kv_ring_span(const ModelSpec& spec, int64_t il, int64_t n_ctx, int64_t n_ubatch);
// Bytes of layer il's K and V caches.
uint64_t kv_bytes_for_layer(const ModelSpec& spec, int64_t il, int64_t n_ctx, int64_t n_ubatch, CacheType type,
                            int64_t n_seq = 1);
// Bytes of a K/V cache of n_cells cells, with its cells' positions and a
// micro-batch's cells, as kv_layout lays them out.
uint64_t kv_bytes_for_cells(const ModelSpec& spec, int64_t n_cells, int64_t n_ubatch, CacheType type);
// Activation buffers of one micro-batch on one device: the sum of
// workspace_widths (layer_ops.h), with the logits when that device runs
// the output head.
uint64_t compute_bytes(const ModelSpec& spec, int64_t n_ubatch, bool with_logits);

// An accelerator dequantizes weight rows for batched products into an fp32
// tile and multiplies it with a BLAS GEMM; reserved once by every
// accelerator that multiplies anything. The largest layer matrix in fp32,
// capped at 32 MiB (292 rows of the widest Llama matrix, 70B's ffn_down of
// 28672 columns; one matrix of a 1B model): small beside any real card, and
// a tiny model's tile stays tiny.
inline constexpr uint64_t kMaxGemmTileBytes = uint64_t{32} << 20;
uint64_t gemm_tile_bytes(const ModelSpec& spec);

// ---- weight streaming (long prompts: CPU-resident layers' matrices are
// multiplied on the accelerator, copied there one matrix at a time) --------
// The dense matrices a layer may have, in the order the layer multiplies
// them; a layer holds some of them (null for the others). Expert tensors
// and the router are not streamed: the host multiplies its experts.
// (MLA's per-head k_b and v_b are not: the host multiplies them.)
inline constexpr LayerTensor kStreamedMatrices[] = {
    LayerTensor::AttnQkv,    LayerTensor::AttnQ,      LayerTensor::AttnK,      LayerTensor::AttnV,
    LayerTensor::AttnQA,     LayerTensor::AttnKvAMqa, LayerTensor::AttnQB,     LayerTensor::AttnOutput,
    LayerTensor::FfnGate,    LayerTensor::FfnUp,      LayerTensor::FfnGateUp,  LayerTensor::FfnDown};
constexpr bool is_streamed(LayerTensor role) {
    for (const LayerTensor r : kStreamedMatrices) {
        if (r == role) return true;
    }
    return false;
}
// Over the matrices of layers [first_layer, n_layer): the bytes of the
// largest (one slot), and the widest input and output rows.
struct StreamShape {
    uint64_t slot_bytes = 0;
    int64_t max_cols = 0;
    int64_t max_rows = 0;
};
StreamShape stream_shape(const ModelSpec& spec, int64_t first_layer);
// The shape of every first layer at once, in one pass from the last layer
// ([il] is stream_shape(spec, il); [n_layer] is empty): for the planner,
// which tries every split.
std::vector<StreamShape> stream_shapes(const ModelSpec& spec);
// What streaming layers [first_layer, n_layer) costs the accelerator: two
// slots (the copy of the next matrix overlaps the product with this one)
// and one micro-batch of the widest input and output in floats, plus room
// for the input in the kernel's own activation format (at most 4 bytes an
// element). 0 when no layer is left to stream (an empty shape).
uint64_t stream_bytes(const StreamShape& shape, int64_t n_ubatch);
// Where those start in the one allocation (byte offsets, each on a
// device_aligned boundary): the second slot, the input, the output and the
// input's room in the kernel's format; bytes is stream_bytes.
struct StreamLayout {
    uint64_t slot1 = 0, x = 0, y = 0, scratch = 0, scratch_bytes = 0, bytes = 0;
};
StreamLayout stream_layout(const StreamShape& shape, int64_t n_ubatch);
uint64_t stream_bytes(const ModelSpec& spec, int64_t first_layer, int64_t n_ubatch);

}  // namespace tandem::model
