// Panel GEMMs for the K-quants with 16-element groups on AVX2 (scheme in
// avx2/gemm_panel_avx2.h): Q6_K and Q3_K in the order of dot_q6_K_batch /
// dot_q3_K_batch (super-block total x d, then one fused multiply-add with
// the activation scale: llama.cpp's tiled kernels), Q2_K in that of
// dot_q2_K_batch (spans of 128 elements, scale and minimum terms in
// separate fused multiply-add chains: its repacked kernel). None needs a
// preparation of the activations: a code offset (Q6_K 32, Q3_K 4) or a
// minimum goes through vpmaddwd against the Q8_K block's own 16-element
// sums (bsums), two groups per instruction.
#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <cstddef>

#include "kernels_cpu/avx2/gemm_panel_avx2.h"
#include "kernels_cpu/gemm_panel.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;
using panel_avx2::kHalf;
constexpr int NT = panel_avx2::kTokens;

// The groups of 16 of a super-block against NT tokens: codes [group 16]
// [quad 4][row 8][4] (elements 16 g + 4 q ..) and group scales as int16
// pairs (sc, sc); group g's vpmaddubsw pair sums are added in int16 over
// runs of kRun quads, then widened and scaled by one vpmaddwd per run, and
// added to (or, first, assigned to) total.
template <int kRun, class Half>
inline void groups16(const Half& p, int g0, int g1, const block_q8_K* const* act, int64_t i, __m256i* total, bool first) {
    for (int g = g0; g < g1; ++g) {
        const __m256i sc = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.scale2[g]));
        for (int q0 = 0; q0 < 4; q0 += kRun) {
            __m256i dot[NT];
            for (int q = q0; q < q0 + kRun; ++q) {
                const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.codes[g][q]));
                for (int t = 0; t < NT; ++t) {
                    const __m256i pr = panel_avx2::pairs(wv, act[t][i].qs + 16 * g + 4 * q);
                    dot[t] = q == q0 ? pr : panel_avx2::add16(dot[t], pr);
                }
            }
            for (int t = 0; t < NT; ++t) {
                const __m256i m = _mm256_madd_epi16(dot[t], sc);
                total[t] = first && g == g0 && q0 == 0 ? m : _mm256_add_epi32(total[t], m);
            }
        }
    }
}

// Sum over group pairs k in [k0, k1) of pair[k] (int16 coefficients of
// groups 2k, 2k + 1 per row) against bsums 2k, 2k + 1 of the token.
inline __m256i bsum_term(const int32_t (*pair)[kHalf], int k0, int k1, const block_q8_K& a) {
    __m256i sum = _mm256_setzero_si256();
    for (int k = k0; k < k1; ++k) {
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(pair[k])),
                                                      panel_avx2::bcast4(a.bsums + 2 * k)));
    }
    return sum;
}

// ---- Q6_K and Q3_K ---------------------------------------------------------------
// Per super-block of a half panel: unsigned codes (value = code - offset),
// group scales as pairs (sc, sc), the offset coefficients of group pairs
// (offset sc 2k, offset sc 2k+1), d per row.
struct HalfG16 {
    alignas(32) uint8_t codes[16][4][kHalf][4];
    alignas(32) int32_t scale2[16][kHalf];
    alignas(32) int32_t coef2[8][kHalf];
    alignas(32) float d[kHalf];
};

// Scales (16 signed int32 registers, lane r = row r) into the pairs.
void store_group_scales(const __m256i sc[16], int offset_shift, HalfG16& p) {
    for (int g = 0; g < 16; ++g) _mm256_store_si256(reinterpret_cast<__m256i*>(p.scale2[g]), panel_avx2::int_as_pair(sc[g]));
    for (int k = 0; k < 8; ++k) {
        const __m256i pair = panel_avx2::ints_as_pair(_mm256_slli_epi32(sc[2 * k], offset_shift), _mm256_slli_epi32(sc[2 * k + 1], offset_shift));
        _mm256_store_si256(reinterpret_cast<__m256i*>(p.coef2[k]), pair);
    }
}

// Super-block i of the 8 rows. Element k = 128 half + 32 quarter + e is
// the low nibble of ql (high nibble for quarters 2 and 3) with two bits of
// qh above it.
void unpack_k6(const panel_avx2::HalfRows& rows, int64_t i, HalfG16& p) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    auto* codes = reinterpret_cast<__m256i*>(p.codes);  // register k / 4 holds elements k .. k + 3
    for (int half = 0; half < 2; ++half) {
        __m256i ql0[8], ql1[8], qh[8];
        rows.lanes32(i, offsetof(block_q6_K, ql) + 64 * half, ql0);
        rows.lanes32(i, offsetof(block_q6_K, ql) + 64 * half + 32, ql1);
        rows.lanes32(i, offsetof(block_q6_K, qh) + 32 * half, qh);
        for (int j = 0; j < 8; ++j) {
            const __m256i l[4] = {_mm256_and_si256(ql0[j], low4), _mm256_and_si256(ql1[j], low4),
                                  _mm256_and_si256(_mm256_srli_epi32(ql0[j], 4), low4),
                                  _mm256_and_si256(_mm256_srli_epi32(ql1[j], 4), low4)};
            for (int quarter = 0; quarter < 4; ++quarter) {
                const __m256i h = panel_avx2::move_byte_bits(qh[j], 2 * quarter, 4, 2);
                _mm256_store_si256(codes + 32 * half + 8 * quarter + j, _mm256_or_si256(l[quarter], h));
            }
        }
    }
    // Sixteen signed scales per row, sign-extended from their bytes.
    __m256i sv[4], sc[16];
    rows.lanes16(i, offsetof(block_q6_K, scales), sv);
    for (int j = 0; j < 4; ++j) {
        for (int b = 0; b < 4; ++b) sc[4 * j + b] = _mm256_srai_epi32(_mm256_slli_epi32(sv[j], 24 - 8 * b), 24);
    }
    store_group_scales(sc, 5, p);  // offset 32
    _mm256_store_ps(p.d, rows.halves(i, offsetof(block_q6_K, d)));
}

// Super-block i of the 8 rows. Element 128 half + 32 grp + e: bits 2 grp of
// qs[32 half + e], and bit 4 half + grp of hmask[e] above them.
void unpack_k3(const panel_avx2::HalfRows& rows, int64_t i, HalfG16& p) {
    const __m256i low2 = _mm256_set1_epi8(0x03);
    auto* codes = reinterpret_cast<__m256i*>(p.codes);
    __m256i hm[8];
    rows.lanes32(i, offsetof(block_q3_K, hmask), hm);
    for (int half = 0; half < 2; ++half) {
        __m256i q[8];
        rows.lanes32(i, offsetof(block_q3_K, qs) + 32 * half, q);
        for (int grp = 0; grp < 4; ++grp) {
            for (int j = 0; j < 8; ++j) {
                const __m256i hb = panel_avx2::move_byte_bits(hm[j], 4 * half + grp, 2, 1);
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi32(q[j], 2 * grp), low2);
                _mm256_store_si256(codes + 32 * half + 8 * grp + j, _mm256_or_si256(lo, hb));
            }
        }
    }
    // element::q3_K_scale: the 16 bytes from two before the scales (the
    // block ends with them and d, so reading past them would leave it):
    // w0 = [qs 62, qs 63, s0, s1], w1 = s2..s5, w2 = s6..s9, w3 = [s10, s11, d].
    __m256i w[4];
    rows.lanes16(i, offsetof(block_q3_K, scales) - 2, w);
    const auto bytes4 = [&](int k) { return _mm256_or_si256(_mm256_srli_epi32(w[k], 16), _mm256_slli_epi32(w[k + 1], 16)); };
    const __m256i s0 = bytes4(0), s1 = bytes4(1), s2 = bytes4(2);  // scale bytes 0-3, 4-7, 8-11
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    // Groups 4 q + b in byte b: low four bits, then the two high ones.
    const __m256i low[4] = {_mm256_and_si256(s0, low4), _mm256_and_si256(s1, low4), _mm256_and_si256(_mm256_srli_epi32(s0, 4), low4),
                            _mm256_and_si256(_mm256_srli_epi32(s1, 4), low4)};
    const __m256i byte = _mm256_set1_epi32(0xFF), thirty_two = _mm256_set1_epi32(32);
    __m256i sc[16];
    for (int q = 0; q < 4; ++q) {
        const __m256i six = _mm256_or_si256(low[q], _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(s2, 2 * q), low2), 4));
        for (int b = 0; b < 4; ++b) sc[4 * q + b] = _mm256_sub_epi32(_mm256_and_si256(_mm256_srli_epi32(six, 8 * b), byte), thirty_two);
    }
    store_group_scales(sc, 2, p);  // offset 4
    _mm256_store_ps(p.d, rows.halves(i, offsetof(block_q3_K, d)));
}

// Q6_K (kRun 2: codes <= 63, a pair sum at most 2 x 63 x 128 = 16128, so
// two quads add exactly in int16, not four) and Q3_K (kRun 4: codes <= 7).
template <int kRun, class Block, auto Unpack>
void group16_gemm(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a, size_t a_stride,
                  int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    const int64_t nb = n_cols / kQK_K;
    const HalfG16* blocks = panel_avx2::unpack_panel<HalfG16, Block>(w, row_stride, n_rows, nb, buf, Unpack);
    panel_avx2::for_token_tiles<block_q8_K>(a, a_stride, n_tokens, n_rows, y, ldy, [&](int h, const block_q8_K* const* act, __m256* out) {
        const HalfG16* half = blocks + h * nb;
        __m256 acc[NT];
        for (auto& v : acc) v = _mm256_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const HalfG16& p = half[i];
            // total = sum over groups of sc x (codes . a) - offset sc x bsum.
            __m256i total[NT];
            groups16<kRun>(p, 0, 16, act, i, total, true);
            const __m256 d = _mm256_load_ps(p.d);
            for (int t = 0; t < NT; ++t) {
                total[t] = _mm256_sub_epi32(total[t], bsum_term(p.coef2, 0, 8, act[t][i]));
                const __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(total[t]), d);
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(act[t][i].d), v, acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = acc[t];
    });
}

// ---- Q2_K ------------------------------------------------------------------------
// Per super-block of a half panel: codes as above, 4-bit group scales as
// pairs (sc, sc), 4-bit minimums as pairs of neighbouring groups (m 2k,
// m 2k+1) against bsums 2k, 2k + 1, d and dmin per row.
struct HalfK2 {
    alignas(32) uint8_t codes[16][4][kHalf][4];
    alignas(32) int32_t scale2[16][kHalf];
    alignas(32) int32_t min_pair[8][kHalf];
    alignas(32) float d[kHalf];
    alignas(32) float dmin[kHalf];
};

// Super-block i of the 8 rows: element 128 half + 32 grp + e is bits 2 grp
// of qs[32 half + e]; byte g of scales is scale g | minimum g << 4.
void unpack_k2(const panel_avx2::HalfRows& rows, int64_t i, HalfK2& p) {
    const __m256i low2 = _mm256_set1_epi8(0x03);
    auto* codes = reinterpret_cast<__m256i*>(p.codes);
    for (int half = 0; half < 2; ++half) {
        __m256i q[8];
        rows.lanes32(i, offsetof(block_q2_K, qs) + 32 * half, q);
        for (int grp = 0; grp < 4; ++grp) {
            for (int j = 0; j < 8; ++j) {
                _mm256_store_si256(codes + 32 * half + 8 * grp + j, _mm256_and_si256(_mm256_srli_epi32(q[j], 2 * grp), low2));
            }
        }
    }
    __m256i sv[4];
    rows.lanes16(i, offsetof(block_q2_K, scales), sv);
    const __m256i nibbles = _mm256_set1_epi8(0x0F), low_byte = _mm256_set1_epi32(0xFF), byte1 = _mm256_set1_epi32(0xFF00);
    for (int j = 0; j < 4; ++j) {  // groups 4j .. 4j + 3, a byte each
        const __m256i sc = _mm256_and_si256(sv[j], nibbles);
        for (int b = 0; b < 4; ++b) _mm256_store_si256(reinterpret_cast<__m256i*>(p.scale2[4 * j + b]), panel_avx2::byte_as_pair(sc, b));
        // Minimums in bytes 0..3, then as the word pairs (4j, 4j + 1) and
        // (4j + 2, 4j + 3).
        const __m256i m = _mm256_and_si256(_mm256_srli_epi32(sv[j], 4), nibbles);
        for (int k = 0; k < 2; ++k) {
            const __m256i mk = _mm256_srli_epi32(m, 16 * k);
            const __m256i pair = _mm256_or_si256(_mm256_and_si256(mk, low_byte), _mm256_slli_epi32(_mm256_and_si256(mk, byte1), 8));
            _mm256_store_si256(reinterpret_cast<__m256i*>(p.min_pair[2 * j + k]), pair);
        }
    }
    _mm256_store_ps(p.d, rows.halves(i, offsetof(block_q2_K, d)));
    _mm256_store_ps(p.dmin, rows.halves(i, offsetof(block_q2_K, dmin)));
}

}  // namespace

size_t q6_K_panel_bytes_avx2(int64_t n_cols) { return 2 * sizeof(HalfG16) * static_cast<size_t>(n_cols / kQK_K); }
size_t q3_K_panel_bytes_avx2(int64_t n_cols) { return q6_K_panel_bytes_avx2(n_cols); }
size_t q2_K_panel_bytes_avx2(int64_t n_cols) { return 2 * sizeof(HalfK2) * static_cast<size_t>(n_cols / kQK_K); }

void q6_K_panel_gemm_avx2(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                          size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    group16_gemm<2, block_q6_K, unpack_k6>(w, row_stride, n_rows, n_cols, a, a_stride, n_tokens, y, ldy, buf);
}

void q3_K_panel_gemm_avx2(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                          size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    group16_gemm<4, block_q3_K, unpack_k3>(w, row_stride, n_rows, n_cols, a, a_stride, n_tokens, y, ldy, buf);
}

void q2_K_panel_gemm_avx2(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                          size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    const int64_t nb = n_cols / kQK_K;
    const HalfK2* blocks = panel_avx2::unpack_panel<HalfK2, block_q2_K>(w, row_stride, n_rows, nb, buf, unpack_k2);
    panel_avx2::for_token_tiles<block_q8_K>(a, a_stride, n_tokens, n_rows, y, ldy, [&](int h, const block_q8_K* const* act, __m256* out) {
        const HalfK2* half = blocks + h * nb;
        __m256 acc[NT], acc_min[NT];
        for (int t = 0; t < NT; ++t) acc[t] = acc_min[t] = _mm256_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const HalfK2& p = half[i];
            for (int span = 0; span < 2; ++span) {  // 128 elements = 8 groups of 16
                __m256i isum[NT];
                groups16<4>(p, 8 * span, 8 * span + 8, act, i, isum, true);  // codes <= 3
                const __m256 d = _mm256_load_ps(p.d);
                for (int t = 0; t < NT; ++t) {
                    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(d, _mm256_set1_ps(act[t][i].d)), acc[t]);
                }
            }
        }
        // The minimum chain, separate in the reference too.
        for (int t = 0; t < NT; ++t) {
            for (int64_t i = 0; i < nb; ++i) {
                const HalfK2& p = half[i];
                const __m256 ddmin = _mm256_mul_ps(_mm256_load_ps(p.dmin), _mm256_set1_ps(act[t][i].d));
                for (int span = 0; span < 2; ++span) {
                    const __m256i imin = bsum_term(p.min_pair, 4 * span, 4 * span + 4, act[t][i]);
                    acc_min[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imin), ddmin, acc_min[t]);
                }
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = _mm256_sub_ps(acc[t], acc_min[t]);
    });
}

}  // namespace tandem::cpu::detail
