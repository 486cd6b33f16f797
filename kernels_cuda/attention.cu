// Attention over the device KV cache as kernels_cpu/attention.cpp computes
// it (ggml's CPU flash attention): one warp per (token, head), one pass over
// the cells with the online softmax of op_math.h. Lane l owns dimensions
// l, l + 32, ... of the head, so for a Q8_0 cache lane l reads element l of
// each 32-element block.
// - F16 cache: Q rounded to fp16 once, Q.K summed in double (products of
//   two halves are exact) and reduced with an xor butterfly, V accumulated
//   in fp16 with one fused multiply-add and one rounding per update.
// - Q8_0 cache: Q quantized to Q8_0 blocks with the host's block function,
//   Q.K as per-block integer sums times both scales (ggml's vec_dot order
//   over blocks), V dequantized and accumulated in fp32 with fma.
// Scores are soft-capped when args.softcap > 0 (math::attention_score).
// The butterfly leaves the bitwise same score in every lane, so all lanes
// take the same branches. The CPU sums Q.K in ggml's SIMD lane order (and
// uses llama.cpp's tiled kernel for 64+ queries), so scores can differ from
// the CPU's in the last bit; the GPU path is held to the golden KL bound.
#include <cuda_runtime.h>

#include "kernels_cuda/cuda_kernels.h"
#include "kernels_cuda/op_math.h"

namespace tandem::cuda::kernels {
namespace {

namespace el = quant::element;

constexpr int kMaxPerLane = 16;  // head sizes up to 512

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__global__ void kv_store_f16_kernel(const float* __restrict__ k, const float* __restrict__ v, int64_t n_tokens,
                                    const int32_t* __restrict__ cells, KvCache kv) {
    const int64_t per_token = kv.k_dim + kv.v_dim;
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= n_tokens * per_token) return;
    const int64_t t = idx / per_token;
    const int64_t e = idx % per_token;
    const int64_t cell = cells[t];
    if (e < kv.k_dim) {
        reinterpret_cast<uint16_t*>(kv.k + cell * kv.k_row_bytes())[e] = el::float_to_half(k[t * kv.k_dim + e]);
    } else {
        const int64_t d = e - kv.k_dim;
        reinterpret_cast<uint16_t*>(kv.v + cell * kv.v_row_bytes())[d] = el::float_to_half(v[t * kv.v_dim + d]);
    }
}

// One thread per 32-element block of K or V, quantized as the CPU's cache
// quantizes (math::kv_q8_0_block).
__global__ void kv_store_q8_0_kernel(const float* __restrict__ k, const float* __restrict__ v, int64_t n_tokens,
                                     const int32_t* __restrict__ cells, KvCache kv) {
    const int64_t kb = kv.k_dim / 32, vb = kv.v_dim / 32;
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= n_tokens * (kb + vb)) return;
    const int64_t t = idx / (kb + vb);
    const int64_t b = idx % (kb + vb);
    const int64_t cell = cells[t];
    if (b < kb) {
        auto* row = reinterpret_cast<quant::block_q8_0*>(kv.k + cell * kv.k_row_bytes());
        math::kv_q8_0_block(k + t * kv.k_dim + b * 32, row[b]);
    } else {
        auto* row = reinterpret_cast<quant::block_q8_0*>(kv.v + cell * kv.v_row_bytes());
        math::kv_q8_0_block(v + t * kv.v_dim + (b - kb) * 32, row[b - kb]);
    }
}

__global__ void kv_clear_kernel(int32_t* cell_pos, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) cell_pos[i] = -1;
}

__device__ __forceinline__ bool visible(int32_t kp, int32_t p, int64_t window) {
    return kp >= 0 && kp <= p && !(window > 0 && p - kp >= window);
}

// What a warp works on: token t, query head h, its KV head g, t's position.
struct WarpTask {
    int64_t t, h, g;
    int lane;
    int32_t p;
};

__device__ __forceinline__ WarpTask warp_task(const AttentionArgs& args, const int32_t* q_pos) {
    WarpTask w;
    w.t = blockIdx.x / args.n_head;
    w.h = blockIdx.x % args.n_head;
    w.g = w.h / (args.n_head / args.n_head_kv);
    w.lane = static_cast<int>(threadIdx.x);
    w.p = q_pos[w.t];
    return w;
}

__global__ void attention_f16_kernel(const float* __restrict__ q, const int32_t* __restrict__ q_pos,
                                     AttentionArgs args, KvCache kv, float* __restrict__ out) {
    const auto [t, h, g, lane, p] = warp_task(args, q_pos);
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

    const int64_t c_end = args.cell_end < 0 ? kv.n_cells : args.cell_end;
    for (int64_t c = args.cell_begin; c < c_end; ++c) {
        if (!visible(kv.cell_pos[c], p, args.window)) continue;
        const auto* kh = reinterpret_cast<const uint16_t*>(kv.k + c * kv.k_row_bytes()) + g * args.head_dim_k;
        double part = 0.0;
        for (int j = 0; j < nk; ++j) {
            const int64_t d = lane + 32 * j;
            if (d < args.head_dim_k) part += static_cast<double>(qh[j]) * static_cast<double>(el::half_to_float(kh[d]));
        }
        const float s = math::attention_score(static_cast<float>(warp_sum(part)), args.scale, args.softcap);
        const bool rescale = s > running_max;
        const math::SoftmaxStep st = math::softmax_step(s, running_max, running_sum);
        const auto* vh = reinterpret_cast<const uint16_t*>(kv.v + c * kv.v_row_bytes()) + g * args.head_dim_v;
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

// Head sizes are whole Q8_0 blocks here (the session checks the cache type
// against them before anything is allocated).
__global__ void attention_q8_0_kernel(const float* __restrict__ q, const int32_t* __restrict__ q_pos,
                                      AttentionArgs args, KvCache kv, float* __restrict__ out) {
    const auto [t, h, g, lane, p] = warp_task(args, q_pos);
    const int nk = static_cast<int>(args.head_dim_k / 32);
    const int nv = static_cast<int>(args.head_dim_v / 32);

    // Q as Q8_0 blocks, made by the host's block function (one lane each).
    __shared__ quant::block_q8_0 qb[kMaxPerLane];
    const float* qrow = q + (t * args.n_head + h) * args.head_dim_k;
    if (lane < nk) el::act_block(qrow + 32 * lane, qb[lane]);
    __syncwarp();
    int qq[kMaxPerLane];
    float qd[kMaxPerLane];
    for (int j = 0; j < nk; ++j) {
        qq[j] = qb[j].qs[lane];
        qd[j] = el::half_to_float(qb[j].d);
    }
    float acc[kMaxPerLane];
    for (int j = 0; j < nv; ++j) acc[j] = 0.0f;
    float running_max = -INFINITY;
    float running_sum = 0.0f;

    const int64_t c_end = args.cell_end < 0 ? kv.n_cells : args.cell_end;
    for (int64_t c = args.cell_begin; c < c_end; ++c) {
        if (!visible(kv.cell_pos[c], p, args.window)) continue;
        const auto* kh = reinterpret_cast<const quant::block_q8_0*>(kv.k + c * kv.k_row_bytes()) + g * nk;
        float qk = 0.0f;
        for (int j = 0; j < nk; ++j) {
            const int isum = warp_sum(qq[j] * static_cast<int>(kh[j].qs[lane]));
            qk += static_cast<float>(isum) * (el::half_to_float(kh[j].d) * qd[j]);
        }
        const float s = math::attention_score(qk, args.scale, args.softcap);
        const bool rescale = s > running_max;
        const math::SoftmaxStep st = math::softmax_step(s, running_max, running_sum);
        const auto* vh = reinterpret_cast<const quant::block_q8_0*>(kv.v + c * kv.v_row_bytes()) + g * nv;
        for (int j = 0; j < nv; ++j) {
            if (rescale) acc[j] *= st.ms;
            const float vd = static_cast<float>(vh[j].qs[lane]) * el::half_to_float(vh[j].d);
            acc[j] = math::fma_f(vd, st.vs, acc[j]);
        }
    }
    float* oh = out + (t * args.n_head + h) * args.head_dim_v;
    const float inv = running_sum > 0.0f ? 1.0f / running_sum : 0.0f;
    for (int j = 0; j < nv; ++j) oh[lane + 32 * j] = acc[j] * inv;
}

}  // namespace

void launch_kv_store(const float* k, const float* v, int64_t n_tokens, const int32_t* cells, const KvCache& kv,
                     void* stream) {
    const int64_t n = kv.q8_0 ? n_tokens * (kv.k_dim + kv.v_dim) / 32 : n_tokens * (kv.k_dim + kv.v_dim);
    if (n <= 0) return;
    constexpr int kThreads = 256;
    const auto blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
    const auto s = static_cast<cudaStream_t>(stream);
    if (kv.q8_0) {
        kv_store_q8_0_kernel<<<blocks, kThreads, 0, s>>>(k, v, n_tokens, cells, kv);
    } else {
        kv_store_f16_kernel<<<blocks, kThreads, 0, s>>>(k, v, n_tokens, cells, kv);
    }
}

void launch_kv_clear(const KvCache& kv, void* stream) {
    constexpr int kThreads = 256;
    kv_clear_kernel<<<static_cast<unsigned>((kv.n_cells + kThreads - 1) / kThreads), kThreads, 0,
                      static_cast<cudaStream_t>(stream)>>>(kv.cell_pos, kv.n_cells);
}

void launch_attention(const float* q, const int32_t* pos, int64_t n_tokens, const AttentionArgs& args,
                      const KvCache& kv, float* out, void* stream) {
    // Head sizes beyond 32 * kMaxPerLane are rejected by the device before
    // any launch (attention_head_supported).
    if (n_tokens <= 0) return;
    const auto grid = static_cast<unsigned>(n_tokens * args.n_head);
    const auto s = static_cast<cudaStream_t>(stream);
    if (kv.q8_0) {
        attention_q8_0_kernel<<<grid, 32, 0, s>>>(q, pos, args, kv, out);
    } else {
        attention_f16_kernel<<<grid, 32, 0, s>>>(q, pos, args, kv, out);
    }
}

bool attention_head_supported(int64_t head_dim) { return head_dim > 0 && head_dim <= 32 * kMaxPerLane; }

}  // namespace tandem::cuda::kernels
