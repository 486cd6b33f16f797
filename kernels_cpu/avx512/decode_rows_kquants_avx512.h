// The activation layout that the AVX-512 rows kernels of Q4_K, Q2_K and
// Q5_K read (prepare_q4_K_rows, prepare_q2_K_rows), shared by
// decode_rows_kquants_avx512.cpp and the several-tokens Q4_K kernel in
// decode_rows_q4_K_tokens_avx512.cpp. Only for files built with the
// AVX-512 flags.
#pragma once

#include <cstddef>
#include <cstdint>

#include <algorithm>
#include <type_traits>

#include "kernels_cpu/simd_x86.h"
#include "kernels_cpu/vec_dot.h"

namespace tandem::cpu::detail::kq_rows {

// Per super-block: the four registers of activation bytes matching the
// format's code registers, then 16 words of activation sums matching its
// minimum words (Q4_K: [0 x 8, sums of elements 32 s .. 32 s + 31],
// against [scales, minimums], so lanes 4..7 give the minimum sum; Q2_K:
// the 16 group sums as they are); after all super-blocks, each one's scale
// as a float.
struct PreparedBlock {
    __m512i act[4];
    __m256i sums;
    __m256i pad;
};
static_assert(sizeof(PreparedBlock) == 320, "prepared super-block layout");

inline size_t d_offset(int64_t nb) { return static_cast<size_t>(nb) * sizeof(PreparedBlock); }

// Sub-blocks of Q4_K/Q5_K code register k: the low 256 bits and the high.
constexpr int low_sub_block(int k) { return 4 * (k / 2) + k % 2; }
constexpr int high_sub_block(int k) { return low_sub_block(k) + 2; }

// The weights about 1 KiB ahead of block b (the rows of a pass lie one
// after another): a pass of several tokens does more work per byte than
// one token, and without these its reads from DRAM overlapped that work
// poorly (Q4_K, Zen 4: 2-2.5x slower than the same pass from L1).
template <class Block>
inline void prefetch_ahead(const Block* b) {
    const auto* p = reinterpret_cast<const char*>(b) + 1024;
    _mm_prefetch(p, _MM_HINT_T0);
    _mm_prefetch(p + 64, _MM_HINT_T0);
    _mm_prefetch(p + 128, _MM_HINT_T0);
}

// nt tokens (at most kMaxDecodeTokens) in passes of up to four:
// pass(std::integral_constant<int, NT>{}, acts, ys) with the NT tokens'
// activations (token t at a + t * a_stride) and outputs (y + t * ldy).
template <class Pass>
void in_passes_of_four(const void* a, size_t a_stride, int nt, float* y, int64_t ldy, Pass&& pass) {
    TANDEM_CHECK(nt >= 1 && nt <= kMaxDecodeTokens, "decode rows: token count out of range");
    const auto* ab = static_cast<const uint8_t*>(a);
    const uint8_t* acts[kMaxDecodeTokens];
    float* ys[kMaxDecodeTokens];
    for (int t = 0; t < nt; ++t) {
        acts[t] = ab + static_cast<size_t>(t) * a_stride;
        ys[t] = y + t * ldy;
    }
    for (int t0 = 0; t0 < nt;) {
        const int take = std::min(nt - t0, 4);
        switch (take) {
            case 1: pass(std::integral_constant<int, 1>{}, acts + t0, ys + t0); break;
            case 2: pass(std::integral_constant<int, 2>{}, acts + t0, ys + t0); break;
            case 3: pass(std::integral_constant<int, 3>{}, acts + t0, ys + t0); break;
            default: pass(std::integral_constant<int, 4>{}, acts + t0, ys + t0); break;
        }
        t0 += take;
    }
}

}  // namespace tandem::cpu::detail::kq_rows
