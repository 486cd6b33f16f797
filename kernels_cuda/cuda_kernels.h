// Launchers of the CUDA kernels, callable from host C++ compiled by g++.
// Internal to kernels_cuda/: pointers are device pointers, the stream is a
// cudaStream_t passed as void* so that this header needs no CUDA include.
#pragma once

#include <cstdint>

#include "runtime/quant/quant_types.h"

namespace tandem::cuda::kernels {

// dst[i] = dequantized element i of the row at src, i < n. Returns false if
// no kernel exists for the type (nothing is launched then).
bool launch_dequantize(quant::Type type, const void* src, float* dst, int64_t n, void* stream);

}  // namespace tandem::cuda::kernels
