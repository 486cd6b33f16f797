// AVX2 kernels for the K-quants against Q8_K activations.
//
// All five formats run through one loop (KDot) over super-blocks of 256,
// split into eight chunks of 32 elements. A per-format view (UQ*_K)
// supplies, for a super-block:
//   weights<C>()  the 32 codes of chunk C as unsigned bytes (offsets such as
//                 Q6_K's -32 are not applied here),
//   scales<C>()   16 int16 lanes: lanes 0-7 the scale of group 2C, lanes
//                 8-15 that of group 2C+1 (groups are 16 elements),
//   coef()        16 int16 coefficients of the activation group sums
//                 (bsums): the minimum of each group for Q2_K/Q4_K/Q5_K,
//                 offset * scale for Q3_K/Q6_K.
// maddubs(u8 codes, s8 activations) makes int16 pair sums, madd with the
// scales makes int32; the offset or minimum then costs one madd on the
// 16 bsums per super-block instead of work per element. The integer sum is
// exact; only the float combination with d differs from the scalar order.
#include <algorithm>
#include <cmath>

#include "kernels_cpu/decode_rows_x86.h"
#include "kernels_cpu/simd_x86.h"
#include "runtime/quant/fp16.h"
#include "kernels_cpu/vec_dot.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;

// Shuffle control that broadcasts byte i to bytes 0-7 and byte j to 8-15.
inline __m128i pair_mask(int i, int j) {
    return _mm_set_epi64x(static_cast<int64_t>(0x0101010101010101ull * static_cast<uint64_t>(j)),
                          static_cast<int64_t>(0x0101010101010101ull * static_cast<uint64_t>(i)));
}

// Chunk C's two group scales from 16 int8 group scales, widened to int16.
template <int C>
inline __m256i group_scales(__m128i s8) {
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(s8, pair_mask(2 * C, 2 * C + 1)));
}

inline __m256i kMask2() { return _mm256_set1_epi8(3); }
inline __m256i kMask4() { return _mm256_set1_epi8(0x0F); }

// Q2_K: 2-bit codes; in each half of 128, byte l of qs[32 half..] holds four
// codes (shifts 0,2,4,6) for chunks 4 half + 0..3.
struct UQ2K {
    using W = block_q2_K;
    static constexpr bool kMinTerm = true;
    static constexpr LaneTerm kLaneTerm = LaneTerm::MinLanes;
    const W& b;
    __m128i raw;
    explicit UQ2K(const W& blk) : b(blk), raw(load128(blk.scales)) {}
    __m128 d_dmin() const { return scales_pair(b.d, b.dmin); }
    template <int C>
    __m256i weights() const {
        const __m256i q = load256(b.qs + 32 * (C / 4));
        return _mm256_and_si256(_mm256_srli_epi16(q, 2 * (C % 4)), kMask2());
    }
    template <int C>
    __m256i scales() const {
        return group_scales<C>(_mm_and_si128(raw, _mm_set1_epi8(0x0F)));
    }
    __m256i coef() const { return _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F))); }
};

// Q3_K: as Q2_K plus a high bit, bit C of hmask[l] for chunk C (the bit
// index is 4 half + shift group, which is the chunk number); the code
// low | high << 2 is in 0..7 and the value is code - 4.
struct UQ3K {
    using W = block_q3_K;
    static constexpr bool kMinTerm = false;
    static constexpr LaneTerm kLaneTerm = LaneTerm::OffsetInline;
    static constexpr int kOffset = 4;
    const W& b;
    __m128i s8;
    __m256i hm;
    explicit UQ3K(const W& blk) : b(blk), hm(load256(blk.hmask)) {
        s8 = q3_K_scales(blk.scales);
    }
    __m128 d_dmin() const { return scales_pair(b.d, 0); }
    template <int C>
    __m256i weights() const {
        const __m256i q = load256(b.qs + 32 * (C / 4));
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(q, 2 * (C % 4)), kMask2());
        // Bit C of hm moved to bit 2 of each byte.
        __m256i h;
        if constexpr (C >= 2) {
            h = _mm256_srli_epi16(hm, C - 2);
        } else {
            h = _mm256_slli_epi16(hm, 2 - C);
        }
        return _mm256_or_si256(low, _mm256_and_si256(h, _mm256_set1_epi8(4)));
    }
    template <int C>
    __m256i scales() const {
        return group_scales<C>(s8);
    }
    __m256i coef() const { return _mm256_slli_epi16(_mm256_cvtepi8_epi16(s8), 2); }  // 4 * scale
};

// Q4_K and Q5_K: chunk C is sub-block C with one 6-bit scale and min;
// chunks 2j and 2j+1 share qs[32j..32j+31] (low and high nibbles).
template <bool kFive>
struct UQ45K {
    using W = std::conditional_t<kFive, block_q5_K, block_q4_K>;
    static constexpr bool kMinTerm = true;
    static constexpr LaneTerm kLaneTerm = LaneTerm::MinScalar;
    const W& b;
    __m128i sm;  // 8 scales, then 8 mins
    __m256i qh;
    explicit UQ45K(const W& blk) : b(blk) {
        sm = q4_K_scales_mins(blk.scales);
        if constexpr (kFive) {
            qh = load256(blk.qh);
        } else {
            qh = _mm256_setzero_si256();
        }
    }
    __m128 d_dmin() const { return scales_pair(b.d, b.dmin); }
    template <int C>
    __m256i weights() const {
        const __m256i q = load256(b.qs + 32 * (C / 2));
        __m256i w = (C % 2 == 0) ? _mm256_and_si256(q, kMask4()) : _mm256_and_si256(_mm256_srli_epi16(q, 4), kMask4());
        if constexpr (kFive) {
            // Bit C of each qh byte becomes bit 4.
            __m256i h;
            if constexpr (C >= 4) {
                h = _mm256_srli_epi16(qh, C - 4);
            } else {
                h = _mm256_slli_epi16(qh, 4 - C);
            }
            w = _mm256_or_si256(w, _mm256_and_si256(h, _mm256_set1_epi8(0x10)));
        }
        return w;
    }
    template <int C>
    __m256i scales() const {
        return _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, pair_mask(C, C)));
    }
    __m256i coef() const {
        // Each sub-block's min applies to both of its 16-element groups.
        const __m128i dup = _mm_set_epi8(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
        return _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, dup));
    }
};

// Q6_K: halves of 128; chunk C is quarter C%4 of half C/4: low nibbles of
// ql[64h..] for quarters 0-1, high nibbles for 2-3 (ql + 32 for odd
// quarters), two high bits from qh[32h + l] at shift 2 * quarter.
struct UQ6K {
    using W = block_q6_K;
    static constexpr bool kMinTerm = false;
    static constexpr LaneTerm kLaneTerm = LaneTerm::OffsetBsum;
    const W& b;
    __m128i s8;
    explicit UQ6K(const W& blk) : b(blk), s8(load128(blk.scales)) {}
    __m128 d_dmin() const { return scales_pair(b.d, 0); }
    template <int C>
    __m256i weights() const {
        constexpr int h = C / 4, qtr = C % 4;
        const __m256i l = load256(b.ql + 64 * h + 32 * (qtr & 1));
        const __m256i low = qtr < 2 ? _mm256_and_si256(l, kMask4()) : _mm256_and_si256(_mm256_srli_epi16(l, 4), kMask4());
        const __m256i hb = load256(b.qh + 32 * h);
        // Bits 2qtr, 2qtr+1 of qh moved to bits 4, 5.
        __m256i hi;
        if constexpr (2 * qtr >= 4) {
            hi = _mm256_srli_epi16(hb, 2 * qtr - 4);
        } else {
            hi = _mm256_slli_epi16(hb, 4 - 2 * qtr);
        }
        return _mm256_or_si256(low, _mm256_and_si256(hi, _mm256_set1_epi8(0x30)));
    }
    template <int C>
    __m256i scales() const {
        return group_scales<C>(s8);
    }
    __m256i coef() const { return _mm256_slli_epi16(_mm256_cvtepi8_epi16(s8), 5); }  // 32 * scale
};

// The integer work of one super-block for NT tokens: per 32-element chunk,
// maddubs (u8 codes x s8 activations) then madd with the group scales,
// added into sumi[t]; Q3_K's offset is subtracted per element pair inside
// the lanes (LaneTerm::OffsetInline). after(C) runs once chunk C is in.
template <class U, int NT, class After>
inline void accumulate_chunks(const U& u, const block_q8_K* const* ya, int64_t i, __m256i* sumi, After&& after) {
    unroll<8>([&](auto C) {
        const __m256i wq = u.template weights<C()>();
        const __m256i sc = u.template scales<C()>();
        for (int t = 0; t < NT; ++t) {
            const __m256i q8 = load256(ya[t][i].qs + 32 * C());
            __m256i p = _mm256_maddubs_epi16(wq, q8);
            if constexpr (U::kLaneTerm == LaneTerm::OffsetInline) {
                p = _mm256_sub_epi16(p, _mm256_maddubs_epi16(_mm256_set1_epi8(U::kOffset), q8));
            }
            sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(p, sc));
        }
        after(C);
    });
}

// Single rows in llama.cpp's float order: eight int32 lanes (lane l holds
// elements 4l..4l+3 of each 32-element chunk), one fused multiply-add per
// lane and super-block, the offset or minimum term as U::kLaneTerm says.
template <class U>
struct KDot {
    template <int NT>
    struct K {
        static void run(int64_t n, const void* w, const void* a, size_t a_stride, float* y, int64_t ldy) {
            using W = typename U::W;
            const W* x = static_cast<const W*>(w);
            const block_q8_K* ya[NT];
            for (int t = 0; t < NT; ++t) ya[t] = act_row<block_q8_K>(a, a_stride, t);
            __m256 acc[NT];
            float acc_min[NT] = {};
            for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
            const int64_t nb = n / kQK_K;
            for (int64_t i = 0; i < nb; ++i) {
                const U u(x[i]);
                const __m256i coef = u.coef();
                const __m128 d_dmin = u.d_dmin();
                __m256i sumi[NT];
                __m128 dt[NT];  // [d y.d, dmin y.d] per token
                for (int t = 0; t < NT; ++t) {
                    dt[t] = _mm_mul_ps(d_dmin, _mm_set1_ps(ya[t][i].d));
                    sumi[t] = _mm256_setzero_si256();
                    if constexpr (U::kLaneTerm == LaneTerm::OffsetInline) continue;
                    const __m256i corr = _mm256_madd_epi16(coef, load256(ya[t][i].bsums));
                    if constexpr (U::kLaneTerm == LaneTerm::MinLanes) {
                        acc[t] = _mm256_fnmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dt[t])), _mm256_cvtepi32_ps(corr), acc[t]);
                    } else if constexpr (U::kLaneTerm == LaneTerm::MinScalar) {
                        const float neg_dmin = -_mm_cvtss_f32(_mm_movehdup_ps(dt[t]));
                        acc_min[t] = std::fma(neg_dmin, static_cast<float>(hsum_i32(corr)), acc_min[t]);
                    } else {
                        sumi[t] = _mm256_sub_epi32(_mm256_setzero_si256(), corr);
                    }
                }
                accumulate_chunks<U, NT>(u, ya, i, sumi, [](auto) {});
                for (int t = 0; t < NT; ++t) {
                    acc[t] = _mm256_fmadd_ps(_mm256_broadcastss_ps(dt[t]), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
                }
            }
            for (int t = 0; t < NT; ++t) y[t * ldy] = hsum(acc[t]) + acc_min[t];
        }
    };
};


// Q3_K, Q5_K and Q6_K rows of a batch of 8 or more in llama.cpp's float
// order (KTiledOrder in runtime/quant/dot_order.h): the integer lanes of KDot
// summed to super-block totals, then the same float steps as the scalar
// reference.
template <class U>
struct KExact {
    template <int NT>
    struct K {
        static void run(int64_t n, const void* w, const void* a, size_t a_stride, float* y, int64_t ldy) {
            using W = typename U::W;
            const auto* x = static_cast<const W*>(w);
            const block_q8_K* ya[NT];
            for (int t = 0; t < NT; ++t) ya[t] = act_row<block_q8_K>(a, a_stride, t);
            float acc[NT] = {};
            for (int64_t i = 0; i < n / kQK_K; ++i) {
                const U u(x[i]);
                const __m256i coef = u.coef();
                __m256i sumi[NT];
                int corr[NT];
                for (int t = 0; t < NT; ++t) {
                    const __m256i c = _mm256_madd_epi16(coef, load256(ya[t][i].bsums));
                    if constexpr (U::kMinTerm) {
                        corr[t] = hsum_i32(c);
                        sumi[t] = _mm256_setzero_si256();
                    } else if constexpr (U::kLaneTerm == LaneTerm::OffsetInline) {
                        corr[t] = 0;  // subtracted inside the lanes instead
                        sumi[t] = _mm256_setzero_si256();
                    } else {
                        corr[t] = 0;
                        sumi[t] = _mm256_sub_epi32(_mm256_setzero_si256(), c);
                    }
                }
                accumulate_chunks<U, NT>(u, ya, i, sumi, [](auto) {});
                const float dw = f16(x[i].d);
                for (int t = 0; t < NT; ++t) {
                    const float dot = static_cast<float>(hsum_i32(sumi[t])) * dw;
                    float v = dot;
                    if constexpr (U::kMinTerm) {
                        const float dmin = f16(x[i].dmin);
                        const auto msum = static_cast<float>(corr[t]);
                        v = std::fma(-dmin, msum, dot);
                    }
                    acc[t] = std::fma(ya[t][i].d, v, acc[t]);
                }
            }
            for (int t = 0; t < NT; ++t) y[t * ldy] = acc[t];
        }
    };
};

// Q2_K and Q4_K in llama.cpp's float order (KSpansOrder in
// runtime/quant/dot_order.h): integer totals over Span 32-element chunks, one fused
// multiply-add each for the scale and the minimum terms.
template <class U, int Span>
struct KSpans {
    template <int NT>
    struct K {
        static void run(int64_t n, const void* w, const void* a, size_t a_stride, float* y, int64_t ldy) {
            const auto* x = static_cast<const typename U::W*>(w);
            const block_q8_K* ya[NT];
            for (int t = 0; t < NT; ++t) ya[t] = act_row<block_q8_K>(a, a_stride, t);
            float acc[NT] = {}, acc_min[NT] = {};
            for (int64_t i = 0; i < n / kQK_K; ++i) {
                const U u(x[i]);
                const __m256i coef = u.coef();
                // Lane l of corr: the minimum term of chunk l (groups 2l, 2l+1);
                // summed per span with vector adds, no trip through memory.
                int span_min[NT][8 / Span];
                for (int t = 0; t < NT; ++t) {
                    const __m256i corr = _mm256_madd_epi16(coef, load256(ya[t][i].bsums));
                    if constexpr (Span == 8) {
                        span_min[t][0] = hsum_i32(corr);
                    } else {
                        const __m128i lo = _mm256_castsi256_si128(corr), hi = _mm256_extracti128_si256(corr, 1);
                        const __m128i pairs = _mm_hadd_epi32(lo, hi);  // c0+c1, c2+c3, c4+c5, c6+c7
                        if constexpr (Span == 2) {
                            alignas(16) int v[4];
                            _mm_store_si128(reinterpret_cast<__m128i*>(v), pairs);
                            for (int j = 0; j < 4; ++j) span_min[t][j] = v[j];
                        } else {
                            const __m128i quads = _mm_hadd_epi32(pairs, pairs);  // c0..3, c4..7
                            span_min[t][0] = _mm_cvtsi128_si32(quads);
                            span_min[t][1] = _mm_extract_epi32(quads, 1);
                        }
                    }
                }
                const float dw = f16(x[i].d), dminw = f16(x[i].dmin);
                __m256i sumi[NT];
                for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
                accumulate_chunks<U, NT>(u, ya, i, sumi, [&](auto C) {
                    if constexpr ((C() + 1) % Span == 0) {
                        for (int t = 0; t < NT; ++t) {
                            const int msum = span_min[t][C() / Span];
                            const float da = ya[t][i].d;
                            acc[t] = std::fma(static_cast<float>(hsum_i32(sumi[t])), dw * da, acc[t]);
                            acc_min[t] = std::fma(static_cast<float>(msum), dminw * da, acc_min[t]);
                            sumi[t] = _mm256_setzero_si256();
                        }
                    }
                });
            }
            for (int t = 0; t < NT; ++t) y[t * ldy] = acc[t] - acc_min[t];
        }
    };
};

template <int NT>
using Q2K = KSpans<UQ2K, 8>::K<NT>;
template <int NT>
using Q2KBatch = KSpans<UQ2K, 4>::K<NT>;
template <int NT>
using Q3K = KDot<UQ3K>::K<NT>;
template <int NT>
using Q3KBatch = KExact<UQ3K>::K<NT>;
template <int NT>
using Q4K = KSpans<UQ45K<false>, 8>::K<NT>;
template <int NT>
using Q4KBatch = KSpans<UQ45K<false>, 2>::K<NT>;
template <int NT>
using Q5K = KDot<UQ45K<true>>::K<NT>;
template <int NT>
using Q5KBatch = KExact<UQ45K<true>>::K<NT>;
template <int NT>
using Q6K = KDot<UQ6K>::K<NT>;
template <int NT>
using Q6KBatch = KExact<UQ6K>::K<NT>;

// Decode rows of Q4_K (decode_rows_x86.h): the super-block sums per row.
// Q4_K for the rows kernel, with fewer instructions per super-block than
// the single-row kernel's unpacking (UQ45K; the rows kernel only needs exact totals, so the lane
// layout is free): the scales and minimums come out of their 12 bytes in
// vector registers (q4_K_scales_mins_simd: 5 instructions instead of ~20
// scalar ones), are widened once, and each chunk's scale words are one
// byte shuffle of that register (not a shuffle and a widening per chunk).
struct Q4KRowSums {
    using W = block_q4_K;
    // Per token t (activation rows ya[t], super-block i): sumi[t] and
    // corr[t]. The codes and scale words of a 64-element pair of chunks are
    // made once for all NT tokens.
    template <int NT>
    static void sums_tokens(const W& b, const block_q8_K* const* ya, int64_t i, __m256i* sumi, __m256i* corr) {
        const __m128i sm = q4_K_scales_mins_simd(b.scales);  // scales 0..7, minimums 0..7
        const __m256i sm16 = _mm256_cvtepu8_epi16(sm);
        // Each sub-block's minimum against the sums of its two 16-element groups.
        const __m128i mins_dup = _mm_set_epi8(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, mins_dup));
        for (int t = 0; t < NT; ++t) corr[t] = _mm256_madd_epi16(mins, load256(ya[t][i].bsums));
        // The eight scale words in both 128-bit lanes.
        const __m256i scales = _mm256_permute4x64_epi64(sm16, 0x44);
        const __m256i mask4 = kMask4();
        __m256i acc[NT];
        for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_si256();
        unroll<4>([&](auto P) {
            const __m256i q = load256(b.qs + 32 * P());
            const __m256i lo = _mm256_and_si256(q, mask4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask4);
            // Scale words of chunks 2P and 2P + 1: bytes 4P, 4P + 1 and 4P + 2, 4P + 3.
            const __m256i sc_lo = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<int16_t>((4 * P() + 1) << 8 | 4 * P())));
            const __m256i sc_hi = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<int16_t>((4 * P() + 3) << 8 | (4 * P() + 2))));
            for (int t = 0; t < NT; ++t) {
                const int8_t* q8 = ya[t][i].qs + 64 * P();
                const __m256i plo = _mm256_maddubs_epi16(lo, load256(q8));
                const __m256i phi = _mm256_maddubs_epi16(hi, load256(q8 + 32));
                acc[t] = _mm256_add_epi32(acc[t], _mm256_add_epi32(_mm256_madd_epi16(plo, sc_lo), _mm256_madd_epi16(phi, sc_hi)));
            }
        });
        for (int t = 0; t < NT; ++t) sumi[t] = acc[t];
    }
};

}  // namespace

void dot_q2_K_avx2(TANDEM_DOT_ARGS) { tile<Q2K>(n, w, a, a_stride, nt, y, ldy); }
void dot_q3_K_avx2(TANDEM_DOT_ARGS) { tile<Q3K>(n, w, a, a_stride, nt, y, ldy); }
void dot_q4_K_avx2(TANDEM_DOT_ARGS) { tile<Q4K>(n, w, a, a_stride, nt, y, ldy); }
void dot_q4_K_rows_avx2(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
    decode_rows<Q4KRowSums>(n, w, row_stride, n_rows, a, y);
}
void dot_q2_K_batch_avx2(TANDEM_DOT_ARGS) { tile<Q2KBatch>(n, w, a, a_stride, nt, y, ldy); }
void dot_q4_K_batch_avx2(TANDEM_DOT_ARGS) { tile<Q4KBatch>(n, w, a, a_stride, nt, y, ldy); }
void dot_q3_K_batch_avx2(TANDEM_DOT_ARGS) { tile<Q3KBatch>(n, w, a, a_stride, nt, y, ldy); }
void dot_q6_K_batch_avx2(TANDEM_DOT_ARGS) { tile<Q6KBatch>(n, w, a, a_stride, nt, y, ldy); }
void dot_q5_K_batch_avx2(TANDEM_DOT_ARGS) { tile<Q5KBatch>(n, w, a, a_stride, nt, y, ldy); }

void dot_q5_K_avx2(TANDEM_DOT_ARGS) { tile<Q5K>(n, w, a, a_stride, nt, y, ldy); }
void dot_q6_K_avx2(TANDEM_DOT_ARGS) { tile<Q6K>(n, w, a, a_stride, nt, y, ldy); }

}  // namespace tandem::cpu::detail
