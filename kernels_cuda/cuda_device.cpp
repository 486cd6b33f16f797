// Host side of the CUDA backend: device discovery and CUDA errors.
// Compiled by the host compiler; kernels live in .cu files behind
// cuda_kernels.h.
#include <cuda_runtime.h>

#include <fmt/format.h>

#include "kernels_cuda/cuda_api.h"
#include "kernels_cuda/cuda_direct.h"
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/cuda_kernels.h"

namespace tandem::cuda {
void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
    throw Error(fmt::format("CUDA call {} failed at {}:{}: {} ({})", call, file, line, cudaGetErrorString(err),
                            cudaGetErrorName(err)));
}

std::vector<DeviceInfo> direct::list_devices(std::string* why_none) {
    std::vector<DeviceInfo> devices;
    int count = 0;
    // cudaErrorInsufficientDriver, cudaErrorNoDevice and friends all mean
    // "no usable GPU here": report the reason and let the CPU take over.
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        if (why_none) *why_none = fmt::format("CUDA reports no usable device: {}", cudaGetErrorString(err));
        (void)cudaGetLastError();  // clear the error so later probes start clean
        return devices;
    }
    for (int i = 0; i < count; ++i) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
        DeviceInfo info;
        info.index = i;
        info.name = prop.name;
        info.compute_major = prop.major;
        info.compute_minor = prop.minor;
        info.total_bytes = prop.totalGlobalMem;
        if (cudaSetDevice(i) == cudaSuccess) {
            size_t free_b = 0, total_b = 0;
            if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) info.free_bytes = free_b;
        }
        devices.push_back(std::move(info));
    }
    if (devices.empty() && why_none) *why_none = "CUDA found no devices";
    return devices;
}

}  // namespace tandem::cuda
