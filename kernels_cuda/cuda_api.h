// The CUDA side of Tandem as seen from plain C++: no CUDA type crosses this
// header. Built without CUDA (TANDEM_CUDA=OFF), the same functions exist and
// report that no GPU is present.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/quant/quant_types.h"

namespace tandem::cuda {

struct DeviceInfo {
    int index = 0;
    std::string name;
    size_t total_bytes = 0;
    size_t free_bytes = 0;
    int compute_major = 0;
    int compute_minor = 0;
};

// True when this binary contains CUDA kernels.
bool compiled_with_cuda();

// The usable GPUs. An absent or too old driver, no device, or a build
// without CUDA all give an empty list and, in `why_none`, the reason:
// Tandem then runs on the CPU; none of these is an error.
std::vector<DeviceInfo> list_devices(std::string* why_none = nullptr);

// Dequantizes `n` elements of one row on GPU `device` and copies the floats
// back: the CUDA twin of quant::dequantize_row, used by tests and benches.
// Throws tandem::Error when a CUDA call fails.
void dequantize_row_on_device(int device, quant::Type type, const void* host_src, float* host_dst, int64_t n);

}  // namespace tandem::cuda
