// Which activation type the CUDA matmul quantizes to for each weight type.
// A plain header so host tests check it against cpu::activation_type: the
// GPU must multiply the very codes the CPU multiplies.
#pragma once

#include "runtime/quant/quant_types.h"

// X(weight type): every type with a CUDA matmul, the twins of
// TANDEM_DOT_TYPES (kernels_cpu/vec_dot.h). Each multiplies activations
// quantized to quant::dot_type(type), as the CPU does.
#define TANDEM_CUDA_MATMUL_TYPES(X) \
    X(F32)                          \
    X(F16)                          \
    X(BF16)                         \
    X(Q4_0)                         \
    X(Q4_1)                         \
    X(Q5_0)                         \
    X(Q5_1)                         \
    X(Q8_0)                         \
    X(Q2_K)                         \
    X(Q3_K)                         \
    X(Q4_K)                         \
    X(Q5_K)                         \
    X(Q6_K)                         \
    X(IQ2_XXS)                      \
    X(IQ2_XS)                       \
    X(IQ2_S)                        \
    X(IQ3_XXS)                      \
    X(IQ3_S)                        \
    X(IQ1_S)                        \
    X(IQ1_M)                        \
    X(IQ4_NL)                       \
    X(IQ4_XS)                       \
    X(MXFP4)

namespace tandem::cuda {

// false when the CUDA matmul has no kernel for w.
constexpr bool matmul_activation_type(quant::Type w, quant::Type& a) {
#define TANDEM_CUDA_MATMUL_CASE(W)      \
    if (w == quant::Type::W) {          \
        a = quant::dot_type(w);         \
        return true;                    \
    }
    TANDEM_CUDA_MATMUL_TYPES(TANDEM_CUDA_MATMUL_CASE)
#undef TANDEM_CUDA_MATMUL_CASE
    return false;
}

}  // namespace tandem::cuda
