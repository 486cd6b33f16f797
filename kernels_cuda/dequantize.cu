// Dequantization on the GPU from the GGUF blocks as stored: one thread per
// output element, reading its block through the element functions shared
// with the host (runtime/quant/quant_element.h).
#include <cuda_runtime.h>

#include <fmt/format.h>

#include "kernels_cuda/cuda_api.h"
#include "kernels_cuda/cuda_check.h"
#include "runtime/quant/quant_element.h"

namespace tandem::cuda {
namespace {

using RowElementFn = float (*)(const void*, int64_t);

template <RowElementFn Fn>
__global__ void dequantize_kernel(const void* __restrict__ src, float* __restrict__ dst, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = Fn(src, i);
}

using LaunchFn = void (*)(const void*, float*, int64_t, cudaStream_t);

template <RowElementFn Fn>
void launch(const void* src, float* dst, int64_t n, cudaStream_t stream) {
    constexpr int kThreads = 256;
    const int64_t blocks = (n + kThreads - 1) / kThreads;
    dequantize_kernel<Fn><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(src, dst, n);
}

struct LaunchEntry {
    quant::Type type;
    LaunchFn fn;
};

#define TANDEM_LAUNCH_ENTRY(Name, Block, Fn, QK) \
    LaunchEntry{quant::Type::Name, &launch<&quant::element::row_element<Block, quant::element::Fn, QK>>},
constexpr LaunchEntry kLaunchTable[] = {TANDEM_FOR_EACH_ELEMENT_TYPE(TANDEM_LAUNCH_ENTRY)};
#undef TANDEM_LAUNCH_ENTRY

// Frees device memory on every exit path, including a thrown CUDA error.
struct DeviceBuffer {
    void* ptr = nullptr;
    explicit DeviceBuffer(size_t bytes) { TANDEM_CUDA_CHECK(cudaMalloc(&ptr, bytes)); }
    ~DeviceBuffer() { cudaFree(ptr); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

}  // namespace

void dequantize_row_on_device(int device, quant::Type type, const void* host_src, float* host_dst, int64_t n) {
    const quant::TypeTraits& tr = quant::traits(type);
    const auto bytes = quant::row_bytes(type, n);
    if (!bytes) throw Error(fmt::format("dequantize on device: {} elements is not a multiple of {}'s block of {}", n, tr.name, tr.block_elems));
    LaunchFn fn = nullptr;
    for (const auto& e : kLaunchTable) {
        if (e.type == type) fn = e.fn;
    }
    if (!fn) throw Error(fmt::format("dequantize on device: no CUDA kernel for type {}", tr.name));
    TANDEM_CUDA_CHECK(cudaSetDevice(device));
    DeviceBuffer src(*bytes);
    DeviceBuffer dst(static_cast<size_t>(n) * sizeof(float));
    TANDEM_CUDA_CHECK(cudaMemcpy(src.ptr, host_src, *bytes, cudaMemcpyHostToDevice));
    fn(src.ptr, static_cast<float*>(dst.ptr), n, nullptr);
    TANDEM_CUDA_CHECK(cudaGetLastError());
    TANDEM_CUDA_CHECK(cudaMemcpy(host_dst, dst.ptr, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToHost));
}

}  // namespace tandem::cuda
