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

// dot(x, y) of two fp16 rows in the order ggml's CPU backend sums them on
// AVX-512 machines (what llama.cpp's flash attention uses for K.Q): steps of
// 64 elements into four 16-lane fp32 accumulators with one fused
// multiply-add each, the accumulators added pairwise (0+2, 1+3, then 0+1)
// and the 16 lanes in halving order (8+8, 4+4, 2+2, 1+1), converted to
// double; the remaining n % 64 products are added one by one in double.
// Reproducing that order makes attention scores bit-identical to llama.cpp,
// which matters because later 8-bit activation codes amplify any ulp.
// The 16-lane sum in the order of GCC's _mm512_reduce_add_ps.
float reduce16_ggml(const float* lanes);
float f16_dot_ggml_scalar(const uint16_t* x, const uint16_t* y, int64_t n);
float f16_dot_ggml_avx2(const uint16_t* x, const uint16_t* y, int64_t n);
void f16_mad_avx2(uint16_t* y, const uint16_t* x, float s, int64_t n);

}  // namespace tandem::cpu::detail
