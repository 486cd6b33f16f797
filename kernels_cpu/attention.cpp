// Attention as ggml's CPU flash attention computes it, one query head at a
// time: a single pass over the cells with an online softmax (running
// maximum M and sum S), no score buffer, and the weighted sum of V kept in
// the cache's own precision (fp16 for an F16 cache, float otherwise).
#include "kernels_cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels_cpu/attention_chunks.h"
#include "kernels_cpu/attention_decode.h"
#include "kernels_cpu/attention_sink.h"
#include "kernels_cpu/attention_tiled.h"
#include "kernels_cpu/f16_accumulate.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/common/error.h"
#include "runtime/quant/dot_order.h"
#include "runtime/quant/fp16.h"

namespace tandem::cpu {
namespace detail {

static_assert(kViewCellAlign % kCellChunk == 0 && kViewCellAlign % 64 == 0,
              "a view starts on a chunk and a tile boundary of the whole cache");

void f16_scale_scalar(uint16_t* y, float s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = quant::fp32_to_fp16(quant::fp16_to_fp32(y[i]) * s);
}

void f16_mad_scalar(uint16_t* y, const uint16_t* x, float s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        y[i] = quant::fp32_to_fp16(std::fma(quant::fp16_to_fp32(x[i]), s, quant::fp16_to_fp32(y[i])));
    }
}

// ggml's F16 dot order, written once for both devices (dot_order.h).
float reduce16_ggml(const float* lanes) { return quant::dot::ggml16_reduce(lanes); }

float f16_dot_ggml_scalar(const uint16_t* x, const uint16_t* y, int64_t n) {
    float lanes[16];
    for (int l = 0; l < 16; ++l) lanes[l] = quant::dot::ggml16_lane(x, y, n, l);
    return quant::dot::ggml16_finish(x, y, n, lanes);
}

int64_t shared_heads_per_task(int64_t gqa, int64_t n_groups, int n_threads) {
    int64_t per_task = 1;
    for (int64_t d = std::min(gqa, kMaxSharedHeads); d >= 1; --d) {
        if (gqa % d == 0) {
            per_task = d;
            break;
        }
    }
    while (per_task % 2 == 0 && n_groups * (gqa / per_task) < 2 * static_cast<int64_t>(n_threads)) per_task /= 2;
    return per_task;
}

int64_t shared_kv_block_tokens(int64_t n_tokens, int64_t tasks_per_token, int64_t heads_per_task, int n_threads) {
    int64_t block = std::max<int64_t>(1, std::min(n_tokens, kMaxBlockQueries / heads_per_task));
    const auto tasks = [&] { return (n_tokens + block - 1) / block * tasks_per_token; };
    while (block > 1 && tasks() < 2 * static_cast<int64_t>(n_threads)) block = (block + 1) / 2;
    return block;
}

SharedKvPlan shared_kv_plan(int64_t n_tokens, int64_t n_head_kv, int64_t gqa, int64_t n_chunks, int n_threads) {
    const int64_t pairs = n_tokens * n_head_kv;
    SharedKvPlan plan;
    plan.split_chunks = n_chunks > 1 && pairs < 2 * static_cast<int64_t>(n_threads);
    const int64_t units = plan.split_chunks ? pairs * n_chunks : pairs;
    plan.heads_per_task = shared_heads_per_task(gqa, units, n_threads);
    plan.tasks = units * (gqa / plan.heads_per_task);
    return plan;
}

}  // namespace detail

namespace {

struct F16Accumulate {
    void (*scale)(uint16_t*, float, int64_t);
    void (*mad)(uint16_t*, const uint16_t*, float, int64_t);
    float (*dot)(const uint16_t*, const uint16_t*, int64_t);
};

F16Accumulate f16_accumulate(SimdLevel level) {
#if defined(__x86_64__)
    if (level != SimdLevel::Scalar) return {detail::f16_scale_avx2, detail::f16_mad_avx2, detail::f16_dot_ggml_avx2};
#endif
    (void)level;
    return {detail::f16_scale_scalar, detail::f16_mad_scalar, detail::f16_dot_ggml_scalar};
}

// A query's share of the work, for splitting the queries over the threads:
// the cells it attends (a causal prompt's later queries attend more), the
// scan over all of its view's cells, and a fixed part per task (its row
// rounded, its output written), in units of one attended cell. Balances;
// changes no result.
double attended_cost(const int32_t* q_pos, const KvCacheView* views, size_t view_step, const AttentionShape& shape,
                     int64_t t) {
    const KvCacheView& kv = views[static_cast<size_t>(t) * view_step];
    int64_t seen = std::min<int64_t>(kv.n_cells, std::max<int64_t>(0, int64_t{q_pos[t]} + 1));
    if (shape.window > 0) seen = std::min<int64_t>(seen, shape.window);
    constexpr double kScanPerCell = 1.0 / 16, kTaskCells = 4;
    return static_cast<double>(seen) + kScanPerCell * static_cast<double>(kv.n_cells) + kTaskCells;
}

#if defined(__x86_64__)
// The shared-KV kernel's tasks (attention_decode.h): a task takes some
// query heads of one KV head for one token, or for a block of tokens (one
// view for all). When the (token, KV head)
// pairs are too few for the threads (one stream at depth, a model with few
// KV heads on many cores), each of their cell chunks becomes a task of its
// own, every chunk's state goes to one buffer, and a second pass merges
// them; otherwise a task takes all its chunks and merges them itself. The
// chunks and their merge are the same either way (attention_chunks.h):
// the choice changes which thread computes a value, never the value.
void shared_kv_views(const float* q, const int32_t* q_pos, int64_t n_tokens, const AttentionShape& shape,
                     const KvCacheView* views, size_t view_step, float* out, ThreadPool& pool, SimdLevel level,
                     detail::DotFn dot) {
    const int64_t gqa = shape.n_head / shape.n_head_kv;
    const int64_t dk = shape.head_dim_k, dv = shape.head_dim_v;
    const int64_t chunk = detail::chunk_floats(dv);
    const auto kernel = is_avx512(level) ? detail::attention_shared_kv_avx512 : detail::attention_shared_kv_avx2;
    const auto view = [&](int64_t t) -> const KvCacheView& { return views[static_cast<size_t>(t) * view_step]; };
    const auto sink = [&](int64_t h) { return shape.sinks ? shape.sinks + h : nullptr; };
    int64_t n_chunks = 0;  // the most any token's view has
    for (int64_t t = 0; t < (view_step == 0 ? 1 : n_tokens); ++t) {
        n_chunks = std::max(n_chunks, detail::cell_chunks(view(t).n_cells));
    }
    const detail::SharedKvPlan plan = detail::shared_kv_plan(n_tokens, shape.n_head_kv, gqa, n_chunks, pool.size());
    const int64_t per_task = plan.heads_per_task;
    if (plan.split_chunks) {
        const int64_t head_tasks = shape.n_head / per_task;
        const int64_t head_stride = n_chunks * chunk;
        std::vector<float> partials(static_cast<size_t>(n_tokens * shape.n_head * head_stride));
        pool.parallel_for(n_tokens * head_tasks * n_chunks, 1, [&](int64_t begin, int64_t end) {
            for (int64_t task = begin; task < end; ++task) {
                const int64_t c = task % n_chunks, th = task / n_chunks;
                const int64_t t = th / head_tasks, h0 = th % head_tasks * per_task;
                const detail::ChunkRange range{c * detail::kCellChunk, (c + 1) * detail::kCellChunk,
                                               partials.data() + (t * shape.n_head + h0) * head_stride + c * chunk,
                                               head_stride};
                const detail::SharedQueries qs{q + (t * shape.n_head + h0) * dk, 0, q_pos + t, 1, per_task, h0};
                kernel(qs, shape, view(t), dot, range);
            }
        });
        pool.parallel_for(n_tokens * shape.n_head, 4, [&](int64_t begin, int64_t end) {
            for (int64_t th = begin; th < end; ++th) {
                detail::merge_chunks(partials.data() + th * head_stride, n_chunks, dv, sink(th % shape.n_head),
                                     out + th * dv);
            }
        });
        return;
    }
    // Against one view, a task takes a block of consecutive tokens: each K
    // and V row is read and unpacked once for all of them (a prompt at depth
    // otherwise reads the whole cache again for every token). Per-token
    // views take one token a task.
    const int64_t tasks_per_token = shape.n_head / per_task;
    const int64_t block = view_step == 0 ? detail::shared_kv_block_tokens(n_tokens, tasks_per_token, per_task, pool.size()) : 1;
    const int64_t n_blocks = (n_tokens + block - 1) / block;
    const auto cost = [&](int64_t task) {
        const int64_t b = task / tasks_per_token;
        double sum = 0.0;
        for (int64_t t = b * block; t < std::min(n_tokens, (b + 1) * block); ++t) {
            sum += attended_cost(q_pos, views, view_step, shape, t);
        }
        return sum;
    };
    pool.parallel_for_cost(n_blocks * tasks_per_token, cost, [&](int64_t begin, int64_t end) {
        std::vector<float> partials;
        for (int64_t task = begin; task < end; ++task) {
            const int64_t t0 = task / tasks_per_token * block, nt = std::min(block, n_tokens - t0);
            const int64_t h0 = task % tasks_per_token * per_task;
            const int64_t chunks = detail::cell_chunks(view(t0).n_cells);
            const int64_t nq = nt * per_task;
            partials.resize(static_cast<size_t>(nq * chunks * chunk));
            const detail::ChunkRange range{0, chunks * detail::kCellChunk, partials.data(), chunks * chunk};
            const detail::SharedQueries qs{q + (t0 * shape.n_head + h0) * dk, shape.n_head * dk, q_pos + t0, nt, per_task, h0};
            kernel(qs, shape, view(t0), dot, range);
            for (int64_t j = 0; j < nq; ++j) {
                const int64_t t = t0 + j / per_task, h = h0 + j % per_task;
                detail::merge_chunks(partials.data() + j * chunks * chunk, chunks, dv, sink(h),
                                     out + (t * shape.n_head + h) * dv);
            }
        }
    });
}
#endif

// Token t against views[t * view_step]: one view for all (view_step 0) or
// one per token (1); the views of one cache share its type.
void attention_views(const float* q, const int32_t* q_pos, int64_t n_tokens, const AttentionShape& shape,
                     const KvCacheView* views, size_t view_step, float* out, ThreadPool& pool, SimdLevel level) {
    TANDEM_CHECK(shape.n_head % shape.n_head_kv == 0, "attention: n_head not a multiple of n_head_kv");
    const KvCacheView& kv = views[0];
    const int64_t gqa = shape.n_head / shape.n_head_kv;
    const quant::Type act_type = activation_type(kv.k_type);
    const auto k_head_bytes = quant::row_bytes(kv.k_type, shape.head_dim_k);
    const auto v_head_bytes = quant::row_bytes(kv.v_type, shape.head_dim_v);
    const auto q_act_bytes = quant::row_bytes(act_type, shape.head_dim_k);
    TANDEM_CHECK(k_head_bytes && v_head_bytes && q_act_bytes, "attention: head size not a multiple of the cache block");
    // An F16 K is dotted in ggml's fp16 order, an F16 V summed in fp16 (as
    // ggml's flash attention does); other types through their block dot
    // kernel and dequantized into float sums.
    const bool k_f16 = kv.k_type == quant::Type::F16, v_f16 = kv.v_type == quant::Type::F16;
    // llama.cpp switches to its tiled kernel for 64 or more queries.
    if (k_f16 && v_f16 && n_tokens >= detail::kTiledAttentionMinTokens && view_step == 0) {
        detail::attention_tiled(q, q_pos, n_tokens, shape, kv, out, pool, level);
        return;
    }
    // Looked up once: a decode step calls it for every cell of every head.
    // F32 and BF16 products follow each ISA's lanes (their AVX-512 kernels
    // sum 32 lanes where the scalar and AVX2 ones sum 16): K.Q takes their
    // AVX2 kernel at the AVX-512 levels, so that every level gives the
    // scalar loop's bits, as the types in llama.cpp's order do.
    const SimdLevel dot_level =
        is_avx512(level) && !detail::follows_llama_order(kv.k_type) ? SimdLevel::Avx2 : level;
    const detail::DotFn dot = detail::dot_kernel(kv.k_type, dot_level);
#if defined(__x86_64__)
    // The query heads of a KV head together (attention_decode.h): same
    // bits as the per-head loop below, the cache read once per KV head.
    if (level != SimdLevel::Scalar) {
        shared_kv_views(q, q_pos, n_tokens, shape, views, view_step, out, pool, level, dot);
        return;
    }
#endif
    // One query head at a time: the scalar path, and the reference the
    // grouped kernels above are tested against bit for bit.
    const F16Accumulate f16 = f16_accumulate(level);
    const quant::QuantizeRowFn q_to_partner = detail::scalar_activation_quantizer(act_type);
    const auto dv = static_cast<size_t>(shape.head_dim_v);
    const float cap = shape.softcap;
    const float qk_scale = cap > 0.0f ? shape.scale / cap : shape.scale;

    const auto cost = [&](int64_t task) { return attended_cost(q_pos, views, view_step, shape, task / shape.n_head); };
    pool.parallel_for_cost(n_tokens * shape.n_head, cost, [&](int64_t begin, int64_t end) {
        std::vector<uint8_t> q_act(*q_act_bytes);
        std::vector<uint16_t> acc16(dv);
        std::vector<float> acc32(dv);
        std::vector<float> v_row(dv);
        std::vector<float> partials;
        for (int64_t task = begin; task < end; ++task) {
            const int64_t t = task / shape.n_head;
            const int64_t h = task % shape.n_head;
            const int64_t g = h / gqa;  // the KV head this query head shares
            const int32_t pos = q_pos[t];
            const KvCacheView& kv = views[static_cast<size_t>(t) * view_step];
            // Q is rounded to K's dot-product partner once (fp16 for an F16
            // K), as ggml's CPU backend converts it (Q8_0, Q8_1: half to even).
            q_to_partner(q + (t * shape.n_head + h) * shape.head_dim_k, q_act.data(), shape.head_dim_k);
            // Chunk by chunk (attention_chunks.h), each from a fresh
            // softmax, merged after.
            const int64_t n_chunks = detail::cell_chunks(kv.n_cells);
            partials.resize(static_cast<size_t>(n_chunks * detail::chunk_floats(shape.head_dim_v)));
            float running_max = 0.0f, running_sum = 0.0f;
            for (int64_t c = 0; c < kv.n_cells; ++c) {
                if (c % detail::kCellChunk == 0) {
                    std::fill(acc16.begin(), acc16.end(), uint16_t{0});
                    std::fill(acc32.begin(), acc32.end(), 0.0f);
                    running_max = -std::numeric_limits<float>::infinity();
                    running_sum = 0.0f;
                }
                const int32_t kp = kv.cell_pos[c];
                const bool visible = kp >= 0 && kp <= pos && !(shape.window > 0 && pos - kp >= shape.window);
                if (visible) {
                    const uint8_t* k_head = kv.k + c * kv.k_row_bytes + g * *k_head_bytes;
                    float qk = 0.0f;
                    if (k_f16) {
                        qk = f16.dot(reinterpret_cast<const uint16_t*>(k_head),
                                     reinterpret_cast<const uint16_t*>(q_act.data()), shape.head_dim_k);
                    } else {
                        dot(shape.head_dim_k, k_head, q_act.data(), 0, 1, &qk, 0);
                    }
                    const float s = cap > 0.0f ? cap * std::tanh(qk * qk_scale) : qk * qk_scale;
                    float ms = 1.0f;  // factor for what was accumulated so far
                    float vs = 1.0f;  // weight of this cell's V
                    if (s > running_max) {
                        ms = std::exp(running_max - s);  // 0 for the first visible cell
                        running_max = s;
                        if (v_f16) {
                            f16.scale(acc16.data(), ms, shape.head_dim_v);
                        } else {
                            for (auto& a : acc32) a *= ms;
                        }
                    } else {
                        vs = std::exp(s - running_max);
                    }
                    const uint8_t* v_head = kv.v + c * kv.v_row_bytes + g * *v_head_bytes;
                    if (v_f16) {
                        f16.mad(acc16.data(), reinterpret_cast<const uint16_t*>(v_head), vs, shape.head_dim_v);
                    } else {
                        quant::dequantize_row(kv.v_type, v_head, v_row.data(), shape.head_dim_v);
                        for (size_t d = 0; d < dv; ++d) acc32[d] = std::fma(v_row[d], vs, acc32[d]);
                    }
                    // One rounding, as ggml's S = S*ms + vs compiles (contracted).
                    running_sum = std::fma(running_sum, ms, vs);
                }
                if ((c + 1) % detail::kCellChunk == 0 || c + 1 == kv.n_cells) {
                    float* p = partials.data() + c / detail::kCellChunk * detail::chunk_floats(shape.head_dim_v);
                    detail::store_chunk(p, running_max, running_sum);
                    for (size_t d = 0; d < dv; ++d) p[2 + d] = v_f16 ? quant::fp16_to_fp32(acc16[d]) : acc32[d];
                }
            }
            detail::merge_chunks(partials.data(), n_chunks, shape.head_dim_v, shape.sinks ? shape.sinks + h : nullptr,
                                 out + (t * shape.n_head + h) * shape.head_dim_v);
        }
    });
}

}  // namespace

void attention(const float* q, const int32_t* q_pos, int64_t n_tokens, const AttentionShape& shape,
               const KvCacheView& kv, float* out, ThreadPool& pool, SimdLevel level) {
    attention_views(q, q_pos, n_tokens, shape, &kv, 0, out, pool, level);
}

void attention_per_token(const float* q, const int32_t* q_pos, const AttentionShape& shape,
                         std::span<const KvCacheView> views, float* out, ThreadPool& pool, SimdLevel level) {
    if (views.empty()) return;
    for (const KvCacheView& v : views) {
        TANDEM_CHECK(v.k_type == views[0].k_type && v.v_type == views[0].v_type,
                     "attention: views of different cache types");
    }
    attention_views(q, q_pos, static_cast<int64_t>(views.size()), shape, views.data(), 1, out, pool, level);
}

}  // namespace tandem::cpu
