// Quantization of one activation block, written once for the host and the
// device. The GPU matmul quantizes its activations itself and must produce
// the very codes and scales the CPU kernels multiply with (kernels_cpu/
// act_quant.cpp for Q8_0/Q8_1, the Q8_K reference, F16/BF16 rounding):
// 8-bit codes amplify half-ulp differences into different integers, so
// "close" is not enough. Compiled for the host as well, these functions are
// checked byte for byte against the CPU quantizers without a GPU.
#pragma once

#include <cstdint>

#include "runtime/quant/quant_element.h"

#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

namespace tandem::quant::element {

// Round to nearest, ties to even (the default FP mode on the host, rintf's
// rounding on the device).
TANDEM_FLOAT_FN(round_half_even, rintf, std::nearbyint)
TANDEM_FLOAT_FN(abs_f, fabsf, std::fabs)

TANDEM_HOST_DEVICE bool finite_f(float v) {
#if defined(__CUDA_ARCH__)
    return isfinite(v);
#else
    return std::isfinite(v);
#endif
}

TANDEM_HOST_DEVICE int clamp_i(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

TANDEM_HOST_DEVICE fp16_bits float_to_half(float f) {
#if defined(__CUDA_ARCH__)
    return __half_as_ushort(__float2half_rn(f));
#else
    return fp32_to_fp16(f);
#endif
}

// Bit manipulation on both sides (not __float2bfloat16_rn) so NaN handling
// is the host's too.
TANDEM_HOST_DEVICE bf16_bits float_to_bf16(float f) {
#if defined(__CUDA_ARCH__)
    const uint32_t x = __float_as_uint(f);
#else
    const uint32_t x = std::bit_cast<uint32_t>(f);
#endif
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_bits>((x >> 16) | 0x40u);
    return static_cast<bf16_bits>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// The value of the largest magnitude (the first of equals), sign kept; 0
// when every |x| is 0 (or NaN).
TANDEM_HOST_DEVICE float signed_absmax(const float* x, int n) {
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < n; ++j) {
        const float a = abs_f(x[j]);
        if (a > amax) {
            amax = a;
            max = x[j];
        }
    }
    return max;
}

// ggml's CPU activation quantizer for 32 elements (id = 127/amax, round half
// to even; not the weight reference's 1/d and half-away rounding). Returns
// the scale; *sum receives the sum of the codes.
TANDEM_HOST_DEVICE float act_q8_32(const float* x, int8_t* qs, int* sum) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) {
        const float a = abs_f(x[j]);
        amax = amax < a ? a : amax;  // std::max(amax, a): keeps amax on NaN
    }
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    if (!finite_f(id)) id = 0.0f;
    int s = 0;
    for (int j = 0; j < 32; ++j) {
        const int q = clamp_i(static_cast<int>(round_half_even(x[j] * id)), -127, 127);
        qs[j] = static_cast<int8_t>(q);
        s += q;
    }
    *sum = s;
    return amax / 127.0f;
}

// A Q8_0 or Q8_1 block by a 32-element quantizer (act_q8_32, or the
// reference's ref_q8_32 of quant_ref_element.h): the codes and the fp16
// scale; Q8_1's s from the float d, as ggml does (it stands for sum(x) as
// the dot products see it, d * sum(q)).
using Q8Quantizer = float (*)(const float*, int8_t*, int*);
template <Q8Quantizer kQ8>
TANDEM_HOST_DEVICE void q8_block(const float* x, block_q8_0& y) {
    int sum = 0;
    y.d = float_to_half(kQ8(x, y.qs, &sum));
}
template <Q8Quantizer kQ8>
TANDEM_HOST_DEVICE void q8_block(const float* x, block_q8_1& y) {
    int sum = 0;
    const float d = kQ8(x, y.qs, &sum);
    y.d = float_to_half(d);
    y.s = float_to_half(d * static_cast<float>(sum));
}

TANDEM_HOST_DEVICE void act_block(const float* x, block_q8_0& y) { q8_block<act_q8_32>(x, y); }
TANDEM_HOST_DEVICE void act_block(const float* x, block_q8_1& y) { q8_block<act_q8_32>(x, y); }

// The Q8_K reference (quant_ref_kquants.cpp): the signed extreme maps to
// -127, so the scale may be negative; bsums are sums of 16 codes.
TANDEM_HOST_DEVICE void act_block(const float* x, block_q8_K& y) {
    const float max = signed_absmax(x, kQK_K);
    if (max == 0.0f) {  // every |x| 0 (or NaN)
        y.d = 0.0f;
        for (int j = 0; j < kQK_K; ++j) y.qs[j] = 0;
        for (int j = 0; j < kQK_K / 16; ++j) y.bsums[j] = 0;
        return;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK_K; ++j) {
        // nearest_int of the reference is round half to even as well.
        y.qs[j] = static_cast<int8_t>(clamp_i(static_cast<int>(round_half_even(iscale * x[j])), -127, 127));
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
        int sum = 0;
        for (int ii = 0; ii < 16; ++ii) sum += y.qs[16 * j + ii];
        y.bsums[j] = static_cast<int16_t>(sum);
    }
    y.d = 1.0f / iscale;
}

// The float partners: one element per "block".
TANDEM_HOST_DEVICE void act_block(const float* x, float& y) { y = *x; }
TANDEM_HOST_DEVICE void act_block(const float* x, fp16_bits& y) { y = float_to_half(*x); }

// bf16_bits and fp16_bits are both uint16_t, so BF16 needs its own name.
TANDEM_HOST_DEVICE void act_block_bf16(const float* x, bf16_bits& y) { y = float_to_bf16(*x); }

}  // namespace tandem::quant::element
