// Decode (one token) over rows of Q5_K with AVX-512 VNNI, in the order of
// its single-row kernel (KLanes in vec_dot_kquants_avx512_body.h, llama.cpp's
// AVX2 vec_dot): per row and super-block eight int32 lanes, lane l the sum
// over the eight 32-element sub-blocks s of scale(s) x (the dot product of
// elements 4l .. 4l + 3 of sub-block s), then acc = fma(d * da,
// float(lanes), acc); the minimum term, corr = sum of min(s) x (the
// activation sum of sub-block s), goes to acc_min = fma(-(dmin * da),
// float(corr), acc_min); at the end hsum(acc) + acc_min.
//
// Why a kernel of its own: the single-row kernel builds each 64-element
// chunk from a 32-byte load, a shift, an insert, a mask and three steps for
// the fifth bit, then multiplies with maddubs and dpwssd (19 GB/s per core
// from L2 on Zen 4), so decode of Q5_K files was compute-bound. Here, per
// super-block of a row (the register layout of the Q4_K rows kernel):
// - the 128 code bytes are two loads; their nibbles make four registers,
//   sub-blocks [0|2], [1|3], [4|6], [5|7], plus 16 where the sub-block's
//   bit of qh is set (one byte test against [qh|qh], one masked byte add);
// - one vpdpbusd per register against the activation arranged the same way
//   once per matmul gives 16 lanes (|lane| <= 4 x 31 x 128 < 2^15);
// - registers 2p, 2p + 1 are interleaved as 16-bit words, so one vpdpwssd
//   against both sub-blocks' scales adds their sums for the same lane l,
//   which is llama.cpp's grouping; the 256-bit halves add to the eight lanes;
// - the minimum sum is one vpmaddwd of the eight minimums against the
//   activation's 32-element sums (made by prepare) and a 4-lane sum.
// One row at a time, super-block after super-block: one sequential stream
// (see decode_rows_legacy_avx512.cpp on interleaving rows from DRAM).
#include <cmath>
#include <cstdint>

#include "kernels_cpu/simd_x86.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

using quant::block_q5_K;
using quant::block_q8_K;
using quant::kQK_K;

// Sub-blocks of code register k: the low 256 bits and the high.
constexpr int low_sub_block(int k) { return 4 * (k / 2) + k % 2; }
constexpr int high_sub_block(int k) { return low_sub_block(k) + 2; }

// The activation per super-block as the kernel reads it: register k is the
// activation of its two sub-blocks, then the eight 32-element sums as
// words. After all super-blocks, each one's activation scale as a float.
struct PreparedBlock {
    __m512i act[4];
    __m128i sums;
    __m128i pad[3];
};
static_assert(sizeof(PreparedBlock) == 320, "prepared super-block layout");

size_t d_offset(int64_t nb) { return static_cast<size_t>(nb) * sizeof(PreparedBlock); }

// Word index into the eight scales for the pair of code registers
// (2p, 2p + 1): the low word of dword L is register 2p's sub-block in
// half L / 8, the high word register 2p + 1's.
__m512i scale_pair_index(int p) {
    alignas(64) int16_t idx[32];
    for (int dw = 0; dw < 16; ++dw) {
        for (int k = 0; k < 2; ++k) {
            const int reg = 2 * p + k;
            idx[2 * dw + k] = static_cast<int16_t>(dw < 8 ? low_sub_block(reg) : high_sub_block(reg));
        }
    }
    return _mm512_load_si512(idx);
}

// Bit of qh that says "add 16" for code register k, per half.
__m512i fifth_bits(int k) {
    return join256(_mm256_set1_epi8(static_cast<char>(1 << low_sub_block(k))),
                   _mm256_set1_epi8(static_cast<char>(1 << high_sub_block(k))));
}

}  // namespace

size_t q5_K_rows_prepared_bytes(int64_t n) {
    const int64_t nb = n / kQK_K;
    return d_offset(nb) + static_cast<size_t>(nb) * sizeof(float);
}

void prepare_q5_K_rows(const void* a, int64_t n, void* out) {
    const int64_t nb = n / kQK_K;
    const auto* ya = static_cast<const block_q8_K*>(a);
    TANDEM_CHECK(reinterpret_cast<uintptr_t>(out) % 64 == 0, "decode rows: prepared activation not 64-byte aligned");
    auto* blocks = static_cast<PreparedBlock*>(out);
    auto* d = reinterpret_cast<float*>(static_cast<uint8_t*>(out) + d_offset(nb));
    for (int64_t i = 0; i < nb; ++i) {
        const int8_t* q = ya[i].qs;
        for (int k = 0; k < 4; ++k) {
            blocks[i].act[k] = join256(load256(q + 32 * low_sub_block(k)), load256(q + 32 * high_sub_block(k)));
        }
        // Sums of 32 from the pairs of 16-element sums (at most 32 x 128:
        // exact in 16 bits).
        const __m256i pairs = _mm256_madd_epi16(load256(ya[i].bsums), _mm256_set1_epi16(1));
        blocks[i].sums = _mm256_cvtepi32_epi16(pairs);
        for (auto& p : blocks[i].pad) p = _mm_setzero_si128();
        d[i] = ya[i].d;
    }
}

void dot_q5_K_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
    const int64_t nb = n / kQK_K;
    const auto* act = static_cast<const PreparedBlock*>(a);
    const auto* act_d = reinterpret_cast<const float*>(static_cast<const uint8_t*>(a) + d_offset(nb));
    const __m512i low4 = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(0x10);
    const __m512i fifth[4] = {fifth_bits(0), fifth_bits(1), fifth_bits(2), fifth_bits(3)};
    const __m512i scale_idx[2] = {scale_pair_index(0), scale_pair_index(1)};
    for (int r = 0; r < n_rows; ++r) {
        const auto* row = reinterpret_cast<const block_q5_K*>(static_cast<const uint8_t*>(w) + static_cast<size_t>(r) * row_stride);
        __m256 acc = _mm256_setzero_ps();
        float acc_min = 0.0f;
        for (int64_t i = 0; i < nb; ++i) {
            const block_q5_K& b = row[i];
            const PreparedBlock& p = act[i];
            const __m512i q0 = _mm512_loadu_si512(b.qs), q1 = _mm512_loadu_si512(b.qs + 64);
            const __m512i qh = _mm512_broadcast_i64x4(load256(b.qh));
            const __m512i nibbles[4] = {_mm512_and_si512(q0, low4), _mm512_and_si512(_mm512_srli_epi16(q0, 4), low4),
                                        _mm512_and_si512(q1, low4), _mm512_and_si512(_mm512_srli_epi16(q1, 4), low4)};
            __m512i dot[4];
            for (int k = 0; k < 4; ++k) {
                const __m512i code = _mm512_mask_add_epi8(nibbles[k], _mm512_test_epi8_mask(qh, fifth[k]), nibbles[k], sixteen);
                dot[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), code, p.act[k]);
            }
            const __m128i sm = q4_K_scales_mins_simd(b.scales);  // 8 scales, then 8 minimums
            const __m512i scales = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));
            __m512i tot = _mm512_setzero_si512();
            for (int q = 0; q < 2; ++q) {
                tot = _mm512_dpwssd_epi32(tot, interleave_words(dot[2 * q], dot[2 * q + 1]),
                                          _mm512_permutexvar_epi16(scale_idx[q], scales));
            }
            const __m256i lanes = _mm256_add_epi32(_mm512_castsi512_si256(tot), _mm512_extracti64x4_epi64(tot, 1));
            const __m128i mins = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(sm, sm));
            const __m128i corr4 = _mm_madd_epi16(mins, p.sums);
            const __m128i corr2 = _mm_add_epi32(corr4, _mm_unpackhi_epi64(corr4, corr4));
            const int corr = _mm_cvtsi128_si32(_mm_add_epi32(corr2, _mm_shuffle_epi32(corr2, 1)));
            const float da = act_d[i];
            acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(b.d) * da), _mm256_cvtepi32_ps(lanes), acc);
            acc_min = std::fma(-(f16(b.dmin) * da), static_cast<float>(corr), acc_min);
        }
        y[r] = hsum(acc) + acc_min;
    }
}

}  // namespace tandem::cpu::detail
