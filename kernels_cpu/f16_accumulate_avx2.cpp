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

}  // namespace tandem::cpu::detail
