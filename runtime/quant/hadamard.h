// The orthonormal Walsh-Hadamard transform a quantized KV cache stores its
// rows through (model::KvRotation), written once for the host and the
// device. H_1 = [1], H_2n = [[H_n, H_n], [H_n, -H_n]] / sqrt(2): H is
// symmetric and its own inverse, so turning Q and K alike keeps Q.K, and
// turning the attention output undoes V's turn.
//
// The order is ggml's fast transform (its CPU mul_mat hinted
// GGML_HINT_SRC0_IS_HADAMARD): every value times 1/sqrt(n) first, then the
// butterflies (u + v, u - v) at spans 1, 2, 4, ..., n/2. Each output is the
// same sequence of correctly rounded adds whatever the vector width, so
// every SIMD level and the device give the same bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/quant/host_device.h"

namespace tandem::quant {

// x: n floats, n a power of two.
TANDEM_HOST_DEVICE void hadamard_block(float* x, int64_t n) {
    const float scale = 1.0f / sqrtf(static_cast<float>(n));
    for (int64_t j = 0; j < n; ++j) x[j] *= scale;
    for (int64_t len = 1; len < n; len <<= 1) {
        for (int64_t i = 0; i < n; i += 2 * len) {
            for (int64_t j = i; j < i + len; ++j) {
                const float u = x[j], v = x[j + len];
                x[j] = u + v;
                x[j + len] = u - v;
            }
        }
    }
}

}  // namespace tandem::quant
