// AVX-512 twins of the tiled attention score and accumulate loops
// (attention_tiled.cpp). A block of up to four queries shares each load of a
// K or V row: 64 keys are four zmm chains per query, so four queries keep
// sixteen independent fused multiply-add chains in flight, enough to hide
// the FMA latency, with one load per four FMAs. Every output is still one
// chain in the scalar reference's order, so the bits are the same.
#include <cmath>

#include "kernels_cpu/attention_tiled.h"
#include "kernels_cpu/simd_x86.h"  // immintrin.h, without GCC 12's false warnings

namespace tandem::cpu::detail {

namespace {

constexpr int kKeyVecs = kAttentionTile / 16;  // zmm registers per 64 keys

template <int NQ>
void scores_block(const float* const* q, const float* kt, int64_t dk, float scale, float* s, float* smax) {
    __m512 acc[NQ][kKeyVecs];
    for (auto& row : acc) {
        for (auto& a : row) a = _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < dk; ++k) {
        const float* krow = kt + k * kAttentionTile;
        __m512 kv[kKeyVecs];
        for (int i = 0; i < kKeyVecs; ++i) kv[i] = _mm512_loadu_ps(krow + 16 * i);
        for (int j = 0; j < NQ; ++j) {
            const __m512 qk = _mm512_set1_ps(q[j][k]);
            for (int i = 0; i < kKeyVecs; ++i) acc[j][i] = _mm512_fmadd_ps(qk, kv[i], acc[j][i]);
        }
    }
    const __m512 sv = _mm512_set1_ps(scale);
    for (int j = 0; j < NQ; ++j) {
        __m512 mx = _mm512_set1_ps(-INFINITY);
        for (int i = 0; i < kKeyVecs; ++i) {
            const __m512 sj = _mm512_mul_ps(acc[j][i], sv);
            _mm512_storeu_ps(s + j * kAttentionTile + 16 * i, sj);
            mx = _mm512_max_ps(mx, sj);
        }
        smax[j] = _mm512_reduce_max_ps(mx);
    }
}

// W zmm registers of outputs (16 * W dims) for NQ queries from column d.
template <int NQ, int W>
void accumulate_columns(const float* p, const float* v, int64_t dv, const float* rescale, float* const* acc, int64_t d) {
    __m512 a[NQ][W];
    for (int j = 0; j < NQ; ++j) {
        const __m512 rs = _mm512_set1_ps(rescale[j]);
        for (int i = 0; i < W; ++i) a[j][i] = _mm512_mul_ps(_mm512_loadu_ps(acc[j] + d + 16 * i), rs);
    }
    for (int64_t t = 0; t < kAttentionTile; ++t) {
        const float* row = v + t * dv + d;
        __m512 vv[W];
        for (int i = 0; i < W; ++i) vv[i] = _mm512_loadu_ps(row + 16 * i);
        for (int j = 0; j < NQ; ++j) {
            const __m512 pt = _mm512_set1_ps(p[j * kAttentionTile + t]);
            for (int i = 0; i < W; ++i) a[j][i] = _mm512_fmadd_ps(pt, vv[i], a[j][i]);
        }
    }
    for (int j = 0; j < NQ; ++j) {
        for (int i = 0; i < W; ++i) _mm512_storeu_ps(acc[j] + d + 16 * i, a[j][i]);
    }
}

template <int NQ>
void accumulate_block(const float* p, const float* v, int64_t dv, const float* rescale, float* const* acc) {
    int64_t d = 0;
    for (; d + 64 <= dv; d += 64) accumulate_columns<NQ, 4>(p, v, dv, rescale, acc, d);
    for (; d + 16 <= dv; d += 16) accumulate_columns<NQ, 1>(p, v, dv, rescale, acc, d);
    for (; d < dv; ++d) {
        for (int j = 0; j < NQ; ++j) {
            float a = acc[j][d] * rescale[j];
            for (int64_t t = 0; t < kAttentionTile; ++t) a = std::fma(p[j * kAttentionTile + t], v[t * dv + d], a);
            acc[j][d] = a;
        }
    }
}

// ggml_expf_poly on 16 lanes: the same operations as the scalar and AVX2
// versions (elementwise.cpp, elementwise_avx2.cpp), lane by lane.
__m512 expf_poly16(__m512 x) {
    const __m512 r = _mm512_set1_ps(0x1.8p23f);
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
    const __m512 n = _mm512_sub_ps(z, r);
    const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f), _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                        _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
        u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
    // |n| > 192: 0 below, infinity above.
    const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192.0f), _CMP_GT_OQ);
    // j * 2^n rounded once (vscalefps), as ldexp in the scalar reference and
    // the two exact power-of-two products of the AVX2 twin.
    const __m512 res = _mm512_scalef_ps(j, n);
    const __mmask16 nonpos = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ);
    const __m512 alt = _mm512_mask_blend_ps(nonpos, _mm512_set1_ps(INFINITY), _mm512_setzero_ps());
    return _mm512_mask_blend_ps(big, res, alt);
}

}  // namespace

void tiled_scores_avx512(const float* const* q, int nq, const float* kt, int64_t dk, float scale, float* s, float* smax) {
    static_assert(kQueryBlock == 4, "the switch below covers blocks of 1 to 4 queries");
    switch (nq) {
        case 4: scores_block<4>(q, kt, dk, scale, s, smax); break;
        case 3: scores_block<3>(q, kt, dk, scale, s, smax); break;
        case 2: scores_block<2>(q, kt, dk, scale, s, smax); break;
        default: scores_block<1>(q, kt, dk, scale, s, smax); break;
    }
}

void tiled_accumulate_avx512(const float* p, int nq, const float* v, int64_t dv, const float* rescale, float* const* acc) {
    switch (nq) {
        case 4: accumulate_block<4>(p, v, dv, rescale, acc); break;
        case 3: accumulate_block<3>(p, v, dv, rescale, acc); break;
        case 2: accumulate_block<2>(p, v, dv, rescale, acc); break;
        default: accumulate_block<1>(p, v, dv, rescale, acc); break;
    }
}

double tiled_softmax_avx512(const float* s, float max, float* p) {
    const __m512 shift = _mm512_set1_ps(max);
    double sum = 0.0;
    for (int64_t g = 0; g < kAttentionTile; g += 16) {
        const __m512 e = expf_poly16(_mm512_sub_ps(_mm512_loadu_ps(s + g), shift));
        _mm512_storeu_ps(p + g, e);
        // GCC's reduction order, the one reduce16_ggml spells out.
        sum += static_cast<double>(_mm512_reduce_add_ps(e));
    }
    return sum;
}

}  // namespace tandem::cpu::detail
