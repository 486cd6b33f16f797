// expf_lanes.h's expf in four double lanes (AVX2): the table entries by
// gather (fast on Zen 3; see expf_lanes.h for where it was not).
#include "kernels_cpu/expf_lanes.h"

#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <algorithm>
#include <cmath>

namespace tandem::cpu::detail {
namespace {

// Four lanes, none of magnitude 88 or more: the AVX-512 version's
// operations, lane for lane.
__m128 expf4(__m128 x, const int64_t* tab) {
    const __m256d xd = _mm256_cvtps_pd(x);
    const __m256d n_over_ln2 = _mm256_set1_pd(kExpfInvLn2N), shift = _mm256_set1_pd(kExpfShift);
    const __m256d kd_shifted = _mm256_fmadd_pd(n_over_ln2, xd, shift);
    const __m256i ki = _mm256_castpd_si256(kd_shifted);
    const __m256d kd = _mm256_sub_pd(kd_shifted, shift);
    const __m256d r = _mm256_fmsub_pd(n_over_ln2, xd, kd);
    const __m256i idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    const __m256i entry = _mm256_i64gather_epi64(reinterpret_cast<const long long*>(tab), idx, 8);
    const __m256d s = _mm256_castsi256_pd(_mm256_add_epi64(entry, _mm256_slli_epi64(ki, 47)));
    const __m256d z = _mm256_fmadd_pd(r, _mm256_set1_pd(kExpfC0), _mm256_set1_pd(kExpfC1));
    const __m256d r2 = _mm256_mul_pd(r, r);
    __m256d y = _mm256_fmadd_pd(r, _mm256_set1_pd(kExpfC2), _mm256_set1_pd(1.0));
    y = _mm256_fmadd_pd(z, r2, y);
    return _mm256_cvtpd_ps(_mm256_mul_pd(y, s));
}

// Eight of x into y; false (nothing stored) where one has magnitude 88 or
// more, or is NaN: glibc's test for its special cases, the top 12 bits of
// |x| at least those of 88.
bool expf8(const float* x, float* y, const int64_t* tab) {
    const __m256 v = _mm256_loadu_ps(x);
    const __m256i top = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(v), 20), _mm256_set1_epi32(0x7ff));
    if (_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(top, _mm256_set1_epi32(0x42a)))) != 0) return false;
    _mm_storeu_ps(y, expf4(_mm256_castps256_ps128(v), tab));
    _mm_storeu_ps(y + 4, expf4(_mm256_extractf128_ps(v, 1), tab));
    return true;
}

}  // namespace

void expf_lanes_avx2(const float* x, float* y, int64_t n) {
    const int64_t* tab = expf_table();
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t m = std::min<int64_t>(8, n - i);
        bool done = false;
        if (m == 8) {
            done = expf8(x + i, y + i, tab);
        } else {
            float in[8] = {}, out[8];  // past n: exp(0), not stored
            std::copy(x + i, x + n, in);
            done = expf8(in, out, tab);
            if (done) std::copy(out, out + m, y + i);
        }
        if (!done) {
            for (int64_t j = i; j < i + m; ++j) y[j] = std::exp(x[j]);
        }
    }
}

}  // namespace tandem::cpu::detail
