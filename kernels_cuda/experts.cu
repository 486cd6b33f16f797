// Row movement for the experts' products (expert_matmul.h) and the copy of
// a fused product's column bands: a gather by row index, and the weighted
// sum over each token's slots (math::slot_sum_element, the CPU's order).
// Neither computes more than a copy or the CPU's own products and sums.
#include <cuda_runtime.h>

#include "kernels_cuda/cuda_kernels.h"
#include "kernels_cuda/op_math.h"

namespace tandem::cuda::kernels {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// One thread per output element.
__global__ void gather_rows_kernel(const float* __restrict__ src, int64_t src_stride, const int32_t* __restrict__ rows,
                                   int64_t width, float* __restrict__ dst, int64_t dst_stride, int64_t n) {
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    const int64_t i = idx / width;
    const int64_t c = idx % width;
    const int64_t r = rows ? static_cast<int64_t>(rows[i]) : i;
    dst[i * dst_stride + c] = src[r * src_stride + c];
}

__global__ void slot_sum_kernel(const float* __restrict__ y, const int32_t* __restrict__ grouped_row,
                                const float* __restrict__ route, int64_t n_used, int64_t width, float* __restrict__ out,
                                int64_t n) {
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    const int64_t t = idx / width;
    const int64_t c = idx % width;
    out[idx] = math::slot_sum_element(y, grouped_row, route, n_used, width, t, c);
}

}  // namespace

void launch_gather_rows(const float* src, int64_t src_stride, const int32_t* rows, int64_t n_rows, int64_t width,
                        float* dst, int64_t dst_stride, void* stream) {
    const int64_t n = n_rows * width;
    if (n <= 0) return;
    gather_rows_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(src, src_stride, rows, width,
                                                                                          dst, dst_stride, n);
}

void launch_slot_sum(const float* y, const int32_t* grouped_row, const float* route, int64_t n_used, int64_t width,
                     int64_t n_tokens, float* out, void* stream) {
    const int64_t n = n_tokens * width;
    if (n <= 0) return;
    slot_sum_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(y, grouped_row, route, n_used,
                                                                                       width, out, n);
}

}  // namespace tandem::cuda::kernels
