// The float order of attention over a long span of cells, written once for
// the host and the device: the cells are cut into chunks of
// kAttentionChunkCells at multiples of it in the whole cache, each chunk
// runs its own online softmax from scratch (a running maximum M_c, sum S_c
// and V accumulator A_c over its visible cells; S_c = 0 when it has none),
// and the chunks are merged in cell order, as ggml's split-KV decode merges
// its per-thread partials:
//   M' = max(M, M_c),  A' = fma(A, e^(M - M'), A_c * e^(M_c - M')),
//   S' = fma(S, e^(M - M'), S_c * e^(M_c - M')),
// the first chunk with a visible cell taken as it is. Then A * ms / S, ms
// the attention sink's factor on the merged M and S. A span of one chunk
// is the single pass bit for bit. The CPU (kernels_cpu/attention_chunks.h)
// and CUDA (kernels_cuda/attention.cu) run these steps with their own exp
// (the same bits on the emulator).
#pragma once

#include <cstdint>

#include "runtime/quant/dot_order.h"  // fma_f
#include "runtime/quant/host_device.h"

namespace tandem::quant::attn {

// Cells per chunk: ggml splits a decode step's cells only from 512 on.
inline constexpr int64_t kAttentionChunkCells = 512;

// The merged state of the chunks so far, in cell order.
struct ChunkMerge {
    float m = 0.0f;
    float s = 0.0f;
    bool any = false;
};

// What the merged accumulator becomes when chunk (m_c, s_c) joins:
// take_only (the first chunk with a visible cell): A = A_c; else
// A = fma(A, keep, A_c * take). A chunk with no visible cell (s_c = 0)
// changes nothing (skip). exp: the device's exp (std::exp on the host).
struct MergeStep {
    bool skip = false;
    bool take_only = false;
    float keep = 1.0f;
    float take = 1.0f;
};

template <class Exp>
TANDEM_HOST_DEVICE MergeStep merge_chunk(ChunkMerge& st, float m_c, float s_c, Exp exp) {
    MergeStep step;
    if (s_c == 0.0f) {
        step.skip = true;
        return step;
    }
    if (!st.any) {
        st.m = m_c;
        st.s = s_c;
        st.any = true;
        step.take_only = true;
        return step;
    }
    const float m_new = st.m < m_c ? m_c : st.m;  // std::max(m, m_c)
    step.keep = exp(st.m - m_new);
    step.take = exp(m_c - m_new);
    st.s = dot::fma_f(st.s, step.keep, s_c * step.take);
    st.m = m_new;
    return step;
}

}  // namespace tandem::quant::attn
