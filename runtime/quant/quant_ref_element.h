// The reference quantizers of the 32-element formats one block at a time,
// written once for the host and the device: quant_ref_legacy.cpp and
// quant_make_iq4.cpp (IQ4_NL's row conversion) are these in a loop, and the
// CUDA KV cache runs them per block, so a GPU stores the bytes the CPU's
// cache stores (cpu::detail::cache_row_quantizer) and quantizes its queries
// as the CPU's attention does (quant::quantize_row). The same float
// operations in the same order on both sides (kernels_cuda is built with
// --fmad=false, the host code without FMA); std::min and std::max are
// spelled as they are defined, so NaNs go the same way.
#pragma once

#include <cstdint>

#include "runtime/quant/act_element.h"
#include "runtime/quant/quant_element_iq.h"

namespace tandem::quant::element {

TANDEM_HOST_DEVICE float min_f(float a, float b) { return b < a ? b : a; }  // std::min(a, b)
TANDEM_HOST_DEVICE float max_f(float a, float b) { return a < b ? b : a; }  // std::max(a, b)
TANDEM_HOST_DEVICE int min_i(int a, int b) { return b < a ? b : a; }

// 1/d for the scaled codes; 0 when d is 0 or so small (a float subnormal)
// that 1/d overflows: such a block's fp16 scale is 0 anyway, and this keeps
// x * id finite, so the float -> int conversions stay defined.
TANDEM_HOST_DEVICE float inverse_or_zero(float d) {
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    return finite_f(id) ? id : 0.0f;
}

// roundf semantics (half away from zero, as ggml's reference Q8
// quantizers use) without a libm call: v - trunc(v) is exact in float, so
// comparing it with 0.5 decides the rounding exactly. |v| < 2^31.
TANDEM_HOST_DEVICE int round_half_away(float v) {
    int i = static_cast<int>(v);  // truncates toward zero
    const float frac = v - static_cast<float>(i);
    if (frac >= 0.5f) ++i;
    if (frac <= -0.5f) --i;
    return i;
}

// Element j in the low nibble of qs[j], element j + 16 in the high one;
// 5-bit codes put their fifth bit j in bit j of the little-endian word qh.
template <int kBits, class Block>
TANDEM_HOST_DEVICE void pack_legacy_codes(const int* q, Block& y) {
    for (int j = 0; j < 16; ++j) y.qs[j] = static_cast<uint8_t>((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
    if constexpr (kBits == 5) {
        uint32_t h = 0;
        for (int j = 0; j < 32; ++j) h |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
        for (int b = 0; b < 4; ++b) y.qh[b] = static_cast<uint8_t>(h >> (8 * b));
    }
}

// Q4_0 / Q5_0 (signed_absmax: the extreme maps to the most negative code,
// which has no positive twin, so it is represented exactly): d = extreme /
// -(2^(bits-1)), codes x * (1/d) + offset + 0.5
// truncated (half up onto [0, 2^bits]) and clamped to the top code.
template <int kBits, class Block>
TANDEM_HOST_DEVICE void ref_symmetric(const float* x, Block& y) {
    constexpr float kHalf = static_cast<float>(1 << (kBits - 1));
    const float d = signed_absmax(x, 32) / -kHalf;
    const float id = inverse_or_zero(d);
    int q[32];
    for (int j = 0; j < 32; ++j) q[j] = min_i((1 << kBits) - 1, static_cast<int>(x[j] * id + (kHalf + 0.5f)));
    y.d = float_to_half(d);
    pack_legacy_codes<kBits>(q, y);
}

// Q4_1 / Q5_1: d = (max - min) / (2^bits - 1), codes (x - min) * (1/d) +
// 0.5 truncated and clamped.
template <int kBits, class Block>
TANDEM_HOST_DEVICE void ref_affine(const float* x, Block& y) {
    float lo = x[0];
    float hi = x[0];
    for (int j = 1; j < 32; ++j) {
        lo = min_f(lo, x[j]);
        hi = max_f(hi, x[j]);
    }
    const float d = (hi - lo) / static_cast<float>((1 << kBits) - 1);
    const float id = inverse_or_zero(d);
    int q[32];
    for (int j = 0; j < 32; ++j) q[j] = min_i((1 << kBits) - 1, static_cast<int>((x[j] - lo) * id + 0.5f));
    y.d = float_to_half(d);
    y.m = float_to_half(lo);
    pack_legacy_codes<kBits>(q, y);
}

TANDEM_HOST_DEVICE void ref_block(const float* x, block_q4_0& y) { ref_symmetric<4>(x, y); }
TANDEM_HOST_DEVICE void ref_block(const float* x, block_q5_0& y) { ref_symmetric<5>(x, y); }
TANDEM_HOST_DEVICE void ref_block(const float* x, block_q4_1& y) { ref_affine<4>(x, y); }
TANDEM_HOST_DEVICE void ref_block(const float* x, block_q5_1& y) { ref_affine<5>(x, y); }

// Q8_0 and Q8_1: symmetric 8-bit with d = amax / 127, codes x * (1/d)
// rounded half away from zero, clamped to [-127, 127] (never -128: products
// of two codes then fit the int16 pairs SIMD dot products accumulate). Not
// the activation quantizer (act_q8_32: 127 / amax, half to even). Returns
// the float d; *sum receives the sum of the codes.
TANDEM_HOST_DEVICE float ref_q8_32(const float* x, int8_t* qs, int* sum) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = max_f(amax, abs_f(x[j]));
    const float d = amax / 127.0f;
    const float id = inverse_or_zero(d);
    int s = 0;
    for (int j = 0; j < 32; ++j) {
        const int q = clamp_i(round_half_away(x[j] * id), -127, 127);
        qs[j] = static_cast<int8_t>(q);
        s += q;
    }
    *sum = s;
    return d;
}

TANDEM_HOST_DEVICE void ref_block(const float* x, block_q8_0& y) { q8_block<ref_q8_32>(x, y); }
TANDEM_HOST_DEVICE void ref_block(const float* x, block_q8_1& y) { q8_block<ref_q8_32>(x, y); }

// ---- IQ4_NL -------------------------------------------------------------------------------
TANDEM_HOST_DEVICE float iq4nl_table(int i) { return static_cast<float>(iq::iq4nl_value(i)); }

// Index of the IQ4_NL value nearest to x (bisection; a tie goes up).
TANDEM_HOST_DEVICE int nearest_iq4nl(float x) {
    if (x <= iq4nl_table(0)) return 0;
    if (x >= iq4nl_table(15)) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (x < iq4nl_table(mid)) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    return x - iq4nl_table(hi - 1) < iq4nl_table(hi) - x ? hi - 1 : hi;
}

// sum w q x and sum w q^2 over a block of 32 with the codes picked at 1/d = id.
TANDEM_HOST_DEVICE void iq4nl_weighted_sums(const float* xb, const float* weight, float id, float* sumqx,
                                            float* sumq2) {
    float sx = 0, s2 = 0;
    for (int j = 0; j < 32; ++j) {
        const float q = iq4nl_table(nearest_iq4nl(id * xb[j]));
        const float w = weight[j];
        sx += w * q * xb[j];
        s2 += w * q * q;
    }
    *sumqx = sx;
    *sumq2 = s2;
}

// The codes of a block of 32 at inverse scale id, packed as Q4_0's.
TANDEM_HOST_DEVICE void iq4nl_pack(const float* x, float id, uint8_t* qs) {
    for (int j = 0; j < 16; ++j) {
        const int lo = nearest_iq4nl(id * x[j]);
        const int hi = nearest_iq4nl(id * x[16 + j]);
        qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
}

// ggml's quantize_row_iq4_nl_ref (its CPU backend's row conversion, a KV
// cache's store): weights x^2, the codes picked at the block's extreme ->
// -127, their least-squares scale, no trial scales; those codes kept.
TANDEM_HOST_DEVICE void ref_block(const float* x, block_iq4_nl& y) {
    constexpr float kBlockMaxEps = 1e-15f;  // blocks below this get scale 0
    float weight[32];
    for (int j = 0; j < 32; ++j) weight[j] = x[j] * x[j];
    const float max = signed_absmax(x, 32);
    const float amax = abs_f(max);
    float id = 0;
    float scale = 0;
    if (amax >= kBlockMaxEps) {
        id = 1 / (max / iq4nl_table(0));
        float sumqx, sumq2;
        iq4nl_weighted_sums(x, weight, id, &sumqx, &sumq2);
        scale = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    }
    y.d = float_to_half(scale);
    iq4nl_pack(x, id, y.qs);
}

}  // namespace tandem::quant::element
