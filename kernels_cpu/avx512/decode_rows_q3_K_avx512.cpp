// Decode (one token) over rows of Q3_K with AVX-512 VNNI, in the order of
// its single-row kernel (KLanes in vec_dot_kquants_avx512_body.h, llama.cpp's
// AVX2 vec_dot): per row and super-block eight int32 lanes, lane l the sum
// over the eight 32-element chunks c of scale(c, l) x (the dot product of
// elements 4l .. 4l + 3 of chunk c, values code - 4), then
// acc = fma(d * da, float(lanes), acc) and at the end hsum(acc) + 0.
//
// Why a kernel of its own: the single-row kernel read 12.6 GB/s per core
// from L2 on Zen 4 (matvec/Q3_K/avx512/128x4096), about a third of what one
// core reads from DRAM here, so decode of Q3_K files was compute-bound (it
// builds each 64-element chunk with a broadcast load, a variable shift and
// masks, and subtracts the offset with a second maddubs). Here, per
// super-block of a row:
// - the 64 bytes of 2-bit codes are one load; code register g holds
//   chunks g (low 256 bits) and 4 + g (high), (qs >> 2g) & 3, plus 4 where
//   the chunk's bit of hmask is set (one byte test, one masked byte add);
// - one vpdpbusd per register against the activation arranged the same way
//   once per matmul gives 16 lanes of code . activation;
// - the value offset (-4 x the lane's activation sum) is activation-only:
//   made by prepare, as 16-bit words interleaved like the lanes below and
//   added with one vpaddw per pair of registers;
// - registers g, g + 1 are interleaved as 16-bit words (|lane| <= 4 x 7 x
//   128 before the offset, <= 2048 after), so one vpdpwssd against the
//   scales of both chunks gives scale(g) x lane + scale(g + 1) x lane: the
//   chunks' sums for the same lane l, which is llama.cpp's grouping;
// - the two 256-bit halves (chunks g and 4 + g) add to the eight lanes.
// One row at a time, super-block after super-block: one sequential stream
// (see decode_rows_legacy_avx512.cpp on interleaving rows from DRAM).
#include <cstdint>

#include "kernels_cpu/simd_x86.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

using quant::block_q3_K;
using quant::block_q8_K;
using quant::kQK_K;

// The activation per super-block as the kernel reads it: register g is
// elements [32 g, 32 g + 32) then [128 + 32 g, 128 + 32 g + 32); then, per
// pair p of registers (2p, 2p + 1), -4 x each lane's activation sum as
// words, register 2p's in the low word of each dword, 2p + 1's in the
// high. After all super-blocks, each one's activation scale as a float.
struct PreparedBlock {
    __m512i act[4];
    __m512i offset[2];
};
static_assert(sizeof(PreparedBlock) == 384, "prepared super-block layout");

size_t d_offset(int64_t nb) { return static_cast<size_t>(nb) * sizeof(PreparedBlock); }

// Word index into the 16 group scales for the pair of code registers
// (2p, 2p + 1): dword L of either register is lane l = L % 8 of chunk
// 4 (L / 8) + g, i.e. 16-element group 2 chunk + l / 4.
__m512i scale_pair_index(int p) {
    alignas(64) int16_t idx[32];
    for (int dw = 0; dw < 16; ++dw) {
        const int half = dw / 8, lane = dw % 8;
        for (int k = 0; k < 2; ++k) {
            const int chunk = 4 * half + 2 * p + k;
            idx[2 * dw + k] = static_cast<int16_t>(2 * chunk + lane / 4);
        }
    }
    return _mm512_load_si512(idx);
}

// Bit of hmask that says "high bit set" for code register g: chunk g's in
// the low 256 bits, chunk 4 + g's in the high.
__m512i hmask_bits(int g) {
    return join256(_mm256_set1_epi8(static_cast<char>(1 << g)), _mm256_set1_epi8(static_cast<char>(1 << (4 + g))));
}

}  // namespace

size_t q3_K_rows_prepared_bytes(int64_t n) {
    const int64_t nb = n / kQK_K;
    return d_offset(nb) + static_cast<size_t>(nb) * sizeof(float);
}

void prepare_q3_K_rows(const void* a, int64_t n, void* out) {
    const int64_t nb = n / kQK_K;
    const auto* ya = static_cast<const block_q8_K*>(a);
    TANDEM_CHECK(reinterpret_cast<uintptr_t>(out) % 64 == 0, "decode rows: prepared activation not 64-byte aligned");
    auto* blocks = static_cast<PreparedBlock*>(out);
    auto* d = reinterpret_cast<float*>(static_cast<uint8_t*>(out) + d_offset(nb));
    const __m512i ones = _mm512_set1_epi8(1), minus4 = _mm512_set1_epi32(-4);
    for (int64_t i = 0; i < nb; ++i) {
        const int8_t* q = ya[i].qs;
        __m512i offset[4];
        for (int g = 0; g < 4; ++g) {
            const __m512i act = join256(load256(q + 32 * g), load256(q + 128 + 32 * g));
            blocks[i].act[g] = act;
            offset[g] = _mm512_mullo_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, act), minus4);
        }
        for (int p = 0; p < 2; ++p) blocks[i].offset[p] = interleave_words(offset[2 * p], offset[2 * p + 1]);
        d[i] = ya[i].d;
    }
}

void dot_q3_K_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
    const int64_t nb = n / kQK_K;
    const auto* act = static_cast<const PreparedBlock*>(a);
    const auto* act_d = reinterpret_cast<const float*>(static_cast<const uint8_t*>(a) + d_offset(nb));
    const __m512i low2 = _mm512_set1_epi8(0x03), four = _mm512_set1_epi8(0x04);
    const __m512i high[4] = {hmask_bits(0), hmask_bits(1), hmask_bits(2), hmask_bits(3)};
    const __m512i scale_idx[2] = {scale_pair_index(0), scale_pair_index(1)};
    for (int r = 0; r < n_rows; ++r) {
        const auto* row = reinterpret_cast<const block_q3_K*>(static_cast<const uint8_t*>(w) + static_cast<size_t>(r) * row_stride);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const block_q3_K& b = row[i];
            prefetch_row_stream(&b);
            const PreparedBlock& p = act[i];
            const __m512i qs = _mm512_loadu_si512(b.qs);
            const __m512i hm = _mm512_broadcast_i64x4(load256(b.hmask));
            __m512i dot[4];
            for (int g = 0; g < 4; ++g) {
                const __m512i low = _mm512_and_si512(g == 0 ? qs : _mm512_srli_epi16(qs, 2 * g), low2);
                const __m512i code = _mm512_mask_add_epi8(low, _mm512_test_epi8_mask(hm, high[g]), low, four);
                dot[g] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), code, p.act[g]);
            }
            const __m512i scales = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(q3_K_scales(b.scales)));
            const __m256i lanes = scaled_lanes(dot, scales, scale_idx, p.offset);
            const float dt = f16(b.d) * act_d[i];
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dt), _mm256_cvtepi32_ps(lanes), acc);
        }
        y[r] = hsum(acc) + 0.0f;  // the single-row kernel's "+ acc_min", which is 0 for Q3_K
    }
}

}  // namespace tandem::cpu::detail
