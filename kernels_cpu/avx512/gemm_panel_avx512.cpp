#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <cstddef>
#include <cstring>

#include "kernels_cpu/gemm_panel.h"
#include "kernels_cpu/avx512/gemm_panel_avx512.h"
#include "runtime/quant/fp16.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;

// Per super-block of the panel: codes [sub-block 8][group 8][row 16][4],
// then scales [sub-block 8][row 16] as int32 and minimums as int16 pairs of
// neighbouring sub-blocks (unpack_k4_header), then d and dmin [row 16] as
// float.
struct PanelBlock {
    alignas(64) uint8_t codes[8][8][kPanelRows][4];
    alignas(64) int32_t scale[8][kPanelRows];
    alignas(64) int16_t min_pair[4][kPanelRows][2];
    alignas(64) float d[kPanelRows];
    alignas(64) float dmin[kPanelRows];
};

// Super-block i of all 16 rows at once: every four bytes of a block land in
// the panel as one dword per row side by side, so loading the rows and
// transposing them in registers gives the panel's registers directly, and
// the nibbles, scales and minimums are split with whole-register
// operations (about 25 instructions per row, where unpacking byte by byte
// took ~370 cycles per row: a tenth of a 512-token matmul). Rows past
// n_rows read row 0 and are zeroed by the live mask.
void unpack_rows(const panel::PanelRows& rows, int64_t i, PanelBlock& p) {
    const __mmask16 live = rows.live;
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    // qs bytes 32k .. 32k + 31: low nibbles are sub-block 2k, high ones 2k + 1.
    for (int k = 0; k < 4; ++k) {
        __m512i g[8];
        rows.lanes32(i, offsetof(block_q4_K, qs) + 32 * k, g);
        for (int j = 0; j < 8; ++j) {
            _mm512_store_si512(p.codes[2 * k][j], _mm512_maskz_and_epi32(live, g[j], low4));
            _mm512_store_si512(p.codes[2 * k + 1][j], _mm512_maskz_and_epi32(live, _mm512_srli_epi32(g[j], 4), low4));
        }
    }
    panel::unpack_k4_header(rows, i, p.scale, p.min_pair, p.d, p.dmin);
}

}  // namespace

void k4_panel_prepare(quant::Type a_type, void* row, int64_t n_cols) {
    TANDEM_CHECK(a_type == quant::Type::Q8_K, "q4_K/q5_K panel: activations not Q8_K");
    static_assert(kK4PanelExtraBytes == sizeof(__m128i), "eight int16 sums per super-block");
    panel::for_each_row_block<block_q8_K>(row, n_cols / kQK_K, kK4PanelExtraBytes, [](const block_q8_K& b, uint8_t* out) {
        // Sums of 32 from the pairs of 16-element sums (at most 32 x 128:
        // exact in 16 bits).
        const __m256i pairs = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.bsums)), _mm256_set1_epi16(1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_cvtepi32_epi16(pairs));
    });
}

size_t q4_K_panel_bytes(int64_t n_cols) { return sizeof(PanelBlock) * static_cast<size_t>(n_cols / kQK_K); }

void q4_K_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    constexpr int NT = panel::kTokens;
    const int64_t nb = n_cols / kQK_K;
    auto* blocks = static_cast<PanelBlock*>(buf);
    const panel::PanelRows rows(w, row_stride, n_rows, sizeof(block_q4_K));
    for (int64_t i = 0; i < nb; ++i) unpack_rows(rows, i, blocks[i]);
    const size_t sums_offset = panel::extras_offset<block_q8_K>(nb);
    panel::for_token_tiles<block_q8_K>(a, a_stride, n_tokens, n_rows, y, ldy, [&](const block_q8_K* const* act, __m512* out) {
        const uint8_t* sums[NT];  // the 32-element sums k4_panel_prepare appended
        for (int t = 0; t < NT; ++t) sums[t] = reinterpret_cast<const uint8_t*>(act[t]) + sums_offset;
        __m512 acc[NT], acc_min[NT];
        for (int t = 0; t < NT; ++t) acc[t] = acc_min[t] = _mm512_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const PanelBlock& p = blocks[i];
            // d * da and dmin * da per token, once per super-block (the
            // products every span multiplies by).
            __m512 dd[NT], ddmin[NT];
            {
                const __m512 d = _mm512_load_ps(p.d);
                const __m512 dmin = _mm512_load_ps(p.dmin);
                for (int t = 0; t < NT; ++t) {
                    const __m512 da = _mm512_set1_ps(act[t][i].d);
                    dd[t] = _mm512_mul_ps(d, da);
                    ddmin[t] = _mm512_mul_ps(dmin, da);
                }
            }
            for (int j = 0; j < 4; ++j) {  // spans of two sub-blocks (64 elements)
                __m512i isum[NT], imin[NT];
                for (int t = 0; t < NT; ++t) isum[t] = imin[t] = _mm512_setzero_si512();
                for (int s = 2 * j; s < 2 * j + 2; ++s) {
                    __m512i dot[NT];
                    for (int t = 0; t < NT; ++t) dot[t] = _mm512_setzero_si512();
                    for (int g = 0; g < 8; ++g) {
                        const __m512i wv = _mm512_load_si512(p.codes[s][g]);
                        for (int t = 0; t < NT; ++t) dot[t] = panel::dpbusd_bcast(dot[t], wv, act[t][i].qs + 32 * s + 4 * g);
                    }
                    const __m512i sc = _mm512_load_si512(p.scale[s]);
                    for (int t = 0; t < NT; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(dot[t], sc));
                }
                // The span's minimum sum, both sub-blocks in one vpdpwssd, exact.
                const __m512i mn = _mm512_load_si512(p.min_pair[j]);
                for (int t = 0; t < NT; ++t) {
                    imin[t] = _mm512_dpwssd_epi32(imin[t], mn, panel::bcast4(sums[t] + kK4PanelExtraBytes * static_cast<size_t>(i) + 4 * j));
                }
                for (int t = 0; t < NT; ++t) {
                    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), dd[t], acc[t]);
                    acc_min[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(imin[t]), ddmin[t], acc_min[t]);
                }
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = _mm512_sub_ps(acc[t], acc_min[t]);
    });
}

namespace {

// Per super-block of a Q6_K panel: unsigned 6-bit codes [group 16][quad 4]
// [row 16][4] (value = code - 32: each group's dot product starts from
// -32 times its activation sum, q6_K_panel_prepare), group scales [group
// 16][row 16] as int32, d [row].
struct PanelBlock6 {
    alignas(64) uint8_t codes[16][4][kPanelRows][4];
    alignas(64) int32_t scale[16][kPanelRows];
    alignas(64) float d[kPanelRows];
};

// Super-block i of all 16 rows at once, as the Q4_K unpacker: rows loaded
// and transposed so lane r is row r. Element k = 128 half + 32 quarter + e
// is the low nibble of ql (high nibble for quarters 2 and 3) with two bits
// of qh above it.
void unpack6_rows(const panel::PanelRows& rows, int64_t i, PanelBlock6& p) {
    const __mmask16 live = rows.live;
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    auto* codes = reinterpret_cast<__m512i*>(p.codes);  // register k / 4 holds elements k .. k + 3
    for (int half = 0; half < 2; ++half) {
        __m512i ql0[8], ql1[8], qh[8];
        rows.lanes32(i, offsetof(block_q6_K, ql) + 64 * half, ql0);
        rows.lanes32(i, offsetof(block_q6_K, ql) + 64 * half + 32, ql1);
        rows.lanes32(i, offsetof(block_q6_K, qh) + 32 * half, qh);
        for (int j = 0; j < 8; ++j) {
            const __m512i l[4] = {_mm512_and_si512(ql0[j], low4), _mm512_and_si512(ql1[j], low4),
                                  _mm512_and_si512(_mm512_srli_epi32(ql0[j], 4), low4),
                                  _mm512_and_si512(_mm512_srli_epi32(ql1[j], 4), low4)};
            for (int quarter = 0; quarter < 4; ++quarter) {
                // Bits 2 quarter, 2 quarter + 1 of qh above the four low bits.
                const __m512i h = panel::move_byte_bits(qh[j], 2 * quarter, 4, 2);
                _mm512_store_si512(codes + 32 * half + 8 * quarter + j, _mm512_maskz_or_epi32(live, l[quarter], h));
            }
        }
    }
    // Sixteen signed scales per row, as int32, one register per group.
    __m512i sv[4];
    rows.lanes16(i, offsetof(block_q6_K, scales), sv);
    for (int j = 0; j < 4; ++j) {
        const __m512i s4 = _mm512_maskz_mov_epi32(live, sv[j]);  // groups 4j .. 4j + 3, a byte each
        for (int b = 0; b < 4; ++b) {
            _mm512_store_si512(p.scale[4 * j + b], _mm512_srai_epi32(_mm512_slli_epi32(s4, 24 - 8 * b), 24));
        }
    }
    _mm512_store_ps(p.d, rows.halves(i, offsetof(block_q6_K, d)));
}

}  // namespace

size_t q6_K_panel_bytes(int64_t n_cols) { return sizeof(PanelBlock6) * static_cast<size_t>(n_cols / kQK_K); }
void q6_K_panel_prepare(quant::Type a_type, void* row, int64_t n_cols) {
    TANDEM_CHECK(a_type == quant::Type::Q8_K, "q6_K panel: activations not Q8_K");
    panel::write_group_starts(row, n_cols, 32);
}

void q6_K_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    constexpr int NT = panel::kTokens;
    const int64_t nb = n_cols / kQK_K;
    auto* blocks = static_cast<PanelBlock6*>(buf);
    const panel::PanelRows rows(w, row_stride, n_rows, sizeof(block_q6_K));
    for (int64_t i = 0; i < nb; ++i) unpack6_rows(rows, i, blocks[i]);
    const size_t starts_offset = panel::extras_offset<block_q8_K>(nb);
    panel::for_token_tiles<block_q8_K>(a, a_stride, n_tokens, n_rows, y, ldy, [&](const block_q8_K* const* act, __m512* out) {
        const uint8_t* starts[NT];  // the group starts q6_K_panel_prepare appended
        for (int t = 0; t < NT; ++t) starts[t] = reinterpret_cast<const uint8_t*>(act[t]) + starts_offset;
        __m512 acc[NT];
        for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const PanelBlock6& p = blocks[i];
            __m512i total[NT];
            for (int t = 0; t < NT; ++t) total[t] = _mm512_setzero_si512();
            for (int g = 0; g < 16; ++g) {
                // value = code - 32: the group's dot product starts from -32
                // times its activation sum (the same integer).
                __m512i dot[NT];
                for (int t = 0; t < NT; ++t) dot[t] = panel::bcast4(starts[t] + kGroupStartsExtraBytes * static_cast<size_t>(i) + 4 * g);
                for (int q = 0; q < 4; ++q) {
                    const __m512i wv = _mm512_load_si512(p.codes[g][q]);
                    for (int t = 0; t < NT; ++t) dot[t] = panel::dpbusd_bcast(dot[t], wv, act[t][i].qs + 16 * g + 4 * q);
                }
                const __m512i sc = _mm512_load_si512(p.scale[g]);
                for (int t = 0; t < NT; ++t) total[t] = _mm512_add_epi32(total[t], _mm512_mullo_epi32(dot[t], sc));
            }
            const __m512 d = _mm512_load_ps(p.d);
            for (int t = 0; t < NT; ++t) {
                const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(total[t]), d);
                acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(act[t][i].d), v, acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = acc[t];
    });
}

}  // namespace tandem::cpu::detail
