// The scalar math of the non-matmul ops, written once for the host and the
// device so that CPU-only tests check it against kernels_cpu/ (the
// reference the GPU must mirror). Every formula follows the CPU kernel's
// order of operations; kernels_cuda is built with --fmad=false, so nvcc does
// not fuse a*b+c where the CPU rounds twice; where the CPU fuses (as ggml
// does), fma_f says so. Only the libm calls (exp, cos, sin, tanh) may differ
// by an ulp between host and device.
#pragma once

#include <cstdint>

#include "runtime/quant/act_element.h"
#include "runtime/quant/attention_order.h"
#include "runtime/quant/dot_order.h"

namespace tandem::cuda::math {

TANDEM_FLOAT_FN(exp_f, expf, std::exp)
TANDEM_FLOAT_FN(tanh_f, tanhf, std::tanh)
TANDEM_FLOAT_FN(cos_f, cosf, std::cos)
TANDEM_FLOAT_FN(sin_f, sinf, std::sin)
TANDEM_FLOAT_FN(log_f, logf, std::log)

using quant::dot::fma_f;  // one definition, with the products' (dot_order.h)

// What cos and sin are multiplied by (cpu::rope_heads): attn_factor, and
// with YaRN (ext_factor != 0) its 1 + 0.1 ln(1 / freq_scale) too.
TANDEM_HOST_DEVICE float rope_mscale(float attn_factor, float ext_factor, float freq_scale) {
    return ext_factor != 0.0f ? attn_factor * fma_f(0.1f, log_f(1.0f / freq_scale), 1.0f) : attn_factor;
}

// Pair i's cosine and sine as ggml's rope_yarn (cpu::rope_heads). theta
// starts at pos and is multiplied by theta_scale once per pair, in float,
// as the CPU loop does (not pos * pow(base, ...)), so the angles round the
// same way; the interpolated angle freq_scale * (theta / ff), with YaRN
// mixed with the extrapolated theta / ff by ramp(i) * ext_factor.
TANDEM_HOST_DEVICE void rope_cos_sin(int64_t pos, int64_t i, float theta_scale, float freq_scale,
                                     const float* freq_factors, float ext_factor, const float corr_dims[2],
                                     float mscale, float& c, float& s) {
    float theta = static_cast<float>(pos);
    for (int64_t k = 0; k < i; ++k) theta *= theta_scale;
    const float extrap = theta / (freq_factors ? freq_factors[i] : 1.0f);
    float angle = freq_scale * extrap;
    if (ext_factor != 0.0f) {
        const float d = corr_dims[1] - corr_dims[0];
        const float y = (static_cast<float>(i) - corr_dims[0]) / (0.001f < d ? d : 0.001f);
        const float ramp = 1.0f - (y < 0.0f ? 0.0f : (1.0f < y ? 1.0f : y));
        const float mix = ramp * ext_factor;
        angle = fma_f(angle, 1.0f - mix, extrap * mix);
    }
    c = cos_f(angle) * mscale;
    s = sin_f(angle) * mscale;
}

// gpt-oss's clamped SwiGLU of one element (cpu::swiglu_oai, with
// std::min's and std::clamp's comparisons).
TANDEM_HOST_DEVICE float swiglu_oai(float g, float up) {
    constexpr float kAlpha = 1.702f, kLimit = 7.0f;
    const float x = kLimit < g ? kLimit : g;
    const float y = up < -kLimit ? -kLimit : (kLimit < up ? kLimit : up);
    return x / (1.0f + exp_f(kAlpha * (-x))) * (y + 1.0f);
}

// The RoPE rotation of one pair, with the fused multiply-adds ggml's
// compiled loop uses.
TANDEM_HOST_DEVICE void rope_rotate(float& x0, float& x1, float c, float s) {
    const float a = x0, b = x1;
    x0 = fma_f(a, c, -(b * s));
    x1 = fma_f(a, s, b * c);
}

TANDEM_HOST_DEVICE float ldexp_f(float v, int e) {
#if defined(__CUDA_ARCH__)
    return ldexpf(v, e);
#else
    return std::ldexp(v, e);
#endif
}

// exp as ggml's AVX-512 CPU backend evaluates it for SwiGLU and the tiled
// softmax (kernels_cpu/elementwise.h, ggml_expf_poly): round x / ln 2 by the
// 1.5 * 2^23 trick, reduce in two parts, a degree-5 polynomial, scale by 2^n.
TANDEM_HOST_DEVICE float expf_poly(float x) {
    const float r = 0x1.8p23f;
    const float z = fma_f(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fma_f(-n, 0x1.7f7d1cp-20f, fma_f(-n, 0x1.62e4p-1f, x));
    if (n > 192.0f || n < -192.0f) return n <= 0.0f ? 0.0f : __builtin_huge_valf();
    const float u = b * b;
    const float j = fma_f(fma_f(fma_f(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fma_f(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                          fma_f(0x1.ffffecp-1f, b, 1.0f));
    return ldexp_f(j, static_cast<int>(n));
}

// SwiGLU of element i of n: the polynomial exp for the elements ggml's
// vector loop covers (whole groups of 16), expf for the tail.
TANDEM_HOST_DEVICE float silu_mul(float g, float up, int64_t i, int64_t n) {
    const float e = i < n - n % 16 ? expf_poly(0.0f - g) : exp_f(-g);
    return g / (1.0f + e) * up;
}

// Element i of n_rows rows of row_len, SwiGLU'd row by row as the CPU
// does (the polynomial's 16-element rule counts within each row).
TANDEM_HOST_DEVICE float swiglu_rows_element(const float* gate, const float* up, int64_t i, int64_t row_len) {
    return silu_mul(gate[i], up[i], i % row_len, row_len);
}

// GELU as ggml's CPU table: fp16 input, fp16 output, saturated beyond 10.
TANDEM_HOST_DEVICE float gelu_f16(float g) {
    constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
    constexpr float kCoef = 0.044715f;
    if (g <= -10.0f) return 0.0f;
    if (g >= 10.0f) return g;
    const float h = quant::element::half_to_float(quant::element::float_to_half(g));
    const float exact = 0.5f * h * (1.0f + tanh_f(kSqrt2OverPi * h * fma_f(kCoef * h, h, 1.0f)));
    return quant::element::half_to_float(quant::element::float_to_half(exact));
}

TANDEM_HOST_DEVICE float softcap_f(float x, float cap) { return cap * tanh_f(x / cap); }

// An attention score from Q.K as kernels_cpu/attention.cpp makes it:
// qk * scale, or with soft-capping (Gemma 2) cap * tanh(qk * (scale /
// cap)), ggml's order (the scale folded into the divisor before tanh).
TANDEM_HOST_DEVICE float attention_score(float qk, float scale, float cap) {
    return cap > 0.0f ? cap * tanh_f(qk * (scale / cap)) : qk * scale;
}

// Element c of token t's sum over its n_used experts' products, as the CPU
// device sums them (cpu_device.cpp): o = y_0 * w_0, then o = o + y_j * w_j
// in slot order, each product rounded (no fma). y holds the products in
// grouped order, row grouped_row[t * n_used + j] for slot j (width floats
// a row); route holds (expert id, weight) pairs, n_used per token.
TANDEM_HOST_DEVICE float slot_sum_element(const float* y, const int32_t* grouped_row, const float* route,
                                          int64_t n_used, int64_t width, int64_t t, int64_t c) {
    float o = 0.0f;
    for (int64_t j = 0; j < n_used; ++j) {
        const int64_t r = t * n_used + j;
        const float v = y[static_cast<int64_t>(grouped_row[r]) * width + c] * route[2 * r + 1];
        o = j == 0 ? v : o + v;
    }
    return o;
}

// The device's exp for the steps of runtime/quant/attention_order.h
// (std::exp on the emulator and the host).
struct ExpF {
    TANDEM_HOST_DEVICE float operator()(float x) const { return exp_f(x); }
};

// One step of the online softmax (attention_order.h's, with exp_f).
using quant::attn::SoftmaxStep;
TANDEM_HOST_DEVICE SoftmaxStep softmax_step(float s, float& running_max, float& running_sum) {
    return quant::attn::softmax_step(s, running_max, running_sum, ExpF{});
}

// The fp16 V accumulator of ggml's CPU flash attention: each update rounds
// to half (kernels_cpu/f16_accumulate.h).
TANDEM_HOST_DEVICE quant::fp16_bits f16_scale(quant::fp16_bits acc, float s) {
    return quant::element::float_to_half(quant::element::half_to_float(acc) * s);
}

TANDEM_HOST_DEVICE quant::fp16_bits f16_mad(quant::fp16_bits acc, quant::fp16_bits v, float s) {
    return quant::element::float_to_half(
        fma_f(quant::element::half_to_float(v), s, quant::element::half_to_float(acc)));
}

}  // namespace tandem::cuda::math
