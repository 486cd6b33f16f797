// Reference quantizers for the 32-element legacy formats. Bit layouts and
// rounding follow ggml's reference (ggml-quants.c) so that blocks read from
// GGUF files decode identically and activations we quantize match what the
// dot-product kernels expect:
//  * 4-bit formats pack element j in the low nibble of qs[j] and element
//    j + 16 in the high nibble (the two half-blocks, not neighbours, share a
//    byte, so SIMD code can split a block with one mask and one shift).
//  * 5-bit formats keep the low 4 bits as above and put bit 4 of element j
//    in bit j of a 32-bit little-endian word qh.
//  * The scale is stored as fp16, but quantization uses the float inverse of
//    the unrounded scale, as ggml does; the fp16 rounding of d (relative
//    2^-11) is well below a quantization step.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "runtime/common/error.h"
#include "runtime/quant/fp16.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_ref.h"

namespace tandem::quant::ref {
namespace {

// qh is four bytes in the struct (no alignment requirement); the bit order
// is that of a little-endian uint32, which memcpy gives on the hosts we
// build for.
static_assert(std::endian::native == std::endian::little, "block layouts assume a little-endian host");

uint32_t load_qh(const uint8_t* qh) {
    uint32_t v;
    std::memcpy(&v, qh, sizeof(v));
    return v;
}

void store_qh(uint8_t* qh, uint32_t v) { std::memcpy(qh, &v, sizeof(v)); }

// Value with the largest magnitude, sign kept: symmetric formats map it to
// the most negative code (-8 / -16), which has no positive twin, so the
// extreme is represented exactly.
float signed_absmax(const float* x, int n) {
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < n; ++j) {
        const float a = std::fabs(x[j]);
        if (a > amax) {
            amax = a;
            max = x[j];
        }
    }
    return max;
}

// 1/d for the scaled codes; 0 when d is 0 or so small (a float subnormal)
// that 1/d overflows: such a block's fp16 scale is 0 anyway, and this keeps
// x * id finite, so the float -> int conversions below stay defined.
float inverse_or_zero(float d) {
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    return std::isfinite(id) ? id : 0.0f;
}

void check_multiple(int64_t n, int qk) { TANDEM_CHECK(n % qk == 0, "row length not a multiple of the block size"); }

}  // namespace

// ---- Q4_0 ---------------------------------------------------------------------

void quantize_row_q4_0(const float* src, void* dst, int64_t n) {
    check_multiple(n, kQK4_0);
    auto* y = static_cast<block_q4_0*>(dst);
    for (int64_t i = 0; i < n / kQK4_0; ++i) {
        const float* x = src + i * kQK4_0;
        const float d = signed_absmax(x, kQK4_0) / -8.0f;
        const float id = inverse_or_zero(d);
        y[i].d = fp32_to_fp16(d);
        for (int j = 0; j < kQK4_0 / 2; ++j) {
            // x*id lies in [-8, 8]; +8.5 then truncation rounds half up
            // onto [0, 16]. The extreme itself lands exactly on 0; only a
            // value of opposite sign and equal magnitude reaches 16 and is
            // clamped to 15.
            const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
            const int q1 = std::min(15, static_cast<int>(x[j + kQK4_0 / 2] * id + 8.5f));
            y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
}

void dequantize_row_q4_0(const void* src, float* dst, int64_t n) {
    check_multiple(n, kQK4_0);
    const auto* x = static_cast<const block_q4_0*>(src);
    for (int64_t i = 0; i < n / kQK4_0; ++i) {
        const float d = fp16_to_fp32(x[i].d);
        float* y = dst + i * kQK4_0;
        for (int j = 0; j < kQK4_0 / 2; ++j) {
            y[j] = static_cast<float>((x[i].qs[j] & 0x0f) - 8) * d;
            y[j + kQK4_0 / 2] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

// ---- Q4_1 ---------------------------------------------------------------------

void quantize_row_q4_1(const float* src, void* dst, int64_t n) {
    check_multiple(n, kQK4_1);
    auto* y = static_cast<block_q4_1*>(dst);
    for (int64_t i = 0; i < n / kQK4_1; ++i) {
        const float* x = src + i * kQK4_1;
        float min = x[0];
        float max = x[0];
        for (int j = 1; j < kQK4_1; ++j) {
            min = std::min(min, x[j]);
            max = std::max(max, x[j]);
        }
        const float d = (max - min) / 15.0f;
        const float id = inverse_or_zero(d);
        y[i].d = fp32_to_fp16(d);
        y[i].m = fp32_to_fp16(min);
        for (int j = 0; j < kQK4_1 / 2; ++j) {
            const int q0 = std::min(15, static_cast<int>((x[j] - min) * id + 0.5f));
            const int q1 = std::min(15, static_cast<int>((x[j + kQK4_1 / 2] - min) * id + 0.5f));
            y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
}

void dequantize_row_q4_1(const void* src, float* dst, int64_t n) {
    check_multiple(n, kQK4_1);
    const auto* x = static_cast<const block_q4_1*>(src);
    for (int64_t i = 0; i < n / kQK4_1; ++i) {
        const float d = fp16_to_fp32(x[i].d);
        const float m = fp16_to_fp32(x[i].m);
        float* y = dst + i * kQK4_1;
        for (int j = 0; j < kQK4_1 / 2; ++j) {
            y[j] = static_cast<float>(x[i].qs[j] & 0x0f) * d + m;
            y[j + kQK4_1 / 2] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
        }
    }
}

// ---- Q5_0 ---------------------------------------------------------------------

void quantize_row_q5_0(const float* src, void* dst, int64_t n) {
    check_multiple(n, kQK5_0);
    auto* y = static_cast<block_q5_0*>(dst);
    for (int64_t i = 0; i < n / kQK5_0; ++i) {
        const float* x = src + i * kQK5_0;
        const float d = signed_absmax(x, kQK5_0) / -16.0f;
        const float id = inverse_or_zero(d);
        y[i].d = fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < kQK5_0 / 2; ++j) {
            const int q0 = std::min(31, static_cast<int>(x[j] * id + 16.5f));
            const int q1 = std::min(31, static_cast<int>(x[j + kQK5_0 / 2] * id + 16.5f));
            y[i].qs[j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
            qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
            qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + kQK5_0 / 2);
        }
        store_qh(y[i].qh, qh);
    }
}

void dequantize_row_q5_0(const void* src, float* dst, int64_t n) {
    check_multiple(n, kQK5_0);
    const auto* x = static_cast<const block_q5_0*>(src);
    for (int64_t i = 0; i < n / kQK5_0; ++i) {
        const float d = fp16_to_fp32(x[i].d);
        const uint32_t qh = load_qh(x[i].qh);
        float* y = dst + i * kQK5_0;
        for (int j = 0; j < kQK5_0 / 2; ++j) {
            const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
            const int h1 = static_cast<int>((qh >> (j + kQK5_0 / 2)) & 1u) << 4;
            y[j] = static_cast<float>(((x[i].qs[j] & 0x0f) | h0) - 16) * d;
            y[j + kQK5_0 / 2] = static_cast<float>(((x[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

// ---- Q5_1 ---------------------------------------------------------------------

void quantize_row_q5_1(const float* src, void* dst, int64_t n) {
    check_multiple(n, kQK5_1);
    auto* y = static_cast<block_q5_1*>(dst);
    for (int64_t i = 0; i < n / kQK5_1; ++i) {
        const float* x = src + i * kQK5_1;
        float min = x[0];
        float max = x[0];
        for (int j = 1; j < kQK5_1; ++j) {
            min = std::min(min, x[j]);
            max = std::max(max, x[j]);
        }
        const float d = (max - min) / 31.0f;
        const float id = inverse_or_zero(d);
        y[i].d = fp32_to_fp16(d);
        y[i].m = fp32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < kQK5_1 / 2; ++j) {
            const int q0 = std::min(31, static_cast<int>((x[j] - min) * id + 0.5f));
            const int q1 = std::min(31, static_cast<int>((x[j + kQK5_1 / 2] - min) * id + 0.5f));
            y[i].qs[j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
            qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
            qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + kQK5_1 / 2);
        }
        store_qh(y[i].qh, qh);
    }
}

void dequantize_row_q5_1(const void* src, float* dst, int64_t n) {
    check_multiple(n, kQK5_1);
    const auto* x = static_cast<const block_q5_1*>(src);
    for (int64_t i = 0; i < n / kQK5_1; ++i) {
        const float d = fp16_to_fp32(x[i].d);
        const float m = fp16_to_fp32(x[i].m);
        const uint32_t qh = load_qh(x[i].qh);
        float* y = dst + i * kQK5_1;
        for (int j = 0; j < kQK5_1 / 2; ++j) {
            const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
            const int h1 = static_cast<int>((qh >> (j + kQK5_1 / 2)) & 1u) << 4;
            y[j] = static_cast<float>((x[i].qs[j] & 0x0f) | h0) * d + m;
            y[j + kQK5_1 / 2] = static_cast<float>((x[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

// ---- Q8_0 / Q8_1 ----------------------------------------------------------------

namespace {

// roundf semantics (half away from zero, as ggml's Q8 quantizers use)
// without the libm call that std::round/lround compile to: v - trunc(v) is
// exact in float, so comparing it with 0.5 decides the rounding exactly.
// Valid for |v| < 2^31; here |v| <= 127.
int round_half_away(float v) {
    int i = static_cast<int>(v);  // truncates toward zero
    const float frac = v - static_cast<float>(i);
    if (frac >= 0.5f) ++i;
    if (frac <= -0.5f) --i;
    return i;
}

// Shared by Q8_0 and Q8_1: symmetric 8-bit with d = amax / 127, so codes
// stay in [-127, 127] (never -128: products of two codes then fit the
// int16 pairs that SIMD dot products accumulate). Returns the float d and
// the sum of codes.
float quantize_q8_block(const float* x, int8_t* qs, int qk, int* sum) {
    float amax = 0.0f;
    for (int j = 0; j < qk; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = inverse_or_zero(d);
    int s = 0;
    for (int j = 0; j < qk; ++j) {
        const int q = round_half_away(x[j] * id);
        const int qc = std::clamp(q, -127, 127);
        qs[j] = static_cast<int8_t>(qc);
        s += qc;
    }
    *sum = s;
    return d;
}

}  // namespace

void quantize_row_q8_0(const float* src, void* dst, int64_t n) {
    check_multiple(n, kQK8_0);
    auto* y = static_cast<block_q8_0*>(dst);
    for (int64_t i = 0; i < n / kQK8_0; ++i) {
        int sum = 0;
        const float d = quantize_q8_block(src + i * kQK8_0, y[i].qs, kQK8_0, &sum);
        y[i].d = fp32_to_fp16(d);
    }
}

void dequantize_row_q8_0(const void* src, float* dst, int64_t n) {
    check_multiple(n, kQK8_0);
    const auto* x = static_cast<const block_q8_0*>(src);
    for (int64_t i = 0; i < n / kQK8_0; ++i) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < kQK8_0; ++j) dst[i * kQK8_0 + j] = static_cast<float>(x[i].qs[j]) * d;
    }
}

void quantize_row_q8_1(const float* src, void* dst, int64_t n) {
    check_multiple(n, kQK8_1);
    auto* y = static_cast<block_q8_1*>(dst);
    for (int64_t i = 0; i < n / kQK8_1; ++i) {
        int sum = 0;
        const float d = quantize_q8_block(src + i * kQK8_1, y[i].qs, kQK8_1, &sum);
        y[i].d = fp32_to_fp16(d);
        // s uses the float d, as ggml does: it stands for sum(x) as the
        // dot-product kernels see it, d * sum(q).
        y[i].s = fp32_to_fp16(d * static_cast<float>(sum));
    }
}

void dequantize_row_q8_1(const void* src, float* dst, int64_t n) {
    check_multiple(n, kQK8_1);
    const auto* x = static_cast<const block_q8_1*>(src);
    for (int64_t i = 0; i < n / kQK8_1; ++i) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < kQK8_1; ++j) dst[i * kQK8_1 + j] = static_cast<float>(x[i].qs[j]) * d;
    }
}

}  // namespace tandem::quant::ref
