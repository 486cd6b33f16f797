// expf in eight double lanes, reproducing glibc's expf (since 2.28; the
// FMA build x86-64 machines with AVX-512 select): x*N/ln2 = k + r with
// N = 32, 2^(k/N) from a table of 2^(i/N) with k/N's integer part added to
// the exponent bits, 2^(r/N) by a degree-3 polynomial, everything in
// double, then one rounding to float. The operations and their fusions are
// glibc's (its disassembly: the reduction and the remainder are fused
// multiply-adds sharing the product x * N/ln2, the polynomial two more),
// so the results are its bits; inputs of magnitude 88 or more (overflow,
// underflow, infinities, NaN) go to std::exp.
#include "kernels_cpu/expf_lanes.h"

#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <algorithm>
#include <bit>
#include <cmath>

namespace tandem::cpu::detail {
namespace {

constexpr double kInvLn2N = 0x1.71547652b82fep+5;  // 32 / ln 2
constexpr double kShift = 0x1.8p+52;                // adding it rounds to an integer
constexpr double kC0 = 0x1.c6af84b912394p-20, kC1 = 0x1.ebfce50fac4f3p-13, kC2 = 0x1.62e42ff0c52d6p-6;

// tab[i] = bits(2^(i/32)) - (i << 47): adding k << 47 for k = i + 32 m
// then gives the bits of 2^(k/32) (the exponent field moves by m).
struct Table {
    __m512i part[4];
    Table() {
        alignas(64) int64_t tab[32];
        for (int i = 0; i < 32; ++i) {
            const auto v = static_cast<double>(std::exp2l(static_cast<long double>(i) / 32));
            tab[i] = std::bit_cast<int64_t>(v) - (static_cast<int64_t>(i) << 47);
        }
        for (int j = 0; j < 4; ++j) part[j] = _mm512_load_si512(tab + 8 * j);
    }
};

const Table& table() {
    static const Table t;
    return t;
}

// Eight lanes, none of magnitude 88 or more.
__m256 expf8(__m256 x, const Table& t) {
    const __m512d xd = _mm512_cvtps_pd(x);
    const __m512d n_over_ln2 = _mm512_set1_pd(kInvLn2N), shift = _mm512_set1_pd(kShift);
    const __m512d kd_shifted = _mm512_fmadd_pd(n_over_ln2, xd, shift);
    const __m512i ki = _mm512_castpd_si512(kd_shifted);
    const __m512d kd = _mm512_sub_pd(kd_shifted, shift);
    const __m512d r = _mm512_fmsub_pd(n_over_ln2, xd, kd);
    const __m512i idx = _mm512_and_si512(ki, _mm512_set1_epi64(31));
    const __m512i low = _mm512_permutex2var_epi64(t.part[0], idx, t.part[1]);    // entries 0..15
    const __m512i high = _mm512_permutex2var_epi64(t.part[2], idx, t.part[3]);   // 16..31
    const __m512i entry = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(idx, _mm512_set1_epi64(16)), low, high);
    const __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(entry, _mm512_slli_epi64(ki, 47)));
    const __m512d z = _mm512_fmadd_pd(r, _mm512_set1_pd(kC0), _mm512_set1_pd(kC1));
    const __m512d r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(r, _mm512_set1_pd(kC2), _mm512_set1_pd(1.0));
    y = _mm512_fmadd_pd(z, r2, y);
    return _mm512_cvtpd_ps(_mm512_mul_pd(y, s));
}

}  // namespace

void expf_lanes_avx512(const float* x, float* y, int64_t n) {
    const Table& t = table();
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
        _mm256_mask_storeu_ps(y + i, mask, expf8(v, t));
    }
}

bool expf_lanes_match_libm() {
    // Every 4093rd float of magnitude below 88 (about a million, both
    // signs), and the edges of the special range.
    static const bool match = [] {
        constexpr int64_t kBlock = 1024;
        float x[kBlock + 8], y[kBlock + 8];
        int64_t count = 0;
        auto flush = [&]() {
            expf_lanes_avx512(x, y, count);
            for (int64_t i = 0; i < count; ++i) {
                if (std::bit_cast<uint32_t>(y[i]) != std::bit_cast<uint32_t>(std::exp(x[i]))) return false;
            }
            count = 0;
            return true;
        };
        for (uint64_t b = 0; b < (1ull << 32); b += 4093) {
            const float v = std::bit_cast<float>(static_cast<uint32_t>(b));
            if (!(std::fabs(v) < 88.0f)) continue;
            x[count++] = v;
            if (count == kBlock && !flush()) return false;
        }
        for (float v : {87.99f, -87.99f, 88.0f, -88.0f, -103.5f, -104.0f, 0.0f, -0.0f}) {
            x[count++] = v;
        }
        return flush();
    }();
    return match;
}

}  // namespace tandem::cpu::detail
