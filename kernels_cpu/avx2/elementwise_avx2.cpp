// AVX2 + FMA twins of the element-wise scalar kernels (SwiGLU, GeGLU, RMS
// square sums, RoPE's rotation): the same operations lane by lane (each
// fused multiply-add rounds once in both), so the bits agree.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels_cpu/elementwise.h"

namespace tandem::cpu::detail {
namespace {

// x * 2^n for integral n in [-192, 192], rounded once: two exact power-of-two
// factors keep every intermediate normal, so only the last product rounds
// (what a single scaling instruction does when the result is subnormal).
inline __m256 scale_pow2(__m256 x, __m256 n) {
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i half = _mm256_srai_epi32(ni, 1);
    const __m256i rest = _mm256_sub_epi32(ni, half);
    auto pow2 = [](__m256i e) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23)); };
    return _mm256_mul_ps(_mm256_mul_ps(x, pow2(half)), pow2(rest));
}

inline __m256 expf_poly8(__m256 x) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
    const __m256 abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 big = _mm256_cmp_ps(abs_n, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    // Out of range: 0 below, infinity above (n is clamped first so the
    // exponent arithmetic of the discarded lanes cannot misbehave).
    const __m256 safe_n = _mm256_blendv_ps(n, _mm256_setzero_ps(), big);
    const __m256 res = scale_pow2(j, safe_n);
    const __m256 alt = _mm256_blendv_ps(_mm256_set1_ps(INFINITY), _mm256_setzero_ps(),
                                        _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ));
    return _mm256_blendv_ps(res, alt, big);
}

}  // namespace

void expf_poly_shifted_avx2(const float* x, float shift, float* y, int64_t n) {
    const __m256 sv = _mm256_set1_ps(shift);
    for (int64_t i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, expf_poly8(_mm256_sub_ps(_mm256_loadu_ps(x + i), sv)));
}

void swiglu_avx2(const float* gate, const float* up, float* out, int64_t n) {
    const int64_t full = n - n % 16;
    for (int64_t i = 0; i < full; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        const __m256 e = expf_poly8(_mm256_sub_ps(_mm256_setzero_ps(), g));
        const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
    }
    swiglu_scalar(gate + full, up + full, out + full, n - full);
}

void geglu_avx2(const float* gate, const float* up, float* out, int64_t n) {
    const uint16_t* table = gelu_f16_table();
    const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
    const __m256i low16 = _mm256_set1_epi32(0xFFFF);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        // The table entry of each lane's fp16 bits (a 32-bit gather of the
        // 16-bit entries; the table has a pad entry past the end).
        const __m256i idx = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(g, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        const __m256i entry = _mm256_and_si256(_mm256_i32gather_epi32(reinterpret_cast<const int*>(table), idx, 2), low16);
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(entry, entry), 0x08);
        __m256 gelu = _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
        gelu = _mm256_blendv_ps(gelu, g, _mm256_cmp_ps(g, hi, _CMP_GE_OQ));
        gelu = _mm256_blendv_ps(gelu, _mm256_setzero_ps(), _mm256_cmp_ps(g, lo, _CMP_LE_OQ));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(gelu, _mm256_loadu_ps(up + i)));
    }
    geglu_scalar(gate + i, up + i, out + i, n - i);
}

void square_sums4_avx2(const float* x, int64_t n, double* sums) {
    // Lane q holds row q's chain: four elements of each row transposed into
    // four registers, each squared in float, widened and added in order.
    __m256d acc = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        __m128 r0 = _mm_loadu_ps(x + i), r1 = _mm_loadu_ps(x + n + i), r2 = _mm_loadu_ps(x + 2 * n + i),
               r3 = _mm_loadu_ps(x + 3 * n + i);
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);  // r_j = element i + j of rows 0..3
        acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm_mul_ps(r0, r0)));
        acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm_mul_ps(r1, r1)));
        acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm_mul_ps(r2, r2)));
        acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm_mul_ps(r3, r3)));
    }
    alignas(32) double out[4];
    _mm256_store_pd(out, acc);
    for (int q = 0; q < 4; ++q) {
        double sum = out[q];
        for (int64_t k = i; k < n; ++k) sum += static_cast<double>(x[q * n + k] * x[q * n + k]);
        sums[q] = sum;
    }
}

void rope_rotate_avx2(float* x, int64_t n_heads, int64_t head_dim, int64_t half, bool neox, const float* cos_v,
                      const float* sin_v) {
    // Lane by lane the scalar rotation: a' = fma(x0, c, -(x1 s)) is fmsub
    // of the rounded product x1 s, b' = fma(x0, s, x1 c) is fmadd of x1 c.
    if (neox) {
        const int64_t full = half - half % 8;
        for (int64_t h = 0; h < n_heads; ++h) {
            float* v = x + h * head_dim;
            for (int64_t i = 0; i < full; i += 8) {
                const __m256 x0 = _mm256_loadu_ps(v + i), x1 = _mm256_loadu_ps(v + half + i);
                const __m256 c = _mm256_loadu_ps(cos_v + i), s = _mm256_loadu_ps(sin_v + i);
                _mm256_storeu_ps(v + i, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
                _mm256_storeu_ps(v + half + i, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
            }
        }
        if (full < half) {
            rope_rotate_scalar(x, n_heads, head_dim, half, true, cos_v, sin_v, full);
        }
        return;
    }
    // Neighbouring pairs (x0, x1) in lanes (2i, 2i + 1): x0 and x1 each
    // duplicated into both lanes, (c, s) and (s, c) interleaved, and
    // fmaddsub does a' in the even lanes and b' in the odd ones.
    const int64_t full = half - half % 4;
    alignas(32) float cs[2 * 2048], sc[2 * 2048];
    const int64_t n_pairs = std::min<int64_t>(full, 2048);
    for (int64_t i = 0; i < n_pairs; ++i) {
        cs[2 * i] = cos_v[i], cs[2 * i + 1] = sin_v[i];
        sc[2 * i] = sin_v[i], sc[2 * i + 1] = cos_v[i];
    }
    for (int64_t h = 0; h < n_heads; ++h) {
        float* v = x + h * head_dim;
        for (int64_t i = 0; i < n_pairs; i += 4) {
            const __m256 xv = _mm256_loadu_ps(v + 2 * i);
            const __m256 x0 = _mm256_moveldup_ps(xv), x1 = _mm256_movehdup_ps(xv);
            const __m256 prod = _mm256_mul_ps(x1, _mm256_load_ps(sc + 2 * i));  // x1 s | x1 c
            _mm256_storeu_ps(v + 2 * i, _mm256_fmaddsub_ps(x0, _mm256_load_ps(cs + 2 * i), prod));
        }
    }
    if (n_pairs < half) rope_rotate_scalar(x, n_heads, head_dim, half, false, cos_v, sin_v, n_pairs);
}

}  // namespace tandem::cpu::detail
