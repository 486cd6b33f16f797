// The driver of attention_decode.h's kernel, shared by its AVX2 and
// AVX-512 files (each includes it once, compiled with its own flags).
// Ops: widen(halves, floats, n) exact; dot(key, query, n) in
// f16_dot_ggml's order over widened rows; scale(acc, s, n) and mad(acc, x,
// s, n) with f16_scale's and f16_mad's roundings; scores and accumulate
// over a tile of cells (scores_rows and accumulate_rows below, or faster
// paths with the same bits).
#pragma once

#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels_cpu/attention_decode.h"
#include "runtime/common/error.h"
#include "runtime/quant/fp16.h"

namespace tandem::cpu::detail {
namespace {

// Cells per tile: their widened K and V rows (at most 32 KiB for heads of
// 128) stay in L1 while every head of the group passes over them.
constexpr int64_t kTile = 32;

// One cell's step of the online softmax, as attention.cpp's per-head loop
// takes it: rescale[i] says whether the score was a new maximum (the
// accumulator is then multiplied by factor[i]), weight[i] is V's weight.
struct SoftmaxSteps {
    float factor[kTile];
    float weight[kTile];
    bool rescale[kTile];
};

// The scores of one tile for each head in a first pass, the softmax steps
// (with their exp calls) in a second, the V sums of all heads in a third:
// no call inside the vector loops, so their registers are not saved and
// restored around every exp (all vector registers are caller-saved).
inline void softmax_steps(const float* s, int64_t n, float& running_max, float& running_sum, SoftmaxSteps& st) {
    for (int64_t i = 0; i < n; ++i) {
        float ms = 1.0f, vs = 1.0f;
        st.rescale[i] = s[i] > running_max;
        if (st.rescale[i]) {
            ms = std::exp(running_max - s[i]);  // 0 for the first visible cell
            running_max = s[i];
        } else {
            vs = std::exp(s[i] - running_max);
        }
        st.factor[i] = ms;
        st.weight[i] = vs;
        // One rounding, as ggml's S = S*ms + vs compiles (contracted).
        running_sum = std::fma(running_sum, ms, vs);
    }
}

// The portable forms of Ops::scores and Ops::accumulate, over Ops' dot,
// scale and mad, for any head size (an Ops may take faster paths for some).
template <class Ops>
void scores_rows(const float* q, const float* kt, int64_t n, int64_t dk, float scale, float* s) {
    for (int64_t i = 0; i < n; ++i) s[i] = Ops::dot(kt + i * dk, q, dk) * scale;
}
// Cells outer, heads inner: each head's accumulator sees the cells in
// order (its bits), and the heads' chains of convert, fma, round overlap
// (one head's chain alone waits on their latency every cell).
template <class Ops>
void accumulate_rows(uint16_t* acc, size_t n_heads, const float* vt, int64_t n, int64_t dv, const SoftmaxSteps* st) {
    const auto udv = static_cast<size_t>(dv);
    for (int64_t i = 0; i < n; ++i) {
        for (size_t h = 0; h < n_heads; ++h) {
            if (st[h].rescale[i]) Ops::scale(acc + h * udv, st[h].factor[i], dv);
            Ops::mad(acc + h * udv, vt + i * dv, st[h].weight[i], dv);
        }
    }
}

template <class Ops>
void shared_kv_attention(const float* q, int64_t n_q, int32_t pos, int64_t kv_head, const AttentionShape& shape,
                         const KvCacheView& kv, float* out) {
    TANDEM_CHECK(n_q > 0 && n_q <= kMaxSharedHeads, "attention: query heads per KV head out of range");
    TANDEM_CHECK(kv.type == quant::Type::F16, "attention: shared-KV kernel needs an F16 cache");
    const int64_t dk = shape.head_dim_k, dv = shape.head_dim_v;
    const auto nq = static_cast<size_t>(n_q);
    const auto udk = static_cast<size_t>(dk), udv = static_cast<size_t>(dv);
    // The queries rounded to fp16 (ggml's K.Q partner) and widened back.
    std::vector<float> qf(nq * udk);
    for (size_t i = 0; i < qf.size(); ++i) qf[i] = quant::fp16_to_fp32(quant::fp32_to_fp16(q[i]));
    std::vector<float> kt(static_cast<size_t>(kTile) * udk), vt(static_cast<size_t>(kTile) * udv);
    std::vector<uint16_t> acc(nq * udv, 0);  // V sums in fp16, as ggml keeps them
    float running_max[kMaxSharedHeads], running_sum[kMaxSharedHeads], scores[kTile];
    for (size_t h = 0; h < nq; ++h) {
        running_max[h] = -std::numeric_limits<float>::infinity();
        running_sum[h] = 0.0f;
    }
    SoftmaxSteps steps[kMaxSharedHeads];
    const uint64_t k_offset = static_cast<uint64_t>(kv_head * dk) * sizeof(uint16_t);
    const uint64_t v_offset = static_cast<uint64_t>(kv_head * dv) * sizeof(uint16_t);
    // The group's slice of a cell is a few lines at a stride of the whole
    // row, a new 4 KiB page every few cells: the hardware prefetchers miss
    // most of them, so the slices kAhead cells on are requested here.
    constexpr int64_t kAhead = 8;
    const auto prefetch_slice = [](const uint8_t* p, int64_t bytes) {
        for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(p + b), _MM_HINT_T0);
    };
    for (int64_t c0 = 0; c0 < kv.n_cells; c0 += kTile) {
        // The tile's visible cells, in storage order, widened once.
        int64_t n = 0;
        for (int64_t c = c0; c < std::min(kv.n_cells, c0 + kTile); ++c) {
            if (c + kAhead < kv.n_cells) {
                prefetch_slice(kv.k + static_cast<uint64_t>(c + kAhead) * kv.k_row_bytes + k_offset, dk * 2);
                prefetch_slice(kv.v + static_cast<uint64_t>(c + kAhead) * kv.v_row_bytes + v_offset, dv * 2);
            }
            const int32_t kp = kv.cell_pos[c];
            if (kp < 0 || kp > pos || (shape.window > 0 && pos - kp >= shape.window)) continue;
            Ops::widen(reinterpret_cast<const uint16_t*>(kv.k + static_cast<uint64_t>(c) * kv.k_row_bytes + k_offset),
                       kt.data() + static_cast<size_t>(n) * udk, dk);
            Ops::widen(reinterpret_cast<const uint16_t*>(kv.v + static_cast<uint64_t>(c) * kv.v_row_bytes + v_offset),
                       vt.data() + static_cast<size_t>(n) * udv, dv);
            ++n;
        }
        if (n == 0) continue;
        for (size_t h = 0; h < nq; ++h) {
            Ops::scores(qf.data() + h * udk, kt.data(), n, dk, shape.scale, scores);
            softmax_steps(scores, n, running_max[h], running_sum[h], steps[h]);
        }
        Ops::accumulate(acc.data(), nq, vt.data(), n, dv, steps);
    }
    for (size_t h = 0; h < nq; ++h) {
        const float inv = running_sum[h] > 0.0f ? 1.0f / running_sum[h] : 0.0f;
        for (size_t d = 0; d < udv; ++d) out[h * udv + d] = quant::fp16_to_fp32(acc[h * udv + d]) * inv;
    }
}

}  // namespace
}  // namespace tandem::cpu::detail
