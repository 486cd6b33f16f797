// The AVX2 dot product of one row of a 256-element i-quant against up to
// kMaxDecodeTokens Q8_K rows, single rows (IqLanesOrder in
// runtime/quant/dot_order_iq.h) or batches (IqTiledOrder, whose integer
// total is the lanes' sum), the bits of the scalar reference. One body for
// the row kernels (vec_dot_iquants_avx2.cpp: tiles of up to kMaxTileTokens)
// and the several-rows kernels (decode_rows_iquants_avx2.cpp: up to
// kMaxDecodeTokens). Per 256-element block, each chunk of 32 elements is
// decoded once for all tokens (iq_decode_avx2.h: mag, sgn, mult), and for
// each token t: a' = sign(a, sgn), p = madd(maddubs(mag, a'), mult), whose
// eight int32 lanes are the four-element sums of the order (lane l:
// elements 4l..4l+3), summed over the chunks (exact), then
// acc_t = fma(d_w * d_a, lanes, acc_t). maddubs never saturates:
// |mag| <= 127, |a| <= 127, and a pair of products is at most 2 * 62 * 127
// for the grids (2 * 127 * 127 for IQ4_XS, still inside int16). Only files
// built with AVX2 flags include it.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

#include "kernels_cpu/avx2/iq_decode_avx2.h"
#include "kernels_cpu/simd_x86.h"
#include "runtime/quant/dot_order.h"
#include "runtime/quant/quant_element_iq.h"

namespace tandem::cpu::detail::iq_avx2 {
namespace {

// The decoder D of the order's type: the per-block float scale and the
// final factor come from the order itself (dot_order_iq.h).
template <class D, class Order, dot::Form kForm = dot::Form::Single>
struct IqDotAvx2 {
    using B = typename D::B;
    static constexpr dot::IqShift kShift = Order::kShift;

    // Tokens whose sums stay in registers while a chunk is used: with the
    // chunk's three vectors and the temporaries, four tokens' sums (eight
    // with IQ1_M's shift sums) fill the 16 ymm registers. More tokens take
    // further passes over the block's chunks, decoded once and kept in
    // memory. (All eight tokens in one pass spilled sums and activations:
    // 512x2048 from L2, one thread, 8 tokens, us: IQ1_M 381 -> 303, IQ3_S
    // 284 -> 253, IQ2_S 208 -> 198, IQ2_XXS 204 -> 213. Eight a group in
    // the AVX-512VL build, which has 32 registers: no better, IQ1_M 300 ->
    // 329, IQ2_S 177 -> 169.)
    static constexpr int kGroup = 4;

    // out[t] = the dot of the n elements at x with token t's row ya[t],
    // t < NT. kStream: the row's blocks are prefetched as the several-rows
    // kernels' streams are (prefetch_row_stream); the row kernels' rows are
    // prefetched by matmul.
    template <int NT, bool kStream = false>
    static void row(int64_t n, const B* x, const block_q8_K* const* ya, float* out) {
        __m256 acc[NT], acc2[NT];
        float chain[NT];
        for (int t = 0; t < NT; ++t) {
            acc[t] = _mm256_setzero_ps();
            acc2[t] = _mm256_setzero_ps();
            chain[t] = 0.0f;
        }
        const __m256i ones8 = _mm256_set1_epi8(1);
        // More than kGroup tokens: the first group's pass keeps the
        // decoded chunks (and IQ1_M's shifts) for the others.
        constexpr int kKept = NT > kGroup ? 8 : 1;
        Chunk kept[kKept];
        __m256i kept_shift[kKept];
        for (int64_t i = 0; i < n / kQK_K; ++i) {
            if constexpr (kStream) prefetch_row_stream(x + i);
            typename D::Prep pr = D::prep(x[i]);
            // A memory-resident prep (D::kMemPrep) stays in memory: its
            // fields are then read with scalar and broadcast loads.
            if constexpr (requires { D::kMemPrep; }) asm volatile("" : "+m"(pr));
            const float dw = weight_scale(x[i]);
            __m256i shm = _mm256_setzero_si256();
            if constexpr (kShift == dot::IqShift::Chain) shm = D::shift_mults(x[i]);
            // Tokens [T0, T0 + kGroup) (and below NT).
            const auto group = [&]<int T0>() {
                constexpr int T1 = T0 + kGroup < NT ? T0 + kGroup : NT;
                // Chunk after chunk, each decoded once (by the first group)
                // and used by the group's tokens while in registers.
                __m256i s[T1 - T0], s2[T1 - T0];
                for (int t = 0; t < T1 - T0; ++t) s[t] = s2[t] = _mm256_setzero_si256();
                const auto use = [&](Chunk ch, __m256i shift, int c) {
                    for (int t = 0; t < T1 - T0; ++t) {
                        const __m256i act = load256(ya[T0 + t][i].qs + 32 * c);
                        const __m256i p = _mm256_maddubs_epi16(ch.mag, _mm256_sign_epi8(act, ch.sgn));
                        s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(p, ch.mult));
                        if constexpr (kShift == dot::IqShift::Lanes) {
                            const __m256i q = _mm256_maddubs_epi16(ones8, _mm256_sign_epi8(act, shift));
                            s2[t] = _mm256_add_epi32(s2[t], _mm256_madd_epi16(q, ch.mult));
                        }
                    }
                };
                if constexpr (T0 == 0) {
#pragma GCC unroll 8
                    for (int c = 0; c < 8; ++c) {
                        const Chunk ch = D::chunk(x[i], pr, c);
                        __m256i shift = _mm256_setzero_si256();
                        if constexpr (kShift == dot::IqShift::Lanes) shift = D::shifts(x[i], pr, c);
                        if constexpr (NT > kGroup) {
                            // Field by field: the struct copy went through
                            // 8-byte pieces in GPRs (GCC 12).
                            kept[c].mag = ch.mag;
                            kept[c].sgn = ch.sgn;
                            kept[c].mult = ch.mult;
                        }
                        if constexpr (NT > kGroup && kShift == dot::IqShift::Lanes) kept_shift[c] = shift;
                        use(ch, shift, c);
                    }
                } else {
                    // Kept in a loop: unrolled, GCC computed all eight chunks'
                    // products before adding them and spilled them.
#pragma GCC unroll 1
                    for (int c = 0; c < 8; ++c) use(kept[c], kShift == dot::IqShift::Lanes ? kept_shift[c] : _mm256_setzero_si256(), c);
                }
                for (int t = 0; t < T1 - T0; ++t) {
                    const block_q8_K& yb = ya[T0 + t][i];
                    int sh = 0;  // IQ1_S: the block's shift term
                    if constexpr (kShift == dot::IqShift::Chain) sh = hsum_i32(_mm256_madd_epi16(load256(yb.bsums), shm));
                    if constexpr (kForm == dot::Form::Batch) {
                        // IqTiledOrder: the lanes' exact total (IQ1: times 8,
                        // plus the shifts), times d_w', one fma with d_a.
                        int total = hsum_i32(s[t]);
                        if constexpr (kShift == dot::IqShift::Chain) total = 8 * total + sh;
                        if constexpr (kShift == dot::IqShift::Lanes) total = 8 * total + hsum_i32(s2[t]);
                        const float v = static_cast<float>(total) * (dw * dot::IqTiledOrder<Order>::factor());
                        chain[T0 + t] = std::fma(yb.d, v, chain[T0 + t]);
                        continue;
                    }
                    const float d = dw * yb.d;
                    acc[T0 + t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s[t]), acc[T0 + t]);
                    if constexpr (kShift == dot::IqShift::Lanes) {
                        acc2[T0 + t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s2[t]), acc2[T0 + t]);
                    } else if constexpr (kShift == dot::IqShift::Chain) {
                        chain[T0 + t] = std::fma(d, static_cast<float>(sh), chain[T0 + t]);
                    }
                }
            };
            [&]<int... G>(std::integer_sequence<int, G...>) {
                (group.template operator()<G * kGroup>(), ...);
            }(std::make_integer_sequence<int, (NT + kGroup - 1) / kGroup>{});
        }
        for (int t = 0; t < NT; ++t) {
            if constexpr (kForm == dot::Form::Batch) {
                out[t] = chain[t];
            } else if constexpr (kShift == dot::IqShift::Chain) {
                out[t] = hsum(acc[t]) + iq::kIq1Delta * chain[t];
            } else if constexpr (kShift == dot::IqShift::Lanes) {
                out[t] = hsum(acc[t]) + iq::kIq1Delta * hsum(acc2[t]);
            } else {
                out[t] = dot::IqLanesOrder<Order>::lanes_factor() * hsum(acc[t]);
            }
        }
    }

    // The row kernels' form (DotFn): y[t * ldy], token t at a + t * a_stride.
    template <int NT>
    struct K {
        static void run(int64_t n, const void* w, const void* a, size_t a_stride, float* y, int64_t ldy) {
            const block_q8_K* ya[NT];
            for (int t = 0; t < NT; ++t) ya[t] = act_row<block_q8_K>(a, a_stride, t);
            float out[NT];
            row<NT>(n, static_cast<const B*>(w), ya, out);
            for (int t = 0; t < NT; ++t) y[t * ldy] = out[t];
        }
    };
};

// X(name, decoder, order): the eight types; the BMI2 build (avx2b) only
// those whose decoders use pdep.
#if defined(TANDEM_AVX2_BMI2)
#define TANDEM_IQ_AVX2_TYPES(X)   \
    X(iq1_s, DIq1s, dot::Iq1sDot) \
    X(iq1_m, DIq1m, dot::Iq1mDot)
#else
#define TANDEM_IQ_AVX2_TYPES(X)                 \
    X(iq2_xxs, DIq2xxs, dot::IqDot<iq::Iq2xxs>) \
    X(iq2_xs, DIq2xs, dot::IqDot<iq::Iq2xs>)    \
    X(iq2_s, DIq2s, dot::IqDot<iq::Iq2s>)       \
    X(iq3_xxs, DIq3xxs, dot::IqDot<iq::Iq3xxs>) \
    X(iq3_s, DIq3s, dot::IqDot<iq::Iq3s>)       \
    X(iq1_s, DIq1s, dot::Iq1sDot)               \
    X(iq1_m, DIq1m, dot::Iq1mDot)               \
    X(iq4_xs, DIq4xs, dot::IqDot<iq::Iq4xs>)
#endif

}  // namespace
}  // namespace tandem::cpu::detail::iq_avx2
