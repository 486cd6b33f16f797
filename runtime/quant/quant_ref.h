// Scalar reference quantize/dequantize routines, one pair per type. They
// define what each format means; every SIMD and CUDA kernel is tested
// against them. Reached through the traits table (quant_types.h), not
// called by name outside runtime/quant and its tests.
#pragma once

#include <cstdint>

namespace tandem::quant::ref {

// Float formats (quant_ref_float.cpp).
void quantize_row_f32(const float* src, void* dst, int64_t n);
void dequantize_row_f32(const void* src, float* dst, int64_t n);
void quantize_row_f16(const float* src, void* dst, int64_t n);
void dequantize_row_f16(const void* src, float* dst, int64_t n);
void quantize_row_bf16(const float* src, void* dst, int64_t n);
void dequantize_row_bf16(const void* src, float* dst, int64_t n);

// 32-element legacy formats (quant_ref_legacy.cpp).
void quantize_row_q4_0(const float* src, void* dst, int64_t n);
void dequantize_row_q4_0(const void* src, float* dst, int64_t n);
void quantize_row_q4_1(const float* src, void* dst, int64_t n);
void dequantize_row_q4_1(const void* src, float* dst, int64_t n);
void quantize_row_q5_0(const float* src, void* dst, int64_t n);
void dequantize_row_q5_0(const void* src, float* dst, int64_t n);
void quantize_row_q5_1(const float* src, void* dst, int64_t n);
void dequantize_row_q5_1(const void* src, float* dst, int64_t n);
void quantize_row_q8_0(const float* src, void* dst, int64_t n);
void dequantize_row_q8_0(const void* src, float* dst, int64_t n);
void quantize_row_q8_1(const float* src, void* dst, int64_t n);
void dequantize_row_q8_1(const void* src, float* dst, int64_t n);

// 256-element K-quants (quant_ref_kquants*.cpp).
void quantize_row_q2_K(const float* src, void* dst, int64_t n);
void dequantize_row_q2_K(const void* src, float* dst, int64_t n);
void quantize_row_q3_K(const float* src, void* dst, int64_t n);
void dequantize_row_q3_K(const void* src, float* dst, int64_t n);
void quantize_row_q4_K(const float* src, void* dst, int64_t n);
void dequantize_row_q4_K(const void* src, float* dst, int64_t n);
void quantize_row_q5_K(const float* src, void* dst, int64_t n);
void dequantize_row_q5_K(const void* src, float* dst, int64_t n);
void quantize_row_q6_K(const float* src, void* dst, int64_t n);
void dequantize_row_q6_K(const void* src, float* dst, int64_t n);
void quantize_row_q8_K(const float* src, void* dst, int64_t n);
void dequantize_row_q8_K(const void* src, float* dst, int64_t n);

// i-quants and MXFP4 (quant_ref_iq.cpp): read only, each element as
// quant_element_iq.h computes it.
void dequantize_row_iq2_xxs(const void* src, float* dst, int64_t n);
void dequantize_row_iq2_xs(const void* src, float* dst, int64_t n);
void dequantize_row_iq2_s(const void* src, float* dst, int64_t n);
void dequantize_row_iq3_xxs(const void* src, float* dst, int64_t n);
void dequantize_row_iq3_s(const void* src, float* dst, int64_t n);
void dequantize_row_iq1_s(const void* src, float* dst, int64_t n);
void dequantize_row_iq1_m(const void* src, float* dst, int64_t n);
void dequantize_row_iq4_nl(const void* src, float* dst, int64_t n);
void dequantize_row_iq4_xs(const void* src, float* dst, int64_t n);
void dequantize_row_mxfp4(const void* src, float* dst, int64_t n);

}  // namespace tandem::quant::ref
