// Scalar activation quantizers for the 32-element partners Q8_0 and Q8_1.
// They follow ggml's CPU backend (id = 127/amax, round half to even), not
// its reference quantizer (id = 1/d, round half away), because activations
// must match what llama.cpp multiplies with; weights written by `tandem
// quantize` keep the reference rounding. Twins of act_quant_avx2.cpp.
#include <algorithm>
#include <cmath>

#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/fp16.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_ref.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;

float act_q8_block(const float* x, int8_t* qs, int* sum) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    if (!std::isfinite(id)) id = 0.0f;
    int s = 0;
    for (int j = 0; j < 32; ++j) {
        const int q = std::clamp(static_cast<int>(std::nearbyint(x[j] * id)), -127, 127);  // default mode: half to even
        qs[j] = static_cast<int8_t>(q);
        s += q;
    }
    *sum = s;
    return amax / 127.0f;
}

}  // namespace

void quantize_activation_q8_0(const float* src, void* dst, int64_t n) {
    auto* y = static_cast<block_q8_0*>(dst);
    for (int64_t i = 0; i < n / kQK8_0; ++i) {
        int sum = 0;
        y[i].d = fp32_to_fp16(act_q8_block(src + i * kQK8_0, y[i].qs, &sum));
    }
}

void quantize_activation_q8_1(const float* src, void* dst, int64_t n) {
    auto* y = static_cast<block_q8_1*>(dst);
    for (int64_t i = 0; i < n / kQK8_1; ++i) {
        int sum = 0;
        const float d = act_q8_block(src + i * kQK8_1, y[i].qs, &sum);
        y[i].d = fp32_to_fp16(d);
        y[i].s = fp32_to_fp16(d * static_cast<float>(sum));
    }
}

quant::QuantizeRowFn scalar_activation_quantizer(quant::Type a_type) {
    if (a_type == quant::Type::Q8_0) return quantize_activation_q8_0;
    if (a_type == quant::Type::Q8_1) return quantize_activation_q8_1;
    return quant::traits(a_type).quantize_row;
}

quant::QuantizeRowFn cache_row_quantizer(quant::Type t, SimdLevel level) {
    return t == quant::Type::IQ4_NL ? quant::ref::quantize_row_iq4_nl_plain : activation_quantizer(t, level);
}

}  // namespace tandem::cpu::detail
