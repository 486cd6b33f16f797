// Attention over the device KV cache as kernels_cpu/attention.cpp's
// per-head path computes it (ggml's CPU flash attention): one warp per
// (token, head), one pass over the cells with the online softmax of
// op_math.h. Lane l owns dimensions l, l + 32, ... of V's head.
// - K.Q: the query made once in K's partner as the CPU makes it
//   (math::KeyDot: fp16 for F16, K's own type for F32/BF16, the activation
//   Q8_0/Q8_1 quantizer for the block types), then the CPU's order for K's
//   type: ggml's fp16 order for F16 (f16_qk), dot::float_dot's for
//   F32/BF16 (float_qk), the type's dot order for the blocks (block_qk:
//   each block's integers in a lane of its own, then the float chains).
// - V: an F16 V accumulated in fp16 with one fused multiply-add and one
//   rounding per update; any other type dequantized (math::kv_element) and
//   accumulated in fp32 with fma.
// Scores are soft-capped when args.softcap > 0 (math::attention_score).
// - Long spans: the cells in the CPU's chunks, at multiples of
//   kAttentionChunkCells in the whole cache, each from a fresh softmax,
//   merged in cell order (runtime/quant/attention_order.h): by the warp as
//   it goes, or, with the chunks split over blocks (flash-decoding: a
//   decode step has only n_head warps otherwise), each chunk's state in
//   args.partials and merge_kernel after. Either way the CPU's steps.
// Attention sinks (args.sinks, gpt-oss) join after the merge, as on the
// CPU (kernels_cpu/attention_chunks.h).
// Every lane gets lane 0's score, so all lanes take the same branches. The
// scores are the CPU's bits where the CPU runs its per-query loop (fewer
// than 64 queries; from 64 an F16/F16 cache takes llama.cpp's tiled kernel).
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "kernels_cuda/cuda_kernels.h"
#include "kernels_cuda/kv_types.h"
#include "kernels_cuda/op_math.h"
#include "runtime/quant/attention_order.h"
#include "runtime/quant/dot_order.h"

namespace tandem::cuda::kernels {
namespace {

namespace el = quant::element;
using quant::Type;

// A lane keeps kMaxPerLane dimensions of V in registers (value heads up to
// 512); the query sits in shared memory, up to kMaxPerLaneK per lane (key
// heads up to 576: DeepSeek's latent and rotated part, 512 + 64).
constexpr int kMaxPerLane = 16;
constexpr int kMaxPerLaneK = 18;
constexpr int kStoreThreads = 256;

// One thread per block of a K or V row (an element for the float types),
// written as the CPU's cache writes it (math::kv_store_block).
template <Type T>
__global__ void kv_store_kernel(const float* __restrict__ src, int64_t dim, int64_t n_tokens,
                                const int32_t* __restrict__ cells, uint8_t* __restrict__ dst, int64_t row_bytes) {
    using Block = typename math::Elem<T>::block;
    constexpr int kElems = math::Elem<T>::qk();
    const int64_t nb = dim / kElems;
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= n_tokens * nb) return;
    const int64_t t = idx / nb;
    const int64_t b = idx % nb;
    auto* row = reinterpret_cast<Block*>(dst + cells[t] * row_bytes);
    math::kv_store_block<T>(src + t * dim + b * kElems, row[b]);
}

template <Type T>
void launch_store_side(const float* src, int64_t dim, int64_t n_tokens, const int32_t* cells, uint8_t* dst,
                       int64_t row_bytes, cudaStream_t s) {
    const int64_t n = n_tokens * (dim / math::Elem<T>::qk());
    if (n <= 0) return;
    const auto blocks = static_cast<unsigned>((n + kStoreThreads - 1) / kStoreThreads);
    kv_store_kernel<T><<<blocks, kStoreThreads, 0, s>>>(src, dim, n_tokens, cells, dst, row_bytes);
}

// The rows of one side (K or V) of type t.
void store_side(Type t, const float* src, int64_t dim, int64_t n_tokens, const int32_t* cells, uint8_t* dst,
                int64_t row_bytes, cudaStream_t s) {
#define TANDEM_KV_STORE_SIDE(T) \
    if (t == Type::T) launch_store_side<Type::T>(src, dim, n_tokens, cells, dst, row_bytes, s);
    TANDEM_FOR_EACH_KV_TYPE(TANDEM_KV_STORE_SIDE)
#undef TANDEM_KV_STORE_SIDE
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

// Q.K of an F32 or BF16 cache as dot::float_dot(K, Q): lanes 0-15 run its
// sixteen chains, then every lane finishes them.
template <class T>
__device__ __forceinline__ float float_qk(const T* q, const T* kh, int64_t n, int lane) {
    __shared__ float lanes[16];
    if (lane < 16) {
        float acc = 0.0f;
        quant::dot::for_lane_elements(n, lane, [&](int64_t e) {
            acc = quant::dot::fma_f(quant::dot::widen(kh[e]), quant::dot::widen(q[e]), acc);
        });
        lanes[lane] = acc;
    }
    __syncwarp();
    const float s = quant::dot::float_finish(n, kh, q, lanes);
    __syncwarp();
    return s;
}

// Q.K of a block cache in the CPU's order O (dot::row_dot): lane j makes
// block j's part (its exact integers and scales), then every lane runs the
// float chains over the parts in block order and finishes them.
template <class O>
__device__ __forceinline__ float block_qk(const typename O::ABlock* q, const typename O::WBlock* kh, int nb,
                                          int lane) {
    __shared__ typename O::Part parts[kMaxPerLaneK];
    if (lane < nb) parts[lane] = O::part(kh[lane], q[lane]);
    __syncwarp();
    float acc[O::kLanes] = {};
    float acc2[O::kLanes] = {};
    for (int j = 0; j < nb; ++j) {
        for (int l = 0; l < O::kLanes; ++l) O::step(acc[l], acc2[l], parts[j], l);
    }
    const float s = O::finish(acc, acc2);
    __syncwarp();  // read before the next cell writes
    return s;
}

// Q.K of one cell's K head (kh) of type K; q in K's partner.
template <Type K>
__device__ __forceinline__ float key_dot(const typename math::KeyDot<K>::Query* q, const uint8_t* kh, int64_t n,
                                         int lane) {
    using Query = typename math::KeyDot<K>::Query;
    if constexpr (K == Type::F16) {
        return f16_qk(q, reinterpret_cast<const uint16_t*>(kh), n, lane);
    } else if constexpr (K == Type::F32 || K == Type::BF16) {
        return float_qk(q, reinterpret_cast<const Query*>(kh), n, lane);
    } else {
        using O = typename math::KeyDot<K>::Order;
        return block_qk<O>(q, reinterpret_cast<const typename O::WBlock*>(kh), static_cast<int>(n / O::kElems), lane);
    }
}

// One cell's V element into a lane's accumulator: fp16 bits for an F16 V
// (kVF16), else float.
template <bool kVF16>
using VAcc = std::conditional_t<kVF16, quant::fp16_bits, float>;

template <bool kVF16>
__device__ __forceinline__ void accumulate(VAcc<kVF16>& acc, bool rescale, const math::SoftmaxStep& st,
                                           const uint8_t* vh, Type v_type, int64_t d) {
    if constexpr (kVF16) {
        if (rescale) acc = math::f16_scale(acc, st.ms);
        acc = math::f16_mad(acc, reinterpret_cast<const uint16_t*>(vh)[d], st.vs);
    } else {
        if (rescale) acc *= st.ms;
        acc = math::fma_f(math::kv_element(v_type, vh, d), st.vs, acc);
    }
}

template <bool kVF16>
__device__ __forceinline__ float value_of(VAcc<kVF16> acc) {
    if constexpr (kVF16) {
        return el::half_to_float(acc);
    } else {
        return acc;
    }
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

constexpr int64_t kChunk = quant::attn::kAttentionChunkCells;

// The chunks a span [begin, end) of cells touches: absolute chunk indices
// first .. first + count - 1.
struct ChunkSpan {
    int64_t begin, end, first, count;
};
__host__ __device__ __forceinline__ ChunkSpan chunk_span(const AttentionArgs& args, int64_t n_cells) {
    const int64_t b = args.cell_begin, e = args.cell_end < 0 ? n_cells : args.cell_end;
    const int64_t first = b / kChunk;
    return {b, e, first, e > b ? (e - 1) / kChunk - first + 1 : 0};
}

// Chunk k's state (M, S, A) of a (token, head) when the chunks are split
// over blocks.
__device__ __forceinline__ float* chunk_state(const AttentionArgs& args, int64_t n_chunks, int64_t t, int64_t h,
                                              int64_t k) {
    return args.partials + ((t * args.n_head + h) * n_chunks + k) * (args.head_dim_v + 2);
}

// The merged A, S and M of a head as the output (attention_order.h's
// finish, as the CPU's merge_chunks ends).
__device__ __forceinline__ float finish_merge(const AttentionArgs& args, int64_t h, quant::attn::ChunkMerge st,
                                              float a) {
    if (!st.any) a = 0.0f;
    const quant::attn::Finish f =
        quant::attn::finish(st.any ? st.m : -INFINITY, st.s, args.sinks ? args.sinks + h : nullptr, math::ExpF{});
    return a * f.ms * f.inv;
}

template <Type K, bool kVF16>
__global__ void attention_kernel(const float* __restrict__ q, const int32_t* __restrict__ q_pos, AttentionArgs args,
                                 KvCache kv, float* __restrict__ out) {
    using Keys = math::KeyDot<K>;
    const auto [t, h, g, lane, p] = warp_task(args, q_pos);
    const int nv = static_cast<int>((args.head_dim_v + 31) / 32);

    // The query in K's partner, made once (a lane per block or element).
    __shared__ typename Keys::Query qk_in[32 * kMaxPerLaneK / Keys::kQueryElems];
    const float* qrow = q + (t * args.n_head + h) * args.head_dim_k;
    for (int64_t i = lane; i < args.head_dim_k / Keys::kQueryElems; i += 32) {
        Keys::query(qrow + i * Keys::kQueryElems, qk_in[i]);
    }
    __syncwarp();

    const int64_t k_row = kv.k_row_bytes(), v_row = kv.v_row_bytes();
    const int64_t k_head = KvCache::bytes_of(K, args.head_dim_k);
    const int64_t v_head = KvCache::bytes_of(kv.v_type, args.head_dim_v);
    const ChunkSpan span = chunk_span(args, kv.n_cells);
    const bool split = gridDim.y > 1;
    quant::attn::ChunkMerge merge;  // the warp's own merge (not split)
    float merged[kMaxPerLane];
    for (int j = 0; j < nv; ++j) merged[j] = 0.0f;
    // This block's chunks: every gridDim.y-th from blockIdx.y.
    for (int64_t k = blockIdx.y; k < span.count; k += gridDim.y) {
        const int64_t c0 = (span.first + k) * kChunk, c1 = c0 + kChunk;
        VAcc<kVF16> acc[kMaxPerLane];
        for (int j = 0; j < nv; ++j) acc[j] = 0;
        float running_max = -INFINITY;
        float running_sum = 0.0f;
        for (int64_t c = c0 > span.begin ? c0 : span.begin; c < (c1 < span.end ? c1 : span.end); ++c) {
            if (!visible(kv.cell_pos[c], p, args.window)) continue;
            const uint8_t* kh = kv.k + c * k_row + g * k_head;
            const float s = math::attention_score(key_dot<K>(qk_in, kh, args.head_dim_k, lane), args.scale, args.softcap);
            const bool rescale = s > running_max;
            const math::SoftmaxStep st = math::softmax_step(s, running_max, running_sum);
            const uint8_t* vh = kv.v + c * v_row + g * v_head;
            for (int j = 0; j < nv; ++j) {
                const int64_t d = lane + 32 * j;
                if (d < args.head_dim_v) accumulate<kVF16>(acc[j], rescale, st, vh, kv.v_type, d);
            }
        }
        if (split) {
            float* part = chunk_state(args, span.count, t, h, k);
            if (lane == 0) {
                part[0] = running_max;
                part[1] = running_sum;
            }
            for (int j = 0; j < nv; ++j) {
                const int64_t d = lane + 32 * j;
                if (d < args.head_dim_v) part[2 + d] = value_of<kVF16>(acc[j]);
            }
            continue;
        }
        const quant::attn::MergeStep step = quant::attn::merge_chunk(merge, running_max, running_sum, math::ExpF{});
        if (step.skip) continue;
        for (int j = 0; j < nv; ++j) {
            const float a = value_of<kVF16>(acc[j]);
            merged[j] = step.take_only ? a : math::fma_f(merged[j], step.keep, a * step.take);
        }
    }
    if (split) return;
    float* oh = out + (t * args.n_head + h) * args.head_dim_v;
    for (int j = 0; j < nv; ++j) {
        const int64_t d = lane + 32 * j;
        if (d < args.head_dim_v) oh[d] = finish_merge(args, h, merge, merged[j]);
    }
}

// The chunks of a (token, head) split over blocks, merged in cell order
// as the CPU's merge_chunks merges them. One thread per output value.
__global__ void merge_kernel(AttentionArgs args, int64_t n_chunks, int64_t n, float* __restrict__ out) {
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    const int64_t th = idx / args.head_dim_v, d = idx % args.head_dim_v;
    quant::attn::ChunkMerge merge;
    float a = 0.0f;
    for (int64_t k = 0; k < n_chunks; ++k) {
        const float* p = args.partials + (th * n_chunks + k) * (args.head_dim_v + 2);
        const quant::attn::MergeStep step = quant::attn::merge_chunk(merge, p[0], p[1], math::ExpF{});
        if (step.skip) continue;
        a = step.take_only ? p[2 + d] : math::fma_f(a, step.keep, p[2 + d] * step.take);
    }
    out[idx] = finish_merge(args, th % args.n_head, merge, a);
}

}  // namespace

void launch_kv_store(const float* k, const float* v, int64_t n_tokens, const int32_t* cells, const KvCache& kv,
                     void* stream) {
    const auto s = static_cast<cudaStream_t>(stream);
    store_side(kv.k_type, k, kv.k_dim, n_tokens, cells, kv.k, kv.k_row_bytes(), s);
    store_side(kv.v_type, v, kv.v_dim, n_tokens, cells, kv.v, kv.stored_v_row_bytes(), s);
}

bool kv_type_supported(Type t) {
#define TANDEM_KV_SUPPORTED(T) \
    if (t == Type::T) return true;
    TANDEM_FOR_EACH_KV_TYPE(TANDEM_KV_SUPPORTED)
#undef TANDEM_KV_SUPPORTED
    return false;
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
    const bool v_f16 = kv.v_type == Type::F16;
#define TANDEM_KV_ATTENTION(T)                                                   \
    if (kv.k_type == Type::T) {                                                 \
        if (v_f16) {                                                            \
            attention_kernel<Type::T, true><<<grid, 32, 0, s>>>(q, pos, args, kv, out);  \
        } else {                                                                \
            attention_kernel<Type::T, false><<<grid, 32, 0, s>>>(q, pos, args, kv, out); \
        }                                                                       \
    }
    TANDEM_FOR_EACH_KV_TYPE(TANDEM_KV_ATTENTION)
#undef TANDEM_KV_ATTENTION
    if (n_split > 1) {
        const int64_t n = n_tokens * args.n_head * args.head_dim_v;
        const int64_t n_chunks = chunk_span(args, kv.n_cells).count;
        constexpr int kThreads = 128;
        merge_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, s>>>(args, n_chunks, n, out);
    }
}

int64_t attention_splits(const AttentionArgs& args, const KvCache& kv, int64_t n_tokens) {
    const int64_t n_chunks = chunk_span(args, kv.n_cells).count;
    if (args.partials == nullptr || n_chunks < 2 || n_tokens <= 0) return 1;
    // Every chunk's state, or no split (the warps merge as they go).
    if (n_tokens * args.n_head * n_chunks * (args.head_dim_v + 2) > args.partial_floats) return 1;
    return std::min<int64_t>(n_chunks, kMaxSplits);
}

bool attention_head_supported(int64_t head_dim_k, int64_t head_dim_v) {
    return head_dim_k > 0 && head_dim_k <= 32 * kMaxPerLaneK && head_dim_v > 0 && head_dim_v <= 32 * kMaxPerLane;
}

}  // namespace tandem::cuda::kernels
