// Panel GEMMs for Q2_K, Q3_K and Q5_K batch rows (see gemm_panel.h), in
// the orders dot_q2_K_batch (llama.cpp's repacked kernel: spans of 128),
// dot_q3_K_batch and dot_q5_K_batch (its tiled kernels: super-block
// totals) reproduce: integer totals per row in the lanes, then the float
// steps of the scalar reference. Also Q4_0, IQ4_NL and MXFP4 (one total
// a block, as their single-row kernels).
#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <cstddef>
#include <cstring>

#include "kernels_cpu/gemm_panel.h"
#include "kernels_cpu/avx512/gemm_panel_avx512.h"
#include "kernels_cpu/nibble_formats.h"
#include "runtime/quant/fp16.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_element.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;
constexpr int NT = panel::kTokens;

// Q5_K: sub-blocks of 32 with a 6-bit scale and minimum each; minimums as
// int16 pairs of neighbouring sub-blocks, against the activation's
// 32-element sums (as Q4_K).
struct Panel5 {
    alignas(64) uint8_t codes[8][8][kPanelRows][4];
    alignas(64) int32_t scale[8][kPanelRows];
    alignas(64) int16_t min_pair[4][kPanelRows][2];
    alignas(64) float d[kPanelRows];
    alignas(64) float dmin[kPanelRows];
};

// All 16 rows of super-block i, as the Q4_K unpacker (rows transposed into
// lanes): the nibbles of qs with bit s of qh[e] above them for sub-block s.
void unpack5_rows(const panel::PanelRows& rows, int64_t i, Panel5& p) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    __m512i qh[8];
    rows.lanes32(i, offsetof(block_q5_K, qh), qh);
    for (int k = 0; k < 4; ++k) {
        __m512i q[8];
        rows.lanes32(i, offsetof(block_q5_K, qs) + 32 * k, q);
        for (int j = 0; j < 8; ++j) {
            for (int h = 0; h < 2; ++h) {
                const int s = 2 * k + h;
                const __m512i hb = panel::move_byte_bits(qh[j], s, 4, 1);  // bit s of qh[e] to bit 4
                const __m512i lo = _mm512_and_si512(h == 0 ? q[j] : _mm512_srli_epi32(q[j], 4), low4);
                _mm512_store_si512(p.codes[s][j], _mm512_maskz_or_epi32(rows.live, lo, hb));
            }
        }
    }
    panel::unpack_k4_header(rows, i, p.scale, p.min_pair, p.d, p.dmin);
}

// Q3_K: groups of 16 with a signed 6-bit scale; value = code - 4, each
// group's dot product starting from -4 times its activation sum
// (q3_K_panel_prepare, as Q6_K).
struct Panel3 {
    alignas(64) uint8_t codes[16][4][kPanelRows][4];
    alignas(64) int32_t scale[16][kPanelRows];
    alignas(64) float d[kPanelRows];
};

// All 16 rows of super-block i (rows transposed into lanes). Element
// 128 half + 32 grp + e: bits 2 grp of qs[32 half + e], and bit 4 half +
// grp of hmask[e] above them.
void unpack3_rows(const panel::PanelRows& rows, int64_t i, Panel3& p) {
    const __m512i low2 = _mm512_set1_epi8(0x03);
    auto* codes = reinterpret_cast<__m512i*>(p.codes);  // register k / 4 holds elements k .. k + 3
    __m512i hm[8];
    rows.lanes32(i, offsetof(block_q3_K, hmask), hm);
    for (int half = 0; half < 2; ++half) {
        __m512i q[8];
        rows.lanes32(i, offsetof(block_q3_K, qs) + 32 * half, q);
        for (int grp = 0; grp < 4; ++grp) {
            const int hbit = 4 * half + grp;
            for (int j = 0; j < 8; ++j) {
                const __m512i hb = panel::move_byte_bits(hm[j], hbit, 2, 1);
                const __m512i lo = _mm512_and_si512(_mm512_srli_epi32(q[j], 2 * grp), low2);
                _mm512_store_si512(codes + 32 * half + 8 * grp + j, _mm512_maskz_or_epi32(rows.live, lo, hb));
            }
        }
    }
    // element::q3_K_scale: the 16 bytes from two before the scales (the
    // block ends with them and d, so reading past them would leave it):
    // w0 = [qs 62, qs 63, s0, s1], w1 = s2..s5, w2 = s6..s9, w3 = [s10, s11, d].
    __m512i w[4];
    rows.lanes16(i, offsetof(block_q3_K, scales) - 2, w);
    for (auto& x : w) x = _mm512_maskz_mov_epi32(rows.live, x);
    const auto bytes4 = [&](int k) { return _mm512_or_si512(_mm512_srli_epi32(w[k], 16), _mm512_slli_epi32(w[k + 1], 16)); };
    const __m512i s0 = bytes4(0), s1 = bytes4(1), s2 = bytes4(2);  // scale bytes 0-3, 4-7, 8-11
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    // Groups 4 q + b in byte b: low four bits, then the two high ones.
    const __m512i low[4] = {_mm512_and_si512(s0, low4), _mm512_and_si512(s1, low4), _mm512_and_si512(_mm512_srli_epi32(s0, 4), low4),
                            _mm512_and_si512(_mm512_srli_epi32(s1, 4), low4)};
    const __m512i byte = _mm512_set1_epi32(0xFF), thirty_two = _mm512_set1_epi32(32);
    for (int q = 0; q < 4; ++q) {
        const __m512i high = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s2, 2 * q), low2), 4);
        const __m512i six = _mm512_or_si512(low[q], high);
        for (int b = 0; b < 4; ++b) {
            const int g = 4 * q + b;
            const __m512i v = _mm512_sub_epi32(_mm512_and_si512(_mm512_srli_epi32(six, 8 * b), byte), thirty_two);
            _mm512_store_si512(p.scale[g], _mm512_maskz_mov_epi32(rows.live, v));
        }
    }
    _mm512_store_ps(p.d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(w[3], 16))));
}

// Q2_K: groups of 16 with a 4-bit scale and a 4-bit minimum each; the
// minimums as int16 pairs of neighbouring groups, for vpdpwssd against the
// activation's two group sums (one instruction per two groups, where a
// 32-bit multiply and an add per group were a fifth of the kernel's work).
struct Panel2 {
    alignas(64) uint8_t codes[16][4][kPanelRows][4];
    alignas(64) int32_t scale[16][kPanelRows];
    alignas(64) int16_t min_pair[8][kPanelRows][2];
    alignas(64) float d[kPanelRows];
    alignas(64) float dmin[kPanelRows];
};

// All 16 rows of super-block i (rows transposed into lanes): element
// 128 half + 32 grp + e is bits 2 grp of qs[32 half + e].
void unpack2_rows(const panel::PanelRows& rows, int64_t i, Panel2& p) {
    const __m512i low2 = _mm512_set1_epi8(0x03);
    auto* codes = reinterpret_cast<__m512i*>(p.codes);
    for (int half = 0; half < 2; ++half) {
        __m512i q[8];
        rows.lanes32(i, offsetof(block_q2_K, qs) + 32 * half, q);
        for (int grp = 0; grp < 4; ++grp) {
            for (int j = 0; j < 8; ++j) {
                _mm512_store_si512(codes + 32 * half + 8 * grp + j,
                                   _mm512_maskz_and_epi32(rows.live, _mm512_srli_epi32(q[j], 2 * grp), low2));
            }
        }
    }
    __m512i sv[4];
    rows.lanes16(i, offsetof(block_q2_K, scales), sv);
    const __m512i nibble = _mm512_set1_epi32(0x0F), low_byte = _mm512_set1_epi32(0xFF), byte1 = _mm512_set1_epi32(0xFF00);
    for (int j = 0; j < 4; ++j) {
        const __m512i s4 = _mm512_maskz_mov_epi32(rows.live, sv[j]);  // groups 4j .. 4j + 3, a byte each
        for (int b = 0; b < 4; ++b) {
            _mm512_store_si512(p.scale[4 * j + b], _mm512_and_si512(_mm512_srli_epi32(s4, 8 * b), nibble));
        }
        // Minimums of groups 4j .. 4j + 3 in bytes 0..3, then as the word
        // pairs (4j, 4j + 1) and (4j + 2, 4j + 3).
        const __m512i m = _mm512_and_si512(_mm512_srli_epi32(s4, 4), _mm512_set1_epi8(0x0F));
        _mm512_store_si512(p.min_pair[2 * j], _mm512_or_si512(_mm512_and_si512(m, low_byte), _mm512_slli_epi32(_mm512_and_si512(m, byte1), 8)));
        const __m512i hi = _mm512_srli_epi32(m, 16);
        _mm512_store_si512(p.min_pair[2 * j + 1], _mm512_or_si512(_mm512_and_si512(hi, low_byte), _mm512_slli_epi32(_mm512_and_si512(hi, byte1), 8)));
    }
    _mm512_store_ps(p.d, rows.halves(i, offsetof(block_q2_K, d)));
    _mm512_store_ps(p.dmin, rows.halves(i, offsetof(block_q2_K, dmin)));
}

// Q4_0, IQ4_NL, MXFP4 (nibble_formats.h): blocks of 32 codes with one
// scale; value = u - kOffset, u the nibble (Q4_0) or its table entry. The
// u stay unsigned, the vpdpbusd operand whose activation bytes come by
// embedded broadcast (one instruction per four elements, where signed
// values would need the activations unsigned, in a register broadcast
// apart), and each token's block total starts from -kOffset times the
// block's activation sum, which the panel's prepare (write_block_starts)
// appends to the activation row: the same exact integer total as the
// values' (vpdpbusd sums u8 x s8 products in int32 without saturating).
struct Panel40 {
    alignas(64) uint8_t codes[8][kPanelRows][4];
    alignas(64) float d[kPanelRows];
};

// Block i of all 16 rows (rows transposed into lanes): group g is the low
// nibbles (g < 4) or the high ones of qs[4 (g % 4) ..], looked up in the
// format's table.
template <class Block>
void unpack40_rows(const panel::PanelRows& rows, int64_t i, Panel40& p) {
    using F = NibbleFormat<Block>;
    __m512i q[4];
    rows.lanes16(i, F::kQs, q);
    const __m512i low4 = _mm512_set1_epi8(0x0F), table = _mm512_broadcast_i32x4(nibble_table<Block>());
    for (int g = 0; g < 8; ++g) {
        __m512i codes = _mm512_and_si512(g < 4 ? q[g] : _mm512_srli_epi32(q[g - 4], 4), low4);
        if constexpr (F::kLookup) codes = _mm512_shuffle_epi8(table, codes);
        _mm512_store_si512(p.codes[g], _mm512_maskz_mov_epi32(rows.live, codes));
    }
    if constexpr (F::kHalfScale) {
        _mm512_store_ps(p.d, rows.halves(i, 0));
    } else {
        for (int r = 0; r < kPanelRows; ++r) {
            p.d[r] = ((rows.live >> r) & 1) != 0 ? F::scale(*reinterpret_cast<const Block*>(rows.at(r, i, 0))) : 0.0f;
        }
    }
}

template <class Block>
void nibble_panel_gemm(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a, size_t a_stride,
                       int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    const int64_t nb = n_cols / 32;
    auto* blocks = static_cast<Panel40*>(buf);
    const panel::PanelRows rows(w, row_stride, n_rows, sizeof(Block));
    for (int64_t i = 0; i < nb; ++i) unpack40_rows<Block>(rows, i, blocks[i]);
    const size_t start_offset = panel::extras_offset<block_q8_0>(nb);
    panel::for_token_tiles<block_q8_0>(a, a_stride, n_tokens, n_rows, y, ldy, [&](const block_q8_0* const* act, __m512* out) {
        const uint8_t* start[NT];
        for (int t = 0; t < NT; ++t) start[t] = reinterpret_cast<const uint8_t*>(act[t]) + start_offset;
        __m512 acc[NT];
        for (auto& v : acc) v = _mm512_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const Panel40& p = blocks[i];
            __m512i dot[NT];
            for (int t = 0; t < NT; ++t) dot[t] = panel::bcast4(start[t] + kQ4_0PanelExtraBytes * static_cast<size_t>(i));
            for (int g = 0; g < 8; ++g) {
                const __m512i wv = _mm512_load_si512(p.codes[g]);
                for (int t = 0; t < NT; ++t) dot[t] = panel::dpbusd_bcast(dot[t], wv, act[t][i].qs + 4 * g);
            }
            const __m512 d = _mm512_load_ps(p.d);
            for (int t = 0; t < NT; ++t) {
                const __m512 da = _mm512_set1_ps(f16(act[t][i].d));
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[t]), _mm512_mul_ps(d, da), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = acc[t];
    });
}

}  // namespace

size_t q4_0_panel_bytes(int64_t n_cols) { return sizeof(Panel40) * static_cast<size_t>(n_cols / 32); }

#define TANDEM_NIBBLE_PANEL(name, Block)                                                                             \
    void name##_panel_prepare(quant::Type a_type, void* row, int64_t n_cols) {                                        \
        write_block_starts<Block>(a_type, row, n_cols);                                                                \
    }                                                                                                                  \
    void name##_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,     \
                                  size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {                \
        nibble_panel_gemm<Block>(w, row_stride, n_rows, n_cols, a, a_stride, n_tokens, y, ldy, buf);                    \
    }
TANDEM_NIBBLE_PANEL(q4_0, block_q4_0)
TANDEM_NIBBLE_PANEL(iq4_nl, block_iq4_nl)
TANDEM_NIBBLE_PANEL(mxfp4, block_mxfp4)
#undef TANDEM_NIBBLE_PANEL

size_t q2_K_panel_bytes(int64_t n_cols) { return sizeof(Panel2) * static_cast<size_t>(n_cols / kQK_K); }

void q2_K_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    const int64_t nb = n_cols / kQK_K;
    auto* blocks = static_cast<Panel2*>(buf);
    const panel::PanelRows rows(w, row_stride, n_rows, sizeof(block_q2_K));
    for (int64_t i = 0; i < nb; ++i) unpack2_rows(rows, i, blocks[i]);
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
                    for (int t = 0; t < NT; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(dot[t], sc));
                }
                // The span's minimum sum, two groups per vpdpwssd (exact).
                for (int k = 4 * span; k < 4 * span + 4; ++k) {
                    const __m512i mn = _mm512_load_si512(p.min_pair[k]);
                    for (int t = 0; t < NT; ++t) imin[t] = _mm512_dpwssd_epi32(imin[t], mn, panel::bcast4(act[t][i].bsums + 2 * k));
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
void q3_K_panel_prepare(quant::Type a_type, void* row, int64_t n_cols) {
    TANDEM_CHECK(a_type == quant::Type::Q8_K, "q3_K panel: activations not Q8_K");
    panel::write_group_starts(row, n_cols, 4);
}

void q5_K_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    const int64_t nb = n_cols / kQK_K;
    auto* blocks = static_cast<Panel5*>(buf);
    const panel::PanelRows rows(w, row_stride, n_rows, sizeof(block_q5_K));
    for (int64_t i = 0; i < nb; ++i) unpack5_rows(rows, i, blocks[i]);
    const size_t sums_offset = panel::extras_offset<block_q8_K>(nb);
    panel::for_token_tiles<block_q8_K>(a, a_stride, n_tokens, n_rows, y, ldy, [&](const block_q8_K* const* act, __m512* out) {
        const uint8_t* sums[NT];  // the 32-element sums k4_panel_prepare appended
        for (int t = 0; t < NT; ++t) sums[t] = reinterpret_cast<const uint8_t*>(act[t]) + sums_offset;
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
                for (int t = 0; t < NT; ++t) total[t] = _mm512_add_epi32(total[t], _mm512_mullo_epi32(dot[t], sc));
            }
            // The minimum sum, two sub-blocks per vpdpwssd, exact.
            for (int j = 0; j < 4; ++j) {
                const __m512i mn = _mm512_load_si512(p.min_pair[j]);
                for (int t = 0; t < NT; ++t) {
                    msum[t] = _mm512_dpwssd_epi32(msum[t], mn, panel::bcast4(sums[t] + kK4PanelExtraBytes * static_cast<size_t>(i) + 4 * j));
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
    auto* blocks = static_cast<Panel3*>(buf);
    const panel::PanelRows rows(w, row_stride, n_rows, sizeof(block_q3_K));
    for (int64_t i = 0; i < nb; ++i) unpack3_rows(rows, i, blocks[i]);
    const size_t starts_offset = panel::extras_offset<block_q8_K>(nb);
    panel::for_token_tiles<block_q8_K>(a, a_stride, n_tokens, n_rows, y, ldy, [&](const block_q8_K* const* act, __m512* out) {
        const uint8_t* starts[NT];  // the group starts q3_K_panel_prepare appended
        for (int t = 0; t < NT; ++t) starts[t] = reinterpret_cast<const uint8_t*>(act[t]) + starts_offset;
        __m512 acc[NT];
        for (auto& v : acc) v = _mm512_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const Panel3& p = blocks[i];
            __m512i total[NT];
            for (auto& v : total) v = _mm512_setzero_si512();
            for (int g = 0; g < 16; ++g) {
                __m512i dot[NT];  // from -4 times the group's activation sum: value = code - 4
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
                acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(act[t][i].d), _mm512_mul_ps(_mm512_cvtepi32_ps(total[t]), d), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = acc[t];
    });
}

}  // namespace tandem::cpu::detail
