// The non-matmul ops of a layer on the GPU, with the CPU kernels' order of
// operations (the shared scalar math is in op_math.h; kernels_cuda builds
// with --fmad=false so nothing is fused behind our back).
#include <cuda_runtime.h>

#include "kernels_cuda/cuda_kernels.h"
#include "kernels_cuda/op_math.h"
#include "runtime/quant/hadamard.h"

namespace tandem::cuda::kernels {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// One block per row: float squares summed in double, as the CPU does; the
// order of the double sum differs, which cannot change the float mean in
// all but freak cases.
__global__ void rms_norm_kernel(const float* x, int64_t x_stride, const float* __restrict__ w, float* y,
                                int64_t y_stride, int64_t n, float eps) {
    __shared__ double partial[kThreads];
    const float* xr = x + static_cast<int64_t>(blockIdx.x) * x_stride;
    float* yr = y + static_cast<int64_t>(blockIdx.x) * y_stride;
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) sum += static_cast<double>(xr[i] * xr[i]);
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
        if (static_cast<int>(threadIdx.x) < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    const float mean = static_cast<float>(partial[0] / static_cast<double>(n));
    const float s = 1.0f / sqrtf(mean + eps);
    // y may alias x: every read of the sum happened before the barrier, and
    // each thread rewrites only the elements it reads below.
    for (int64_t i = threadIdx.x; i < n; i += kThreads) yr[i] = w ? (xr[i] * s) * w[i] : xr[i] * s;
}

// One thread per (token, head, pair).
__global__ void rope_kernel(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t row_stride,
                            const int32_t* __restrict__ pos, RopeArgs args) {
    const int64_t half = args.n_rot / 2;
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= n_tokens * n_heads * half) return;
    const int64_t i = idx % half;
    const int64_t h = (idx / half) % n_heads;
    const int64_t t = idx / (half * n_heads);
    float c = 0.0f, s = 0.0f;
    math::rope_cos_sin(pos[t], i, args.theta_scale, args.freq_scale, args.freq_factors, args.ext_factor,
                       args.corr_dims, args.mscale, c, s);
    float* v = x + t * row_stride + h * head_dim;
    const int64_t a = args.neox ? i : 2 * i;
    const int64_t b = args.neox ? i + half : 2 * i + 1;
    const float x0 = v[a];
    const float x1 = v[b];
    float r0 = x0, r1 = x1;
    math::rope_rotate(r0, r1, c, s);
    v[a] = r0;
    v[b] = r1;
}

// n elements in rows of row_len: the exp rule counts within each row.
__global__ void swiglu_kernel(const float* gate, const float* up, float* out, int64_t n, int64_t row_len) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = math::swiglu_rows_element(gate, up, i, row_len);
}

__global__ void swiglu_oai_kernel(const float* gate, const float* up, float* out, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = math::swiglu_oai(gate[i], up[i]);
}

__global__ void geglu_kernel(const float* gate, const float* up, float* out, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = math::gelu_f16(gate[i]) * up[i];
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}

__global__ void scale_kernel(float* x, int64_t n, float s) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}

// One thread per element; element i adds v[i % len], as cpu::add per row.
__global__ void add_rows_kernel(float* x, const float* __restrict__ v, int64_t len, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] += v[i % len];
}

__global__ void softcap_kernel(float* x, int64_t n, float cap) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] = math::softcap_f(x[i], cap);
}

// One thread per block of the transform: the blocks are 64-128 floats and
// few (Q, K, V and the attention output of a micro-batch), and a thread
// running quant::hadamard_block keeps its order of adds.
__global__ void hadamard_kernel(float* x, int64_t n_blocks, int64_t block) {
    const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (b < n_blocks) quant::hadamard_block(x + b * block, block);
}

}  // namespace

void launch_hadamard(float* x, int64_t n, int64_t block, void* stream) {
    const int64_t n_blocks = n / block;
    if (n_blocks > 0) {
        hadamard_kernel<<<blocks_for(n_blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, n_blocks, block);
    }
}

void launch_rms_norm(const float* x, int64_t x_stride, const float* w, float* y, int64_t y_stride, int64_t n,
                     int64_t n_rows, float eps, void* stream) {
    if (n_rows <= 0) return;
    rms_norm_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        x, x_stride, w, y, y_stride, n, eps);
}

void launch_rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t row_stride,
                 const int32_t* pos, const RopeArgs& args, void* stream) {
    const int64_t n = n_tokens * n_heads * (args.n_rot / 2);
    if (n <= 0) return;
    rope_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, n_tokens, n_heads, head_dim,
                                                                                   row_stride, pos, args);
}

void launch_swiglu(const float* gate, const float* up, float* out, int64_t n, void* stream) {
    launch_swiglu_rows(gate, up, out, n, 1, stream);
}

void launch_swiglu_rows(const float* gate, const float* up, float* out, int64_t row_len, int64_t n_rows,
                        void* stream) {
    const int64_t n = row_len * n_rows;
    if (n > 0) {
        swiglu_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(gate, up, out, n, row_len);
    }
}

void launch_geglu(const float* gate, const float* up, float* out, int64_t n, void* stream) {
    if (n > 0) geglu_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(gate, up, out, n);
}

void launch_swiglu_oai(const float* gate, const float* up, float* out, int64_t n, void* stream) {
    if (n > 0) swiglu_oai_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(gate, up, out, n);
}

void launch_add(float* y, const float* x, int64_t n, void* stream) {
    if (n > 0) add_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(y, x, n);
}

void launch_scale(float* x, int64_t n, float s, void* stream) {
    if (n > 0) scale_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, n, s);
}

void launch_add_rows(float* x, const float* v, int64_t len, int64_t n_rows, void* stream) {
    const int64_t n = len * n_rows;
    if (n > 0) add_rows_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, v, len, n);
}

void launch_softcap(float* x, int64_t n, float cap, void* stream) {
    if (n > 0) softcap_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, n, cap);
}

}  // namespace tandem::cuda::kernels
