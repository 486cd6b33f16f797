// Panel GEMMs for the 32-element formats whose llama.cpp order is eight
// lanes per row (Q8_0, Q5_0, Q4_1, Q5_1: LegacyLanesOrder in
// runtime/quant/dot_order.h): per block, lane l is the integer sum of elements
// 4l..4l+3, fused into its own float accumulator with d = d_w * d_a; the
// eight accumulators are added as ((0+4)+(2+6)) + ((1+5)+(3+7)) at the end,
// then the minimum chain of Q4_1/Q5_1. Here the 16 rows of a panel sit in
// the lanes of a 512-bit register, so lane l of the reference is one
// vpdpbusd per token: the eight accumulators are eight registers per token
// and no horizontal sum is ever needed. The codes stay unsigned (Q8_0's with
// 128 added), the operand whose activation bytes come by embedded
// broadcast, and each lane starts from -offset times the sum of its four
// activation bytes (Q8_0 128, Q5_0 16, Q4_1/Q5_1 none), which the panel's
// preparation appends to each activation row: the same integer, exactly.
#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "kernels_cpu/gemm_panel.h"
#include "kernels_cpu/avx512/gemm_panel_avx512.h"
#include "runtime/quant/fp16.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;

struct PanelLegacy {
    alignas(64) uint8_t u[8][kPanelRows][4];  // unsigned codes, group l = elements 4l..4l+3
    alignas(64) float d[kPanelRows];
    alignas(64) float m[kPanelRows];          // Q4_1/Q5_1 minimum, else 0
};

// The code offset of each format: value = code - offset.
template <class Block>
constexpr int kCodeOffset = std::is_same_v<Block, block_q8_0> ? 128 : std::is_same_v<Block, block_q5_0> ? 16 : 0;


// The 32 nibbles of qs (16 bytes at qs_offset): group l < 4 the low nibbles
// of bytes 4l .., l >= 4 the high nibbles of bytes 4 (l - 4) ...
void nibbles(const panel::PanelRows& rows, int64_t i, size_t qs_offset, __m512i v[8]) {
    __m512i q[4];
    rows.lanes16(i, qs_offset, q);
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int l = 0; l < 8; ++l) v[l] = _mm512_and_si512(l < 4 ? q[l] : _mm512_srli_epi32(q[l - 4], 4), low4);
}

// Fifth bits from the 32-bit qh: bit 4l + b of qh to bit 4 of byte b of
// group l (the multiply spreads four bits to the bytes' low bits).
void add_high_bits(__m512i qh, __m512i v[8]) {
    const __m512i spread = _mm512_set1_epi32(0x00204081), lows = _mm512_set1_epi32(0x01010101);
    for (int l = 0; l < 8; ++l) {
        const __m512i four = _mm512_and_si512(_mm512_srli_epi32(qh, 4 * l), _mm512_set1_epi32(0xF));
        v[l] = _mm512_or_si512(v[l], _mm512_slli_epi32(_mm512_and_si512(_mm512_mullo_epi32(four, spread), lows), 4));
    }
}

// Bytes 0 .. 15 of a block whose qh follows a 2-byte d: qh = (w0 >> 16) | (w1 << 16).
__m512i qh_after_d(const __m512i w[4]) { return _mm512_or_si512(_mm512_srli_epi32(w[0], 16), _mm512_slli_epi32(w[1], 16)); }

// Block i of all 16 rows, rows transposed into lanes (panel::PanelRows):
// values() gives the eight registers of unsigned codes (group l = elements
// 4l .. 4l + 3; value = code - kCodeOffset) and the dword lane d | m << 16 (m = 0 where a format has no
// minimum). Reads stay inside each block.
void values(const panel::PanelRows& rows, int64_t i, const block_q8_0*, __m512i v[8], __m512i& header) {
    rows.lanes32(i, offsetof(block_q8_0, qs), v);
    for (int l = 0; l < 8; ++l) v[l] = _mm512_xor_si512(v[l], _mm512_set1_epi8(static_cast<char>(0x80)));  // + 128
    __m512i w[4];
    rows.lanes16(i, 0, w);
    header = _mm512_and_si512(w[0], _mm512_set1_epi32(0xFFFF));
}
void values(const panel::PanelRows& rows, int64_t i, const block_q5_0*, __m512i v[8], __m512i& header) {
    __m512i w[4];
    rows.lanes16(i, 0, w);
    nibbles(rows, i, offsetof(block_q5_0, qs), v);
    add_high_bits(qh_after_d(w), v);
    header = _mm512_and_si512(w[0], _mm512_set1_epi32(0xFFFF));
}
void values(const panel::PanelRows& rows, int64_t i, const block_q4_1*, __m512i v[8], __m512i& header) {
    __m512i w[4];
    rows.lanes16(i, 0, w);
    nibbles(rows, i, offsetof(block_q4_1, qs), v);
    header = w[0];
}
void values(const panel::PanelRows& rows, int64_t i, const block_q5_1*, __m512i v[8], __m512i& header) {
    __m512i w[4];
    rows.lanes16(i, 0, w);
    nibbles(rows, i, offsetof(block_q5_1, qs), v);
    add_high_bits(w[1], v);
    header = w[0];
}

template <class Block>
void unpack_legacy_rows(const panel::PanelRows& rows, int64_t i, PanelLegacy& p) {
    __m512i v[8], header;
    values(rows, i, static_cast<const Block*>(nullptr), v, header);
    for (int l = 0; l < 8; ++l) _mm512_store_si512(p.u[l], _mm512_maskz_mov_epi32(rows.live, v[l]));
    header = _mm512_maskz_mov_epi32(rows.live, header);
    _mm512_store_ps(p.d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(header)));
    _mm512_store_ps(p.m, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(header, 16))));
}

template <class Block, class Act>
void legacy_panel_gemm(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                       size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    constexpr bool kMin = std::is_same_v<Act, block_q8_1>;
    constexpr bool kStarts = kCodeOffset<Block> != 0;
    constexpr int NT = 2;  // eight accumulators per token: two tokens fill the registers
    const int64_t nb = n_cols / 32;
    auto* blocks = static_cast<PanelLegacy*>(buf);
    const panel::PanelRows rows(w, row_stride, n_rows, sizeof(Block));
    for (int64_t i = 0; i < nb; ++i) unpack_legacy_rows<Block>(rows, i, blocks[i]);
    const auto* abase = static_cast<const uint8_t*>(a);
    const size_t starts_at = panel::extras_offset<Act>(nb);  // the lane starts
    const auto store_mask = static_cast<__mmask16>((1u << n_rows) - 1u);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += NT) {
        const Act* act[NT];
        const uint8_t* starts[NT];
        for (int t = 0; t < NT; ++t) {
            act[t] = reinterpret_cast<const Act*>(abase + (t0 + t) * a_stride);
            starts[t] = reinterpret_cast<const uint8_t*>(act[t]) + starts_at;
        }
        __m512 acc[NT][8], acc_min[NT];
        for (int t = 0; t < NT; ++t) {
            for (auto& v : acc[t]) v = _mm512_setzero_ps();
            acc_min[t] = _mm512_setzero_ps();
        }
        for (int64_t i = 0; i < nb; ++i) {
            const PanelLegacy& p = blocks[i];
            const __m512 dw = _mm512_load_ps(p.d);
            __m512 d[NT];
            for (int t = 0; t < NT; ++t) d[t] = _mm512_mul_ps(dw, _mm512_set1_ps(f16(act[t][i].d)));
            for (int l = 0; l < 8; ++l) {
                const __m512i wv = _mm512_load_si512(p.u[l]);  // one load for every token
                for (int t = 0; t < NT; ++t) {
                    const __m512i start = kStarts ? panel::bcast4(starts[t] + kLaneStartsExtraBytes * static_cast<size_t>(i) + 4 * l) : _mm512_setzero_si512();
                    const __m512i lane = panel::dpbusd_bcast(start, wv, act[t][i].qs + 4 * l);
                    acc[t][l] = _mm512_fmadd_ps(d[t], _mm512_cvtepi32_ps(lane), acc[t][l]);
                }
            }
            if constexpr (kMin) {
                for (int t = 0; t < NT; ++t) {
                    acc_min[t] = _mm512_fmadd_ps(_mm512_load_ps(p.m), _mm512_set1_ps(f16(act[t][i].s)), acc_min[t]);
                }
            }
        }
        for (int t = 0; t < NT; ++t) {
            const __m512* s = acc[t];
            const __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s[0], s[4]), _mm512_add_ps(s[2], s[6])),
                                             _mm512_add_ps(_mm512_add_ps(s[1], s[5]), _mm512_add_ps(s[3], s[7])));
            _mm512_mask_storeu_ps(y + (t0 + t) * ldy, store_mask, _mm512_add_ps(sum, acc_min[t]));
        }
    }
}

// Lane starts of Q8_0 activation rows, as row extras: -offset x the sum of
// each four bytes.
template <int kOffset>
void write_lane_starts(void* row, int64_t n_cols) {
    static_assert(kLaneStartsExtraBytes == sizeof(__m256i), "eight int32 starts per block");
    panel::for_each_row_block<block_q8_0>(row, n_cols / 32, kLaneStartsExtraBytes, [](const block_q8_0& b, uint8_t* out) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
        const __m256i sums = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), q);  // 8 sums of four signed bytes
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_mullo_epi32(sums, _mm256_set1_epi32(-kOffset)));
    });
}

}  // namespace

size_t legacy_panel_bytes(int64_t n_cols) { return sizeof(PanelLegacy) * static_cast<size_t>(n_cols / 32); }

void q8_0_panel_prepare(quant::Type a_type, void* row, int64_t n_cols) {
    TANDEM_CHECK(a_type == quant::Type::Q8_0, "q8_0 panel: activations not Q8_0");
    write_lane_starts<kCodeOffset<block_q8_0>>(row, n_cols);
}
void q5_0_panel_prepare(quant::Type a_type, void* row, int64_t n_cols) {
    TANDEM_CHECK(a_type == quant::Type::Q8_0, "q5_0 panel: activations not Q8_0");
    write_lane_starts<kCodeOffset<block_q5_0>>(row, n_cols);
}

void q8_0_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    legacy_panel_gemm<block_q8_0, block_q8_0>(w, row_stride, n_rows, n_cols, a, a_stride, n_tokens, y, ldy, buf);
}
void q5_0_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    legacy_panel_gemm<block_q5_0, block_q8_0>(w, row_stride, n_rows, n_cols, a, a_stride, n_tokens, y, ldy, buf);
}
void q4_1_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    legacy_panel_gemm<block_q4_1, block_q8_1>(w, row_stride, n_rows, n_cols, a, a_stride, n_tokens, y, ldy, buf);
}
void q5_1_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    legacy_panel_gemm<block_q5_1, block_q8_1>(w, row_stride, n_rows, n_cols, a, a_stride, n_tokens, y, ldy, buf);
}

}  // namespace tandem::cpu::detail
