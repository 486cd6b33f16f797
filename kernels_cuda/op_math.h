// The scalar math of the non-matmul ops, written once for the host and the
// device so that CPU-only tests check it against kernels_cpu/ (the
// reference the GPU must mirror). Every formula follows the CPU kernel's
// order of operations; kernels_cuda is built with --fmad=false, so nvcc does
// not fuse a*b+c where the CPU rounds twice. Only the libm calls (exp, cos,
// sin, tanh) may differ by an ulp between host and device.
#pragma once

#include <cstdint>

#include "runtime/quant/act_element.h"

namespace tandem::cuda::math {

TANDEM_HOST_DEVICE float exp_f(float v) {
#if defined(__CUDA_ARCH__)
    return expf(v);
#else
    return std::exp(v);
#endif
}

TANDEM_HOST_DEVICE float tanh_f(float v) {
#if defined(__CUDA_ARCH__)
    return tanhf(v);
#else
    return std::tanh(v);
#endif
}

TANDEM_HOST_DEVICE float fma_f(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
    return fmaf(a, b, c);
#else
    return std::fma(a, b, c);
#endif
}

// RoPE angle of pair i at position pos: theta starts at pos and is
// multiplied by theta_scale once per pair, in float, as the CPU loop does
// (not pos * pow(base, ...)), so the angles round the same way.
TANDEM_HOST_DEVICE float rope_angle(int64_t pos, int64_t i, float theta_scale, float freq_scale,
                                    const float* freq_factors) {
    float theta = static_cast<float>(pos);
    for (int64_t k = 0; k < i; ++k) theta *= theta_scale;
    const float ff = freq_factors ? freq_factors[i] : 1.0f;
    return freq_scale * (theta / ff);
}

TANDEM_HOST_DEVICE float silu_mul(float g, float up) { return g / (1.0f + exp_f(-g)) * up; }

// GELU as ggml's CPU table: fp16 input, fp16 output, saturated beyond 10.
TANDEM_HOST_DEVICE float gelu_f16(float g) {
    constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
    constexpr float kCoef = 0.044715f;
    if (g <= -10.0f) return 0.0f;
    if (g >= 10.0f) return g;
    const float h = quant::element::half_to_float(quant::element::float_to_half(g));
    const float exact = 0.5f * h * (1.0f + tanh_f(kSqrt2OverPi * h * (1.0f + kCoef * h * h)));
    return quant::element::half_to_float(quant::element::float_to_half(exact));
}

TANDEM_HOST_DEVICE float softcap_f(float x, float cap) { return cap * tanh_f(x / cap); }

// One step of the online softmax over a visible cell with score s: updates
// the running maximum and sum and returns the factor for what was
// accumulated so far (ms) and the weight of this cell's V (vs).
struct SoftmaxStep {
    float ms;
    float vs;
};

TANDEM_HOST_DEVICE SoftmaxStep softmax_step(float s, float& running_max, float& running_sum) {
    SoftmaxStep st{1.0f, 1.0f};
    if (s > running_max) {
        st.ms = exp_f(running_max - s);  // 0 for the first visible cell
        running_max = s;
    } else {
        st.vs = exp_f(s - running_max);
    }
    running_sum = running_sum * st.ms + st.vs;
    return st;
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
