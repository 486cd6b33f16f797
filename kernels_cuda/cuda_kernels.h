// Launchers of the CUDA kernels, callable from host C++ compiled by g++.
// Internal to kernels_cuda/ (and the CUDA device): pointers are device
// pointers, the stream is a cudaStream_t passed as void* so that this header
// needs no CUDA include. Launchers only enqueue; the caller checks
// cudaGetLastError and synchronizes.
#pragma once

#include <cstdint>

#include "runtime/quant/quant_element.h"
#include "runtime/quant/quant_types.h"

namespace tandem::cuda::kernels {

// dst[i] = dequantized element i of the row at src, i < n. Returns false if
// no kernel exists for the type (nothing is launched then).
bool launch_dequantize(quant::Type type, const void* src, float* dst, int64_t n, void* stream);

// Bytes of activation scratch a product of n_tokens rows of n_cols needs
// (0 if the weight type has no CUDA matmul): launch_matmul's quantized
// rows, or on the cuBLAS path (device_matmul.h: uses_cublas) the floats of
// launch_act_roundtrip, whichever is larger.
uint64_t matmul_scratch_bytes(quant::Type w_type, int64_t n_cols, int64_t n_tokens);

// y[t * ldy + r] = sum_i w(r, i) * a(t, i) for r < n_rows, t < n_tokens,
// where a is x quantized to the weight type's activation partner (the codes
// and scales the CPU makes) in `scratch` (matmul_scratch_bytes), summed as
// the CPU sums (runtime/quant/dot_order.h): the CPU's bits. Tokens the CPU
// multiplies in a type's batch form take it here too, unless single_order
// (every token then in the single-row order, as MatmulOrder::SingleToken).
// Returns false if the weight type has no kernel.
bool launch_matmul(quant::Type w_type, const void* w, uint64_t w_row_bytes, int64_t n_rows, int64_t n_cols,
                   const float* x, int64_t ldx, int64_t n_tokens, void* scratch, float* y, int64_t ldy,
                   bool single_order, void* stream);

// launch_matmul's 256-element i-quants (matmul_iq.cu) in their single-row
// order (IqLanesOrder) or, batch_form, their batch form (IqTiledOrder, 8
// tokens at most: more take the tensor cores), for tokens [t_begin, t_end)
// of the Q8_K activations a (rows a_row_bytes apart), into y. Returns false
// if w_type is not one of them (nothing is launched then).
bool launch_iq_dot(quant::Type w_type, bool batch_form, const void* w, uint64_t w_row_bytes, int64_t n_rows,
                   int64_t n_cols, const void* a, uint64_t a_row_bytes, int64_t t_begin, int64_t t_end, float* y,
                   int64_t ldy, void* stream);

// out (n_tokens rows of n_cols, packed) = x (rows ldx apart) quantized to
// the weight type's activation partner as launch_matmul quantizes it, then
// dequantized (math::act_roundtrip): the batch path multiplies these
// floats. Returns false if the weight type has no kernel.
bool launch_act_roundtrip(quant::Type w_type, const float* x, int64_t ldx, int64_t n_cols, int64_t n_tokens,
                          float* out, void* stream);

// y = x / sqrt(mean(x^2) + eps) * w (w may be null), n_rows rows of n,
// x's rows x_stride floats apart, y's y_stride.
void launch_rms_norm(const float* x, int64_t x_stride, const float* w, float* y, int64_t y_stride, int64_t n,
                     int64_t n_rows, float eps, void* stream);

struct RopeArgs {
    bool neox = false;
    int64_t n_rot = 0;
    float theta_scale = 1.0f;  // freq_base^(-2/n_rot), computed on the host as the CPU does
    float freq_scale = 1.0f;
    const float* freq_factors = nullptr;  // device, n_rot/2 floats, or null
    // YaRN as cpu::RopeParams; mscale is math::rope_mscale of its fields.
    float ext_factor = 0.0f;
    float corr_dims[2] = {0.0f, 0.0f};
    float mscale = 1.0f;
};

// Rotates n_heads heads of head_dim floats per token; token t's heads start
// at x + t * row_stride and its position is pos[t] (device).
void launch_rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t row_stride,
                 const int32_t* pos, const RopeArgs& args, void* stream);

void launch_swiglu(const float* gate, const float* up, float* out, int64_t n, void* stream);
// launch_swiglu on each of n_rows rows of row_len, in one launch (the CPU
// applies SwiGLU row by row, and its exp rule depends on the row's length).
void launch_swiglu_rows(const float* gate, const float* up, float* out, int64_t row_len, int64_t n_rows,
                        void* stream);
void launch_geglu(const float* gate, const float* up, float* out, int64_t n, void* stream);
void launch_swiglu_oai(const float* gate, const float* up, float* out, int64_t n, void* stream);  // cpu::swiglu_oai
void launch_add(float* y, const float* x, int64_t n, void* stream);  // y += x
void launch_scale(float* x, int64_t n, float s, void* stream);
void launch_softcap(float* x, int64_t n, float cap, void* stream);
// Each block of `block` floats of x's first n times the orthonormal
// Walsh-Hadamard matrix (quant::hadamard_block, the CPU's bits).
void launch_hadamard(float* x, int64_t n, int64_t block, void* stream);
// x rows (n_rows of len floats) += v (len floats): a bias, cpu::add per row.
void launch_add_rows(float* x, const float* v, int64_t len, int64_t n_rows, void* stream);

// dst row i (width floats, dst_stride apart) = src row rows[i] (src_stride
// apart) for i < n_rows; rows null: src row i (a column band, copy_cols).
// rows is a device array.
void launch_gather_rows(const float* src, int64_t src_stride, const int32_t* rows, int64_t n_rows, int64_t width,
                        float* dst, int64_t dst_stride, void* stream);

// out row t (width floats) = math::slot_sum_element over t's n_used slots,
// for t < n_tokens: the experts' products y (grouped order, rows
// grouped_row[t * n_used + j]) weighted by route's weights, added in slot
// order. y, grouped_row, route and out are device arrays.
void launch_slot_sum(const float* y, const int32_t* grouped_row, const float* route, int64_t n_used, int64_t width,
                     int64_t n_tokens, float* out, void* stream);

// A KV cache on the device, K and V each in one of the cache types
// (model::cache_element_types), stored as the CPU's LayerKvCache: cell c
// holds K of all KV heads in the k_row_bytes() at k + c * k_row_bytes(), V
// likewise; cell_pos[c] is its position or -1.
struct KvCache {
    uint8_t* k = nullptr;
    uint8_t* v = nullptr;
    int32_t* cell_pos = nullptr;
    int64_t n_cells = 0;
    int64_t k_dim = 0;  // elements of a K row (all KV heads)
    int64_t v_dim = 0;  // elements of a stored V row; 0 with v_in_k
    quant::Type k_type = quant::Type::F16;
    quant::Type v_type = quant::Type::F16;  // K's with v_in_k
    // V is each K row's first head_dim_v elements (MLA's latent): v == k,
    // and no V rows are stored.
    bool v_in_k = false;

    // Bytes of `elems` elements of type t (whole blocks; 0 for a type
    // without a block layout).
    TANDEM_HOST_DEVICE static int64_t bytes_of(quant::Type t, int64_t elems) {
#define TANDEM_KV_BYTES(T, Block, fn, qk) \
    if (t == quant::Type::T) return elems / (qk) * static_cast<int64_t>(sizeof(Block));
        TANDEM_FOR_EACH_ELEMENT_TYPE(TANDEM_KV_BYTES)
#undef TANDEM_KV_BYTES
        return 0;
    }
    TANDEM_HOST_DEVICE int64_t k_row_bytes() const { return bytes_of(k_type, k_dim); }
    // From one cell's V to the next (a K row with v_in_k).
    TANDEM_HOST_DEVICE int64_t v_row_bytes() const { return v_in_k ? k_row_bytes() : bytes_of(v_type, v_dim); }
    // The bytes of V a cell stores (0 with v_in_k).
    TANDEM_HOST_DEVICE int64_t stored_v_row_bytes() const { return bytes_of(v_type, v_dim); }
};

// Stores the K and V rows of token t (t < n_tokens) into cell cells[t]
// (device), each block written as the CPU's cache writes it
// (math::kv_store_block). cell_pos is left alone: the host chooses the
// cells (KvCells) and uploads the positions. Both types must be
// kv_type_supported (the cache checks them when it is made).
void launch_kv_store(const float* k, const float* v, int64_t n_tokens, const int32_t* cells, const KvCache& kv,
                     void* stream);
// Whether the device stores and attends over type t (a cache type).
bool kv_type_supported(quant::Type t);
// Sets every cell_pos to -1.
void launch_kv_clear(const KvCache& kv, void* stream);

struct AttentionArgs {
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim_k = 0;
    int64_t head_dim_v = 0;
    int64_t window = 0;
    float scale = 1.0f;
    float softcap = 0.0f;  // scores through math::attention_score; 0: off
    // Attention sinks (AttentionShape::sinks): device, n_head floats; null: none.
    const float* sinks = nullptr;
    // The cells read, [cell_begin, cell_end) (KvCells::cell_span: the
    // sequence holds none outside it); cell_end < 0: every cell.
    int64_t cell_begin = 0;
    int64_t cell_end = -1;
    // Device room for split partials (partial_floats floats), or null. A
    // span of several chunks (runtime/quant/attention_order.h: 512 cells at
    // multiples of 512) with room for every chunk's state is split over up
    // to kMaxSplits blocks per (token, head), each chunk's state kept and
    // merged after (flash-decoding: a decode step has only n_head warps
    // otherwise); without room, each warp merges its chunks as it goes.
    // Either way the CPU's chunks and merge.
    float* partials = nullptr;
    int64_t partial_floats = 0;
};
inline constexpr int64_t kMaxSplits = 32;

// cpu::attention: q n_tokens rows of n_head * head_dim_k, out n_tokens rows
// of n_head * head_dim_v, pos on the device. Nothing is launched for a K
// type without kv_type_supported.
void launch_attention(const float* q, const int32_t* pos, int64_t n_tokens, const AttentionArgs& args,
                      const KvCache& kv, float* out, void* stream);
// How many blocks launch_attention splits each (token, head)'s cells over.
int64_t attention_splits(const AttentionArgs& args, const KvCache& kv, int64_t n_tokens);
// Whether launch_attention handles heads of this size (a warp keeps a
// bounded number of dimensions per lane in registers).
bool attention_head_supported(int64_t head_dim_k, int64_t head_dim_v);

}  // namespace tandem::cuda::kernels
