// AVX-512 kernels for the K-quants against Q8_K activations.
//
// Same scheme as the AVX2 file, in four chunks of 64 elements per
// super-block (four 16-element groups per chunk). A per-format view (UQ*_K)
// supplies:
//   weights<C>()  the 64 codes of chunk C as unsigned bytes,
//   scales16()    the 16 group scales as int16,
//   coef()        16 int16 coefficients of the bsums (minimums for
//                 Q2_K/Q4_K/Q5_K, offset * scale for Q3_K/Q6_K).
// Per chunk and token: maddubs (u8 x s8 -> int16 pairs) then VNNI dpwssd
// with the scales (int16 x int16 pairs accumulated into int32), two
// instructions for 64 weights. Each chunk's scale vector (scale of group
// 4C + l/8 in int16 lane l) is one permute shared by all tokens.
//
// Included by vec_dot_avx512.cpp (built with VNNI) and
// vec_dot_avx512_novnni.cpp (without), which name the entry points through
// TANDEM_AVX512_FN.
#pragma once
#include "kernels_cpu/simd_x86.h"
#include "kernels_cpu/vec_dot.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;

inline __m512i m2() { return _mm512_set1_epi8(3); }
inline __m512i m4() { return _mm512_set1_epi8(0x0F); }

// Shifts each 16-bit lane left by S (right by -S when negative); callers
// mask to whole bits within each byte afterwards.
template <int S>
inline __m512i shift_bits(__m512i v) {
    if constexpr (S > 0) {
        return _mm512_slli_epi16(v, S);
    } else if constexpr (S < 0) {
        return _mm512_srli_epi16(v, -S);
    } else {
        return v;
    }
}

// Q2_K: in each half of 128, byte l of qs[32 half..] holds the codes of the
// four 32-element groups at shifts 0, 2, 4, 6. Chunk C = groups 2p and
// 2p+1 (p = C % 2) of half C/2: the 32 bytes broadcast to both register
// halves, shifted by 4p in the lower and 4p+2 in the upper (one variable
// shift), masked to two bits.
template <int C>
inline __m512i low2_chunk(const uint8_t* qs) {
    constexpr int p = C % 2;
    const __m512i q = _mm512_broadcast_i64x4(load256(qs + 32 * (C / 2)));
    const __m512i shift = join256(_mm256_set1_epi16(4 * p), _mm256_set1_epi16(4 * p + 2));
    return _mm512_and_si512(_mm512_srlv_epi16(q, shift), m2());
}

struct UQ2K {
    using W = block_q2_K;
    static constexpr bool kMinTerm = true;
    const W& b;
    __m128i raw;
    explicit UQ2K(const W& blk) : b(blk), raw(load128(blk.scales)) {}
    __m128 d_dmin() const { return scales_pair(b.d, b.dmin); }
    template <int C>
    __m512i weights() const {
        return low2_chunk<C>(b.qs);
    }
    __m256i scales16() const { return _mm256_cvtepu8_epi16(_mm_and_si128(raw, _mm_set1_epi8(0x0F))); }
    __m256i coef() const { return _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F))); }
};

// Q3_K: Q2_K's low bits plus bit 2C (first 32) / 2C+1 (second 32) of
// hmask[l] as bit 2; code in 0..7, value code - 4.
struct UQ3K {
    using W = block_q3_K;
    static constexpr bool kMinTerm = false;
    const W& b;
    __m128i s8;
    __m512i hm;  // [hmask, hmask >> 1]: bit 2C of either half is the chunk's bit
    explicit UQ3K(const W& blk) : b(blk) {
        s8 = q3_K_scales(blk.scales);
        const __m256i h = load256(blk.hmask);
        hm = join256(h, _mm256_srli_epi16(h, 1));
    }
    __m128 d_dmin() const { return scales_pair(b.d, 0); }
    template <int C>
    __m512i weights() const {
        const __m512i high = _mm512_and_si512(shift_bits<2 - 2 * C>(hm), _mm512_set1_epi8(4));
        return _mm512_or_si512(low2_chunk<C>(b.qs), high);
    }
    __m256i scales16() const { return _mm256_cvtepi8_epi16(s8); }
    __m256i coef() const { return _mm256_slli_epi16(_mm256_cvtepi8_epi16(s8), 2); }  // 4 * scale
};

// Q4_K/Q5_K: chunk C is sub-blocks 2C (low nibbles of qs[32C..]) and 2C+1
// (high nibbles), so one 32-byte load serves both halves of the register.
template <bool kFive>
struct UQ45K {
    using W = std::conditional_t<kFive, block_q5_K, block_q4_K>;
    static constexpr bool kMinTerm = true;
    const W& b;
    __m128i sm;  // 8 scales, then 8 mins
    __m512i qh;  // Q5_K: [qh, qh >> 1], bit 2C is the chunk's fifth bit
    explicit UQ45K(const W& blk) : b(blk) {
        sm = q4_K_scales_mins(blk.scales);
        if constexpr (kFive) {
            const __m256i h = load256(blk.qh);
            qh = join256(h, _mm256_srli_epi16(h, 1));
        } else {
            qh = _mm512_setzero_si512();
        }
    }
    __m128 d_dmin() const { return scales_pair(b.d, b.dmin); }
    template <int C>
    __m512i weights() const {
        const __m256i q = load256(b.qs + 32 * C);
        __m512i w = _mm512_and_si512(join256(q, _mm256_srli_epi16(q, 4)), m4());
        if constexpr (kFive) {
            w = _mm512_or_si512(w, _mm512_and_si512(shift_bits<4 - 2 * C>(qh), _mm512_set1_epi8(0x10)));
        }
        return w;
    }
    // Each sub-block's scale and min cover two 16-element groups.
    static __m128i dup(__m128i v, int first) {
        const __m128i idx = _mm_add_epi8(_mm_set_epi8(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0), _mm_set1_epi8(static_cast<char>(first)));
        return _mm_shuffle_epi8(v, idx);
    }
    __m256i scales16() const { return _mm256_cvtepu8_epi16(dup(sm, 0)); }
    __m256i coef() const { return _mm256_cvtepu8_epi16(dup(sm, 8)); }
};

// Q6_K: chunk C covers quarters 2p, 2p+1 (p = C % 2) of half C/2: low
// nibbles (p = 0) or high nibbles (p = 1) of ql[64 half..+64], and from
// [qh, qh >> 2] of qh[32 half..] bits 4p, 4p+1 as bits 4, 5.
struct UQ6K {
    using W = block_q6_K;
    static constexpr bool kMinTerm = false;
    const W& b;
    __m128i s8;
    explicit UQ6K(const W& blk) : b(blk), s8(load128(blk.scales)) {}
    __m128 d_dmin() const { return scales_pair(b.d, 0); }
    template <int C>
    __m512i weights() const {
        constexpr int h = C / 2, p = C % 2;
        const __m512i l = load512(b.ql + 64 * h);
        const __m512i low = _mm512_and_si512(p == 0 ? l : _mm512_srli_epi16(l, 4), m4());
        const __m256i qh = load256(b.qh + 32 * h);
        const __m512i hb = join256(qh, _mm256_srli_epi16(qh, 2));
        const __m512i hi = _mm512_and_si512(shift_bits<4 - 4 * p>(hb), _mm512_set1_epi8(0x30));
        return _mm512_or_si512(low, hi);
    }
    __m256i scales16() const { return _mm256_cvtepi8_epi16(s8); }
    __m256i coef() const { return _mm256_slli_epi16(_mm256_cvtepi8_epi16(s8), 5); }  // 32 * scale
};

// Index vector for chunk C's scales: int16 lane l takes group 4C + l/8.
template <int C>
inline __m512i scale_index() {
    return _mm512_set_epi16(4 * C + 3, 4 * C + 3, 4 * C + 3, 4 * C + 3, 4 * C + 3, 4 * C + 3, 4 * C + 3, 4 * C + 3,
                            4 * C + 2, 4 * C + 2, 4 * C + 2, 4 * C + 2, 4 * C + 2, 4 * C + 2, 4 * C + 2, 4 * C + 2,
                            4 * C + 1, 4 * C + 1, 4 * C + 1, 4 * C + 1, 4 * C + 1, 4 * C + 1, 4 * C + 1, 4 * C + 1,
                            4 * C, 4 * C, 4 * C, 4 * C, 4 * C, 4 * C, 4 * C, 4 * C);
}

template <class U>
struct KDot {
    template <int NT>
    struct K {
        static void run(int64_t n, const void* w, const void* a, size_t a_stride, float* y, int64_t ldy) {
            using W = typename U::W;
            const W* x = static_cast<const W*>(w);
            const block_q8_K* ya[NT];
            for (int t = 0; t < NT; ++t) ya[t] = act_row<block_q8_K>(a, a_stride, t);
            __m512 acc[NT];
            __m256 accm[NT];  // minimum terms (Q2_K, Q4_K, Q5_K)
            for (int t = 0; t < NT; ++t) {
                acc[t] = _mm512_setzero_ps();
                accm[t] = _mm256_setzero_ps();
            }
            const int64_t nb = n / kQK_K;
            for (int64_t i = 0; i < nb; ++i) {
                const U u(x[i]);
                const __m256i coef = u.coef();
                const __m512i sc16 = _mm512_castsi256_si512(u.scales16());  // upper half never indexed
                const __m128 d_dmin = u.d_dmin();
                __m512i sumi[NT];
                __m128 dt[NT];  // [d y.d, dmin y.d] per token
                for (int t = 0; t < NT; ++t) {
                    dt[t] = _mm_mul_ps(d_dmin, _mm_set1_ps(ya[t][i].d));
                    const __m256i corr = _mm256_madd_epi16(coef, load256(ya[t][i].bsums));
                    if constexpr (U::kMinTerm) {
                        sumi[t] = _mm512_setzero_si512();
                        accm[t] = _mm256_fnmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dt[t])), _mm256_cvtepi32_ps(corr), accm[t]);
                    } else {
                        sumi[t] = join256(_mm256_sub_epi32(_mm256_setzero_si256(), corr), _mm256_setzero_si256());
                    }
                }
                unroll<4>([&](auto C) {
                    const __m512i wq = u.template weights<C()>();
                    const __m512i sc = _mm512_permutexvar_epi16(scale_index<C()>(), sc16);
                    for (int t = 0; t < NT; ++t) {
                        const __m512i p = _mm512_maddubs_epi16(wq, load512(ya[t][i].qs + 64 * C()));
                        sumi[t] = dpwssd(sumi[t], p, sc);
                    }
                });
                for (int t = 0; t < NT; ++t) {
                    acc[t] = _mm512_fmadd_ps(_mm512_broadcastss_ps(dt[t]), _mm512_cvtepi32_ps(sumi[t]), acc[t]);
                }
            }
            for (int t = 0; t < NT; ++t) {
                float s = _mm512_reduce_add_ps(acc[t]);
                if constexpr (U::kMinTerm) s += hsum(accm[t]);
                y[t * ldy] = s;
            }
        }
    };
};

template <int NT>
using Q2K = KDot<UQ2K>::K<NT>;
template <int NT>
using Q3K = KDot<UQ3K>::K<NT>;
template <int NT>
using Q4K = KDot<UQ45K<false>>::K<NT>;
template <int NT>
using Q5K = KDot<UQ45K<true>>::K<NT>;
template <int NT>
using Q6K = KDot<UQ6K>::K<NT>;

}  // namespace

void TANDEM_AVX512_FN(q2_K)(TANDEM_DOT_ARGS) { tile<Q2K>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX512_FN(q3_K)(TANDEM_DOT_ARGS) { tile<Q3K>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX512_FN(q4_K)(TANDEM_DOT_ARGS) { tile<Q4K>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX512_FN(q5_K)(TANDEM_DOT_ARGS) { tile<Q5K>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX512_FN(q6_K)(TANDEM_DOT_ARGS) { tile<Q6K>(n, w, a, a_stride, nt, y, ldy); }

}  // namespace tandem::cpu::detail
