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
#include <algorithm>
#include <cmath>

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
    static constexpr LaneTerm kLaneTerm = LaneTerm::MinLanes;
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
    static constexpr LaneTerm kLaneTerm = LaneTerm::OffsetInline;
    static constexpr int kOffset = 4;
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
    static constexpr LaneTerm kLaneTerm = LaneTerm::MinScalar;
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
    static constexpr LaneTerm kLaneTerm = LaneTerm::OffsetBsum;
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

// The integer work of one super-block for NT tokens: chunk C's 64 codes
// times the activations (maddubs), times the group scales (dpwssd); int32
// lane l of chunk C holds elements 64C + 4l .. 64C + 4l + 3, i.e. AVX2
// lane l % 8 of 32-element chunk 2C + l / 8. Integer sums are exact, so
// any grouping of them equals the AVX2 kernel's.
template <class U, int NT, class OnChunk>
inline void k_int_chunks(const U& u, const block_q8_K* const* ya, int64_t i, OnChunk&& on_chunk) {
    const __m512i sc16 = _mm512_castsi256_si512(u.scales16());  // upper half never indexed
    unroll<4>([&](auto C) {
        const __m512i wq = u.template weights<C()>();
        const __m512i sc = _mm512_permutexvar_epi16(scale_index<C()>(), sc16);
        __m512i part[NT];
        for (int t = 0; t < NT; ++t) {
            const __m512i q8 = load512(ya[t][i].qs + 64 * C());
            __m512i p = _mm512_maddubs_epi16(wq, q8);
            if constexpr (U::kLaneTerm == LaneTerm::OffsetInline) {
                p = _mm512_sub_epi16(p, _mm512_maddubs_epi16(_mm512_set1_epi8(U::kOffset), q8));
            }
            part[t] = dpwssd(_mm512_setzero_si512(), p, sc);
        }
        on_chunk(C, part);
    });
}

// Single rows of Q3_K, Q5_K and Q6_K in the order of llama.cpp's AVX2
// vec_dot (KDot in vec_dot_kquants_avx2.cpp): the 16 lanes folded to its 8.
template <class U>
struct KLanes {
    template <int NT>
    struct K {
        static void run(int64_t n, const void* w, const void* a, size_t a_stride, float* y, int64_t ldy) {
            const auto* x = static_cast<const typename U::W*>(w);
            const block_q8_K* ya[NT];
            for (int t = 0; t < NT; ++t) ya[t] = act_row<block_q8_K>(a, a_stride, t);
            __m256 acc[NT];
            float acc_min[NT] = {};
            for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
            for (int64_t i = 0; i < n / kQK_K; ++i) {
                const U u(x[i]);
                const __m256i coef = u.coef();
                const __m128 d_dmin = u.d_dmin();
                __m512i sumi[NT];
                for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
                k_int_chunks<U, NT>(u, ya, i, [&](auto, const __m512i* part) {
                    for (int t = 0; t < NT; ++t) sumi[t] = _mm512_add_epi32(sumi[t], part[t]);
                });
                for (int t = 0; t < NT; ++t) {
                    const __m128 dt = _mm_mul_ps(d_dmin, _mm_set1_ps(ya[t][i].d));
                    __m256i lanes = _mm256_add_epi32(_mm512_castsi512_si256(sumi[t]), _mm512_extracti64x4_epi64(sumi[t], 1));
                    if constexpr (U::kLaneTerm == LaneTerm::OffsetBsum) {
                        lanes = _mm256_sub_epi32(lanes, _mm256_madd_epi16(coef, load256(ya[t][i].bsums)));
                    } else if constexpr (U::kLaneTerm == LaneTerm::MinScalar) {
                        const int corr = hsum_i32(_mm256_madd_epi16(coef, load256(ya[t][i].bsums)));
                        acc_min[t] = std::fma(-_mm_cvtss_f32(_mm_movehdup_ps(dt)), static_cast<float>(corr), acc_min[t]);
                    }
                    acc[t] = _mm256_fmadd_ps(_mm256_broadcastss_ps(dt), _mm256_cvtepi32_ps(lanes), acc[t]);
                }
            }
            for (int t = 0; t < NT; ++t) y[t * ldy] = hsum(acc[t]) + acc_min[t];
        }
    };
};

// Q2_K and Q4_K (spans of Span 32-element chunks, one fused multiply-add
// per span for the scale and the minimum terms) and, with Span 0, the
// batch rows of Q3_K, Q5_K, Q6_K (KTiledOrder: per super-block d * total,
// minus dmin * the minimum term fused, then one fused multiply-add with the
// activation scale). Only integer totals reach the float steps, which are
// the scalar reference's.
template <class U, int Span>
struct KTotals {
    template <int NT>
    struct K {
        static void run(int64_t n, const void* w, const void* a, size_t a_stride, float* y, int64_t ldy) {
            static_assert(Span == 0 || Span == 2 || Span == 4 || Span == 8, "spans of whole 64-element chunks");
            const auto* x = static_cast<const typename U::W*>(w);
            const block_q8_K* ya[NT];
            for (int t = 0; t < NT; ++t) ya[t] = act_row<block_q8_K>(a, a_stride, t);
            float acc[NT] = {}, acc_min[NT] = {};
            constexpr int kChunksPerSpan = Span == 0 ? 4 : Span / 2;  // 64-element chunks
            for (int64_t i = 0; i < n / kQK_K; ++i) {
                const U u(x[i]);
                const __m256i coef = u.coef();
                const float dw = f16(x[i].d);
                // Lane l of corr: the minimum (or offset) term of 32-element chunk l.
                __m256i corr[NT];
                for (int t = 0; t < NT; ++t) corr[t] = _mm256_madd_epi16(coef, load256(ya[t][i].bsums));
                __m512i sumi[NT];
                for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
                k_int_chunks<U, NT>(u, ya, i, [&](auto C, const __m512i* part) {
                    for (int t = 0; t < NT; ++t) sumi[t] = _mm512_add_epi32(sumi[t], part[t]);
                    if constexpr ((C() + 1) % kChunksPerSpan == 0) {
                        for (int t = 0; t < NT; ++t) {
                            const int total = _mm512_reduce_add_epi32(sumi[t]);
                            sumi[t] = _mm512_setzero_si512();
                            const float da = ya[t][i].d;
                            if constexpr (Span == 0) {
                                const int ctot = hsum_i32(corr[t]);
                                if constexpr (U::kMinTerm) {
                                    const float dot = static_cast<float>(total) * dw;
                                    acc[t] = std::fma(da, std::fma(-f16(x[i].dmin), static_cast<float>(ctot), dot), acc[t]);
                                } else {
                                    // Q3_K's offset is already inside the lanes (OffsetInline).
                                    const int offset = U::kLaneTerm == LaneTerm::OffsetInline ? 0 : ctot;
                                    acc[t] = std::fma(da, static_cast<float>(total - offset) * dw, acc[t]);
                                }
                            } else {
                                alignas(32) int c32[8];
                                _mm256_store_si256(reinterpret_cast<__m256i*>(c32), corr[t]);
                                int msum = 0;
                                for (int l = 2 * (C() + 1 - kChunksPerSpan); l < 2 * (C() + 1); ++l) msum += c32[l];
                                acc[t] = std::fma(static_cast<float>(total), dw * da, acc[t]);
                                acc_min[t] = std::fma(static_cast<float>(msum), f16(x[i].dmin) * da, acc_min[t]);
                            }
                        }
                    }
                });
            }
            for (int t = 0; t < NT; ++t) y[t * ldy] = acc[t] - acc_min[t];
        }
    };
};

// Totals of four 8-lane vectors in one pass: [sum v0, sum v1, sum v2, sum v3].
inline __m128i hsum4_i32(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
inline __m256i fold512(__m512i v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }

// Single rows of Q2_K (spans of whole super-blocks): as KTotals
// with Span 8, but the integer totals of four super-blocks are reduced
// together (one hadd tree instead of four), then added to the float
// accumulators one super-block after the other, as the reference does.
template <class U>
struct KSuperBlocks {
    template <int NT>
    struct K {
        static void run(int64_t n, const void* w, const void* a, size_t a_stride, float* y, int64_t ldy) {
            const auto* x = static_cast<const typename U::W*>(w);
            const block_q8_K* ya[NT];
            for (int t = 0; t < NT; ++t) ya[t] = act_row<block_q8_K>(a, a_stride, t);
            float acc[NT] = {}, acc_min[NT] = {};
            const int64_t nb = n / kQK_K;
            for (int64_t i0 = 0; i0 < nb; i0 += 4) {
                const int nq = static_cast<int>(std::min<int64_t>(4, nb - i0));
                __m256i tot[NT][4], mins[NT][4];
                for (int t = 0; t < NT; ++t) {
                    for (int q = 0; q < 4; ++q) tot[t][q] = mins[t][q] = _mm256_setzero_si256();
                }
                for (int q = 0; q < nq; ++q) {
                    const int64_t i = i0 + q;
                    const U u(x[i]);
                    const __m256i coef = u.coef();
                    __m512i sumi[NT];
                    for (int t = 0; t < NT; ++t) {
                        sumi[t] = _mm512_setzero_si512();
                        mins[t][q] = _mm256_madd_epi16(coef, load256(ya[t][i].bsums));
                    }
                    k_int_chunks<U, NT>(u, ya, i, [&](auto, const __m512i* part) {
                        for (int t = 0; t < NT; ++t) sumi[t] = _mm512_add_epi32(sumi[t], part[t]);
                    });
                    for (int t = 0; t < NT; ++t) tot[t][q] = fold512(sumi[t]);
                }
                for (int t = 0; t < NT; ++t) {
                    alignas(16) int it[4], im[4];
                    _mm_store_si128(reinterpret_cast<__m128i*>(it), hsum4_i32(tot[t][0], tot[t][1], tot[t][2], tot[t][3]));
                    _mm_store_si128(reinterpret_cast<__m128i*>(im), hsum4_i32(mins[t][0], mins[t][1], mins[t][2], mins[t][3]));
                    for (int q = 0; q < nq; ++q) {
                        const int64_t i = i0 + q;
                        const float da = ya[t][i].d;
                        acc[t] = std::fma(static_cast<float>(it[q]), f16(x[i].d) * da, acc[t]);
                        acc_min[t] = std::fma(static_cast<float>(im[q]), f16(x[i].dmin) * da, acc_min[t]);
                    }
                }
            }
            for (int t = 0; t < NT; ++t) y[t * ldy] = acc[t] - acc_min[t];
        }
    };
};

// Batch rows of Q2_K and Q4_K (spans of Span 32-element chunks) for a full
// tile of four tokens: the four tokens' span totals come out of one hadd
// tree into the lanes of one vector, and the per-token fused multiply-adds
// run lane-parallel (lane t is token t's chain, as in KTotals).
template <class U, int Span>
struct KSpans4 {
    static void run(int64_t n, const void* w, const void* a, size_t a_stride, float* y, int64_t ldy) {
        constexpr int NT = 4;
        constexpr int kChunksPerSpan = Span / 2;  // 64-element chunks per span
        constexpr int kSpans = 8 / Span;
        const auto* x = static_cast<const typename U::W*>(w);
        const block_q8_K* ya[NT];
        for (int t = 0; t < NT; ++t) ya[t] = act_row<block_q8_K>(a, a_stride, t);
        __m128 acc = _mm_setzero_ps(), acc_min = _mm_setzero_ps();
        for (int64_t i = 0; i < n / kQK_K; ++i) {
            const U u(x[i]);
            const __m256i coef = u.coef();
            const __m128 da = _mm_set_ps(ya[3][i].d, ya[2][i].d, ya[1][i].d, ya[0][i].d);
            const __m128 d = _mm_mul_ps(_mm_set1_ps(f16(x[i].d)), da);
            const __m128 dmin = _mm_mul_ps(_mm_set1_ps(f16(x[i].dmin)), da);
            // Minimum terms per span, tokens in lanes: mins[s] lane t.
            alignas(32) int c32[NT][8];
            for (int t = 0; t < NT; ++t) {
                _mm256_store_si256(reinterpret_cast<__m256i*>(c32[t]), _mm256_madd_epi16(coef, load256(ya[t][i].bsums)));
            }
            __m128i mins[kSpans];
            for (int sp = 0; sp < kSpans; ++sp) {
                alignas(16) int m[NT];
                for (int t = 0; t < NT; ++t) {
                    int v = 0;
                    for (int l = sp * Span; l < (sp + 1) * Span; ++l) v += c32[t][l];
                    m[t] = v;
                }
                mins[sp] = _mm_load_si128(reinterpret_cast<const __m128i*>(m));
            }
            __m512i sumi[NT];
            for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
            k_int_chunks<U, NT>(u, ya, i, [&](auto C, const __m512i* part) {
                for (int t = 0; t < NT; ++t) sumi[t] = _mm512_add_epi32(sumi[t], part[t]);
                if constexpr ((C() + 1) % kChunksPerSpan == 0) {
                    const __m128i tot = hsum4_i32(fold512(sumi[0]), fold512(sumi[1]), fold512(sumi[2]), fold512(sumi[3]));
                    for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
                    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(tot), d, acc);
                    acc_min = _mm_fmadd_ps(_mm_cvtepi32_ps(mins[C() / kChunksPerSpan]), dmin, acc_min);
                }
            });
        }
        alignas(16) float r[NT];
        _mm_store_ps(r, _mm_sub_ps(acc, acc_min));
        for (int t = 0; t < NT; ++t) y[t * ldy] = r[t];
    }
};

// The batch kernel entry: full tiles of four tokens take KSpans4, smaller
// tiles KTotals (the same float steps, one token at a time).
template <class U, int Span>
inline void spans_tile(int64_t n, const void* w, const void* a, size_t a_stride, int nt, float* y, int64_t ldy) {
    if (nt == 4) {
        KSpans4<U, Span>::run(n, w, a, a_stride, y, ldy);
    } else {
        tile<KTotals<U, Span>::template K>(n, w, a, a_stride, nt, y, ldy);
    }
}

template <int NT>
using Q2K = KSuperBlocks<UQ2K>::K<NT>;
template <int NT>
using Q3K = KLanes<UQ3K>::K<NT>;
template <int NT>
using Q3KBatch = KTotals<UQ3K, 0>::K<NT>;
template <int NT>
using Q5K = KLanes<UQ45K<true>>::K<NT>;
template <int NT>
using Q5KBatch = KTotals<UQ45K<true>, 0>::K<NT>;
template <int NT>
using Q6K = KLanes<UQ6K>::K<NT>;
template <int NT>
using Q6KBatch = KTotals<UQ6K, 0>::K<NT>;

}  // namespace

void TANDEM_AVX512_FN(q2_K)(TANDEM_DOT_ARGS) { tile<Q2K>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX512_FN(q3_K)(TANDEM_DOT_ARGS) { tile<Q3K>(n, w, a, a_stride, nt, y, ldy); }
// Single Q4_K rows: the AVX2 kernel (same bits) streams faster from DRAM
// with two threads on Zen 4 (matvec/Q4_K/.../dram: 405 us against 560 us).
void TANDEM_AVX512_FN(q4_K)(TANDEM_DOT_ARGS) { dot_q4_K_avx2(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX512_FN(q5_K)(TANDEM_DOT_ARGS) { tile<Q5K>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX512_FN(q6_K)(TANDEM_DOT_ARGS) { tile<Q6K>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX512_FN(q2_K_batch)(TANDEM_DOT_ARGS) { spans_tile<UQ2K, 4>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX512_FN(q3_K_batch)(TANDEM_DOT_ARGS) { tile<Q3KBatch>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX512_FN(q4_K_batch)(TANDEM_DOT_ARGS) { spans_tile<UQ45K<false>, 2>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX512_FN(q5_K_batch)(TANDEM_DOT_ARGS) { tile<Q5KBatch>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX512_FN(q6_K_batch)(TANDEM_DOT_ARGS) { tile<Q6KBatch>(n, w, a, a_stride, nt, y, ldy); }

}  // namespace tandem::cpu::detail
