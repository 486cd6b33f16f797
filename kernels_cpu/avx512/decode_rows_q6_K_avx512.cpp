// Decode (one token) over rows of Q6_K with AVX-512 VNNI, in the order of
// its single-row kernel (KLanes in vec_dot_kquants_avx512_body.h, llama.cpp's
// AVX2 vec_dot): per row and super-block eight int32 lanes, lane l the sum
// over the eight 32-element chunks c of scale(c, l) x (the dot product of
// the unsigned codes of elements 4l .. 4l + 3 of chunk c), minus lane l of
// vpmaddwd(32 x scales, the activation's 16-element sums) (the -32 offset),
// then acc = fma(d * da, float(lanes), acc) and at the end hsum(acc) + 0.
//
// Why a kernel of its own: the single-row kernel builds each 64-element
// chunk from a 64-byte load, a 32-byte load, two shifts, an insert and
// three masks, then multiplies with maddubs and dpwssd; Q6_K is the output
// head and the widest tensors of every K-quant mix. Here, per super-block
// of a row:
// - chunk c = 4 half + quarter, element e: low four bits in ql[64 half +
//   32 (quarter % 2) + e] (high nibble for quarters 2, 3), two high bits at
//   2 quarter in qh[32 half + e]; code register k holds chunks 2k (low 256
//   bits) and 2k + 1 (high): the low or high nibbles of one 64-byte load of
//   ql, and qh broadcast to both halves, shifted per half (one variable
//   16-bit shift), masked and merged with one vpternlogd;
// - the activation of register k is Q8_K's qs[64k .. 64k + 63] as it is,
//   so nothing is prepared; one vpdpbusd per register (|lane| <= 4 x 63 x
//   128 < 2^15);
// - registers 2p, 2p + 1 are interleaved as 16-bit words, so one vpdpwssd
//   against both chunks' group scales adds their sums for the same lane l,
//   which is llama.cpp's grouping; the 256-bit halves add to the eight lanes.
// One row at a time, super-block after super-block: one sequential stream
// (see decode_rows_legacy_avx512.cpp on interleaving rows from DRAM).
#include <algorithm>
#include <cstdint>

#include "kernels_cpu/simd_x86.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

using quant::block_q6_K;
using quant::block_q8_K;
using quant::kQK_K;

// Word index into the 16 group scales for the pair of code registers
// (2p, 2p + 1): dword L of register k is lane l = L % 8 of chunk
// 2k + L / 8, whose elements 4l .. 4l + 3 are in group 2 chunk + l / 4.
__m512i scale_pair_index(int p) {
    alignas(64) int16_t idx[32];
    for (int dw = 0; dw < 16; ++dw) {
        for (int k = 0; k < 2; ++k) {
            const int chunk = 2 * (2 * p + k) + dw / 8;
            idx[2 * dw + k] = static_cast<int16_t>(2 * chunk + (dw % 8) / 4);
        }
    }
    return _mm512_load_si512(idx);
}

// Per-half 16-bit shift counts that bring the two high bits of chunk c
// (bits 2 (c % 4) of qh) to bits 4, 5: left by 4 - 2 (c % 4) for quarters
// 0-2, right by 2 for quarter 3. Register k's chunks 2k, 2k + 1 have
// quarters (0, 1) for even k, (2, 3) for odd. Bits a 16-bit shift carries
// into the other byte land outside bits 4, 5 and are masked off.
__m512i half_counts(int first, int second) {
    return join256(_mm256_set1_epi16(static_cast<int16_t>(first)), _mm256_set1_epi16(static_cast<int16_t>(second)));
}

}  // namespace

void dot_q6_K_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
    const int64_t nb = n / kQK_K;
    const auto* ya = static_cast<const block_q8_K*>(a);
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
    const __m512i left = half_counts(4, 2), right = half_counts(0, 2);  // quarters (0, 1); (2, 3)
    const __m512i scale_idx[2] = {scale_pair_index(0), scale_pair_index(1)};
    constexpr int kOr = 0xEA;  // vpternlogd: (a & b) | c
    for (int r = 0; r < n_rows; ++r) {
        const auto* row = reinterpret_cast<const block_q6_K*>(static_cast<const uint8_t*>(w) + static_cast<size_t>(r) * row_stride);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const block_q6_K& b = row[i];
            prefetch_row_stream(&b);
            const block_q8_K& x = ya[i];
            __m512i dot[4];
            for (int half = 0; half < 2; ++half) {
                const __m512i ql = _mm512_loadu_si512(b.ql + 64 * half);
                const __m512i qh = _mm512_broadcast_i64x4(load256(b.qh + 32 * half));
                const __m512i high01 = _mm512_and_si512(_mm512_sllv_epi16(qh, left), bits45);
                const __m512i high23 = _mm512_and_si512(_mm512_srlv_epi16(qh, right), bits45);
                const __m512i code01 = _mm512_ternarylogic_epi32(ql, low4, high01, kOr);
                const __m512i code23 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), low4, high23, kOr);
                dot[2 * half] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), code01, _mm512_loadu_si512(x.qs + 128 * half));
                dot[2 * half + 1] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), code23, _mm512_loadu_si512(x.qs + 128 * half + 64));
            }
            const __m256i scales16 = _mm256_cvtepi8_epi16(load128(b.scales));
            const __m512i scales = _mm512_castsi256_si512(scales16);
            const __m256i offset = _mm256_madd_epi16(_mm256_slli_epi16(scales16, 5), load256(x.bsums));  // 32 x scale x sum
            const __m256i lanes = _mm256_sub_epi32(scaled_lanes(dot, scales, scale_idx), offset);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(b.d) * x.d), _mm256_cvtepi32_ps(lanes), acc);
        }
        y[r] = hsum(acc) + 0.0f;  // the single-row kernel's "+ acc_min", which is 0 for Q6_K
    }
}

namespace {

// Several tokens: each super-block's codes and scale words made once, then
// per token the integers and float steps of dot_q6_K_rows_avx512 (exact
// integer sums; the same float operations in the same order).
template <int NT>
void q6_K_rows_tokens(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, size_t a_stride, float* y,
                      int64_t ldy) {
    const int64_t nb = n / kQK_K;
    const block_q8_K* ya[NT];
    for (int t = 0; t < NT; ++t) {
        ya[t] = reinterpret_cast<const block_q8_K*>(static_cast<const uint8_t*>(a) + static_cast<size_t>(t) * a_stride);
    }
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
    const __m512i left = half_counts(4, 2), right = half_counts(0, 2);
    const __m512i scale_idx[2] = {scale_pair_index(0), scale_pair_index(1)};
    constexpr int kOr = 0xEA;
    for (int r = 0; r < n_rows; ++r) {
        const auto* row = reinterpret_cast<const block_q6_K*>(static_cast<const uint8_t*>(w) + static_cast<size_t>(r) * row_stride);
        __m256 acc[NT];
        for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const block_q6_K& b = row[i];
            prefetch_row_stream(&b);
            __m512i code[4];
            for (int half = 0; half < 2; ++half) {
                const __m512i ql = _mm512_loadu_si512(b.ql + 64 * half);
                const __m512i qh = _mm512_broadcast_i64x4(load256(b.qh + 32 * half));
                const __m512i high01 = _mm512_and_si512(_mm512_sllv_epi16(qh, left), bits45);
                const __m512i high23 = _mm512_and_si512(_mm512_srlv_epi16(qh, right), bits45);
                code[2 * half] = _mm512_ternarylogic_epi32(ql, low4, high01, kOr);
                code[2 * half + 1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), low4, high23, kOr);
            }
            const __m256i scales16 = _mm256_cvtepi8_epi16(load128(b.scales));
            const __m512i scales = _mm512_castsi256_si512(scales16);
            const __m512i words[2] = {_mm512_permutexvar_epi16(scale_idx[0], scales),
                                      _mm512_permutexvar_epi16(scale_idx[1], scales)};
            const __m256i scales32 = _mm256_slli_epi16(scales16, 5);
            const float d = f16(b.d);
            for (int t = 0; t < NT; ++t) {
                const block_q8_K& x = ya[t][i];
                __m512i dot[4];
                for (int k = 0; k < 4; ++k) {
                    dot[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), code[k], _mm512_loadu_si512(x.qs + 64 * k));
                }
                __m512i tot = _mm512_dpwssd_epi32(_mm512_setzero_si512(), interleave_words(dot[0], dot[1]), words[0]);
                tot = _mm512_dpwssd_epi32(tot, interleave_words(dot[2], dot[3]), words[1]);
                const __m256i sum = _mm256_add_epi32(_mm512_castsi512_si256(tot), _mm512_extracti64x4_epi64(tot, 1));
                const __m256i offset = _mm256_madd_epi16(scales32, load256(x.bsums));
                const __m256i lanes = _mm256_sub_epi32(sum, offset);
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * x.d), _mm256_cvtepi32_ps(lanes), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) y[t * ldy + r] = hsum(acc[t]) + 0.0f;
    }
}

}  // namespace

void dot_q6_K_rows_multi_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, size_t a_stride,
                                int nt, float* y, int64_t ldy) {
    const auto* ab = static_cast<const uint8_t*>(a);
    for (int t0 = 0; t0 < nt;) {
        const int left = nt - t0;
        const int take = left == 5 || left == 6 ? 3 : std::min(left, 4);
        const void* at = ab + static_cast<size_t>(t0) * a_stride;
        float* yt = y + t0 * ldy;
        switch (take) {
            case 1: q6_K_rows_tokens<1>(n, w, row_stride, n_rows, at, a_stride, yt, ldy); break;
            case 2: q6_K_rows_tokens<2>(n, w, row_stride, n_rows, at, a_stride, yt, ldy); break;
            case 3: q6_K_rows_tokens<3>(n, w, row_stride, n_rows, at, a_stride, yt, ldy); break;
            default: q6_K_rows_tokens<4>(n, w, row_stride, n_rows, at, a_stride, yt, ldy); break;
        }
        t0 += take;
    }
}

}  // namespace tandem::cpu::detail
