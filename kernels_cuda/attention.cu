// Attention over the device KV cache as kernels_cpu/attention.cpp computes
// it (ggml's CPU flash attention): one warp per (token, head), one pass over
// the cells with the online softmax of op_math.h. Lane l owns dimensions
// l, l + 32, ... of the head, so for a Q8_0 cache lane l reads element l of
// each 32-element block.
// - F16 cache: Q rounded to fp16 once, Q.K in the CPU's lane order
//   (f16_qk), V accumulated in fp16 with one fused multiply-add and one
//   rounding per update.
// - Q8_0 cache: Q quantized to Q8_0 blocks with the host's block function,
//   Q.K as the CPU's Q8_0 dot product (q8_0_qk: integer lanes, its float
//   order), V dequantized and accumulated in fp32 with fma.
// Scores are soft-capped when args.softcap > 0 (math::attention_score).
// Attention sinks (args.sinks, gpt-oss) join after the cells as on the CPU
// (apply_sink).
// Every lane gets lane 0's score, so all lanes take the same branches. The
// scores are the CPU's bits where the CPU runs its per-query loop (fewer
// than 64 queries; from 64 it takes llama.cpp's tiled kernel).
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels_cuda/cuda_kernels.h"
#include "kernels_cuda/op_math.h"
#include "runtime/quant/dot_order.h"

namespace tandem::cuda::kernels {
namespace {

namespace el = quant::element;

// A lane keeps kMaxPerLane dimensions of V in registers (value heads up to
// 512); the query sits in shared memory, up to kMaxPerLaneK per lane (key
// heads up to 576: DeepSeek's latent and rotated part, 512 + 64).
constexpr int kMaxPerLane = 16;
constexpr int kMaxPerLaneK = 18;


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

// Q.K of an F16 cache in the CPU's order (dot::ggml16_*, which the CPU's
// f16_dot_ggml runs): lanes 0-15 each run one lane's four chains, then
// every lane reduces the sixteen in the CPU's order. q: the query rounded
// to fp16, as floats. Every lane gets the score.
__device__ __forceinline__ float f16_qk(const float* q, const uint16_t* kh, int64_t n, int lane) {
    __shared__ float lanes[16];
    if (lane < 16) lanes[lane] = quant::dot::ggml16_lane(q, kh, n, lane);
    __syncwarp();
    const float s = quant::dot::ggml16_finish(q, kh, n, lanes);
    __syncwarp();  // read before the next cell writes
    return s;
}

// Q.K of a Q8_0 cache in the CPU's order (the Q8_0 x Q8_0 dot product,
// dot::Q8_0Order): lane l < 8 steps float lane l over the blocks, then
// every lane finishes the eight as the CPU does.
__device__ __forceinline__ float q8_0_qk(const quant::block_q8_0* q, const quant::block_q8_0* kh, int nk, int lane) {
    using O = quant::dot::Q8_0Order;
    __shared__ float lanes[8];
    if (lane < 8) {
        float acc = 0.0f;
        for (int j = 0; j < nk; ++j) O::step_lane(acc, O::scale(kh[j], q[j]), O::lane(kh[j], q[j], lane));
        lanes[lane] = acc;
    }
    __syncwarp();
    const float no_min = 0.0f;
    const float s = O::finish(lanes, &no_min);
    __syncwarp();  // read before the next cell writes
    return s;
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

// The cells block (blockIdx.y) of gridDim.y reads: the span cut into
// equal runs.
struct CellRange {
    int64_t begin, end;
};
__device__ __forceinline__ CellRange cell_range(const AttentionArgs& args, const KvCache& kv) {
    const int64_t b = args.cell_begin, e = args.cell_end < 0 ? kv.n_cells : args.cell_end;
    const int64_t per = (e - b + gridDim.y - 1) / gridDim.y;
    const int64_t c0 = b + per * blockIdx.y;
    return {c0 < e ? c0 : e, c0 + per < e ? c0 + per : e};
}

// A head's result: out = acc / sum, or with the cells split over blocks,
// this block's (max, sum, acc) in args.partials for merge_kernel.
__device__ __forceinline__ float* partial_of(const AttentionArgs& args, int64_t t, int64_t h) {
    return args.partials + ((t * args.n_head + h) * gridDim.y + blockIdx.y) * (args.head_dim_v + 2);
}

// A head's sink (args.sinks), as kernels_cpu/attention_sink.h applies it:
// after the cells, one more softmax step with no value; returns the factor
// of the f32 accumulator (1 when the sink is no new maximum: no bit
// changes). With the cells split, block 0 alone takes it (ggml: the first
// chunk of cells), so the merge counts it once.
__device__ __forceinline__ float apply_sink(const AttentionArgs& args, int64_t h, float& running_max,
                                            float& running_sum) {
    if (args.sinks == nullptr || blockIdx.y != 0) return 1.0f;
    return math::softmax_step(args.sinks[h], running_max, running_sum).ms;
}

__global__ void attention_f16_kernel(const float* __restrict__ q, const int32_t* __restrict__ q_pos,
                                     AttentionArgs args, KvCache kv, float* __restrict__ out) {
    const auto [t, h, g, lane, p] = warp_task(args, q_pos);
    const int nk = static_cast<int>((args.head_dim_k + 31) / 32);
    const int nv = static_cast<int>((args.head_dim_v + 31) / 32);

    // Q rounded to fp16 once, as the CPU rounds it to the F16 cache's partner.
    __shared__ float qh[32 * kMaxPerLaneK];
    const float* qrow = q + (t * args.n_head + h) * args.head_dim_k;
    for (int j = 0; j < nk; ++j) {
        const int64_t d = lane + 32 * j;
        if (d < args.head_dim_k) qh[d] = el::half_to_float(el::float_to_half(qrow[d]));
    }
    __syncwarp();
    quant::fp16_bits acc[kMaxPerLane];
    for (int j = 0; j < nv; ++j) acc[j] = 0;
    float running_max = -INFINITY;
    float running_sum = 0.0f;

    const CellRange cr = cell_range(args, kv);
    for (int64_t c = cr.begin; c < cr.end; ++c) {
        if (!visible(kv.cell_pos[c], p, args.window)) continue;
        const auto* kh = reinterpret_cast<const uint16_t*>(kv.k + c * kv.k_row_bytes()) + g * args.head_dim_k;
        const float s = math::attention_score(f16_qk(qh, kh, args.head_dim_k, lane), args.scale, args.softcap);
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
    const float ms = apply_sink(args, h, running_max, running_sum);
    if (gridDim.y > 1) {
        float* part = partial_of(args, t, h);
        if (lane == 0) {
            part[0] = running_max;
            part[1] = running_sum;
        }
        for (int j = 0; j < nv; ++j) {
            const int64_t d = lane + 32 * j;
            if (d < args.head_dim_v) part[2 + d] = el::half_to_float(acc[j]) * ms;
        }
        return;
    }
    float* oh = out + (t * args.n_head + h) * args.head_dim_v;
    const float inv = running_sum > 0.0f ? 1.0f / running_sum : 0.0f;
    for (int j = 0; j < nv; ++j) {
        const int64_t d = lane + 32 * j;
        if (d < args.head_dim_v) oh[d] = el::half_to_float(acc[j]) * ms * inv;
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
    __shared__ quant::block_q8_0 qb[kMaxPerLaneK];
    const float* qrow = q + (t * args.n_head + h) * args.head_dim_k;
    if (lane < nk) el::act_block(qrow + 32 * lane, qb[lane]);
    __syncwarp();
    float acc[kMaxPerLane];
    for (int j = 0; j < nv; ++j) acc[j] = 0.0f;
    float running_max = -INFINITY;
    float running_sum = 0.0f;

    const CellRange cr = cell_range(args, kv);
    for (int64_t c = cr.begin; c < cr.end; ++c) {
        if (!visible(kv.cell_pos[c], p, args.window)) continue;
        const auto* kh = reinterpret_cast<const quant::block_q8_0*>(kv.k + c * kv.k_row_bytes()) + g * nk;
        const float s = math::attention_score(q8_0_qk(qb, kh, nk, lane), args.scale, args.softcap);
        const bool rescale = s > running_max;
        const math::SoftmaxStep st = math::softmax_step(s, running_max, running_sum);
        const auto* vh = reinterpret_cast<const quant::block_q8_0*>(kv.v + c * kv.v_row_bytes()) + g * nv;
        for (int j = 0; j < nv; ++j) {
            if (rescale) acc[j] *= st.ms;
            const float vd = static_cast<float>(vh[j].qs[lane]) * el::half_to_float(vh[j].d);
            acc[j] = math::fma_f(vd, st.vs, acc[j]);
        }
    }
    const float ms = apply_sink(args, h, running_max, running_sum);
    if (gridDim.y > 1) {
        float* part = partial_of(args, t, h);
        if (lane == 0) {
            part[0] = running_max;
            part[1] = running_sum;
        }
        for (int j = 0; j < nv; ++j) part[2 + lane + 32 * j] = acc[j] * ms;
        return;
    }
    float* oh = out + (t * args.n_head + h) * args.head_dim_v;
    const float inv = running_sum > 0.0f ? 1.0f / running_sum : 0.0f;
    for (int j = 0; j < nv; ++j) oh[lane + 32 * j] = acc[j] * ms * inv;
}

// The split blocks of a (token, head) merged by log-sum-exp: with M the
// largest block maximum, out = sum_i acc_i e^(m_i - M) / sum_i s_i
// e^(m_i - M) (a block that saw no visible cell has s_i = 0 and adds
// nothing; with sinks, block 0 holds its head's sink in m_0 and s_0). One
// thread per output value.
__global__ void merge_kernel(AttentionArgs args, int64_t n_split, int64_t n, float* __restrict__ out) {
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    const int64_t th = idx / args.head_dim_v, d = idx % args.head_dim_v;
    const float* part = args.partials + th * n_split * (args.head_dim_v + 2);
    float m = -INFINITY;
    for (int64_t i = 0; i < n_split; ++i) {
        const float* p = part + i * (args.head_dim_v + 2);
        if (p[1] > 0.0f && p[0] > m) m = p[0];
    }
    float sum = 0.0f, acc = 0.0f;
    for (int64_t i = 0; i < n_split; ++i) {
        const float* p = part + i * (args.head_dim_v + 2);
        if (!(p[1] > 0.0f)) continue;
        const float w = math::exp_f(p[0] - m);
        sum = math::fma_f(p[1], w, sum);
        acc = math::fma_f(p[2 + d], w, acc);
    }
    out[idx] = sum > 0.0f ? acc / sum : 0.0f;
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
    // Head sizes beyond these are rejected by the device before
    // any launch (attention_head_supported).
    if (n_tokens <= 0) return;
    const int64_t n_split = attention_splits(args, kv, n_tokens);
    const dim3 grid(static_cast<unsigned>(n_tokens * args.n_head), static_cast<unsigned>(n_split));
    const auto s = static_cast<cudaStream_t>(stream);
    if (kv.q8_0) {
        attention_q8_0_kernel<<<grid, 32, 0, s>>>(q, pos, args, kv, out);
    } else {
        attention_f16_kernel<<<grid, 32, 0, s>>>(q, pos, args, kv, out);
    }
    if (n_split > 1) {
        const int64_t n = n_tokens * args.n_head * args.head_dim_v;
        constexpr int kThreads = 128;
        merge_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, s>>>(args, n_split, n, out);
    }
}

int64_t attention_splits(const AttentionArgs& args, const KvCache& kv, int64_t n_tokens) {
    const int64_t cells = (args.cell_end < 0 ? kv.n_cells : args.cell_end) - args.cell_begin;
    if (args.partials == nullptr || cells < 2 * kSplitCells || n_tokens <= 0) return 1;
    const int64_t per_split = n_tokens * args.n_head * (args.head_dim_v + 2);
    int64_t n = std::min<int64_t>(cells / kSplitCells, kMaxSplits);
    n = std::min<int64_t>(n, args.partial_floats / per_split);
    return n >= 2 ? n : 1;
}

bool attention_head_supported(int64_t head_dim_k, int64_t head_dim_v) {
    return head_dim_k > 0 && head_dim_k <= 32 * kMaxPerLaneK && head_dim_v > 0 && head_dim_v <= 32 * kMaxPerLane;
}

}  // namespace tandem::cuda::kernels
