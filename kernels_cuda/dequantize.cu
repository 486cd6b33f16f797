// Dequantization on the GPU from the GGUF blocks as stored: one thread per
// output element, reading its block through the element functions shared
// with the host (runtime/quant/quant_element.h), so the CPU tests already
// check this indexing.
#include <cuda_runtime.h>

#include "kernels_cuda/cuda_kernels.h"
#include "runtime/quant/quant_element.h"

namespace tandem::cuda::kernels {
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

}  // namespace

bool launch_dequantize(quant::Type type, const void* src, float* dst, int64_t n, void* stream) {
    for (const auto& e : kLaunchTable) {
        if (e.type == type) {
            e.fn(src, dst, n, static_cast<cudaStream_t>(stream));
            return true;
        }
    }
    return false;
}

}  // namespace tandem::cuda::kernels
