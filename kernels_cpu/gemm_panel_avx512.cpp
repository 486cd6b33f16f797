#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <cstring>

#include "kernels_cpu/gemm_panel.h"
#include "kernels_cpu/gemm_panel_avx512.h"
#include "runtime/quant/fp16.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_element.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;

// Per super-block of the panel: codes [sub-block 8][group 8][row 16][4],
// then scales [sub-block 8][row 16] as int32 and minimums twice as int16
// pairs (for vpdpwssd against two 16-element activation sums), then d and
// dmin [row 16] as float.
struct PanelBlock {
    alignas(64) uint8_t codes[8][8][kPanelRows][4];
    alignas(64) int32_t scale[8][kPanelRows];
    alignas(64) int16_t min[8][kPanelRows][2];
    alignas(64) float d[kPanelRows];
    alignas(64) float dmin[kPanelRows];
};

void unpack(const block_q4_K* rows[kPanelRows], int64_t n_rows, int64_t i, PanelBlock& p) {
    for (int64_t r = 0; r < kPanelRows; ++r) {
        if (r >= n_rows) {
            // Missing rows: zero codes and scales give zero, never stored.
            for (int s = 0; s < 8; ++s) {
                for (int g = 0; g < 8; ++g) std::memset(p.codes[s][g][r], 0, 4);
                p.scale[s][r] = 0;
                p.min[s][r][0] = p.min[s][r][1] = 0;
            }
            p.d[r] = p.dmin[r] = 0.0f;
            continue;
        }
        const block_q4_K& b = rows[r][i];
        for (int s = 0; s < 8; ++s) {
            int sc = 0, m = 0;
            element::q4_K_scale_min(b.scales, s, sc, m);
            p.scale[s][r] = sc;
            p.min[s][r][0] = p.min[s][r][1] = static_cast<int16_t>(m);
            const uint8_t* qs = b.qs + 32 * (s / 2);
            const int shift = 4 * (s % 2);
            uint8_t c[32];
            for (int e = 0; e < 32; ++e) c[e] = static_cast<uint8_t>((qs[e] >> shift) & 0xF);
            panel::put_codes32(p.codes, r, 32 * s, c);
        }
        p.d[r] = fp16_to_fp32(b.d);
        p.dmin[r] = fp16_to_fp32(b.dmin);
    }
}

}  // namespace

size_t q4_K_panel_bytes(int64_t n_cols) { return sizeof(PanelBlock) * static_cast<size_t>(n_cols / kQK_K); }

void q4_K_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    constexpr int NT = panel::kTokens;
    const int64_t nb = n_cols / kQK_K;
    const PanelBlock* blocks = panel::unpack_panel<block_q4_K, PanelBlock>(w, row_stride, n_rows, nb, buf, unpack);
    panel::for_token_tiles<block_q8_K>(a, a_stride, n_tokens, n_rows, y, ldy, [&](const block_q8_K* const* act, __m512* out) {
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
                    const __m512i mn = _mm512_load_si512(p.min[s]);
                    for (int t = 0; t < NT; ++t) {
                        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(dot[t], sc));
                        // min * (bsum[2s] + bsum[2s+1]) in one instruction, exact.
                        imin[t] = _mm512_dpwssd_epi32(imin[t], mn, panel::bcast4(act[t][i].bsums + 2 * s));
                    }
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
// [row 16][4] (value = code - 32), group scales [group 16][row 16] as int32
// and as int16 pairs of neighbouring groups (for vpdpwssd against two group
// activation sums), d [row].
struct PanelBlock6 {
    alignas(64) uint8_t codes[16][4][kPanelRows][4];
    alignas(64) int32_t scale[16][kPanelRows];
    alignas(64) int16_t scale_pair[8][kPanelRows][2];
    alignas(64) float d[kPanelRows];
};

void unpack6(const block_q6_K* rows[kPanelRows], int64_t n_rows, int64_t i, PanelBlock6& p) {
    for (int64_t r = 0; r < kPanelRows; ++r) {
        if (r >= n_rows) {
            for (int g = 0; g < 16; ++g) {
                for (int q = 0; q < 4; ++q) std::memset(p.codes[g][q][r], 0, 4);
                p.scale[g][r] = 0;
                p.scale_pair[g / 2][r][g % 2] = 0;
            }
            p.d[r] = 0.0f;
            continue;
        }
        const block_q6_K& b = rows[r][i];
        // Element k = 128 half + 32 quarter + e: low nibble of ql (high
        // nibble for quarters 2 and 3), two bits of qh above it.
        for (int half = 0; half < 2; ++half) {
            for (int quarter = 0; quarter < 4; ++quarter) {
                const uint8_t* ql = b.ql + half * 64 + (quarter & 1) * 32;
                const uint8_t* qh = b.qh + half * 32;
                const int lshift = quarter < 2 ? 0 : 4, hshift = 2 * quarter;
                uint8_t c[32];
                for (int e = 0; e < 32; ++e) {
                    c[e] = static_cast<uint8_t>(((ql[e] >> lshift) & 0xF) | ((qh[e] >> hshift) & 3) << 4);
                }
                panel::put_codes32(p.codes, r, 128 * half + 32 * quarter, c);
            }
        }
        for (int g = 0; g < 16; ++g) {
            p.scale[g][r] = b.scales[g];
            p.scale_pair[g / 2][r][g % 2] = b.scales[g];
        }
        p.d[r] = fp16_to_fp32(b.d);
    }
}

}  // namespace

size_t q6_K_panel_bytes(int64_t n_cols) { return sizeof(PanelBlock6) * static_cast<size_t>(n_cols / kQK_K); }

void q6_K_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    constexpr int NT = panel::kTokens;
    const int64_t nb = n_cols / kQK_K;
    const PanelBlock6* blocks = panel::unpack_panel<block_q6_K, PanelBlock6>(w, row_stride, n_rows, nb, buf, unpack6);
    panel::for_token_tiles<block_q8_K>(a, a_stride, n_tokens, n_rows, y, ldy, [&](const block_q8_K* const* act, __m512* out) {
        __m512 acc[NT];
        for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const PanelBlock6& p = blocks[i];
            __m512i total[NT];
            for (int t = 0; t < NT; ++t) total[t] = _mm512_setzero_si512();
            for (int g = 0; g < 16; ++g) {
                __m512i dot[NT];
                for (int t = 0; t < NT; ++t) dot[t] = _mm512_setzero_si512();
                for (int q = 0; q < 4; ++q) {
                    const __m512i wv = _mm512_load_si512(p.codes[g][q]);
                    for (int t = 0; t < NT; ++t) dot[t] = panel::dpbusd_bcast(dot[t], wv, act[t][i].qs + 16 * g + 4 * q);
                }
                const __m512i sc = _mm512_load_si512(p.scale[g]);
                for (int t = 0; t < NT; ++t) total[t] = _mm512_add_epi32(total[t], _mm512_mullo_epi32(dot[t], sc));
            }
            // value = code - 32: the super-block total less 32 * sum over
            // groups of scale * activation sum, two groups per vpdpwssd;
            // the same integer as subtracting inside each group.
            for (int t = 0; t < NT; ++t) {
                const __m512i off = panel::scaled_group_sums(p.scale_pair, act[t][i].bsums);
                total[t] = _mm512_sub_epi32(total[t], _mm512_slli_epi32(off, 5));
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
