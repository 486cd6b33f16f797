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
// the attention sink's factor on the merged M and S (finish). A span of one
// chunk is the single pass bit for bit. The CPU (kernels_cpu/
// attention_chunks.h, attention_tiled.cpp) and CUDA (kernels_cuda/
// attention.cu) run these steps with their own exp (the same bits on the
// emulator).
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

// One step of the online softmax over a visible cell of score s: the
// running maximum and sum take it in, and the step gives the factor for
// what was accumulated so far (ms) and the weight of the cell's V (vs).
// One of the two is an exp, the other 1 (a multiply that changes no bit);
// S = fma(S, ms, vs) rounds once, as ggml's S = S*ms + vs compiles.
struct SoftmaxStep {
    float ms = 1.0f;
    float vs = 1.0f;
};

template <class Exp>
TANDEM_HOST_DEVICE SoftmaxStep softmax_step(float s, float& running_max, float& running_sum, Exp exp) {
    SoftmaxStep st;
    if (s > running_max) {
        st.ms = exp(running_max - s);  // 0 for the first visible cell
        running_max = s;
    } else {
        st.vs = exp(s - running_max);
    }
    running_sum = dot::fma_f(running_sum, st.ms, st.vs);
    return st;
}

// How the accumulator A of a finished pass, or of merged chunks, with its
// running maximum M and sum S becomes the output: A * ms * inv. A sink
// logit (gpt-oss; null: none) is one more step of the online softmax that
// has no value, as ggml's CPU flash attention applies it; inv = 1 / S, 0
// where no cell was visible (S = 0).
struct Finish {
    float ms = 1.0f;
    float inv = 0.0f;
};

template <class Exp>
TANDEM_HOST_DEVICE Finish finish(float running_max, float running_sum, const float* sink, Exp exp) {
    Finish f;
    if (sink != nullptr) f.ms = softmax_step(*sink, running_max, running_sum, exp).ms;
    f.inv = running_sum > 0.0f ? 1.0f / running_sum : 0.0f;
    return f;
}

}  // namespace tandem::quant::attn
