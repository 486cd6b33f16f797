// attention_decode.h's kernel with AVX2, F16C and FMA: 8-lane halves of
// ggml's 16-lane accumulators.
#include <immintrin.h>

#include <cmath>

#include "kernels_cpu/attention_decode_body.h"
#include "kernels_cpu/attention_tiled.h"  // widen_f16_avx2
#include "kernels_cpu/f16_accumulate.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

// f16_dot_ggml over a widened key and a query already rounded to fp16 and
// widened (both exact), in the reference's order: steps of 64 into four
// 16-lane accumulators (two 8-lane halves each), (0+2) + (1+3), the 16
// lanes halved 8+8, 4+4, then (0+2) + (1+3); the n % 64 tail in double.
float dot_ggml_f32(const float* k, const float* q, int64_t n) {
    constexpr int64_t kStep = 64;
    const int64_t np = n - n % kStep;
    double sum = 0.0;
    if (np > 0) {
        __m256 acc[4][2];
        for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
        for (int64_t i = 0; i < np; i += kStep) {
            for (int j = 0; j < 4; ++j) {
                for (int h = 0; h < 2; ++h) {
                    const int64_t e = i + 16 * j + 8 * h;
                    acc[j][h] = _mm256_fmadd_ps(_mm256_loadu_ps(k + e), _mm256_loadu_ps(q + e), acc[j][h]);
                }
            }
        }
        // lanes 0..7 and 8..15 of the 16-lane total
        const __m256 lo = _mm256_add_ps(_mm256_add_ps(acc[0][0], acc[2][0]), _mm256_add_ps(acc[1][0], acc[3][0]));
        const __m256 hi = _mm256_add_ps(_mm256_add_ps(acc[0][1], acc[2][1]), _mm256_add_ps(acc[1][1], acc[3][1]));
        const __m256 t8 = _mm256_add_ps(hi, lo);
        const __m128 t4 = _mm_add_ps(_mm256_extractf128_ps(t8, 1), _mm256_castps256_ps128(t8));
        const __m128 ab = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));  // [t4 0 + t4 2, t4 1 + t4 3]
        sum = _mm_cvtss_f32(_mm_add_ss(ab, _mm_shuffle_ps(ab, ab, 1)));
    }
    for (int64_t e = np; e < n; ++e) sum += static_cast<double>(k[e] * q[e]);
    return static_cast<float>(sum);
}

// y = half(fma(x, s, float(y))) with x already widened (f16_mad's bits).
void mad_f16_acc(uint16_t* y, const float* x, float s, int64_t n) {
    const __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        auto* p = reinterpret_cast<__m128i*>(y + i);
        const __m256 v = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), sv, _mm256_cvtph_ps(_mm_loadu_si128(p)));
        _mm_storeu_si128(p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; ++i) y[i] = quant::fp32_to_fp16(std::fma(x[i], s, quant::fp16_to_fp32(y[i])));
}

struct Avx2Ops {
    static void widen(const uint16_t* src, float* dst, int64_t n) { widen_f16_avx2(src, dst, n); }
    static float dot(const float* k, const float* q, int64_t n) { return dot_ggml_f32(k, q, n); }
    static void scale(uint16_t* y, float s, int64_t n) { f16_scale_avx2(y, s, n); }
    static void mad(uint16_t* y, const float* x, float s, int64_t n) { mad_f16_acc(y, x, s, n); }
    static void dequantize_q8_0(const uint8_t* src, float* dst, int64_t n) {
        const auto* b = reinterpret_cast<const quant::block_q8_0*>(src);
        for (int64_t i = 0; i < n / quant::kQK8_0; ++i) {
            const __m256 d = _mm256_set1_ps(_cvtsh_ss(b[i].d));  // F16C: the portable conversion is ~25 instructions a block
            for (int j = 0; j < quant::kQK8_0; j += 8) {
                const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[i].qs + j)));
                _mm256_storeu_ps(dst + i * quant::kQK8_0 + j, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
            }
        }
    }
    static void scale_f32(float* y, float s, int64_t n) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), _mm256_set1_ps(s)));
        for (; i < n; ++i) y[i] *= s;
    }
    static void mad_f32(float* y, const float* x, float s, int64_t n) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(s), _mm256_loadu_ps(y + i)));
        }
        for (; i < n; ++i) y[i] = std::fma(x[i], s, y[i]);
    }
};

}  // namespace

void attention_shared_kv_avx2(const float* q, int64_t n_q, int32_t pos, int64_t head, const AttentionShape& shape,
                              const KvCacheView& kv, DotFn block_dot, float* out) {
    shared_kv_attention_for<Avx2Ops>(q, n_q, pos, head, shape, kv, block_dot, out);
}

}  // namespace tandem::cpu::detail
