// Attention over an F16 KV cache as kernels_cpu/attention.cpp computes it
// (ggml's CPU flash attention): one warp per (token, head), one pass over
// the cells with the online softmax of op_math.h, and the V accumulator kept
// in fp16 with one fused multiply-add and one rounding per update. Each lane
// owns head_dim / 32 dimensions; Q.K is summed in double (the products of
// two halves are exact) and reduced with an xor butterfly, which leaves the
// bitwise same score in every lane, so all lanes take the same branches.
// The CPU now sums Q.K in ggml's lane order (and uses llama.cpp's tiled
// kernel for batches of 64 or more), so scores here can differ from the
// CPU's in the last bit; the GPU path is held to the golden KL bound.
#include <cuda_runtime.h>

#include "kernels_cuda/cuda_kernels.h"
#include "kernels_cuda/op_math.h"

namespace tandem::cuda::kernels {
namespace {

namespace el = quant::element;

constexpr int kMaxPerLane = 16;  // head sizes up to 512

__device__ __forceinline__ double warp_sum(double v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__global__ void kv_store_kernel(const float* __restrict__ k, const float* __restrict__ v, int64_t n_tokens,
                                const int32_t* __restrict__ pos, KvF16 kv) {
    const int64_t per_token = kv.k_dim + kv.v_dim;
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= n_tokens * per_token) return;
    const int64_t t = idx / per_token;
    const int64_t e = idx % per_token;
    const int64_t cell = pos[t] % kv.n_cells;
    if (e < kv.k_dim) {
        kv.k[cell * kv.k_dim + e] = el::float_to_half(k[t * kv.k_dim + e]);
    } else {
        const int64_t d = e - kv.k_dim;
        kv.v[cell * kv.v_dim + d] = el::float_to_half(v[t * kv.v_dim + d]);
    }
    if (e == 0) kv.cell_pos[cell] = pos[t];
}

__global__ void kv_clear_kernel(int32_t* cell_pos, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) cell_pos[i] = -1;
}

__global__ void attention_kernel(const float* __restrict__ q, const int32_t* __restrict__ q_pos,
                                 AttentionArgs args, KvF16 kv, float* __restrict__ out) {
    const int64_t t = blockIdx.x / args.n_head;
    const int64_t h = blockIdx.x % args.n_head;
    const int64_t g = h / (args.n_head / args.n_head_kv);
    const int lane = static_cast<int>(threadIdx.x);
    const int32_t p = q_pos[t];
    const int nk = static_cast<int>((args.head_dim_k + 31) / 32);
    const int nv = static_cast<int>((args.head_dim_v + 31) / 32);

    // Q rounded to fp16 once, as the CPU rounds it to the F16 cache's partner.
    float qh[kMaxPerLane];
    const float* qrow = q + (t * args.n_head + h) * args.head_dim_k;
    for (int j = 0; j < nk; ++j) {
        const int64_t d = lane + 32 * j;
        qh[j] = d < args.head_dim_k ? el::half_to_float(el::float_to_half(qrow[d])) : 0.0f;
    }
    quant::fp16_bits acc[kMaxPerLane];
    for (int j = 0; j < nv; ++j) acc[j] = 0;
    float running_max = -INFINITY;
    float running_sum = 0.0f;

    for (int64_t c = 0; c < kv.n_cells; ++c) {
        const int32_t kp = kv.cell_pos[c];
        if (kp < 0 || kp > p || (args.window > 0 && p - kp >= args.window)) continue;
        const uint16_t* kh = kv.k + c * kv.k_dim + g * args.head_dim_k;
        double part = 0.0;
        for (int j = 0; j < nk; ++j) {
            const int64_t d = lane + 32 * j;
            if (d < args.head_dim_k) part += static_cast<double>(qh[j]) * static_cast<double>(el::half_to_float(kh[d]));
        }
        const float s = static_cast<float>(warp_sum(part)) * args.scale;
        const bool rescale = s > running_max;
        const math::SoftmaxStep st = math::softmax_step(s, running_max, running_sum);
        const uint16_t* vh = kv.v + c * kv.v_dim + g * args.head_dim_v;
        for (int j = 0; j < nv; ++j) {
            const int64_t d = lane + 32 * j;
            if (d >= args.head_dim_v) continue;
            if (rescale) acc[j] = math::f16_scale(acc[j], st.ms);
            acc[j] = math::f16_mad(acc[j], vh[d], st.vs);
        }
    }
    float* oh = out + (t * args.n_head + h) * args.head_dim_v;
    const float inv = running_sum > 0.0f ? 1.0f / running_sum : 0.0f;
    for (int j = 0; j < nv; ++j) {
        const int64_t d = lane + 32 * j;
        if (d < args.head_dim_v) oh[d] = el::half_to_float(acc[j]) * inv;
    }
}

}  // namespace

void launch_kv_store(const float* k, const float* v, int64_t n_tokens, const int32_t* pos, const KvF16& kv,
                     void* stream) {
    const int64_t n = n_tokens * (kv.k_dim + kv.v_dim);
    if (n <= 0) return;
    constexpr int kThreads = 256;
    kv_store_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0,
                      static_cast<cudaStream_t>(stream)>>>(k, v, n_tokens, pos, kv);
}

void launch_kv_clear(const KvF16& kv, void* stream) {
    constexpr int kThreads = 256;
    kv_clear_kernel<<<static_cast<unsigned>((kv.n_cells + kThreads - 1) / kThreads), kThreads, 0,
                      static_cast<cudaStream_t>(stream)>>>(kv.cell_pos, kv.n_cells);
}

void launch_attention(const float* q, const int32_t* pos, int64_t n_tokens, const AttentionArgs& args,
                      const KvF16& kv, float* out, void* stream) {
    // Head sizes beyond 32 * kMaxPerLane are rejected by the backend before
    // any launch (attention_head_supported).
    if (n_tokens <= 0) return;
    attention_kernel<<<static_cast<unsigned>(n_tokens * args.n_head), 32, 0, static_cast<cudaStream_t>(stream)>>>(
        q, pos, args, kv, out);
}

bool attention_head_supported(int64_t head_dim) { return head_dim > 0 && head_dim <= 32 * kMaxPerLane; }

}  // namespace tandem::cuda::kernels
