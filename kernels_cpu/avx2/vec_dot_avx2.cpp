// AVX2 + FMA + F16C kernels for the float formats and the 32-element
// legacy formats (the K-quants are in vec_dot_kquants_avx2.cpp).
//
// Each kernel is a template over the number of tokens NT in the tile: the
// weight block is loaded and unpacked once, then multiplied with NT
// activation rows while it sits in registers.
#include <cmath>

#include "kernels_cpu/avx2/legacy_blocks_avx2.h"
#include "kernels_cpu/simd_x86.h"
#include "runtime/quant/iq_tables.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/fp16.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;

// ---- Float formats ----------------------------------------------------------------------
// Per format: how to load 8 elements as floats, and one element for the tail.

struct LoadF32 {
    using T = float;
    static __m256 load8(const T* p) { return _mm256_loadu_ps(p); }
    static float one(T v) { return v; }
};
struct LoadF16 {
    using T = fp16_bits;
    static __m256 load8(const T* p) { return _mm256_cvtph_ps(load128(p)); }
    static float one(T v) { return f16(v); }
};
struct LoadBF16 {
    using T = bf16_bits;
    // bf16 is the top half of an f32: widen to 32 bits and shift into place.
    static __m256 load8(const T* p) {
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
    }
    static float one(T v) { return bf16_to_fp32(v); }
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
            // Two accumulators per token hide the FMA latency (4 cycles) when
            // NT is small; with NT = 4 there are 8 independent chains.
            __m256 acc0[NT], acc1[NT];
            for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
            int64_t i = 0;
            for (; i + 16 <= n; i += 16) {
                const __m256 w0 = L::load8(x + i);
                const __m256 w1 = L::load8(x + i + 8);
                for (int t = 0; t < NT; ++t) {
                    acc0[t] = _mm256_fmadd_ps(w0, LA::load8(ya[t] + i), acc0[t]);
                    acc1[t] = _mm256_fmadd_ps(w1, LA::load8(ya[t] + i + 8), acc1[t]);
                }
            }
            for (; i + 8 <= n; i += 8) {
                const __m256 w0 = L::load8(x + i);
                for (int t = 0; t < NT; ++t) acc0[t] = _mm256_fmadd_ps(w0, LA::load8(ya[t] + i), acc0[t]);
            }
            for (int t = 0; t < NT; ++t) {
                float s = hsum(_mm256_add_ps(acc0[t], acc1[t]));
                for (int64_t j = i; j < n; ++j) s += L::one(x[j]) * LA::one(ya[t][j]);
                y[t * ldy] = s;
            }
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
// The blocks' unpackers: legacy_blocks_avx2.h.
using namespace legacy_avx2;

template <class U>
struct LegacyDot {
    using W = typename U::W;
    using A = typename U::A;
    static constexpr bool kHasMin = std::is_same_v<A, block_q8_1>;
    // One block of one row and token onto its chains: acc (eight lanes) and
    // accm (lane 0: sum of m * s, Q4_1 and Q5_1). q: U::unpack(x).
    static void block(const W& x, __m256i q, const A& yb, __m256& acc, __m128& accm) {
        // maddubs multiplies unsigned by signed bytes; for signed weights
        // move the sign onto the activation (|w| * sign(w)y).
        const __m256i qu = U::kSigned ? _mm256_sign_epi8(q, q) : q;
        __m256i act = load256(yb.qs);
        if constexpr (U::kSigned) act = _mm256_sign_epi8(act, q);
        const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(qu, act), _mm256_set1_epi16(1));
        // Both fp16 scales through one conversion: [dx, dy].
        const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(x.d | static_cast<uint32_t>(yb.d) << 16)));
        const __m256 d = _mm256_broadcastss_ps(_mm_mul_ss(dd, _mm_movehdup_ps(dd)));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc);
        if constexpr (kHasMin) {
            // The minimum applies to every element: m * sum(y) = m * s.
            const __m128 ms = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(m_of(x) | static_cast<uint32_t>(s_of(yb)) << 16)));
            accm = _mm_fmadd_ss(ms, _mm_movehdup_ps(ms), accm);
        }
    }
    // Decode: one token against rows read one after another, each with the
    // chains of K<1> (the same bits), every block asking for its lines
    // kRowStreamAhead bytes ahead into L1 and kL2StreamAhead into L2
    // (prefetch_row_stream). Eight rows block by block with the next
    // pass's rows prefetched (what this was until session 25) kept eight
    // streams per thread open and read 24-25 GB/s from DRAM on two Zen 4
    // threads at 2048 columns; one stream at a time reads 35-40 GB/s:
    // Q8_0 from DRAM, two threads, tandem_bench_kernels alternating old
    // and new builds: 512x2048 46-57 -> 29-40 us, 2048x2048 173-189 ->
    // 101-147, 5632x2048 456-513 -> 278-390 (1024 bytes ahead into L1:
    // within noise of 2048; 4 KiB into L2: 10-25% slower than 12 KiB).
    static void row(int64_t n, const W* x, const A* ya, float* y) {
        __m256 acc = _mm256_setzero_ps();
        __m128 accm = _mm_setzero_ps();
        for (int64_t i = 0; i < n / 32; ++i) {
            prefetch_row_stream(x + i);
            block(x[i], U::unpack(x[i]), ya[i], acc, accm);
        }
        *y = hsum(acc) + _mm_cvtss_f32(accm);
    }
    static void rows_fn(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
        const auto* base = static_cast<const uint8_t*>(w);
        const A* ya = static_cast<const A*>(a);
        for (int r = 0; r < n_rows; ++r) row(n, reinterpret_cast<const W*>(base + static_cast<size_t>(r) * row_stride), ya, y + r);
    }
    // Several tokens of a small batch (a serving step): R rows against NT
    // tokens, each (row, token) with the chains of block() in its order,
    // so each token gets the bits rows() gives it alone. A row's block is
    // loaded and unpacked once for the NT tokens. The float steps that
    // block() does per token run across the tokens in one vector instead
    // (lane t: token t, the same operations): d_w * d_a, and the minimum's
    // chain m * s (Q4_1, Q5_1). The R x NT accumulators live in L1
    // between rows.
    template <int R, int NT>
    static void rows_tokens(int64_t n, const uint8_t* w, size_t row_stride, const uint8_t* a, size_t a_stride, float* y,
                            int64_t ldy) {
        static_assert(NT <= 8, "the tokens' scales share one vector");
        const W* x[R];
        for (int r = 0; r < R; ++r) x[r] = reinterpret_cast<const W*>(w + static_cast<size_t>(r) * row_stride);
        const A* ya[NT];
        for (int t = 0; t < NT; ++t) ya[t] = act_row<A>(a, a_stride, t);
        __m256 acc[R][NT];
        __m256 accm[R];  // lane t: token t's chain of m * s
        for (int r = 0; r < R; ++r) {
            for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_setzero_ps();
            accm[r] = _mm256_setzero_ps();
        }
        const __m256i ones = _mm256_set1_epi16(1);
        alignas(32) float da[8] = {}, sa[8] = {}, dp[8];
        for (int64_t i = 0; i < n / 32; ++i) {
            for (int t = 0; t < NT; ++t) {
                da[t] = f16(ya[t][i].d);
                if constexpr (kHasMin) sa[t] = f16(s_of(ya[t][i]));
            }
            const __m256 da_v = _mm256_load_ps(da);
            for (int r = 0; r < R; ++r) {
                const W& b = x[r][i];
                _mm_prefetch(reinterpret_cast<const char*>(&b) + R * row_stride, _MM_HINT_T0);
                const __m256i q = U::unpack(b);
                const __m256i qu = U::kSigned ? _mm256_sign_epi8(q, q) : q;
                _mm256_store_ps(dp, _mm256_mul_ps(_mm256_set1_ps(f16(b.d)), da_v));
                for (int t = 0; t < NT; ++t) {
                    __m256i act = load256(ya[t][i].qs);
                    if constexpr (U::kSigned) act = _mm256_sign_epi8(act, q);
                    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(qu, act), ones);
                    acc[r][t] = _mm256_fmadd_ps(_mm256_broadcast_ss(dp + t), _mm256_cvtepi32_ps(s), acc[r][t]);
                }
                if constexpr (kHasMin) {
                    accm[r] = _mm256_fmadd_ps(_mm256_set1_ps(f16(m_of(b))), _mm256_load_ps(sa), accm[r]);
                }
            }
        }
        for (int r = 0; r < R; ++r) {
            alignas(32) float m[8];
            _mm256_store_ps(m, accm[r]);
            for (int t = 0; t < NT; ++t) y[t * ldy + r] = hsum(acc[r][t]) + m[t];
        }
    }
    template <int NT>
    static void rows_tokens_all(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, size_t a_stride,
                                float* y, int64_t ldy) {
        const auto* base = static_cast<const uint8_t*>(w);
        const auto* act = static_cast<const uint8_t*>(a);
        int r = 0;
        for (; r + 8 <= n_rows; r += 8) {
            rows_tokens<8, NT>(n, base + static_cast<size_t>(r) * row_stride, row_stride, act, a_stride, y + r, ldy);
        }
        for (; r < n_rows; ++r) {
            rows_tokens<1, NT>(n, base + static_cast<size_t>(r) * row_stride, row_stride, act, a_stride, y + r, ldy);
        }
    }
    static void multi_fn(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, size_t a_stride, int nt,
                         float* y, int64_t ldy) {
        with_decode_tokens(nt, [&](auto NT) { rows_tokens_all<NT()>(n, w, row_stride, n_rows, a, a_stride, y, ldy); });
    }
    template <int NT>
    struct K {
        static void run(int64_t n, const void* w, const void* a, size_t a_stride, float* y, int64_t ldy) {
            const W* x = static_cast<const W*>(w);
            const A* ya[NT];
            for (int t = 0; t < NT; ++t) ya[t] = act_row<A>(a, a_stride, t);
            const __m256i ones = _mm256_set1_epi16(1);
            __m256 acc0[NT];
            __m128 accm[NT];  // lane 0: sum of m * s (Q4_1, Q5_1)
            for (int t = 0; t < NT; ++t) {
                acc0[t] = _mm256_setzero_ps();
                accm[t] = _mm_setzero_ps();
            }
            if constexpr (U::kBlockTotal) {
                float total_acc[NT] = {};
                for (int64_t i = 0; i < n / 32; ++i) {
                    const __m256i q = U::unpack(x[i]);
                    const __m256i qu = _mm256_sign_epi8(q, q);
                    const float dw = U::weight_scale(x[i]);
                    for (int t = 0; t < NT; ++t) {
                        const A& yb = ya[t][i];
                        const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(qu, _mm256_sign_epi8(load256(yb.qs), q)), ones);
                        total_acc[t] = std::fma(static_cast<float>(hsum_i32(s)), dw * f16(yb.d), total_acc[t]);
                    }
                }
                for (int t = 0; t < NT; ++t) y[t * ldy] = total_acc[t];
            } else {
                // One accumulator chain per token, block after block, as
                // llama.cpp's kernels keep it: the float rounding then matches
                // theirs bit for bit. (With one token a block is about as long
                // as the FMA latency; decode is bound by memory anyway.)
                const int64_t nb = n / 32;
                for (int64_t i = 0; i < nb; ++i) {
                    const __m256i q = U::unpack(x[i]);
                    for (int t = 0; t < NT; ++t) block(x[i], q, ya[t][i], acc0[t], accm[t]);
                }
                for (int t = 0; t < NT; ++t) y[t * ldy] = hsum(acc0[t]) + _mm_cvtss_f32(accm[t]);
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
template <int NT>
using IQ4_NLK = LegacyDot<UIQ4_NL>::K<NT>;
template <int NT>
using MXFP4K = LegacyDot<UMXFP4>::K<NT>;

}  // namespace

void dot_f32_avx2(TANDEM_DOT_ARGS) { tile<F32K>(n, w, a, a_stride, nt, y, ldy); }
void dot_f16_avx2(TANDEM_DOT_ARGS) { tile<F16K>(n, w, a, a_stride, nt, y, ldy); }
void dot_bf16_avx2(TANDEM_DOT_ARGS) { tile<BF16K>(n, w, a, a_stride, nt, y, ldy); }
void dot_f16_wide_avx2(TANDEM_DOT_ARGS) { tile<F16WideK>(n, w, a, a_stride, nt, y, ldy); }
void dot_bf16_wide_avx2(TANDEM_DOT_ARGS) { tile<BF16WideK>(n, w, a, a_stride, nt, y, ldy); }
void dot_q4_0_avx2(TANDEM_DOT_ARGS) { tile<Q4_0K>(n, w, a, a_stride, nt, y, ldy); }
void dot_q4_1_avx2(TANDEM_DOT_ARGS) { tile<Q4_1K>(n, w, a, a_stride, nt, y, ldy); }
void dot_q5_0_avx2(TANDEM_DOT_ARGS) { tile<Q5_0K>(n, w, a, a_stride, nt, y, ldy); }
void dot_q5_1_avx2(TANDEM_DOT_ARGS) { tile<Q5_1K>(n, w, a, a_stride, nt, y, ldy); }
void dot_q8_0_avx2(TANDEM_DOT_ARGS) { tile<Q8_0K>(n, w, a, a_stride, nt, y, ldy); }
void dot_iq4_nl_avx2(TANDEM_DOT_ARGS) { tile<IQ4_NLK>(n, w, a, a_stride, nt, y, ldy); }
void dot_mxfp4_avx2(TANDEM_DOT_ARGS) { tile<MXFP4K>(n, w, a, a_stride, nt, y, ldy); }

#define TANDEM_LEGACY_ROWS(name, U)                                                                            \
    void dot_##name##_rows_avx2(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) { \
        LegacyDot<U>::rows_fn(n, w, row_stride, n_rows, a, y);                                                 \
    }
TANDEM_LEGACY_ROWS(q4_1, UQ4_1)
TANDEM_LEGACY_ROWS(q5_0, UQ5_0)
TANDEM_LEGACY_ROWS(q5_1, UQ5_1)
TANDEM_LEGACY_ROWS(q8_0, UQ8_0)
#undef TANDEM_LEGACY_ROWS

#define TANDEM_LEGACY_MULTI(name, U) \
    void dot_##name##_rows_multi_avx2(TANDEM_DECODE_MULTI_ARGS) { LegacyDot<U>::multi_fn(n, w, row_stride, n_rows, a, a_stride, nt, y, ldy); }
TANDEM_LEGACY_MULTI(q4_1, UQ4_1)
TANDEM_LEGACY_MULTI(q5_0, UQ5_0)
TANDEM_LEGACY_MULTI(q5_1, UQ5_1)
TANDEM_LEGACY_MULTI(q8_0, UQ8_0)
#undef TANDEM_LEGACY_MULTI

}  // namespace tandem::cpu::detail
