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
#include "runtime/quant/quant_ref_element.h"
#include "runtime/quant/quant_ref_kquants_scales.h"

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

using detail::check_multiple;

// A row of 32-element blocks, each by its shared core (quant_ref_element.h,
// which the CUDA KV cache runs too).
template <class Block, int kQK>
void quantize_blocks(const float* src, void* dst, int64_t n) {
    check_multiple(n, kQK);
    auto* y = static_cast<Block*>(dst);
    for (int64_t i = 0; i < n / kQK; ++i) element::ref_block(src + i * kQK, y[i]);
}

}  // namespace

// ---- Q4_0 ---------------------------------------------------------------------

void quantize_row_q4_0(const float* src, void* dst, int64_t n) {
    quantize_blocks<block_q4_0, kQK4_0>(src, dst, n);
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
    quantize_blocks<block_q4_1, kQK4_1>(src, dst, n);
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
    quantize_blocks<block_q5_0, kQK5_0>(src, dst, n);
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
    quantize_blocks<block_q5_1, kQK5_1>(src, dst, n);
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

void quantize_row_q8_0(const float* src, void* dst, int64_t n) {
    quantize_blocks<block_q8_0, kQK8_0>(src, dst, n);
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
    quantize_blocks<block_q8_1, kQK8_1>(src, dst, n);
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
