// AVX2 activation quantizers: Q8_0, Q8_1, Q8_K, F16, BF16, producing
// exactly the bytes of the scalar reference quantizers (quant_ref_*.cpp),
// so the SIMD level never changes the numbers, only the speed. A matvec
// quantizes one activation row serially before the threads start, which
// with the scalar reference costs a few percent of a 4096-wide decode
// matvec; these are several times faster.
//
// Exactness notes: every float operation is the one the reference does
// (same multiply, same division, no FMA contraction); the reference's
// rounding helpers are reproduced bit for bit: half-away-from-zero for
// Q8_0/Q8_1 (trunc, then compare the exact remainder with 0.5), and
// nearest-even for Q8_K (cvtps_epi32 under the default MXCSR rounding is
// what the reference's 1.5 * 2^23 trick computes for |v| < 2^22).
#include <cmath>

#include "kernels_cpu/simd_x86.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/fp16.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;

inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

inline float hmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

// Four vectors of 8 int32 codes (each in [-127, 127]) to 32 int8 in order.
// The two packs work per 128-bit lane, leaving dwords in the order
// [v0 lo, v1 lo, v2 lo, v3 lo | v0 hi, v1 hi, v2 hi, v3 hi]; one dword
// permute restores element order.
inline void store_codes(int8_t* dst, __m256i v0, __m256i v1, __m256i v2, __m256i v3) {
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v0, v1), _mm256_packs_epi32(v2, v3));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

inline __m256i clamp127(__m256i v) {
    return _mm256_min_epi32(_mm256_max_epi32(v, _mm256_set1_epi32(-127)), _mm256_set1_epi32(127));
}

// One 32-element block as ggml's CPU backend quantizes activations (not
// its reference quantizer): id = 127/amax, codes rounded half to even.
// Matching it keeps the activations bit-identical to llama.cpp's, which
// on random-weight models decides whether logits agree to 1e-4 or 1e-3.
// Returns d = amax/127; *sum gets the code sum. Twin of act_q8_block in
// act_quant.cpp.
float q8_block(const float* x, int8_t* qs, int* sum) {
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        amax = _mm256_max_ps(abs_ps(v[k]), amax);  // NaN in x loses, as std::max(amax, |x|)
    }
    const float max_abs = hmax(amax);
    float id = max_abs != 0.0f ? 127.0f / max_abs : 0.0f;
    if (!std::isfinite(id)) id = 0.0f;
    const __m256 idv = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) {
        const __m256 r = _mm256_round_ps(_mm256_mul_ps(v[k], idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[k] = clamp127(_mm256_cvtps_epi32(r));
    }
    store_codes(qs, q[0], q[1], q[2], q[3]);
    *sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    return max_abs / 127.0f;
}

// Sums of four groups of 16 codes, each group held as two vectors of 8
// int32: three rounds of in-lane hadd leave lane 0 with the sums of
// elements 0-3 of each group and lane 1 with elements 4-7.
inline __m128i group_sums4(const __m256i* g) {
    const __m256i t0 = _mm256_add_epi32(g[0], g[1]), t1 = _mm256_add_epi32(g[2], g[3]);
    const __m256i t2 = _mm256_add_epi32(g[4], g[5]), t3 = _mm256_add_epi32(g[6], g[7]);
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(t0, t1), _mm256_hadd_epi32(t2, t3));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

}  // namespace

void quantize_row_q8_0_avx2(const float* src, void* dst, int64_t n) {
    auto* y = static_cast<block_q8_0*>(dst);
    for (int64_t i = 0; i < n / kQK8_0; ++i) {
        int sum = 0;
        y[i].d = fp32_to_fp16(q8_block(src + i * kQK8_0, y[i].qs, &sum));
    }
}

void quantize_row_q8_1_avx2(const float* src, void* dst, int64_t n) {
    auto* y = static_cast<block_q8_1*>(dst);
    for (int64_t i = 0; i < n / kQK8_1; ++i) {
        int sum = 0;
        const float d = q8_block(src + i * kQK8_1, y[i].qs, &sum);
        y[i].d = fp32_to_fp16(d);
        y[i].s = fp32_to_fp16(d * static_cast<float>(sum));
    }
}

void quantize_row_q8_K_avx2(const float* src, void* dst, int64_t n) {
    auto* y = static_cast<block_q8_K*>(dst);
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        const float* x = src + i * kQK_K;
        __m256 amaxv = _mm256_setzero_ps();
        for (int k = 0; k < 32; ++k) amaxv = _mm256_max_ps(abs_ps(_mm256_loadu_ps(x + 8 * k)), amaxv);
        const float amax = hmax(amaxv);
        if (amax == 0.0f) {
            std::memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        // The reference keeps the signed value of the first element with
        // the largest magnitude; +a and -a tie, so find that element.
        float max = 0.0f;
        for (int k = 0; k < 32; ++k) {
            const __m256 xv = _mm256_loadu_ps(x + 8 * k);
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(xv), _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (hit != 0) {
                max = x[8 * k + __builtin_ctz(static_cast<unsigned>(hit))];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m256 is = _mm256_set1_ps(iscale);
        __m256i q[32];
        for (int k = 0; k < 32; ++k) q[k] = clamp127(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), is)));
        for (int k = 0; k < 32; k += 4) store_codes(y[i].qs + 8 * k, q[k], q[k + 1], q[k + 2], q[k + 3]);
        for (int g = 0; g < 16; g += 8) {
            const __m128i s0 = group_sums4(q + 2 * g);
            const __m128i s1 = group_sums4(q + 2 * g + 8);
            _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].bsums + g), _mm_packs_epi32(s0, s1));
        }
        y[i].d = 1.0f / iscale;
    }
}

void quantize_row_f16_avx2(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<fp16_bits*>(dst);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        // Round to nearest even, subnormals and overflow as IEEE: the same
        // function as the reference fp32_to_fp16.
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; ++i) out[i] = fp32_to_fp16(src[i]);
}

void quantize_row_bf16_avx2(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<bf16_bits*>(dst);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i r[2];
        for (int k = 0; k < 2; ++k) {
            const __m256i x = _mm256_castps_si256(_mm256_loadu_ps(src + i + 8 * k));
            // Nearest even: add 0x7fff plus the lowest kept bit.
            const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
            const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
            const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
            const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                                      _mm256_set1_epi32(0x7f800000));
            r[k] = _mm256_blendv_epi8(rounded, quiet, is_nan);
        }
        // packus works per 128-bit lane; the qword permute restores order.
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), _MM_SHUFFLE(3, 1, 2, 0));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), p);
    }
    for (; i < n; ++i) out[i] = fp32_to_bf16(src[i]);
}

}  // namespace tandem::cpu::detail

namespace tandem::cpu::detail {

// Rounded through fp16 and back: exactly fp16_to_fp32(fp32_to_fp16(x)).
void round_row_f16_avx2(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<float*>(dst);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; ++i) out[i] = quant::fp16_to_fp32(quant::fp32_to_fp16(src[i]));
}

// Rounded through bf16 and back, as quantize_row_bf16_avx2 rounds.
void round_row_bf16_avx2(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<float*>(dst);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i x = _mm256_castps_si256(_mm256_loadu_ps(src + i));
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
        const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
        const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
        const __m256i is_nan =
            _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
        const __m256i bits = _mm256_slli_epi32(_mm256_blendv_epi8(rounded, quiet, is_nan), 16);
        _mm256_storeu_ps(out + i, _mm256_castsi256_ps(bits));
    }
    for (; i < n; ++i) out[i] = quant::bf16_to_fp32(quant::fp32_to_bf16(src[i]));
}

}  // namespace tandem::cpu::detail
