// One-pass attention (fewer queries than the tiled kernel takes, so every
// decode step) over a cache of any K and V types, with the query heads
// that share a KV head taken together. The per-head path in attention.cpp
// reads each K and V row once per query head and widens it each time; with
// grouped-query heads (4 or 8 query heads per KV head in Llama 3) that is
// 4-8 reads of the cache per step, and at long contexts the cache is as
// large as a layer's weights. Here each visible cell's K and V are widened
// (dequantized) to f32 once and serve every head of the group from L1.
//
// Same bits as the per-head path (its scalar twin: f16_dot_ggml_scalar,
// f16_scale_scalar, f16_mad_scalar per head): each head keeps its own
// score order (ggml's four 16-lane accumulators and halving reduction for
// an F16 K, else K's block dot kernel), soft cap, online softmax state and
// V accumulator (fp16 for an F16 V, else f32); sharing the widening
// changes no value. A prompt's tokens against one view go in blocks
// (SharedQueries): the cells any token of the block sees are unpacked once
// for all of them, and each query takes the ones its token sees, in order;
// else every token of a prompt at depth reads and unpacks the whole cache
// again. Internal to kernels_cpu.
#pragma once

#include <cstdint>

#include "kernels_cpu/attention.h"
#include "kernels_cpu/attention_chunks.h"
#include "kernels_cpu/vec_dot.h"

namespace tandem::cpu::detail {

// Most query heads one call takes (their state lives on the stack).
inline constexpr int64_t kMaxSharedHeads = 16;

// Most queries (tokens x query heads) one call takes (their state lives on
// the stack): a prompt's tokens share each K and V row read and unpacked.
inline constexpr int64_t kMaxBlockQueries = 32;

// Query heads [head, head + n_q) (n_q <= kMaxSharedHeads) of n_tokens
// tokens, all reading the same KV head: token tt's head head + i at
// q + tt * token_stride + i * head_dim_k (floats, not yet rounded), at
// position pos[tt]; n_tokens * n_q <= kMaxBlockQueries. Query j = tt * n_q + i.
struct SharedQueries {
    const float* q = nullptr;
    int64_t token_stride = 0;
    const int32_t* pos = nullptr;
    int64_t n_tokens = 1;
    int64_t n_q = 1;
    int64_t head = 0;
};

// The queries of qs over the cells of range, each as alone (its own
// visible cells in order, the same bits as one token at a time), for any
// pair of cache types and soft cap: each chunk's state of query j goes to range.partials + j *
// range.head_stride (attention_chunks.h), for merge_chunks to finish.
// block_dot: the K.Q kernel of a K other than F16, the one attention_views
// takes (the scalar loop's bits at every level: AVX2's for F32 and BF16 at
// the AVX-512 levels); unused for F16.
void attention_shared_kv_avx2(const SharedQueries& qs, const AttentionShape& shape, const KvCacheView& kv,
                              DotFn block_dot, const ChunkRange& range);
void attention_shared_kv_avx512(const SharedQueries& qs, const AttentionShape& shape, const KvCacheView& kv,
                                DotFn block_dot, const ChunkRange& range);

// Query heads per call: the largest divisor of gqa up to kMaxSharedHeads,
// halved while that leaves fewer than two tasks per thread (a decode step
// of a model with few KV heads on many cores).
int64_t shared_heads_per_task(int64_t gqa, int64_t n_groups, int n_threads);

// Tokens a task takes together against one view: as many as
// kMaxBlockQueries holds with heads_per_task heads each, halved while that
// leaves fewer than two tasks per thread.
int64_t shared_kv_block_tokens(int64_t n_tokens, int64_t tasks_per_token, int64_t heads_per_task, int n_threads);

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
