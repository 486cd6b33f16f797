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

// Importance-weighted quantizers: what ggml's quantize_<type>(src, dst, 1,
// n, qw) writes for one row, byte for byte. qw holds one importance weight
// per column (llama-imatrix's mean squared activation), or is nullptr.
// With qw == nullptr each does what ggml's does without a matrix (said at
// each definition). i-quants and MXFP4 (quant_make_iq*.cpp):
void quantize_row_iq2_xxs_w(const float* src, void* dst, int64_t n, const float* qw);
void quantize_row_iq2_xs_w(const float* src, void* dst, int64_t n, const float* qw);
void quantize_row_iq2_s_w(const float* src, void* dst, int64_t n, const float* qw);
void quantize_row_iq1_s_w(const float* src, void* dst, int64_t n, const float* qw);
void quantize_row_iq1_m_w(const float* src, void* dst, int64_t n, const float* qw);
void quantize_row_iq3_xxs_w(const float* src, void* dst, int64_t n, const float* qw);
void quantize_row_iq3_s_w(const float* src, void* dst, int64_t n, const float* qw);
void quantize_row_iq4_nl_w(const float* src, void* dst, int64_t n, const float* qw);
void quantize_row_iq4_xs_w(const float* src, void* dst, int64_t n, const float* qw);
void quantize_row_mxfp4(const float* src, void* dst, int64_t n);
// ggml's quantize_row_iq4_nl_ref, its CPU backend's row conversion (a KV
// cache's store): one least-squares scale over the codes picked at the
// block's extreme -> -127, no trial scales, those codes kept.
void quantize_row_iq4_nl_plain(const float* src, void* dst, int64_t n);
// The K-quants and legacy types with importance weights
// (quant_make_weighted.cpp); with qw == nullptr ggml uses the plain
// reference quantizers above, and so do the callers here.
void quantize_row_q2_K_w(const float* src, void* dst, int64_t n, const float* qw);
void quantize_row_q3_K_w(const float* src, void* dst, int64_t n, const float* qw);
void quantize_row_q4_K_w(const float* src, void* dst, int64_t n, const float* qw);
void quantize_row_q5_K_w(const float* src, void* dst, int64_t n, const float* qw);
void quantize_row_q6_K_w(const float* src, void* dst, int64_t n, const float* qw);
void quantize_row_q4_0_w(const float* src, void* dst, int64_t n, const float* qw);
void quantize_row_q4_1_w(const float* src, void* dst, int64_t n, const float* qw);
void quantize_row_q5_0_w(const float* src, void* dst, int64_t n, const float* qw);
void quantize_row_q5_1_w(const float* src, void* dst, int64_t n, const float* qw);

}  // namespace tandem::quant::ref
