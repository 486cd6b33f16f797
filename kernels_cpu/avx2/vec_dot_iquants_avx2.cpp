// AVX2 dot products of the 256-element i-quants against Q8_K, single rows
// (IqLanesOrder in runtime/quant/dot_order_iq.h) and batches (IqTiledOrder,
// whose integer total is the lanes' sum), the bits of the scalar reference.
// Per 256-element block, each chunk of 32 elements is decoded once for all
// tokens (iq_decode_avx2.h: mag, sgn, mult), and for each token t:
// a' = sign(a, sgn), p = madd(maddubs(mag, a'), mult), whose eight int32
// lanes are the four-element sums of the order (lane l: elements 4l..4l+3),
// summed over the chunks (exact), then acc_t = fma(d_w * d_a, lanes, acc_t).
// maddubs never saturates: |mag| <= 127, |a| <= 127, and a pair of products
// is at most 2 * 62 * 127 for the grids (2 * 127 * 127 for IQ4_XS, still
// inside int16).
#include <cmath>

#include "kernels_cpu/avx2/iq_decode_avx2.h"
#include "kernels_cpu/simd_x86.h"
#include "runtime/quant/dot_order.h"
#include "runtime/quant/quant_element_iq.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;
using namespace iq_avx2;

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
                typename D::Prep pr = D::prep(x[i]);
                // A memory-resident prep (D::kMemPrep) stays in memory: its
                // fields are then read with scalar and broadcast loads.
                if constexpr (requires { D::kMemPrep; }) asm volatile("" : "+m"(pr));
#pragma GCC unroll 8
                for (int c = 0; c < 8; ++c) {
                    const Chunk ch = D::chunk(x[i], pr, c);
                    __m256i shift = _mm256_setzero_si256();
                    if constexpr (kShift == dot::IqShift::Lanes) shift = D::shifts(x[i], pr, c);
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
                const float dw = weight_scale(x[i]);
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

void TANDEM_AVX2_FN(dot_iq2_xxs)(TANDEM_DOT_ARGS) { tile<Iq2xxsK>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX2_FN(dot_iq2_xs)(TANDEM_DOT_ARGS) { tile<Iq2xsK>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX2_FN(dot_iq2_s)(TANDEM_DOT_ARGS) { tile<Iq2sK>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX2_FN(dot_iq3_xxs)(TANDEM_DOT_ARGS) { tile<Iq3xxsK>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX2_FN(dot_iq3_s)(TANDEM_DOT_ARGS) { tile<Iq3sK>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX2_FN(dot_iq1_s)(TANDEM_DOT_ARGS) { tile<Iq1sK>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX2_FN(dot_iq1_m)(TANDEM_DOT_ARGS) { tile<Iq1mK>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX2_FN(dot_iq4_xs)(TANDEM_DOT_ARGS) { tile<Iq4xsK>(n, w, a, a_stride, nt, y, ldy); }
// Batches of 8 or more (IqTiledOrder).
void TANDEM_AVX2_FN(dot_iq2_xxs_batch)(TANDEM_DOT_ARGS) { tile<Iq2xxsBatchK>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX2_FN(dot_iq2_xs_batch)(TANDEM_DOT_ARGS) { tile<Iq2xsBatchK>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX2_FN(dot_iq2_s_batch)(TANDEM_DOT_ARGS) { tile<Iq2sBatchK>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX2_FN(dot_iq3_xxs_batch)(TANDEM_DOT_ARGS) { tile<Iq3xxsBatchK>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX2_FN(dot_iq3_s_batch)(TANDEM_DOT_ARGS) { tile<Iq3sBatchK>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX2_FN(dot_iq1_s_batch)(TANDEM_DOT_ARGS) { tile<Iq1sBatchK>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX2_FN(dot_iq1_m_batch)(TANDEM_DOT_ARGS) { tile<Iq1mBatchK>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX2_FN(dot_iq4_xs_batch)(TANDEM_DOT_ARGS) { tile<Iq4xsBatchK>(n, w, a, a_stride, nt, y, ldy); }

}  // namespace tandem::cpu::detail
