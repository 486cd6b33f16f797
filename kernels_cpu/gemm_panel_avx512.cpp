#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <cstddef>
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

// Eight rows of eight dwords in each 256-bit half of r[0..7] (half 0: rows
// 0-7, half 1: rows 8-15) to eight registers of one dword index each, rows
// in lane order: out[j] lane q = dword j of row q.
void transpose_8x8_halves(const __m512i r[8], __m512i out[8]) {
    __m512i t[8], u[8];
    for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int h = 0; h < 2; ++h) {  // rows 0-3 of each half, then rows 4-7
        u[4 * h + 0] = _mm512_unpacklo_epi64(t[4 * h], t[4 * h + 2]);      // dwords 0 | 4
        u[4 * h + 1] = _mm512_unpackhi_epi64(t[4 * h], t[4 * h + 2]);      // 1 | 5
        u[4 * h + 2] = _mm512_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);  // 2 | 6
        u[4 * h + 3] = _mm512_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);  // 3 | 7
    }
    // Each 256-bit half: rows 0-3 from u[j], rows 4-7 from u[j + 4].
    const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), second = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    for (int j = 0; j < 4; ++j) {
        out[j] = _mm512_permutex2var_epi64(u[j], first, u[j + 4]);
        out[j + 4] = _mm512_permutex2var_epi64(u[j], second, u[j + 4]);
    }
}

// Super-block i of all 16 rows at once: every four bytes of a block land in
// the panel as one dword per row side by side, so loading the rows and
// transposing them in registers gives the panel's registers directly, and
// the nibbles, scales and minimums are split with whole-register
// operations (about 25 instructions per row, where unpacking byte by byte
// took ~370 cycles per row: a tenth of a 512-token matmul). Rows past
// n_rows read row 0 and are zeroed by the live mask.
void unpack_rows(const uint8_t* const rows[kPanelRows], __mmask16 live, int64_t i, PanelBlock& p) {
    const auto block = [&](int r) { return rows[r] + i * static_cast<int64_t>(sizeof(block_q4_K)); };
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    // qs bytes 32k .. 32k + 31: low nibbles are sub-block 2k, high ones 2k + 1.
    for (int k = 0; k < 4; ++k) {
        __m512i r[8], g[8];
        for (int q = 0; q < 8; ++q) {
            const auto* lo = reinterpret_cast<const __m256i*>(block(q) + offsetof(block_q4_K, qs) + 32 * k);
            const auto* hi = reinterpret_cast<const __m256i*>(block(q + 8) + offsetof(block_q4_K, qs) + 32 * k);
            r[q] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(lo)), _mm256_loadu_si256(hi), 1);
        }
        transpose_8x8_halves(r, g);
        for (int j = 0; j < 8; ++j) {
            _mm512_store_si512(p.codes[2 * k][j], _mm512_maskz_and_epi32(live, g[j], low4));
            _mm512_store_si512(p.codes[2 * k + 1][j], _mm512_maskz_and_epi32(live, _mm512_srli_epi32(g[j], 4), low4));
        }
    }
    // The first 16 bytes (d and dmin, scales 0-3, 4-7, 8-11) as four dwords
    // per row: lane L of a[q] holds row q + 4L; a 4x4 transpose inside each
    // lane puts dword j of rows 0-15 in order into v[j].
    __m512i a[4], t[4], v[4];
    for (int q = 0; q < 4; ++q) {
        a[q] = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block(q))));
        for (int L = 1; L < 4; ++L) a[q] = _mm512_inserti32x4(a[q], _mm_loadu_si128(reinterpret_cast<const __m128i*>(block(q + 4 * L))), L);
    }
    t[0] = _mm512_unpacklo_epi32(a[0], a[1]), t[1] = _mm512_unpackhi_epi32(a[0], a[1]);
    t[2] = _mm512_unpacklo_epi32(a[2], a[3]), t[3] = _mm512_unpackhi_epi32(a[2], a[3]);
    v[0] = _mm512_maskz_mov_epi32(live, _mm512_unpacklo_epi64(t[0], t[2]));
    v[1] = _mm512_maskz_mov_epi32(live, _mm512_unpackhi_epi64(t[0], t[2]));
    v[2] = _mm512_maskz_mov_epi32(live, _mm512_unpacklo_epi64(t[1], t[3]));
    v[3] = _mm512_maskz_mov_epi32(live, _mm512_unpackhi_epi64(t[1], t[3]));
    // element::q4_K_scale_min on four sub-blocks per byte lane: scales bytes
    // 0-3 (b0), 4-7 (b1), 8-11 (b2). Sub-blocks 0-3: b0 & 63, b1 & 63;
    // 4-7: (b2 & 15) | (b0 >> 6) << 4, (b2 >> 4) | (b1 >> 6) << 4. The 32-bit
    // shifts carry bits across bytes only into positions the masks clear.
    const __m512i b0 = v[1], b1 = v[2], b2 = v[3];
    const __m512i low6 = _mm512_set1_epi8(0x3F), bits45 = _mm512_set1_epi8(0x30);
    const __m512i sc[2] = {_mm512_and_si512(b0, low6),
                           _mm512_or_si512(_mm512_and_si512(b2, low4), _mm512_and_si512(_mm512_srli_epi32(b0, 2), bits45))};
    const __m512i mn[2] = {_mm512_and_si512(b1, low6), _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(b2, 4), low4),
                                                                       _mm512_and_si512(_mm512_srli_epi32(b1, 2), bits45))};
    const __m512i byte = _mm512_set1_epi32(0xFF);
    for (int s = 0; s < 8; ++s) {
        const int shift = 8 * (s % 4);
        _mm512_store_si512(p.scale[s], _mm512_and_si512(_mm512_srli_epi32(sc[s / 4], shift), byte));
        const __m512i m = _mm512_and_si512(_mm512_srli_epi32(mn[s / 4], shift), byte);
        _mm512_store_si512(p.min[s], _mm512_or_si512(m, _mm512_slli_epi32(m, 16)));  // the int16 pair (m, m)
    }
    _mm512_store_ps(p.d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v[0])));
    _mm512_store_ps(p.dmin, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v[0], 16))));
}

}  // namespace

size_t q4_K_panel_bytes(int64_t n_cols) { return sizeof(PanelBlock) * static_cast<size_t>(n_cols / kQK_K); }

void q4_K_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    constexpr int NT = panel::kTokens;
    const int64_t nb = n_cols / kQK_K;
    auto* blocks = static_cast<PanelBlock*>(buf);
    {
        const uint8_t* rows[kPanelRows];
        for (int64_t r = 0; r < kPanelRows; ++r) rows[r] = static_cast<const uint8_t*>(w) + (r < n_rows ? r : 0) * row_stride;
        const auto live = static_cast<__mmask16>((1u << n_rows) - 1u);
        for (int64_t i = 0; i < nb; ++i) unpack_rows(rows, live, i, blocks[i]);
    }
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
