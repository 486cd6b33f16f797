// Scalar dequantization of the i-quants and MXFP4: each element as its
// decoder in quant_element_iq.h computes it (so the CUDA kernel, which
// calls the same decoders, gives the same floats).
#include "runtime/quant/quant_element_iq.h"
#include "runtime/quant/quant_ref.h"

namespace tandem::quant::ref {
namespace {

template <class D, int kElems>
void dequantize(const void* src, float* dst, int64_t n) {
    const auto* blocks = static_cast<const typename D::Block*>(src);
    for (int64_t i = 0; i < n / kElems; ++i) {
        for (int k = 0; k < kElems; ++k) dst[i * kElems + k] = D::value(blocks[i], k);
    }
}

}  // namespace

void dequantize_row_iq2_xxs(const void* src, float* dst, int64_t n) { dequantize<iq::Iq2xxs, kQK_K>(src, dst, n); }
void dequantize_row_iq2_xs(const void* src, float* dst, int64_t n) { dequantize<iq::Iq2xs, kQK_K>(src, dst, n); }
void dequantize_row_iq2_s(const void* src, float* dst, int64_t n) { dequantize<iq::Iq2s, kQK_K>(src, dst, n); }
void dequantize_row_iq3_xxs(const void* src, float* dst, int64_t n) { dequantize<iq::Iq3xxs, kQK_K>(src, dst, n); }
void dequantize_row_iq3_s(const void* src, float* dst, int64_t n) { dequantize<iq::Iq3s, kQK_K>(src, dst, n); }
void dequantize_row_iq1_s(const void* src, float* dst, int64_t n) { dequantize<iq::Iq1s, kQK_K>(src, dst, n); }
void dequantize_row_iq1_m(const void* src, float* dst, int64_t n) { dequantize<iq::Iq1m, kQK_K>(src, dst, n); }
void dequantize_row_iq4_nl(const void* src, float* dst, int64_t n) { dequantize<iq::Iq4nl, kQK4_NL>(src, dst, n); }
void dequantize_row_iq4_xs(const void* src, float* dst, int64_t n) { dequantize<iq::Iq4xs, kQK_K>(src, dst, n); }
void dequantize_row_mxfp4(const void* src, float* dst, int64_t n) { dequantize<iq::Mxfp4, kQK_MXFP4>(src, dst, n); }

}  // namespace tandem::quant::ref
