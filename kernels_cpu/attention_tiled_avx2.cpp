// AVX2 + FMA twins of the tiled attention loops (attention_tiled.cpp): the
// same fused multiply-add chains, vectorized across the independent
// outputs, so the bits equal the scalar reference.
#include <immintrin.h>

#include "kernels_cpu/attention_tiled.h"
#include "kernels_cpu/elementwise.h"
#include "kernels_cpu/f16_accumulate.h"

namespace tandem::cpu::detail {

void tiled_scores_avx2(const float* q, const float* kt, int64_t dk, float* s) {
    __m256 acc[kAttentionTile / 8];
    for (auto& a : acc) a = _mm256_setzero_ps();
    for (int64_t k = 0; k < dk; ++k) {
        const __m256 qk = _mm256_set1_ps(q[k]);
        const float* row = kt + k * kAttentionTile;
        for (int j = 0; j < kAttentionTile / 8; ++j) acc[j] = _mm256_fmadd_ps(qk, _mm256_loadu_ps(row + 8 * j), acc[j]);
    }
    for (int j = 0; j < kAttentionTile / 8; ++j) _mm256_storeu_ps(s + 8 * j, acc[j]);
}

double tiled_softmax_avx2(const float* s, float max, float* p) {
    expf_poly_shifted_avx2(s, max, p, kAttentionTile);
    double sum = 0.0;
    for (int64_t g = 0; g < kAttentionTile; g += 16) sum += static_cast<double>(reduce16_ggml(p + g));
    return sum;
}

void tiled_accumulate_avx2(const float* p, const float* v, int64_t dv, float* acc) {
    int64_t d = 0;
    // 64 outputs at a time, eight independent chains in registers: one
    // chain alone waits on the fma latency at every step. Each output is
    // still its own chain over t, so the bits are the scalar reference's.
    for (; d + 64 <= dv; d += 64) {
        __m256 a[8];
        for (int j = 0; j < 8; ++j) a[j] = _mm256_loadu_ps(acc + d + 8 * j);
        for (int64_t t = 0; t < kAttentionTile; ++t) {
            const __m256 pt = _mm256_set1_ps(p[t]);
            const float* row = v + t * dv + d;
            for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_ps(pt, _mm256_loadu_ps(row + 8 * j), a[j]);
        }
        for (int j = 0; j < 8; ++j) _mm256_storeu_ps(acc + d + 8 * j, a[j]);
    }
    for (; d + 8 <= dv; d += 8) {
        __m256 a = _mm256_loadu_ps(acc + d);
        for (int64_t t = 0; t < kAttentionTile; ++t) a = _mm256_fmadd_ps(_mm256_set1_ps(p[t]), _mm256_loadu_ps(v + t * dv + d), a);
        _mm256_storeu_ps(acc + d, a);
    }
    if (d < dv) tiled_accumulate_scalar(p, v + d, dv, acc + d);
}

void widen_f16_avx2(const uint16_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    }
    widen_f16_scalar(src + i, dst + i, n - i);
}

}  // namespace tandem::cpu::detail
