// Panel GEMMs for Q2_K, Q3_K and Q5_K batch rows (see gemm_panel.h), in
// the orders dot_q2_K_batch (llama.cpp's repacked kernel: spans of 128),
// dot_q3_K_batch and dot_q5_K_batch (its tiled kernels: super-block
// totals) reproduce: integer totals per row in the lanes, then the float
// steps of the scalar reference.
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
constexpr int NT = panel::kTokens;

// Q5_K: sub-blocks of 32 with a 6-bit scale and minimum each; minimums
// twice as int16 pairs, for vpdpwssd against two 16-element activation
// sums (as Q4_K).
struct Panel5 {
    alignas(64) uint8_t codes[8][8][kPanelRows][4];
    alignas(64) int32_t scale[8][kPanelRows];
    alignas(64) int16_t min[8][kPanelRows][2];
    alignas(64) float d[kPanelRows];
    alignas(64) float dmin[kPanelRows];
};

void unpack5(const block_q5_K* rows[kPanelRows], int64_t n_rows, int64_t i, Panel5& p) {
    std::memset(&p, 0, sizeof p);  // missing rows: zero codes, scales and d
    for (int64_t r = 0; r < n_rows; ++r) {
        const block_q5_K& b = rows[r][i];
        for (int s = 0; s < 8; ++s) {
            int sc = 0, m = 0;
            element::q4_K_scale_min(b.scales, s, sc, m);
            p.scale[s][r] = sc;
            p.min[s][r][0] = p.min[s][r][1] = static_cast<int16_t>(m);
            const uint8_t* qs = b.qs + 32 * (s / 2);
            const int shift = 4 * (s % 2);
            uint8_t c[32];
            for (int l = 0; l < 32; ++l) c[l] = static_cast<uint8_t>(((qs[l] >> shift) & 0xF) | ((b.qh[l] >> s) & 1) << 4);
            panel::put_codes32(p.codes, r, 32 * s, c);
        }
        p.d[r] = fp16_to_fp32(b.d);
        p.dmin[r] = fp16_to_fp32(b.dmin);
    }
}

// Q3_K: groups of 16 with a signed 6-bit scale; value = code - 4. Scales
// also as int16 pairs of neighbouring groups, for the offset term by
// vpdpwssd against two group activation sums (as Q6_K).
struct Panel3 {
    alignas(64) uint8_t codes[16][4][kPanelRows][4];
    alignas(64) int32_t scale[16][kPanelRows];
    alignas(64) int16_t scale_pair[8][kPanelRows][2];
    alignas(64) float d[kPanelRows];
};

void unpack3(const block_q3_K* rows[kPanelRows], int64_t n_rows, int64_t i, Panel3& p) {
    std::memset(&p, 0, sizeof p);
    for (int64_t r = 0; r < n_rows; ++r) {
        const block_q3_K& b = rows[r][i];
        // Element k = 128 half + 32 shift_group + e (element::k_low_bit_index
        // in loop form): two bits of qs, one bit of hmask.
        for (int half = 0; half < 2; ++half) {
            for (int grp = 0; grp < 4; ++grp) {
                const uint8_t* qs = b.qs + 32 * half;
                const int hbit = 4 * half + grp;
                uint8_t c[32];
                for (int e = 0; e < 32; ++e) {
                    c[e] = static_cast<uint8_t>(((qs[e] >> (2 * grp)) & 3) | ((b.hmask[e] >> hbit) & 1) << 2);
                }
                panel::put_codes32(p.codes, r, 128 * half + 32 * grp, c);
            }
        }
        for (int g = 0; g < 16; ++g) {
            p.scale[g][r] = element::q3_K_scale(b.scales, g);
            p.scale_pair[g / 2][r][g % 2] = static_cast<int16_t>(p.scale[g][r]);
        }
        p.d[r] = fp16_to_fp32(b.d);
    }
}

// Q2_K: groups of 16 with a 4-bit scale and a 4-bit minimum each.
struct Panel2 {
    alignas(64) uint8_t codes[16][4][kPanelRows][4];
    alignas(64) int32_t scale[16][kPanelRows];
    alignas(64) int32_t min[16][kPanelRows];
    alignas(64) float d[kPanelRows];
    alignas(64) float dmin[kPanelRows];
};

void unpack2(const block_q2_K* rows[kPanelRows], int64_t n_rows, int64_t i, Panel2& p) {
    std::memset(&p, 0, sizeof p);
    for (int64_t r = 0; r < n_rows; ++r) {
        const block_q2_K& b = rows[r][i];
        for (int half = 0; half < 2; ++half) {  // as Q3_K, without hmask
            for (int grp = 0; grp < 4; ++grp) {
                const uint8_t* qs = b.qs + 32 * half;
                uint8_t c[32];
                for (int e = 0; e < 32; ++e) c[e] = static_cast<uint8_t>((qs[e] >> (2 * grp)) & 3);
                panel::put_codes32(p.codes, r, 128 * half + 32 * grp, c);
            }
        }
        for (int g = 0; g < 16; ++g) {
            p.scale[g][r] = b.scales[g] & 0xF;
            p.min[g][r] = b.scales[g] >> 4;
        }
        p.d[r] = fp16_to_fp32(b.d);
        p.dmin[r] = fp16_to_fp32(b.dmin);
    }
}

// Q4_0: blocks of 32 with an fp16 scale; value = code - 8, kept signed, so
// vpdpbusd takes the activations offset by 128 (flip_activations) and each
// block's total starts from -128 times the sum of its values: the exact
// total, without the activation sums the offset would otherwise need.
struct Panel40 {
    alignas(64) int8_t v[8][kPanelRows][4];
    alignas(64) int32_t corr[kPanelRows];
    alignas(64) float d[kPanelRows];
};

void unpack40(const block_q4_0* rows[kPanelRows], int64_t n_rows, int64_t i, Panel40& p) {
    std::memset(&p, 0, sizeof p);
    for (int64_t r = 0; r < n_rows; ++r) {
        const block_q4_0& b = rows[r][i];
        int8_t v[32];
        int sum = 0;
        for (int j = 0; j < 16; ++j) {
            v[j] = static_cast<int8_t>((b.qs[j] & 0xF) - 8);
            v[j + 16] = static_cast<int8_t>((b.qs[j] >> 4) - 8);
        }
        for (int j = 0; j < 32; ++j) sum += v[j];
        panel::put_codes32(p.v, r, 0, reinterpret_cast<const uint8_t*>(v));
        p.corr[r] = -128 * sum;
        p.d[r] = fp16_to_fp32(b.d);
    }
}

}  // namespace

size_t q4_0_panel_bytes(int64_t n_cols) { return sizeof(Panel40) * static_cast<size_t>(n_cols / 32); }

void q4_0_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    const int64_t nb = n_cols / 32;
    const Panel40* blocks = panel::unpack_panel<block_q4_0, Panel40>(w, row_stride, n_rows, nb, buf, unpack40);
    panel::for_token_tiles<block_q8_0>(a, a_stride, n_tokens, n_rows, y, ldy, [&](const block_q8_0* const* act, __m512* out) {
        __m512 acc[NT];
        for (auto& v : acc) v = _mm512_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const Panel40& p = blocks[i];
            const __m512i corr = _mm512_load_si512(p.corr);
            __m512i dot[NT];
            for (auto& v : dot) v = corr;
            for (int g = 0; g < 8; ++g) {
                const __m512i wv = _mm512_load_si512(p.v[g]);
                for (int t = 0; t < NT; ++t) {
                    dot[t] = _mm512_dpbusd_epi32(dot[t], panel::bcast4(act[t][i].qs + 4 * g), wv);
                }
            }
            const __m512 d = _mm512_load_ps(p.d);
            for (int t = 0; t < NT; ++t) {
                const __m512 da = _mm512_set1_ps(fp16_to_fp32(act[t][i].d));
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[t]), _mm512_mul_ps(d, da), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = acc[t];
    });
}

size_t q2_K_panel_bytes(int64_t n_cols) { return sizeof(Panel2) * static_cast<size_t>(n_cols / kQK_K); }

void q2_K_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    const int64_t nb = n_cols / kQK_K;
    const Panel2* blocks = panel::unpack_panel<block_q2_K, Panel2>(w, row_stride, n_rows, nb, buf, unpack2);
    panel::for_token_tiles<block_q8_K>(a, a_stride, n_tokens, n_rows, y, ldy, [&](const block_q8_K* const* act, __m512* out) {
        __m512 acc[NT], acc_min[NT];
        for (int t = 0; t < NT; ++t) acc[t] = acc_min[t] = _mm512_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const Panel2& p = blocks[i];
            const __m512 d = _mm512_load_ps(p.d);
            const __m512 dmin = _mm512_load_ps(p.dmin);
            for (int span = 0; span < 2; ++span) {  // 128 elements = 8 groups of 16
                __m512i isum[NT], imin[NT];
                for (int t = 0; t < NT; ++t) isum[t] = imin[t] = _mm512_setzero_si512();
                for (int g = 8 * span; g < 8 * span + 8; ++g) {
                    __m512i dot[NT];
                    for (auto& v : dot) v = _mm512_setzero_si512();
                    for (int q = 0; q < 4; ++q) {
                        const __m512i wv = _mm512_load_si512(p.codes[g][q]);
                        for (int t = 0; t < NT; ++t) dot[t] = panel::dpbusd_bcast(dot[t], wv, act[t][i].qs + 16 * g + 4 * q);
                    }
                    const __m512i sc = _mm512_load_si512(p.scale[g]);
                    const __m512i mn = _mm512_load_si512(p.min[g]);
                    for (int t = 0; t < NT; ++t) {
                        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(dot[t], sc));
                        imin[t] = _mm512_add_epi32(imin[t], _mm512_mullo_epi32(mn, _mm512_set1_epi32(act[t][i].bsums[g])));
                    }
                }
                for (int t = 0; t < NT; ++t) {
                    const __m512 da = _mm512_set1_ps(act[t][i].d);
                    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, da), acc[t]);
                    acc_min[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(imin[t]), _mm512_mul_ps(dmin, da), acc_min[t]);
                }
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = _mm512_sub_ps(acc[t], acc_min[t]);
    });
}

size_t q5_K_panel_bytes(int64_t n_cols) { return sizeof(Panel5) * static_cast<size_t>(n_cols / kQK_K); }
size_t q3_K_panel_bytes(int64_t n_cols) { return sizeof(Panel3) * static_cast<size_t>(n_cols / kQK_K); }

void q5_K_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    const int64_t nb = n_cols / kQK_K;
    const Panel5* blocks = panel::unpack_panel<block_q5_K, Panel5>(w, row_stride, n_rows, nb, buf, unpack5);
    panel::for_token_tiles<block_q8_K>(a, a_stride, n_tokens, n_rows, y, ldy, [&](const block_q8_K* const* act, __m512* out) {
        __m512 acc[NT];
        for (auto& v : acc) v = _mm512_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const Panel5& p = blocks[i];
            __m512i total[NT], msum[NT];
            for (int t = 0; t < NT; ++t) total[t] = msum[t] = _mm512_setzero_si512();
            for (int s = 0; s < 8; ++s) {
                __m512i dot[NT];
                for (auto& v : dot) v = _mm512_setzero_si512();
                for (int g = 0; g < 8; ++g) {
                    const __m512i wv = _mm512_load_si512(p.codes[s][g]);
                    for (int t = 0; t < NT; ++t) dot[t] = panel::dpbusd_bcast(dot[t], wv, act[t][i].qs + 32 * s + 4 * g);
                }
                const __m512i sc = _mm512_load_si512(p.scale[s]);
                const __m512i mn = _mm512_load_si512(p.min[s]);
                for (int t = 0; t < NT; ++t) {
                    total[t] = _mm512_add_epi32(total[t], _mm512_mullo_epi32(dot[t], sc));
                    // min * (bsum[2s] + bsum[2s+1]) in one instruction, exact.
                    msum[t] = _mm512_dpwssd_epi32(msum[t], mn, panel::bcast4(act[t][i].bsums + 2 * s));
                }
            }
            const __m512 d = _mm512_load_ps(p.d);
            const __m512 dmin = _mm512_load_ps(p.dmin);
            for (int t = 0; t < NT; ++t) {
                // v = fma(-dmin, msum, total * d); acc = fma(da, v, acc)
                const __m512 v = _mm512_fnmadd_ps(dmin, _mm512_cvtepi32_ps(msum[t]), _mm512_mul_ps(_mm512_cvtepi32_ps(total[t]), d));
                acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(act[t][i].d), v, acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = acc[t];
    });
}

void q3_K_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    const int64_t nb = n_cols / kQK_K;
    const Panel3* blocks = panel::unpack_panel<block_q3_K, Panel3>(w, row_stride, n_rows, nb, buf, unpack3);
    panel::for_token_tiles<block_q8_K>(a, a_stride, n_tokens, n_rows, y, ldy, [&](const block_q8_K* const* act, __m512* out) {
        __m512 acc[NT];
        for (auto& v : acc) v = _mm512_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const Panel3& p = blocks[i];
            __m512i total[NT];
            for (auto& v : total) v = _mm512_setzero_si512();
            for (int g = 0; g < 16; ++g) {
                __m512i dot[NT];
                for (auto& v : dot) v = _mm512_setzero_si512();
                for (int q = 0; q < 4; ++q) {
                    const __m512i wv = _mm512_load_si512(p.codes[g][q]);
                    for (int t = 0; t < NT; ++t) dot[t] = panel::dpbusd_bcast(dot[t], wv, act[t][i].qs + 16 * g + 4 * q);
                }
                const __m512i sc = _mm512_load_si512(p.scale[g]);
                for (int t = 0; t < NT; ++t) total[t] = _mm512_add_epi32(total[t], _mm512_mullo_epi32(dot[t], sc));
            }
            // value = code - 4: less 4 * sum over groups of scale *
            // activation sum, two groups per vpdpwssd; the same integer as
            // subtracting inside each group.
            for (int t = 0; t < NT; ++t) {
                const __m512i off = panel::scaled_group_sums(p.scale_pair, act[t][i].bsums);
                total[t] = _mm512_sub_epi32(total[t], _mm512_slli_epi32(off, 2));
            }
            const __m512 d = _mm512_load_ps(p.d);
            for (int t = 0; t < NT; ++t) {
                acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(act[t][i].d), _mm512_mul_ps(_mm512_cvtepi32_ps(total[t]), d), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = acc[t];
    });
}

}  // namespace tandem::cpu::detail
