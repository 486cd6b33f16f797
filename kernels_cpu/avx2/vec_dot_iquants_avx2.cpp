// AVX2 dot products of the 256-element i-quants against Q8_K, single rows
// (IqLanesOrder in runtime/quant/dot_order_iq.h) and batches (IqTiledOrder,
// whose integer total is the lanes' sum), the bits of the scalar reference. Per 256-element block and chunk c of 32 elements, the chunk
// is decoded once for all tokens into
//   mag:  32 unsigned magnitudes (grid bytes, |table value| or |grid|),
//   sgn:  32 signs as bytes (+1 or -1; 0 where the code is 0),
//   mult: the sixteen 16-bit sub-block multipliers of its int16 pairs,
// and for each token t: a' = sign(a, sgn), p = madd(maddubs(mag, a'), mult),
// whose eight int32 lanes are the four-element sums of the order (lane l:
// elements 4l..4l+3), summed over the chunks (exact), then
// acc_t = fma(d_w * d_a, lanes, acc_t). maddubs never saturates: |mag| <=
// 127, |a| <= 127, and a pair of products is at most 2 * 62 * 127 for the
// grids (2 * 127 * 127 for IQ4_XS, still inside int16).
#include <cmath>

#include "kernels_cpu/simd_x86.h"
#include "runtime/quant/dot_order.h"
#include "runtime/quant/quant_element_iq.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;

// Byte j of the result: -1 where bit j of the 32 sign bits is set, else +1.
inline __m256i signs32(uint32_t bits) {
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(bits)),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
    const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
    return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(1));
}
inline __m256i grid64x4(const uint64_t* grid, int i0, int i1, int i2, int i3) {
    return _mm256_set_epi64x(static_cast<int64_t>(grid[i3]), static_cast<int64_t>(grid[i2]),
                             static_cast<int64_t>(grid[i1]), static_cast<int64_t>(grid[i0]));
}
inline __m256i mult_per32(int m) { return _mm256_set1_epi16(static_cast<int16_t>(m)); }
inline __m256i mult_per16(int m0, int m1) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(static_cast<int16_t>(m0))),
                                   _mm_set1_epi16(static_cast<int16_t>(m1)), 1);
}

// One decoded chunk.
struct Chunk {
    __m256i mag, sgn, mult;
};
// Signed codes w as a chunk: |w| and sign(w).
inline Chunk signed_chunk(__m256i w, __m256i mult) { return {_mm256_sign_epi8(w, w), w, mult}; }

struct DIq2xxs {
    using B = block_iq2_xxs;
    static Chunk chunk(const B& b, int c) {
        const auto* q = reinterpret_cast<const uint8_t*>(b.qs) + 8 * c;
        const uint32_t aux1 = load_u32(q + 4);
        return {grid64x4(iq::kIq2xxsGrid, q[0], q[1], q[2], q[3]), signs32(iq::signs_7x4(aux1)),
                mult_per32(2 * static_cast<int>(aux1 >> 28) + 1)};
    }
};
struct DIq2xs {
    using B = block_iq2_xs;
    static Chunk chunk(const B& b, int c) {
        const uint16_t* q = b.qs + 4 * c;
        const auto& t = iq::kSigns8.v;
        const uint32_t s = static_cast<uint32_t>(t[q[0] >> 9]) | static_cast<uint32_t>(t[q[1] >> 9]) << 8 |
                           static_cast<uint32_t>(t[q[2] >> 9]) << 16 | static_cast<uint32_t>(t[q[3] >> 9]) << 24;
        return {grid64x4(iq::kIq2xsGrid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511), signs32(s),
                mult_per16(2 * (b.scales[c] & 15) + 1, 2 * (b.scales[c] >> 4) + 1)};
    }
};
struct DIq2s {
    using B = block_iq2_s;
    static Chunk chunk(const B& b, int c) {
        const uint8_t* q = b.qs + 4 * c;
        const int h = b.qh[c];
        return {grid64x4(iq::kIq2sGrid, q[0] | ((h << 8) & 0x300), q[1] | ((h << 6) & 0x300), q[2] | ((h << 4) & 0x300),
                         q[3] | ((h << 2) & 0x300)),
                signs32(load_u32(b.qs + kQK_K / 8 + 4 * c)),
                mult_per16(2 * (b.scales[c] & 15) + 1, 2 * (b.scales[c] >> 4) + 1)};
    }
};
struct DIq3xxs {
    using B = block_iq3_xxs;
    static Chunk chunk(const B& b, int c) {
        const uint8_t* q = b.qs + 8 * c;
        const uint32_t aux = load_u32(b.qs + kQK_K / 4 + 4 * c);
        const uint32_t* g = iq::kIq3xxsGrid;
        const __m256i mag = _mm256_set_epi32(static_cast<int>(g[q[7]]), static_cast<int>(g[q[6]]), static_cast<int>(g[q[5]]),
                                             static_cast<int>(g[q[4]]), static_cast<int>(g[q[3]]), static_cast<int>(g[q[2]]),
                                             static_cast<int>(g[q[1]]), static_cast<int>(g[q[0]]));
        return {mag, signs32(iq::signs_7x4(aux)), mult_per32(2 * static_cast<int>(aux >> 28) + 1)};
    }
};
struct DIq3s {
    using B = block_iq3_s;
    static Chunk chunk(const B& b, int c) {
        const uint8_t* q = b.qs + 8 * c;
        const int h = b.qh[c];
        const uint32_t* g = iq::kIq3sGrid;
        auto row = [&](int j) { return static_cast<int>(g[q[j] | (((h >> j) & 1) << 8)]); };
        const __m256i mag = _mm256_set_epi32(row(7), row(6), row(5), row(4), row(3), row(2), row(1), row(0));
        return {mag, signs32(load_u32(b.signs + 4 * c)), mult_per32(1 + 2 * ((b.scales[c / 2] >> (4 * (c % 2))) & 15))};
    }
};
struct DIq1s {
    using B = block_iq1_s;
    static Chunk chunk(const B& b, int c) {
        const uint8_t* q = b.qs + 4 * c;
        const int h = b.qh[c];
        const __m256i w = grid64x4(iq::kIq1sGrid, q[0] | ((h & 7) << 8), q[1] | (((h >> 3) & 7) << 8),
                                   q[2] | (((h >> 6) & 7) << 8), q[3] | (((h >> 9) & 7) << 8));
        return signed_chunk(w, mult_per32(2 * ((h >> 12) & 7) + 1));
    }
    // The block's shift multipliers as int16 pairs, +-(2 s + 1) of chunk c
    // in pair c (twice: one for each 16-element activation sum): the
    // shift term is madd(bsums, this), summed (no branch on the signs).
    static __m256i shift_mults(const B& b) {
        const __m128i qh = load128(b.qh);
        const __m128i m = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(qh, 11), _mm_set1_epi16(14)), _mm_set1_epi16(1));
        const __m128i neg = _mm_srai_epi16(qh, 15);
        const __m128i sm = _mm_sub_epi16(_mm_xor_si128(m, neg), neg);
        return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(sm, sm)), _mm_unpackhi_epi16(sm, sm), 1);
    }
};
struct DIq1m {
    using B = block_iq1_m;
    static Chunk chunk(const B& b, int c) {
        const uint8_t* q = b.qs + 4 * c;
        const int h0 = b.qh[2 * c], h1 = b.qh[2 * c + 1];
        const __m256i w = grid64x4(iq::kIq1sGrid, q[0] | ((h0 & 7) << 8), q[1] | (((h0 >> 4) & 7) << 8),
                                   q[2] | ((h1 & 7) << 8), q[3] | (((h1 >> 4) & 7) << 8));
        const int sc = static_cast<int>(iq::load16(b.scales + 2 * (c / 2)) >> (6 * (c % 2)));
        return signed_chunk(w, mult_per16(2 * (sc & 7) + 1, 2 * ((sc >> 3) & 7) + 1));
    }
    // The shifts' signs of chunk c, +1 or -1 for each of its 32 weights.
    // Group g's sign is bit 4 g + 3 of the chunk's 16 qh bits: a compare
    // per 16-bit word of the group's 8 bytes (-1 bytes), or'ed with 1.
    static __m256i shifts(const B& b, int c) {
        const __m256i bit = _mm256_set_epi64x(static_cast<int64_t>(0x8000800080008000ull), 0x0800080008000800, 0x0080008000800080,
                                              0x0008000800080008);
        const __m256i h = _mm256_set1_epi16(static_cast<int16_t>(iq::load16(b.qh + 2 * c)));
        return _mm256_or_si256(_mm256_cmpeq_epi16(_mm256_and_si256(h, bit), bit), _mm256_set1_epi8(1));
    }
};
struct DIq4xs {
    using B = block_iq4_xs;
    static Chunk chunk(const B& b, int c) {
        const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(iq::kIq4nlValues));
        const __m128i bits = load128(b.qs + 16 * c);
        const __m128i m4 = _mm_set1_epi8(0x0F);
        const __m256i w = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_shuffle_epi8(table, _mm_and_si128(bits, m4))),
            _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(bits, 4), m4)), 1);
        const int ls = ((b.scales_l[c / 2] >> (4 * (c % 2))) & 0xF) | (((b.scales_h >> (2 * c)) & 3) << 4);
        return signed_chunk(w, mult_per32(ls - 32));
    }
};

// The decoder D of the order's type: the per-block float scale and the
// final factor come from the order itself (dot_order_iq.h).
template <class D, class Order, dot::Form kForm = dot::Form::Single>
struct IqDotAvx2 {
    using B = typename D::B;
    static constexpr dot::IqShift kShift = Order::kShift;
    template <int NT>
    struct K {
        static void run(int64_t n, const void* w, const void* a, size_t a_stride, float* y, int64_t ldy) {
            const B* x = static_cast<const B*>(w);
            const block_q8_K* ya[NT];
            for (int t = 0; t < NT; ++t) ya[t] = act_row<block_q8_K>(a, a_stride, t);
            __m256 acc[NT], acc2[NT];
            float chain[NT];
            for (int t = 0; t < NT; ++t) {
                acc[t] = _mm256_setzero_ps();
                acc2[t] = _mm256_setzero_ps();
                chain[t] = 0.0f;
            }
            const __m256i ones8 = _mm256_set1_epi8(1);
            for (int64_t i = 0; i < n / kQK_K; ++i) {
                // Chunk after chunk, each decoded once and used by every
                // token while in registers.
                __m256i s[NT], s2[NT];
                for (int t = 0; t < NT; ++t) s[t] = s2[t] = _mm256_setzero_si256();
                for (int c = 0; c < 8; ++c) {
                    const Chunk ch = D::chunk(x[i], c);
                    __m256i shift = _mm256_setzero_si256();
                    if constexpr (kShift == dot::IqShift::Lanes) shift = D::shifts(x[i], c);
                    for (int t = 0; t < NT; ++t) {
                        const __m256i act = load256(ya[t][i].qs + 32 * c);
                        const __m256i p = _mm256_maddubs_epi16(ch.mag, _mm256_sign_epi8(act, ch.sgn));
                        s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(p, ch.mult));
                        if constexpr (kShift == dot::IqShift::Lanes) {
                            const __m256i q = _mm256_maddubs_epi16(ones8, _mm256_sign_epi8(act, shift));
                            s2[t] = _mm256_add_epi32(s2[t], _mm256_madd_epi16(q, ch.mult));
                        }
                    }
                }
                const float dw = dot::IqLanesOrder<Order>::weight_scale(x[i]);
                __m256i shm = _mm256_setzero_si256();
                if constexpr (kShift == dot::IqShift::Chain) shm = D::shift_mults(x[i]);
                for (int t = 0; t < NT; ++t) {
                    const block_q8_K& yb = ya[t][i];
                    int sh = 0;  // IQ1_S: the block's shift term
                    if constexpr (kShift == dot::IqShift::Chain) sh = hsum_i32(_mm256_madd_epi16(load256(yb.bsums), shm));
                    if constexpr (kForm == dot::Form::Batch) {
                        // IqTiledOrder: the lanes' exact total (IQ1: times 8,
                        // plus the shifts), times d_w', one fma with d_a.
                        int total = hsum_i32(s[t]);
                        if constexpr (kShift == dot::IqShift::Chain) total = 8 * total + sh;
                        if constexpr (kShift == dot::IqShift::Lanes) total = 8 * total + hsum_i32(s2[t]);
                        const float v = static_cast<float>(total) * (dw * dot::IqTiledOrder<Order>::factor());
                        chain[t] = std::fma(yb.d, v, chain[t]);
                        continue;
                    }
                    const float d = dw * yb.d;
                    acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s[t]), acc[t]);
                    if constexpr (kShift == dot::IqShift::Lanes) {
                        acc2[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s2[t]), acc2[t]);
                    } else if constexpr (kShift == dot::IqShift::Chain) {
                        chain[t] = std::fma(d, static_cast<float>(sh), chain[t]);
                    }
                }
            }
            for (int t = 0; t < NT; ++t) {
                if constexpr (kForm == dot::Form::Batch) {
                    y[t * ldy] = chain[t];
                } else if constexpr (kShift == dot::IqShift::Chain) {
                    y[t * ldy] = hsum(acc[t]) + iq::kIq1Delta * chain[t];
                } else if constexpr (kShift == dot::IqShift::Lanes) {
                    y[t * ldy] = hsum(acc[t]) + iq::kIq1Delta * hsum(acc2[t]);
                } else {
                    y[t * ldy] = dot::IqLanesOrder<Order>::lanes_factor() * hsum(acc[t]);
                }
            }
        }
    };
};

template <int NT>
using Iq2xxsK = IqDotAvx2<DIq2xxs, dot::IqDot<iq::Iq2xxs>>::K<NT>;
template <int NT>
using Iq2xsK = IqDotAvx2<DIq2xs, dot::IqDot<iq::Iq2xs>>::K<NT>;
template <int NT>
using Iq2sK = IqDotAvx2<DIq2s, dot::IqDot<iq::Iq2s>>::K<NT>;
template <int NT>
using Iq3xxsK = IqDotAvx2<DIq3xxs, dot::IqDot<iq::Iq3xxs>>::K<NT>;
template <int NT>
using Iq3sK = IqDotAvx2<DIq3s, dot::IqDot<iq::Iq3s>>::K<NT>;
template <int NT>
using Iq1sK = IqDotAvx2<DIq1s, dot::Iq1sDot>::K<NT>;
template <int NT>
using Iq1mK = IqDotAvx2<DIq1m, dot::Iq1mDot>::K<NT>;
template <int NT>
using Iq4xsK = IqDotAvx2<DIq4xs, dot::IqDot<iq::Iq4xs>>::K<NT>;

template <int NT>
using Iq2xxsBatchK = IqDotAvx2<DIq2xxs, dot::IqDot<iq::Iq2xxs>, dot::Form::Batch>::K<NT>;
template <int NT>
using Iq2xsBatchK = IqDotAvx2<DIq2xs, dot::IqDot<iq::Iq2xs>, dot::Form::Batch>::K<NT>;
template <int NT>
using Iq2sBatchK = IqDotAvx2<DIq2s, dot::IqDot<iq::Iq2s>, dot::Form::Batch>::K<NT>;
template <int NT>
using Iq3xxsBatchK = IqDotAvx2<DIq3xxs, dot::IqDot<iq::Iq3xxs>, dot::Form::Batch>::K<NT>;
template <int NT>
using Iq3sBatchK = IqDotAvx2<DIq3s, dot::IqDot<iq::Iq3s>, dot::Form::Batch>::K<NT>;
template <int NT>
using Iq1sBatchK = IqDotAvx2<DIq1s, dot::Iq1sDot, dot::Form::Batch>::K<NT>;
template <int NT>
using Iq1mBatchK = IqDotAvx2<DIq1m, dot::Iq1mDot, dot::Form::Batch>::K<NT>;
template <int NT>
using Iq4xsBatchK = IqDotAvx2<DIq4xs, dot::IqDot<iq::Iq4xs>, dot::Form::Batch>::K<NT>;
}  // namespace

void dot_iq2_xxs_avx2(TANDEM_DOT_ARGS) { tile<Iq2xxsK>(n, w, a, a_stride, nt, y, ldy); }
void dot_iq2_xs_avx2(TANDEM_DOT_ARGS) { tile<Iq2xsK>(n, w, a, a_stride, nt, y, ldy); }
void dot_iq2_s_avx2(TANDEM_DOT_ARGS) { tile<Iq2sK>(n, w, a, a_stride, nt, y, ldy); }
void dot_iq3_xxs_avx2(TANDEM_DOT_ARGS) { tile<Iq3xxsK>(n, w, a, a_stride, nt, y, ldy); }
void dot_iq3_s_avx2(TANDEM_DOT_ARGS) { tile<Iq3sK>(n, w, a, a_stride, nt, y, ldy); }
void dot_iq1_s_avx2(TANDEM_DOT_ARGS) { tile<Iq1sK>(n, w, a, a_stride, nt, y, ldy); }
void dot_iq1_m_avx2(TANDEM_DOT_ARGS) { tile<Iq1mK>(n, w, a, a_stride, nt, y, ldy); }
void dot_iq4_xs_avx2(TANDEM_DOT_ARGS) { tile<Iq4xsK>(n, w, a, a_stride, nt, y, ldy); }
// Batches of 8 or more (IqTiledOrder).
void dot_iq2_xxs_batch_avx2(TANDEM_DOT_ARGS) { tile<Iq2xxsBatchK>(n, w, a, a_stride, nt, y, ldy); }
void dot_iq2_xs_batch_avx2(TANDEM_DOT_ARGS) { tile<Iq2xsBatchK>(n, w, a, a_stride, nt, y, ldy); }
void dot_iq2_s_batch_avx2(TANDEM_DOT_ARGS) { tile<Iq2sBatchK>(n, w, a, a_stride, nt, y, ldy); }
void dot_iq3_xxs_batch_avx2(TANDEM_DOT_ARGS) { tile<Iq3xxsBatchK>(n, w, a, a_stride, nt, y, ldy); }
void dot_iq3_s_batch_avx2(TANDEM_DOT_ARGS) { tile<Iq3sBatchK>(n, w, a, a_stride, nt, y, ldy); }
void dot_iq1_s_batch_avx2(TANDEM_DOT_ARGS) { tile<Iq1sBatchK>(n, w, a, a_stride, nt, y, ldy); }
void dot_iq1_m_batch_avx2(TANDEM_DOT_ARGS) { tile<Iq1mBatchK>(n, w, a, a_stride, nt, y, ldy); }
void dot_iq4_xs_batch_avx2(TANDEM_DOT_ARGS) { tile<Iq4xsBatchK>(n, w, a, a_stride, nt, y, ldy); }

}  // namespace tandem::cpu::detail
