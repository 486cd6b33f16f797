// expf_lanes.h's expf in eight double lanes (AVX-512).
#include "kernels_cpu/expf_lanes.h"

#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <algorithm>
#include <cmath>

namespace tandem::cpu::detail {
namespace {

// Eight lanes, none of magnitude 88 or more; table: the 32 entries in four
// registers.
__m256 expf8(__m256 x, const __m512i* table) {
    const __m512d xd = _mm512_cvtps_pd(x);
    const __m512d n_over_ln2 = _mm512_set1_pd(kExpfInvLn2N), shift = _mm512_set1_pd(kExpfShift);
    const __m512d kd_shifted = _mm512_fmadd_pd(n_over_ln2, xd, shift);
    const __m512i ki = _mm512_castpd_si512(kd_shifted);
    const __m512d kd = _mm512_sub_pd(kd_shifted, shift);
    const __m512d r = _mm512_fmsub_pd(n_over_ln2, xd, kd);
    const __m512i idx = _mm512_and_si512(ki, _mm512_set1_epi64(31));
    const __m512i low = _mm512_permutex2var_epi64(table[0], idx, table[1]);   // entries 0..15
    const __m512i high = _mm512_permutex2var_epi64(table[2], idx, table[3]);  // 16..31
    const __m512i entry = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(idx, _mm512_set1_epi64(16)), low, high);
    const __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(entry, _mm512_slli_epi64(ki, 47)));
    const __m512d z = _mm512_fmadd_pd(r, _mm512_set1_pd(kExpfC0), _mm512_set1_pd(kExpfC1));
    const __m512d r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(r, _mm512_set1_pd(kExpfC2), _mm512_set1_pd(1.0));
    y = _mm512_fmadd_pd(z, r2, y);
    return _mm512_cvtpd_ps(_mm512_mul_pd(y, s));
}

}  // namespace

void expf_lanes_avx512(const float* x, float* y, int64_t n) {
    const int64_t* tab = expf_table();
    const __m512i table[4] = {_mm512_load_si512(tab), _mm512_load_si512(tab + 8), _mm512_load_si512(tab + 16),
                              _mm512_load_si512(tab + 24)};
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t m = std::min<int64_t>(8, n - i);
        const auto mask = static_cast<__mmask8>((1u << m) - 1u);
        const __m256 v = _mm256_maskz_loadu_ps(mask, x + i);  // past n: exp(0), not stored
        // glibc's test for its special cases: the top 12 bits of |x| at
        // least those of 88.
        const __m256i top = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(v), 20), _mm256_set1_epi32(0x7ff));
        if (_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(top, _mm256_set1_epi32(0x42a)))) != 0) {
            for (int64_t j = i; j < i + m; ++j) y[j] = std::exp(x[j]);
            continue;
        }
        _mm256_mask_storeu_ps(y + i, mask, expf8(v, table));
    }
}

}  // namespace tandem::cpu::detail
