// One-pass attention (fewer queries than the tiled kernel takes, so every
// decode step) over an F16 or Q8_0 cache, with the query heads that share a
// KV head taken together. The per-head path in attention.cpp reads each K and V row
// once per query head and widens it each time; with grouped-query heads
// (4 or 8 query heads per KV head in Llama 3) that is 4-8 reads of the
// cache per step, and at long contexts the cache is as large as a layer's
// weights. Here each visible cell's K and V are widened (dequantized) to
// f32 once and serve every head of the group from L1.
//
// Same bits as the per-head path (its scalar twin: f16_dot_ggml_scalar,
// f16_scale_scalar, f16_mad_scalar per head): each head keeps its own
// score order (ggml's four 16-lane accumulators and halving reduction),
// online softmax state and fp16 V accumulator; sharing the widening
// changes no value. Internal to kernels_cpu.
#pragma once

#include <cstdint>

#include "kernels_cpu/attention.h"
#include "kernels_cpu/attention_chunks.h"
#include "kernels_cpu/vec_dot.h"

namespace tandem::cpu::detail {

// Most query heads one call takes (their state lives on the stack).
inline constexpr int64_t kMaxSharedHeads = 16;

// Query heads [head, head + n_q) of one token (q: n_q rows of head_dim_k
// floats, not yet rounded; n_q <= kMaxSharedHeads), all reading the same KV
// head of a cache shared_kv_takes, at position pos, over the cells of
// range: each chunk's state goes to range.partials (attention_chunks.h),
// for merge_chunks to finish. block_dot: the K.Q kernel of a K other than
// F16 (the per-head path's, dot_kernel(k_type, level)); unused for F16.
void attention_shared_kv_avx2(const float* q, int64_t n_q, int32_t pos, int64_t head, const AttentionShape& shape,
                              const KvCacheView& kv, DotFn block_dot, const ChunkRange& range);
void attention_shared_kv_avx512(const float* q, int64_t n_q, int32_t pos, int64_t head, const AttentionShape& shape,
                                const KvCacheView& kv, DotFn block_dot, const ChunkRange& range);

// The K/V type pairs the kernel takes: both F16, or neither (K through its
// block dot kernel, V dequantized).
inline bool shared_kv_takes(quant::Type k, quant::Type v) {
    return (k == quant::Type::F16) == (v == quant::Type::F16);
}

// Query heads per call: the largest divisor of gqa up to kMaxSharedHeads,
// halved while that leaves fewer than two tasks per thread (a decode step
// of a model with few KV heads on many cores).
int64_t shared_heads_per_task(int64_t gqa, int64_t n_groups, int n_threads);

// How a step's shared-KV work is cut into tasks: when its (token, KV head)
// pairs are fewer than two per thread and the cells span several chunks
// (attention_chunks.h), every chunk of a pair is a task of its own
// (split_chunks) and the chunks' states are merged in a second pass; else a
// task takes all the chunks of its heads. Either way the same bits.
struct SharedKvPlan {
    bool split_chunks = false;
    int64_t heads_per_task = 1;  // query heads of one KV head a task takes
    int64_t tasks = 0;
};
SharedKvPlan shared_kv_plan(int64_t n_tokens, int64_t n_head_kv, int64_t gqa, int64_t n_chunks, int n_threads);

}  // namespace tandem::cpu::detail
