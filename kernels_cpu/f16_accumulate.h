// The V accumulator of CPU attention, kept in fp16 as ggml's CPU flash
// attention keeps it (when V is F16): every step rounds to half precision.
// Matching that rounding, not exceeding it, is what makes logits agree with
// llama.cpp on quantized models, whose 8-bit activations turn half-ulp
// differences into different codes. Scalar and AVX2 (F16C + FMA) versions
// are bit-identical: one fused multiply-add, then round to nearest even.
#pragma once

#include <cstdint>

namespace tandem::cpu::detail {

// y[i] = half(float(y[i]) * s)
void f16_scale_scalar(uint16_t* y, float s, int64_t n);
// y[i] = half(fma(float(x[i]), s, float(y[i])))
void f16_mad_scalar(uint16_t* y, const uint16_t* x, float s, int64_t n);
void f16_scale_avx2(uint16_t* y, float s, int64_t n);
void f16_mad_avx2(uint16_t* y, const uint16_t* x, float s, int64_t n);

}  // namespace tandem::cpu::detail
