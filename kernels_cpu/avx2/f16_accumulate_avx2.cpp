#include <immintrin.h>

#include <cmath>

#include "kernels_cpu/f16_accumulate.h"
#include "runtime/quant/fp16.h"

namespace tandem::cpu::detail {

void f16_scale_avx2(uint16_t* y, float s, int64_t n) {
    const __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        auto* p = reinterpret_cast<__m128i*>(y + i);
        const __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(p)), sv);
        _mm_storeu_si128(p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    f16_scale_scalar(y + i, s, n - i);
}

void f16_mad_avx2(uint16_t* y, const uint16_t* x, float s, int64_t n) {
    const __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        auto* p = reinterpret_cast<__m128i*>(y + i);
        const __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
        const __m256 v = _mm256_fmadd_ps(xv, sv, _mm256_cvtph_ps(_mm_loadu_si128(p)));
        _mm_storeu_si128(p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    f16_mad_scalar(y + i, x + i, s, n - i);
}

float f16_dot_ggml_avx2(const uint16_t* x, const uint16_t* y, int64_t n) {
    constexpr int64_t kStep = 64;
    const int64_t np = n - n % kStep;
    double sum = 0.0;
    if (np > 0) {
        // Each 16-lane accumulator of the reference is two 8-lane halves.
        __m256 acc[4][2];
        for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
        auto load8 = [](const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); };
        for (int64_t i = 0; i < np; i += kStep) {
            for (int j = 0; j < 4; ++j) {
                for (int h = 0; h < 2; ++h) {
                    const int64_t k = i + 16 * j + 8 * h;
                    acc[j][h] = _mm256_fmadd_ps(load8(x + k), load8(y + k), acc[j][h]);
                }
            }
        }
        float lanes[16];
        for (int h = 0; h < 2; ++h) {
            const __m256 a = _mm256_add_ps(acc[0][h], acc[2][h]);
            const __m256 b = _mm256_add_ps(acc[1][h], acc[3][h]);
            _mm256_storeu_ps(lanes + 8 * h, _mm256_add_ps(a, b));
        }
        sum = reduce16_ggml(lanes);
    }
    for (int64_t k = np; k < n; ++k) {
        sum += static_cast<double>(quant::fp16_to_fp32(x[k]) * quant::fp16_to_fp32(y[k]));
    }
    return static_cast<float>(sum);
}

}  // namespace tandem::cpu::detail
