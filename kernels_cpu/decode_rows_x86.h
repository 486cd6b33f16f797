// Decode (one token) over rows of a K-quant with a minimum term, in
// llama.cpp's single-row order (KSpans with one span of eight chunks): per
// row and super-block the integer total and the integer
// minimum sum, each converted once and fused into the row's accumulators.
// The rows are read one after another, each as one sequential stream
// (interleaving four rows' super-blocks halves the speed from DRAM: the
// prefetchers follow one stream per row poorly); their per-super-block lane
// sums are kept, reduced across rows by one hadd tree, and the float steps
// run with rows in the lanes. Sums::sums_tokens<NT>(block, activation rows,
// super-block index, sumi, corr) gives, per token, the lane sums whose
// totals are a super-block's integer total and minimum sum; any lane layout
// will do, the totals are exact. Include
// only from files built with -mavx2 -mfma -mf16c (after simd_x86.h's flags).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels_cpu/simd_x86.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

// Lane r of the result: the sum of the eight lanes of v[r], r < 4.
inline __m128i row_totals4(const __m256i* v) {
    const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]);
    const __m256i h23 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i h = _mm256_hadd_epi32(h01, h23);  // [r0..r3 low halves | r0..r3 high halves]
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

constexpr int kRowsPerPass = 4;  // row_totals4 reduces four rows

// NT tokens (only NT = 1 is in use: the AVX2 several-tokens Q4_K kernel is
// avx2/decode_rows_q4_K_tokens_avx2.cpp; token t's activation
// row at a + t * a_stride, its outputs at y + t * ldy): each super-block of
// a row is loaded and unpacked once (Sums::sums_tokens) for all NT tokens,
// and each token's integers and float steps are the one-token pass's own,
// in its order, so each token gets the bits it gets alone. Spans shrink
// with NT so the table of lane sums stays at 16 KiB.
template <class Sums, int NT>
void decode_rows4_tokens(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, size_t a_stride,
                         float* y, int64_t ldy) {
    using W = typename Sums::W;
    constexpr int R = kRowsPerPass;
    const W* x[R];
    decode_row_pointers(w, row_stride, n_rows, R, x);
    const quant::block_q8_K* ya[NT];
    for (int t = 0; t < NT; ++t) {
        ya[t] = reinterpret_cast<const quant::block_q8_K*>(static_cast<const uint8_t*>(a) + static_cast<size_t>(t) * a_stride);
    }
    const int64_t nb = n / quant::kQK_K;
    __m128 acc[NT], acc_min[NT];
    for (int t = 0; t < NT; ++t) acc[t] = acc_min[t] = _mm_setzero_ps();
    constexpr int64_t kSpan = 64 / NT;  // super-blocks per pass
    alignas(32) __m256i sums[kSpan][NT][R], mins[kSpan][NT][R];
    for (int64_t i0 = 0; i0 < nb; i0 += kSpan) {
        const int64_t ni = std::min(kSpan, nb - i0);
        for (int r = 0; r < R; ++r) {
            for (int64_t k = 0; k < ni; ++k) {
                prefetch_row_stream(&x[r][i0 + k]);
                __m256i s[NT], m[NT];
                Sums::template sums_tokens<NT>(x[r][i0 + k], ya, i0 + k, s, m);
                for (int t = 0; t < NT; ++t) {
                    sums[k][t][r] = s[t];
                    mins[k][t][r] = m[t];
                }
            }
        }
        for (int64_t k = 0; k < ni; ++k) {
            const int64_t i = i0 + k;
            const __m128 dw = _mm_cvtph_ps(_mm_setr_epi16(static_cast<int16_t>(x[0][i].d), static_cast<int16_t>(x[1][i].d),
                                                          static_cast<int16_t>(x[2][i].d), static_cast<int16_t>(x[3][i].d),
                                                          0, 0, 0, 0));
            const __m128 dmin = _mm_cvtph_ps(_mm_setr_epi16(
                static_cast<int16_t>(x[0][i].dmin), static_cast<int16_t>(x[1][i].dmin),
                static_cast<int16_t>(x[2][i].dmin), static_cast<int16_t>(x[3][i].dmin), 0, 0, 0, 0));
            for (int t = 0; t < NT; ++t) {
                const __m128 da = _mm_set1_ps(ya[t][i].d);
                acc[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(row_totals4(sums[k][t])), _mm_mul_ps(dw, da), acc[t]);
                acc_min[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(row_totals4(mins[k][t])), _mm_mul_ps(dmin, da), acc_min[t]);
            }
        }
    }
    for (int t = 0; t < NT; ++t) {
        alignas(16) float out[R];
        _mm_store_ps(out, _mm_sub_ps(acc[t], acc_min[t]));
        for (int r = 0; r < n_rows; ++r) y[t * ldy + r] = out[r];
    }
}

// Up to kDecodeRows rows, four at a time.
template <class Sums>
void decode_rows(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
    for (int r = 0; r < n_rows; r += kRowsPerPass) {
        decode_rows4_tokens<Sums, 1>(n, static_cast<const uint8_t*>(w) + static_cast<size_t>(r) * row_stride, row_stride,
                                     std::min(kRowsPerPass, n_rows - r), a, 0, y + r, 0);
    }
}

}  // namespace
}  // namespace tandem::cpu::detail
