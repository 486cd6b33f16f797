// The CUDA side of Tandem as seen from plain C++: no CUDA type crosses this
// header. Built without CUDA (TANDEM_CUDA=OFF), the same functions exist and
// report that no GPU is present.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels_cuda/cuda_kernels.h"
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

// The usable GPUs. An absent or too old driver, no device, a build
// without CUDA or a plugin (libtandem_cuda.so) that cannot be loaded all
// give an empty list and, in `why_none`, the reason: Tandem then runs on
// the CPU; none of these is an error. This and measure_bandwidth go through
// the plugin (runtime/engine_cuda/cuda_loader.cpp). Single kernels on host
// data, for tests and benches, are tests/cuda_ops/cuda_test_ops.h.
std::vector<DeviceInfo> list_devices(std::string* why_none = nullptr);

// Copy bandwidths of GPU `device`, in GB/s (1e9 bytes per second), best of
// a few runs over buffers of `bytes` (less when the GPU has less free).
// device_gbps counts a device-to-device copy's read and write; host-to-
// device copies come from pinned memory. Throws tandem::Error on a CUDA
// failure.
struct BandwidthMeasurement {
    double device_gbps = 0.0;
    double host_to_device_gbps = 0.0;
    size_t bytes = 0;
};
BandwidthMeasurement measure_bandwidth(int device, size_t bytes);

}  // namespace tandem::cuda
