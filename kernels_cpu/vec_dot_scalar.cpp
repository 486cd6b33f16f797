// Scalar reference dot products: the definition every SIMD kernel is tested
// against, and the fallback on CPUs without AVX2.
//
// The arithmetic follows ggml's reference kernels so the numbers match
// llama.cpp: per block, an exact integer sum of weight code times
// activation code, then one float combination with the block scales
// (d_w * d_a * isum, plus the minimum term for the *_1 and K formats, which
// uses the activation's precomputed block sums: Q8_1's s, Q8_K's bsums).
// Float formats accumulate in double here so the reference is the most
// accurate of the implementations; the SIMD versions agree to within
// summation-order rounding.
#include <cstring>

#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/fp16.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_element.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;

float h2f(fp16_bits h) { return fp16_to_fp32(h); }

float dot_f32(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const float*>(w);
    const auto* y = static_cast<const float*>(a);
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(y[i]);
    return static_cast<float>(s);
}

float dot_f16(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const fp16_bits*>(w);
    const auto* y = static_cast<const fp16_bits*>(a);
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(h2f(x[i])) * static_cast<double>(h2f(y[i]));
    return static_cast<float>(s);
}

float dot_bf16(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const bf16_bits*>(w);
    const auto* y = static_cast<const bf16_bits*>(a);
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        s += static_cast<double>(bf16_to_fp32(x[i])) * static_cast<double>(bf16_to_fp32(y[i]));
    }
    return static_cast<float>(s);
}

// ---- 32-element formats ----------------------------------------------------------------

float dot_q4_0(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const block_q4_0*>(w);
    const auto* y = static_cast<const block_q8_0*>(a);
    float sum = 0.0f;
    for (int64_t i = 0; i < n / kQK4_0; ++i) {
        int isum = 0;
        for (int j = 0; j < kQK4_0 / 2; ++j) {
            isum += ((x[i].qs[j] & 0xF) - 8) * y[i].qs[j];
            isum += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + kQK4_0 / 2];
        }
        sum += static_cast<float>(isum) * (h2f(x[i].d) * h2f(y[i].d));
    }
    return sum;
}

float dot_q4_1(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const block_q4_1*>(w);
    const auto* y = static_cast<const block_q8_1*>(a);
    float sum = 0.0f;
    for (int64_t i = 0; i < n / kQK4_1; ++i) {
        int isum = 0;
        for (int j = 0; j < kQK4_1 / 2; ++j) {
            isum += (x[i].qs[j] & 0xF) * y[i].qs[j];
            isum += (x[i].qs[j] >> 4) * y[i].qs[j + kQK4_1 / 2];
        }
        // The minimum m applies to every element: m * sum(y) = m * s.
        sum += static_cast<float>(isum) * (h2f(x[i].d) * h2f(y[i].d)) + h2f(x[i].m) * h2f(y[i].s);
    }
    return sum;
}

float dot_q5_0(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const block_q5_0*>(w);
    const auto* y = static_cast<const block_q8_0*>(a);
    float sum = 0.0f;
    for (int64_t i = 0; i < n / kQK5_0; ++i) {
        int isum = 0;
        for (int j = 0; j < kQK5_0; ++j) isum += (element::q5_value(x[i].qh, x[i].qs, j) - 16) * y[i].qs[j];
        sum += static_cast<float>(isum) * (h2f(x[i].d) * h2f(y[i].d));
    }
    return sum;
}

float dot_q5_1(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const block_q5_1*>(w);
    const auto* y = static_cast<const block_q8_1*>(a);
    float sum = 0.0f;
    for (int64_t i = 0; i < n / kQK5_1; ++i) {
        int isum = 0;
        for (int j = 0; j < kQK5_1; ++j) isum += element::q5_value(x[i].qh, x[i].qs, j) * y[i].qs[j];
        sum += static_cast<float>(isum) * (h2f(x[i].d) * h2f(y[i].d)) + h2f(x[i].m) * h2f(y[i].s);
    }
    return sum;
}

float dot_q8_0(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const block_q8_0*>(w);
    const auto* y = static_cast<const block_q8_0*>(a);
    float sum = 0.0f;
    for (int64_t i = 0; i < n / kQK8_0; ++i) {
        int isum = 0;
        for (int j = 0; j < kQK8_0; ++j) isum += x[i].qs[j] * y[i].qs[j];
        sum += static_cast<float>(isum) * (h2f(x[i].d) * h2f(y[i].d));
    }
    return sum;
}

// ---- K-quants ----------------------------------------------------------------------------
// Per super-block: isum = sum over 16-element groups of scale * sum(q * y),
// exact in int32 (|isum| < 2^28 for every format), and for the formats with
// a minimum, msum = sum over groups of min * bsum(y).

float dot_q2_K(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const block_q2_K*>(w);
    const auto* y = static_cast<const block_q8_K*>(a);
    float sum = 0.0f;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        int isum = 0;
        int msum = 0;
        for (int g = 0; g < kQK_K / 16; ++g) msum += (x[i].scales[g] >> 4) * y[i].bsums[g];
        for (int k = 0; k < kQK_K; ++k) {
            const element::KLowBitIndex ix = element::k_low_bit_index(k);
            const int q = (x[i].qs[ix.byte] >> ix.shift) & 3;
            isum += (x[i].scales[ix.scale] & 0xF) * q * y[i].qs[k];
        }
        sum += (y[i].d * h2f(x[i].d)) * static_cast<float>(isum) - (y[i].d * h2f(x[i].dmin)) * static_cast<float>(msum);
    }
    return sum;
}

float dot_q3_K(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const block_q3_K*>(w);
    const auto* y = static_cast<const block_q8_K*>(a);
    float sum = 0.0f;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        int sc[16];
        for (int g = 0; g < 16; ++g) sc[g] = element::q3_K_scale(x[i].scales, g);
        int isum = 0;
        for (int k = 0; k < kQK_K; ++k) {
            const element::KLowBitIndex ix = element::k_low_bit_index(k);
            const int low = (x[i].qs[ix.byte] >> ix.shift) & 3;
            const int q = low - (((x[i].hmask[ix.hbyte] >> ix.hbit) & 1) ? 0 : 4);
            isum += sc[ix.scale] * q * y[i].qs[k];
        }
        sum += (y[i].d * h2f(x[i].d)) * static_cast<float>(isum);
    }
    return sum;
}

// Q4_K and Q5_K: eight sub-blocks of 32 with 6-bit scales and minimums.
template <class Block, bool kFiveBit>
float dot_q45_K(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const Block*>(w);
    const auto* y = static_cast<const block_q8_K*>(a);
    float sum = 0.0f;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        int isum = 0;
        int msum = 0;
        for (int sb = 0; sb < 8; ++sb) {
            int sc = 0, m = 0;
            element::q4_K_scale_min(x[i].scales, sb, sc, m);
            msum += m * (y[i].bsums[2 * sb] + y[i].bsums[2 * sb + 1]);
            const uint8_t* qs = x[i].qs + 32 * (sb / 2);
            int s = 0;
            for (int l = 0; l < 32; ++l) {
                int q = (sb % 2 == 0) ? (qs[l] & 0xF) : (qs[l] >> 4);
                if constexpr (kFiveBit) q |= ((x[i].qh[l] >> sb) & 1) << 4;
                s += q * y[i].qs[32 * sb + l];
            }
            isum += sc * s;
        }
        sum += (y[i].d * h2f(x[i].d)) * static_cast<float>(isum) - (y[i].d * h2f(x[i].dmin)) * static_cast<float>(msum);
    }
    return sum;
}

float dot_q4_K(int64_t n, const void* w, const void* a) { return dot_q45_K<block_q4_K, false>(n, w, a); }
float dot_q5_K(int64_t n, const void* w, const void* a) { return dot_q45_K<block_q5_K, true>(n, w, a); }

float dot_q6_K(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const block_q6_K*>(w);
    const auto* y = static_cast<const block_q8_K*>(a);
    float sum = 0.0f;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        int isum = 0;
        for (int g = 0; g < 16; ++g) {
            int s = 0;
            for (int l = 0; l < 16; ++l) {
                const int k = 16 * g + l;
                const int half = k / 128, r = k % 128, quarter = r / 32, e = r % 32;
                const uint8_t lbyte = x[i].ql[half * 64 + e + (quarter & 1) * 32];
                const int low = quarter < 2 ? (lbyte & 0xF) : (lbyte >> 4);
                const int high = (x[i].qh[half * 32 + e] >> (2 * quarter)) & 3;
                s += ((low | (high << 4)) - 32) * y[i].qs[k];
            }
            // Element k uses scale half*8 + 2*quarter + e/16, which for the
            // 16 elements of group g is exactly g.
            isum += x[i].scales[g] * s;
        }
        sum += (y[i].d * h2f(x[i].d)) * static_cast<float>(isum);
    }
    return sum;
}

}  // namespace

#define TANDEM_DEFINE_SCALAR(T, name, A) \
    void dot_##name##_scalar(TANDEM_DOT_ARGS) { each_token<dot_##name>(n, w, a, a_stride, nt, y, ldy); }
TANDEM_DOT_TYPES(TANDEM_DEFINE_SCALAR)
#undef TANDEM_DEFINE_SCALAR

}  // namespace tandem::cpu::detail
