// Decode attention over the cells in fixed chunks, so that the cells of one
// KV head can be split over the threads (a model with few KV heads on many
// cores, or one stream at a long depth) and still give the same bits at
// every thread count. The chunks and their merge are the order of
// runtime/quant/attention_order.h, which CUDA follows too. Where all the
// visible cells fall in one chunk (every context up to kCellChunk cells)
// this is the single pass's result bit for bit. The chunk boundaries
// depend on the cell index alone (a view starts on one: kViewCellAlign),
// never on the thread count or the batch: which thread runs a chunk
// changes no bit. Internal to kernels_cpu.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels_cpu/attention_sink.h"
#include "runtime/quant/attention_order.h"

namespace tandem::cpu::detail {

inline constexpr int64_t kCellChunk = quant::attn::kAttentionChunkCells;

inline int64_t cell_chunks(int64_t n_cells) { return (n_cells + kCellChunk - 1) / kCellChunk; }

// One chunk's state: M, S, then the head_dim_v floats of A.
inline int64_t chunk_floats(int64_t dv) { return dv + 2; }

// Where a pass over cells [begin, end) (begin a multiple of kCellChunk)
// leaves each chunk's state: query head h's chunk i (counted from begin's)
// at partials + h * head_stride + i * chunk_floats(dv).
struct ChunkRange {
    int64_t begin = 0, end = 0;
    float* partials = nullptr;
    int64_t head_stride = 0;
};

inline void store_chunk(float* p, float running_max, float running_sum) {
    p[0] = running_max;
    p[1] = running_sum;
}

// Merges one head's n_chunks states (in cell order, chunk_floats(dv)
// apart) into out (dv floats). sink: the head's sink logit, or null.
inline void merge_chunks(const float* partials, int64_t n_chunks, int64_t dv, const float* sink, float* out) {
    quant::attn::ChunkMerge st;
    for (int64_t c = 0; c < n_chunks; ++c) {
        const float* p = partials + c * chunk_floats(dv);
        const quant::attn::MergeStep step = quant::attn::merge_chunk(st, p[0], p[1], HostExp{});
        if (step.skip) continue;
        const float* a = p + 2;
        if (step.take_only) {
            std::copy(a, a + dv, out);
            continue;
        }
        for (int64_t d = 0; d < dv; ++d) out[d] = std::fma(out[d], step.keep, a[d] * step.take);
    }
    // No visible cell cannot happen for a causal query that stored its own
    // K and V; zeros keep a misuse harmless.
    if (!st.any) std::fill(out, out + dv, 0.0f);
    const quant::attn::Finish f =
        finish_softmax(st.any ? st.m : -std::numeric_limits<float>::infinity(), st.s, sink);
    for (int64_t d = 0; d < dv; ++d) out[d] = out[d] * f.ms * f.inv;
}

}  // namespace tandem::cpu::detail
