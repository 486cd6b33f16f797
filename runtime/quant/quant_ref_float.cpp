// Float "formats": F32 is a copy, F16/BF16 convert element by element with
// the exact bit-level routines of fp16.h (round to nearest even), so the
// reference never depends on F16C or any other CPU feature.
#include <cstring>

#include "runtime/quant/fp16.h"
#include "runtime/quant/quant_ref.h"

namespace tandem::quant::ref {

void quantize_row_f32(const float* src, void* dst, int64_t n) {
    // memcpy, not a loop of assignments: the bytes (NaN payloads included)
    // must survive unchanged.
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void dequantize_row_f32(const void* src, float* dst, int64_t n) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void quantize_row_f16(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<fp16_bits*>(dst);
    for (int64_t i = 0; i < n; ++i) out[i] = fp32_to_fp16(src[i]);
}

void dequantize_row_f16(const void* src, float* dst, int64_t n) {
    const auto* in = static_cast<const fp16_bits*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(in[i]);
}

void quantize_row_bf16(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<bf16_bits*>(dst);
    for (int64_t i = 0; i < n; ++i) out[i] = fp32_to_bf16(src[i]);
}

void dequantize_row_bf16(const void* src, float* dst, int64_t n) {
    const auto* in = static_cast<const bf16_bits*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(in[i]);
}

}  // namespace tandem::quant::ref
