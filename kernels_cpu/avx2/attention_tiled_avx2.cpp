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

// NQ queries x NB ymm chains (NQ * NB = 8 accumulators, the most the 16
// registers hold beside the loads) over a band of 8 * NB keys, for every
// band of the tile: each row of the band's keys is loaded once for the NQ
// queries, so a block of four reads the widened tile once instead of four
// times (the tile, 64 keys x dk floats, lives in L2). Each score is still
// its own fused multiply-add chain over k: the scalar reference's bits.
template <int NQ, int NB>
void scores_block(const float* const* q, const float* kt, int64_t dk, float scale, float* s, float* smax) {
    const __m256 sv = _mm256_set1_ps(scale);
    __m256 mx[NQ];
    for (auto& m : mx) m = _mm256_set1_ps(-INFINITY);
    for (int band = 0; band < kAttentionTile; band += 8 * NB) {
        __m256 acc[NQ][NB];
        for (auto& row : acc) {
            for (auto& a : row) a = _mm256_setzero_ps();
        }
        for (int64_t k = 0; k < dk; ++k) {
            const float* row = kt + k * kAttentionTile + band;
            __m256 key[NB];
            for (int b = 0; b < NB; ++b) key[b] = _mm256_loadu_ps(row + 8 * b);
            for (int j = 0; j < NQ; ++j) {
                const __m256 qk = _mm256_broadcast_ss(q[j] + k);
                for (int b = 0; b < NB; ++b) acc[j][b] = _mm256_fmadd_ps(qk, key[b], acc[j][b]);
            }
        }
        for (int j = 0; j < NQ; ++j) {
            for (int b = 0; b < NB; ++b) {
                const __m256 sj = _mm256_mul_ps(acc[j][b], sv);
                _mm256_storeu_ps(s + j * kAttentionTile + band + 8 * b, sj);
                mx[j] = _mm256_max_ps(mx[j], sj);
            }
        }
    }
    for (int j = 0; j < NQ; ++j) smax[j] = hmax8(mx[j]);
}

// The same blocking for V: NQ queries x NB ymm of outputs, each band of
// outputs one pass over the tile's 64 value rows shared by the NQ queries.
// Each output is its own chain over t, after its rescale: the reference's
// bits.
template <int NQ, int NB>
void accumulate_block(const float* p, const float* v, int64_t dv, const float* rescale, float* const* acc) {
    int64_t d = 0;
    for (; d + 8 * NB <= dv; d += 8 * NB) {
        __m256 a[NQ][NB];
        for (int j = 0; j < NQ; ++j) {
            const __m256 rs = _mm256_set1_ps(rescale[j]);
            for (int b = 0; b < NB; ++b) a[j][b] = _mm256_mul_ps(_mm256_loadu_ps(acc[j] + d + 8 * b), rs);
        }
        for (int64_t t = 0; t < kAttentionTile; ++t) {
            const float* row = v + t * dv + d;
            __m256 val[NB];
            for (int b = 0; b < NB; ++b) val[b] = _mm256_loadu_ps(row + 8 * b);
            for (int j = 0; j < NQ; ++j) {
                const __m256 pt = _mm256_broadcast_ss(p + j * kAttentionTile + t);
                for (int b = 0; b < NB; ++b) a[j][b] = _mm256_fmadd_ps(pt, val[b], a[j][b]);
            }
        }
        for (int j = 0; j < NQ; ++j) {
            for (int b = 0; b < NB; ++b) _mm256_storeu_ps(acc[j] + d + 8 * b, a[j][b]);
        }
    }
    for (; d < dv; ++d) {  // the last dv % (8 NB) outputs, one chain each
        for (int j = 0; j < NQ; ++j) {
            float a = acc[j][d] * rescale[j];
            for (int64_t t = 0; t < kAttentionTile; ++t) a = std::fma(p[j * kAttentionTile + t], v[t * dv + d], a);
            acc[j][d] = a;
        }
    }
}

}  // namespace

void tiled_scores_avx2(const float* const* q, int nq, const float* kt, int64_t dk, float scale, float* s, float* smax) {
    static_assert(kQueryBlock == 4 && kAttentionTile % 64 == 0);
    switch (nq) {  // the block's queries: a full block of four, or the batch's last few
        case 4: return scores_block<4, 2>(q, kt, dk, scale, s, smax);
        case 3: return scores_block<3, 2>(q, kt, dk, scale, s, smax);
        case 2: return scores_block<2, 4>(q, kt, dk, scale, s, smax);
        default:
            for (int j = 0; j < nq; ++j) scores_block<1, 8>(q + j, kt, dk, scale, s + j * kAttentionTile, smax + j);
    }
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
    switch (nq) {
        case 4: return accumulate_block<4, 2>(p, v, dv, rescale, acc);
        case 3: return accumulate_block<3, 2>(p, v, dv, rescale, acc);
        case 2: return accumulate_block<2, 4>(p, v, dv, rescale, acc);
        default:
            for (int j = 0; j < nq; ++j) {
                accumulate_block<1, 8>(p + j * kAttentionTile, v, dv, rescale + j, acc + j);
            }
    }
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
    // Loads before conversions, as Avx512Ops::widen (attention_decode_avx512.cpp).
    for (; i + 64 <= n; i += 64) {
        __m128i h[8];
        for (int j = 0; j < 8; ++j) h[j] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 8 * j));
        for (int j = 0; j < 8; ++j) _mm256_storeu_ps(dst + i + 8 * j, _mm256_cvtph_ps(h[j]));
    }
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    }
    widen_f16_scalar(src + i, dst + i, n - i);
}

}  // namespace tandem::cpu::detail
