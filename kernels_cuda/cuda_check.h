// Every CUDA runtime call is checked; a failure becomes a tandem::Error that
// names the call, the file and line, and CUDA's own description.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "runtime/common/error.h"

namespace tandem::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);

}  // namespace tandem::cuda

#define TANDEM_CUDA_CHECK(call)                                                      \
    do {                                                                             \
        const cudaError_t tandem_cuda_err_ = (call);                                 \
        if (tandem_cuda_err_ != cudaSuccess)                                         \
            ::tandem::cuda::throw_cuda_error(tandem_cuda_err_, #call, __FILE__, __LINE__); \
    } while (0)
