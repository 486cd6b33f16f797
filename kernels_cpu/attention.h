// Attention of a batch of query tokens over a layer's KV cache on the CPU.
// The cache stores one row per cell (all KV heads of one position), K and V
// each in one of llama.cpp's cache types (F32, F16, BF16, Q8_0, Q4_0, Q4_1,
// IQ4_NL, Q5_0, Q5_1); queries are rounded to K's activation partner (F16,
// Q8_0, Q8_1...) for the Q.K products, as ggml does, the softmax runs in
// float, and the weighted sum of V in fp16 for an F16 V, else in float.
#pragma once

#include <cstdint>
#include <span>

#include "kernels_cpu/matmul.h"
#include "kernels_cpu/thread_pool.h"
#include "runtime/quant/quant_types.h"

namespace tandem::cpu {

// A view may start at a multiple of this many cells of the whole cache and
// end anywhere after its last visible cell: the kernels tile the cells from
// the view's start (32 and 64 at a time) and chunk them (512 at a time,
// attention_chunks.h), skip tiles with nothing visible, and so sum the same
// bits as over the whole cache (a view from a multiple of 64 only, as
// before, chunked a sequence of more than 512 cells elsewhere).
inline constexpr int64_t kViewCellAlign = 512;

struct KvCacheView {
    quant::Type k_type = quant::Type::F16;  // K's and V's element types (llama.cpp's -ctk, -ctv)
    quant::Type v_type = quant::Type::F16;
    const uint8_t* k = nullptr;   // n_cells rows of k_row_bytes
    const uint8_t* v = nullptr;   // n_cells rows of v_row_bytes
    uint64_t k_row_bytes = 0;
    uint64_t v_row_bytes = 0;
    int64_t n_cells = 0;
    const int32_t* cell_pos = nullptr;  // position held by each cell, -1 if empty
};

struct AttentionShape {
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim_k = 0;
    int64_t head_dim_v = 0;
    int64_t window = 0;   // sliding window: keys with q_pos - k_pos >= window are masked; 0 = none
    float scale = 1.0f;   // applied to Q.K before the softmax
    // Soft-capping (Gemma 2): a score s becomes softcap * tanh(s / softcap),
    // computed as ggml does: softcap * tanh(Q.K * (scale / softcap)). 0: off.
    float softcap = 0.0f;
    // Attention sinks (gpt-oss): n_head logits on the host, one per query
    // head, that join each softmax row's denominator only (no value), as
    // ggml's flash attention applies them after the pass over the cells.
    // Null: none.
    const float* sinks = nullptr;
};

// q: n_tokens rows of n_head * head_dim_k floats (already RoPE'd).
// q_pos: the position of each query token. out: n_tokens rows of
// n_head * head_dim_v floats. A query sees cells with 0 <= pos <= q_pos
// (causal) inside the window.
void attention(const float* q, const int32_t* q_pos, int64_t n_tokens, const AttentionShape& shape,
               const KvCacheView& kv, float* out, ThreadPool& pool, SimdLevel level);

// Query t (of views.size()) against views[t]: a serving step, one token
// per stream, each against its own sequence's cells, in one hand-off to
// the threads (one call per stream split each stream's few head groups
// over the threads on its own). The same bits as attention() per token.
void attention_per_token(const float* q, const int32_t* q_pos, const AttentionShape& shape,
                         std::span<const KvCacheView> views, float* out, ThreadPool& pool, SimdLevel level);

}  // namespace tandem::cpu
