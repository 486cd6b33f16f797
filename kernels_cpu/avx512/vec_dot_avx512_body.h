// AVX-512 (F, BW, VL; VNNI when the build enables it) kernels for the float
// formats and the 32-element legacy formats. K-quants are in
// vec_dot_kquants_avx512_body.h.
//
// The legacy formats go two blocks per 512-bit register. VNNI's dpbusd
// multiplies unsigned by signed bytes, so signed weights (Q4_0, Q5_0, Q8_0
// after their offsets) move their sign onto the activation: |w| * (sign(w) y),
// which is one abs per weight block and one masked negate per token.
//
// Included by vec_dot_avx512.cpp (built with VNNI) and
// vec_dot_avx512_novnni.cpp (without), which name the entry points through
// TANDEM_AVX512_FN.
#pragma once
#include "kernels_cpu/simd_x86.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/fp16.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;

// ---- Float formats ----------------------------------------------------------------------

struct LoadF32 {
    using T = float;
    static __m512 load16(const T* p) { return _mm512_loadu_ps(p); }
    static __m512 load_tail(const T* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};
struct LoadF16 {
    using T = fp16_bits;
    static __m512 load16(const T* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
    static __m512 load_tail(const T* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
};
struct LoadBF16 {
    using T = bf16_bits;
    static __m512 widen(__m256i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16)); }
    static __m512 load16(const T* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
    static __m512 load_tail(const T* p, __mmask16 m) { return widen(_mm256_maskz_loadu_epi16(m, p)); }
};

// L loads weights, LA activations: the same format, or (the "wide"
// kernels) F16/BF16 weights against activations already widened to f32.
template <class L, class LA = L>
struct FloatDot {
    template <int NT>
    struct K {
        static void run(int64_t n, const void* w, const void* a, size_t a_stride, float* y, int64_t ldy) {
            using T = typename L::T;
            using TA = typename LA::T;
            const T* x = static_cast<const T*>(w);
            const TA* ya[NT];
            for (int t = 0; t < NT; ++t) ya[t] = act_row<TA>(a, a_stride, t);
            // Two chains per token so one token still has two FMAs in flight.
            __m512 acc0[NT], acc1[NT];
            for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = _mm512_setzero_ps();
            int64_t i = 0;
            for (; i + 32 <= n; i += 32) {
                const __m512 w0 = L::load16(x + i);
                const __m512 w1 = L::load16(x + i + 16);
                for (int t = 0; t < NT; ++t) {
                    acc0[t] = _mm512_fmadd_ps(w0, LA::load16(ya[t] + i), acc0[t]);
                    acc1[t] = _mm512_fmadd_ps(w1, LA::load16(ya[t] + i + 16), acc1[t]);
                }
            }
            for (; i < n; i += 16) {
                // Masked loads read nothing past the row, so the tail needs
                // no scalar loop.
                const int left = static_cast<int>(n - i < 16 ? n - i : 16);
                const __mmask16 m = static_cast<__mmask16>((1u << left) - 1u);
                const __m512 w0 = L::load_tail(x + i, m);
                for (int t = 0; t < NT; ++t) acc0[t] = _mm512_fmadd_ps(w0, LA::load_tail(ya[t] + i, m), acc0[t]);
            }
            for (int t = 0; t < NT; ++t) y[t * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[t], acc1[t]));
        }
    };
};

template <int NT>
using F32K = FloatDot<LoadF32>::K<NT>;
template <int NT>
using F16K = FloatDot<LoadF16>::K<NT>;
template <int NT>
using BF16K = FloatDot<LoadBF16>::K<NT>;
template <int NT>
using F16WideK = FloatDot<LoadF16, LoadF32>::K<NT>;
template <int NT>
using BF16WideK = FloatDot<LoadBF16, LoadF32>::K<NT>;

// ---- Legacy formats ----------------------------------------------------------------------

// The 32 nibbles of two blocks in element order: [b0 low, b0 high, b1 low,
// b1 high] in 128-bit lanes. Shifting a [b0, b1] pair gives [b0 lo, b1 lo,
// b0 hi, b1 hi]; one lane shuffle puts each block's halves together.
inline __m512i nibbles64(const uint8_t* qs0, const uint8_t* qs1) {
    const __m256i pair = _mm256_inserti128_si256(_mm256_castsi128_si256(load128(qs0)), load128(qs1), 1);
    const __m512i v = join256(pair, _mm256_srli_epi16(pair, 4));
    return _mm512_and_si512(_mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(0x0F));
}

// Fifth bits of two Q5 blocks: bit j of the mask is element j of the pair.
inline __mmask64 bits64(const uint8_t* qh0, const uint8_t* qh1) {
    return _cvtu64_mask64(static_cast<uint64_t>(load_u32(qh0)) | (static_cast<uint64_t>(load_u32(qh1)) << 32));
}

// Q4_0 keeps its codes unsigned and subtracts 8 * sum(y) with a second
// dpbusd: two dpbusd per token instead of the sign transfer's abs, mask and
// masked negate, which is fewer instructions at the one-token (decode)
// tile that is memory-bound on this format's unpacking.
struct UQ4_0 {
    using W = block_q4_0;
    using A = block_q8_0;
    static constexpr bool kSigned = false;
    static constexpr int kOffset = 8;
    static __m512i unpack(const W& b0, const W& b1) { return nibbles64(b0.qs, b1.qs); }
};
struct UQ4_1 {
    using W = block_q4_1;
    using A = block_q8_1;
    static constexpr bool kSigned = false;
    static __m512i unpack(const W& b0, const W& b1) { return nibbles64(b0.qs, b1.qs); }
};
// Q5_0 likewise: unsigned 5-bit codes, 16 * sum(y) subtracted.
struct UQ5_0 {
    using W = block_q5_0;
    using A = block_q8_0;
    static constexpr bool kSigned = false;
    static constexpr int kOffset = 16;
    static __m512i unpack(const W& b0, const W& b1) {
        const __m512i nib = nibbles64(b0.qs, b1.qs);
        return _mm512_mask_add_epi8(nib, bits64(b0.qh, b1.qh), nib, _mm512_set1_epi8(16));
    }
};
struct UQ5_1 {
    using W = block_q5_1;
    using A = block_q8_1;
    static constexpr bool kSigned = false;
    static __m512i unpack(const W& b0, const W& b1) {
        const __m512i nib = nibbles64(b0.qs, b1.qs);
        return _mm512_mask_add_epi8(nib, bits64(b0.qh, b1.qh), nib, _mm512_set1_epi8(16));
    }
};
struct UQ8_0 {
    using W = block_q8_0;
    using A = block_q8_0;
    static constexpr bool kSigned = true;
    static __m512i unpack(const W& b0, const W& b1) { return join256(load256(b0.qs), load256(b1.qs)); }
};

// Two fp16 bit patterns side by side, for one conversion of several scales.
inline uint64_t pair_bits(fp16_bits lo, fp16_bits hi) { return lo | static_cast<uint64_t>(hi) << 16; }
// Four fp16 values (in the low 64 bits) to floats.
inline __m128 cvt4(uint64_t bits) { return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<int64_t>(bits))); }
// A code offset the kernel subtracts as offset * sum(y); 0 if none.
template <class U>
constexpr int offset_of() {
    if constexpr (requires { U::kOffset; }) {
        return U::kOffset;
    } else {
        return 0;
    }
}

template <class U>
struct LegacyDot {
    template <int NT>
    struct K {
        static void run(int64_t n, const void* w, const void* a, size_t a_stride, float* y, int64_t ldy) {
            using W = typename U::W;
            using A = typename U::A;
            constexpr bool kHasMin = std::is_same_v<A, block_q8_1>;
            const W* x = static_cast<const W*>(w);
            const A* ya[NT];
            for (int t = 0; t < NT; ++t) ya[t] = act_row<A>(a, a_stride, t);
            __m512 acc[NT];
            __m128 accm[NT];  // lanes 0, 1: m * s of the even and odd blocks
            for (int t = 0; t < NT; ++t) {
                acc[t] = _mm512_setzero_ps();
                accm[t] = _mm_setzero_ps();
            }
            // Lane l of a block-pair register belongs to block l / 8.
            const __m512i pair_idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
            // Blocks i and i+1 (kTwo) or block i alone, the odd last one:
            // then the second activation half is zero and contributes nothing.
            auto step = [&](int64_t i, auto two) {
                constexpr bool kTwo = decltype(two)::value;
                const W& b1 = kTwo ? x[i + 1] : x[i];
                const __m512i q = U::unpack(x[i], b1);
                const __m512i qu = U::kSigned ? _mm512_abs_epi8(q) : q;
                const __mmask64 neg = U::kSigned ? _mm512_movepi8_mask(q) : 0;
                // The four fp16 scales of a pair (two weight, two activation)
                // go through one conversion: [dx0, dx1, dy0, dy1]. A missing
                // second block has scale bits 0, i.e. 0.0.
                const uint64_t dx_bits = pair_bits(x[i].d, kTwo ? b1.d : 0);
                const uint64_t m_bits = kHasMin ? pair_bits(m_of(x[i]), kTwo ? m_of(b1) : 0) : 0;
                for (int t = 0; t < NT; ++t) {
                    const A& y0 = ya[t][i];
                    const A& y1 = kTwo ? ya[t][i + 1] : y0;
                    __m512i act = join256(load256(y0.qs), kTwo ? load256(y1.qs) : _mm256_setzero_si256());
                    if constexpr (U::kSigned) act = _mm512_mask_sub_epi8(act, neg, _mm512_setzero_si512(), act);
                    __m512i s = dpbusd(_mm512_setzero_si512(), qu, act);
                    if constexpr (offset_of<U>() != 0) {
                        s = _mm512_sub_epi32(s, dpbusd(_mm512_setzero_si512(), _mm512_set1_epi8(offset_of<U>()), act));
                    }
                    const __m128 dd = cvt4(dx_bits | pair_bits(y0.d, kTwo ? y1.d : 0) << 32);
                    const __m128 prod = _mm_mul_ps(dd, _mm_movehl_ps(dd, dd));  // [dx0 dy0, dx1 dy1, ..]
                    const __m512 d = _mm512_permutexvar_ps(pair_idx, _mm512_castps128_ps512(prod));
                    acc[t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc[t]);
                    if constexpr (kHasMin) {
                        // The minimum applies to every element: m * sum(y) = m * s.
                        const __m128 ms = cvt4(m_bits | pair_bits(s_of(y0), kTwo ? s_of(y1) : 0) << 32);
                        accm[t] = _mm_fmadd_ps(ms, _mm_movehl_ps(ms, ms), accm[t]);
                    }
                }
            };
            const int64_t nb = n / 32;
            int64_t i = 0;
            for (; i + 2 <= nb; i += 2) step(i, std::true_type{});
            if (i < nb) step(i, std::false_type{});
            for (int t = 0; t < NT; ++t) {
                const float msum = _mm_cvtss_f32(_mm_add_ss(accm[t], _mm_movehdup_ps(accm[t])));
                y[t * ldy] = _mm512_reduce_add_ps(acc[t]) + msum;
            }
        }
    };
};

template <int NT>
using Q4_0K = LegacyDot<UQ4_0>::K<NT>;
template <int NT>
using Q4_1K = LegacyDot<UQ4_1>::K<NT>;
template <int NT>
using Q5_0K = LegacyDot<UQ5_0>::K<NT>;
template <int NT>
using Q5_1K = LegacyDot<UQ5_1>::K<NT>;
template <int NT>
using Q8_0K = LegacyDot<UQ8_0>::K<NT>;

}  // namespace

void TANDEM_AVX512_FN(f32)(TANDEM_DOT_ARGS) { tile<F32K>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX512_FN(f16)(TANDEM_DOT_ARGS) { tile<F16K>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX512_FN(bf16)(TANDEM_DOT_ARGS) { tile<BF16K>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX512_FN(f16_wide)(TANDEM_DOT_ARGS) { tile<F16WideK>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX512_FN(bf16_wide)(TANDEM_DOT_ARGS) { tile<BF16WideK>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX512_FN(q4_0)(TANDEM_DOT_ARGS) { tile<Q4_0K>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX512_FN(q4_1)(TANDEM_DOT_ARGS) { tile<Q4_1K>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX512_FN(q5_0)(TANDEM_DOT_ARGS) { tile<Q5_0K>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX512_FN(q5_1)(TANDEM_DOT_ARGS) { tile<Q5_1K>(n, w, a, a_stride, nt, y, ldy); }
void TANDEM_AVX512_FN(q8_0)(TANDEM_DOT_ARGS) { tile<Q8_0K>(n, w, a, a_stride, nt, y, ldy); }

}  // namespace tandem::cpu::detail
