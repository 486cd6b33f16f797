// AVX2 + FMA twins of the tiled attention loops (attention_tiled.cpp): the
// same fused multiply-add chains, vectorized across the independent
// outputs, so the bits equal the scalar reference.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels_cpu/attention_tiled.h"
#include "kernels_cpu/elementwise.h"
#include "kernels_cpu/f16_accumulate.h"
#include "kernels_cpu/simd_x86.h"

namespace tandem::cpu::detail {

namespace {

float hmax8(__m256 v) {
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    return _mm_cvtss_f32(m4);
}

// One query at a time: eight ymm chains of 64 keys fill the FMA pipes
// (AVX2 has 16 registers, not room for two queries' chains and the loads).
float scores_one(const float* q, const float* kt, int64_t dk, float scale, float* s) {
    __m256 acc[kAttentionTile / 8];
    for (auto& a : acc) a = _mm256_setzero_ps();
    for (int64_t k = 0; k < dk; ++k) {
        const __m256 qk = _mm256_set1_ps(q[k]);
        const float* row = kt + k * kAttentionTile;
        for (int j = 0; j < kAttentionTile / 8; ++j) acc[j] = _mm256_fmadd_ps(qk, _mm256_loadu_ps(row + 8 * j), acc[j]);
    }
    const __m256 sv = _mm256_set1_ps(scale);
    __m256 mx = _mm256_set1_ps(-INFINITY);
    for (int j = 0; j < kAttentionTile / 8; ++j) {
        const __m256 sj = _mm256_mul_ps(acc[j], sv);
        _mm256_storeu_ps(s + 8 * j, sj);
        mx = _mm256_max_ps(mx, sj);
    }
    return hmax8(mx);
}

void accumulate_one(const float* p, const float* v, int64_t dv, float rescale, float* acc) {
    const __m256 rs = _mm256_set1_ps(rescale);
    int64_t d = 0;
    // 64 outputs at a time, eight independent chains in registers: one
    // chain alone waits on the fma latency at every step. Each output is
    // still its own chain over t, so the bits are the scalar reference's.
    for (; d + 64 <= dv; d += 64) {
        __m256 a[8];
        for (int j = 0; j < 8; ++j) a[j] = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 8 * j), rs);
        for (int64_t t = 0; t < kAttentionTile; ++t) {
            const __m256 pt = _mm256_set1_ps(p[t]);
            const float* row = v + t * dv + d;
            for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_ps(pt, _mm256_loadu_ps(row + 8 * j), a[j]);
        }
        for (int j = 0; j < 8; ++j) _mm256_storeu_ps(acc + d + 8 * j, a[j]);
    }
    for (; d + 8 <= dv; d += 8) {
        __m256 a = _mm256_mul_ps(_mm256_loadu_ps(acc + d), rs);
        for (int64_t t = 0; t < kAttentionTile; ++t) a = _mm256_fmadd_ps(_mm256_set1_ps(p[t]), _mm256_loadu_ps(v + t * dv + d), a);
        _mm256_storeu_ps(acc + d, a);
    }
    for (; d < dv; ++d) {
        float a = acc[d] * rescale;
        for (int64_t t = 0; t < kAttentionTile; ++t) a = std::fma(p[t], v[t * dv + d], a);
        acc[d] = a;
    }
}

}  // namespace

void tiled_scores_avx2(const float* const* q, int nq, const float* kt, int64_t dk, float scale, float* s, float* smax) {
    for (int j = 0; j < nq; ++j) smax[j] = scores_one(q[j], kt, dk, scale, s + j * kAttentionTile);
}

float tiled_mask_avx2(const int32_t* cell_pos, int32_t pos, int64_t window, float* s) {
    const __m256i posv = _mm256_set1_epi32(pos);
    const __m256i minus1 = _mm256_set1_epi32(-1);
    // window <= 0 means none: a limit no distance reaches.
    const __m256i winv = _mm256_set1_epi32(window > 0 ? static_cast<int32_t>(std::min<int64_t>(window, INT32_MAX)) : INT32_MAX);
    const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
    __m256 mx = neg_inf;
    for (int64_t t = 0; t < kAttentionTile; t += 8) {
        const __m256i kp = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cell_pos + t));
        // visible: kp > -1, pos > kp - 1 (kp <= pos), window > pos - kp.
        const __m256i vis = _mm256_and_si256(
            _mm256_and_si256(_mm256_cmpgt_epi32(kp, minus1), _mm256_cmpgt_epi32(_mm256_add_epi32(posv, _mm256_set1_epi32(1)), kp)),
            _mm256_cmpgt_epi32(winv, _mm256_sub_epi32(posv, kp)));
        const __m256 sv = _mm256_blendv_ps(neg_inf, _mm256_loadu_ps(s + t), _mm256_castsi256_ps(vis));
        _mm256_storeu_ps(s + t, sv);
        mx = _mm256_max_ps(mx, sv);
    }
    return hmax8(mx);
}

double tiled_softmax_avx2(const float* s, float max, float* p) {
    expf_poly_shifted_avx2(s, max, p, kAttentionTile);
    double sum = 0.0;
    for (int64_t g = 0; g < kAttentionTile; g += 16) sum += static_cast<double>(reduce16_ggml(p + g));
    return sum;
}

void tiled_accumulate_avx2(const float* p, int nq, const float* v, int64_t dv, const float* rescale, float* const* acc) {
    for (int j = 0; j < nq; ++j) accumulate_one(p + j * kAttentionTile, v, dv, rescale[j], acc[j]);
}

void widen_keys_avx2(const uint8_t* keys, uint64_t row_bytes, int64_t nc, int64_t dk, float* kt) {
    const int64_t nc8 = nc - nc % 8, dk8 = dk - dk % 8;
    for (int64_t c = 0; c < nc8; c += 8) {
        for (int64_t k = 0; k < dk8; k += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; ++i) {
                r[i] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(keys + (c + i) * row_bytes + 2 * k)));
            }
            transpose8x8_ps(r, r);
            for (int i = 0; i < 8; ++i) _mm256_storeu_ps(kt + (k + i) * kAttentionTile + c, r[i]);
        }
    }
    // The rest one element at a time: the last dk % 8 rows of the whole
    // tile, then the cells past nc8 (zeros past nc).
    for (int64_t k = dk8; k < dk; ++k) {
        for (int64_t c = 0; c < nc8; ++c) {
            kt[k * kAttentionTile + c] = _cvtsh_ss(*reinterpret_cast<const uint16_t*>(keys + c * row_bytes + 2 * k));
        }
    }
    for (int64_t k = 0; k < dk; ++k) {
        for (int64_t c = nc8; c < kAttentionTile; ++c) {
            kt[k * kAttentionTile + c] = c < nc ? _cvtsh_ss(*reinterpret_cast<const uint16_t*>(keys + c * row_bytes + 2 * k)) : 0.0f;
        }
    }
}

void widen_f16_avx2(const uint16_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    }
    widen_f16_scalar(src + i, dst + i, n - i);
}

}  // namespace tandem::cpu::detail
