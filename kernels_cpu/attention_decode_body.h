// The driver of attention_decode.h's kernel, shared by its AVX2 and
// AVX-512 files (each includes it once, compiled with its own flags).
// Ops: widen(halves, floats, n) exact; dot(key, query, n) in
// f16_dot_ggml's order over widened rows; scale(acc, s, n) and mad(acc, x,
// s, n) with f16_scale's and f16_mad's roundings; for Q8_0 caches
// dequantize_q8_0(blocks, floats, n) as the reference dequantizer,
// scale_f32 (y *= s) and mad_f32 (y = fma(x, s, y)) element by element.
// Optional, each with its loop's bits: dot_cells and float_dot_cells (a
// tile's scores of one query, F16 and BF16/F32 keys), scores_legacy,
// accumulate_f16_in_registers, accumulate_f32_in_registers.
#pragma once

#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels_cpu/attention_chunks.h"
#include "kernels_cpu/attention_decode.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/common/error.h"
#include "runtime/quant/dot_order.h"
#include "runtime/quant/fp16.h"
#include "runtime/quant/quant_types.h"

namespace tandem::cpu::detail {
namespace {

// Cells per tile: their widened K and V rows (at most 32 KiB for heads of
// 128) stay in L1 while every head of the group passes over them.
constexpr int64_t kTile = 32;

// One cell's step of the online softmax, as attention.cpp's per-head loop
// takes it: rescale[i] says whether the score was a new maximum (the
// accumulator is then multiplied by factor[i]), weight[i] is V's weight.
struct SoftmaxSteps {
    float factor[kTile];
    float weight[kTile];
    bool rescale[kTile];
};

// The exp arguments of a tile's scores in cell order: a score above the
// running maximum becomes it (rescale: the accumulator is scaled by
// exp(old - new)), any other is weighted by exp(score - maximum).
inline void softmax_args_scalar(const float* s, int64_t n, float& running_max, float* arg, bool* rescale) {
    float m = running_max;  // in a register: the stores below may alias running_max
    for (int64_t i = 0; i < n; ++i) {
        rescale[i] = s[i] > m;
        if (rescale[i]) {
            arg[i] = m - s[i];  // exp: 0 for the first visible cell
            m = s[i];
        } else {
            arg[i] = s[i] - m;
        }
    }
    running_max = m;
}

// The scores of one tile for each head in a first pass, the softmax steps
// in a second, the V sums of all heads in a third: no call inside the
// vector loops, so their registers are not saved and restored around every
// exp (all vector registers are caller-saved). The steps: the exp
// arguments in cell order (they depend on the running maximum), then all
// the tile's exps at once (Ops::expf_lanes where the ISA file has one: the
// same bits as std::exp, several per instruction), then each cell's
// factor and weight, selected without a branch (which cells bring a new
// maximum follows the data: a branch on it mispredicted often).
template <class Ops>
inline void softmax_steps(const float* s, int64_t n, float& running_max, SoftmaxSteps& st) {
    float arg[kTile], e[kTile];
    if constexpr (requires { Ops::softmax_args(s, n, running_max, arg, st.rescale); }) {
        Ops::softmax_args(s, n, running_max, arg, st.rescale);
    } else {
        softmax_args_scalar(s, n, running_max, arg, st.rescale);
    }
    if constexpr (requires { Ops::expf_lanes(arg, e, n); }) {
        Ops::expf_lanes(arg, e, n);
    } else {
        for (int64_t i = 0; i < n; ++i) e[i] = std::exp(arg[i]);
    }
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i r = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(st.rescale + i)));
        const __m256 up = _mm256_castsi256_ps(_mm256_cmpgt_epi32(r, _mm256_setzero_si256()));
        const __m256 ev = _mm256_loadu_ps(e + i);
        _mm256_storeu_ps(st.factor + i, _mm256_blendv_ps(one, ev, up));
        _mm256_storeu_ps(st.weight + i, _mm256_blendv_ps(ev, one, up));
    }
    for (; i < n; ++i) {
        st.factor[i] = st.rescale[i] ? e[i] : 1.0f;
        st.weight[i] = st.rescale[i] ? 1.0f : e[i];
    }
}

// The running sums of queries' steps over a tile's n cells: each one
// rounding a cell, as ggml's S = S*ms + vs compiles (contracted), in cell
// order. Four queries' chains together: one alone waits on the fma's
// latency every cell.
inline void running_sums(const SoftmaxSteps* st, size_t nq, int64_t n, float* sums) {
    size_t j = 0;
    for (; j + 4 <= nq; j += 4) {
        float s0 = sums[j], s1 = sums[j + 1], s2 = sums[j + 2], s3 = sums[j + 3];
        for (int64_t i = 0; i < n; ++i) {
            s0 = std::fma(s0, st[j].factor[i], st[j].weight[i]);
            s1 = std::fma(s1, st[j + 1].factor[i], st[j + 1].weight[i]);
            s2 = std::fma(s2, st[j + 2].factor[i], st[j + 2].weight[i]);
            s3 = std::fma(s3, st[j + 3].factor[i], st[j + 3].weight[i]);
        }
        sums[j] = s0;
        sums[j + 1] = s1;
        sums[j + 2] = s2;
        sums[j + 3] = s3;
    }
    for (; j < nq; ++j) {
        float sum = sums[j];
        for (int64_t i = 0; i < n; ++i) sum = std::fma(sum, st[j].factor[i], st[j].weight[i]);
        sums[j] = sum;
    }
}

// The V sums of a tile for every head: Scale(acc, factor, dv) when a cell
// brought a new maximum, then Mad(acc, v, weight, dv). Cells outer, heads
// inner: each head's accumulator sees the cells in order (its bits), and
// the heads' chains of convert, fma, round overlap (one head's chain alone
// waits on their latency every cell).
template <auto Scale, auto Mad, class Acc>
void accumulate_rows(Acc* acc, size_t n_heads, const float* vt, int64_t n, int64_t dv, const SoftmaxSteps* st) {
    const auto udv = static_cast<size_t>(dv);
    for (int64_t i = 0; i < n; ++i) {
        for (size_t h = 0; h < n_heads; ++h) {
            if (st[h].rescale[i]) Scale(acc + h * udv, st[h].factor[i], dv);
            Mad(acc + h * udv, vt + i * dv, st[h].weight[i], dv);
        }
    }
}

// The cache's two halves, chosen apart as the per-head path chooses them
// (K by its type, V by its own): a key side stages a tile's keys and
// scores them, a value side stages the V rows and keeps the sums.

// An F16 K: keys widened into the tile and dotted in f16_dot_ggml's order
// against the queries rounded to fp16.
template <class Ops>
struct F16Keys {
    int64_t dk;
    std::vector<float> qf, kt;
    F16Keys(const float* q, size_t nq, int64_t dk_, const KvCacheView&, DotFn)
        : dk(dk_), qf(nq * static_cast<size_t>(dk_)), kt(static_cast<size_t>(kTile * dk_)) {
        // The queries rounded to fp16 (ggml's K.Q partner) and widened back.
        for (size_t i = 0; i < qf.size(); ++i) qf[i] = quant::fp16_to_fp32(quant::fp32_to_fp16(q[i]));
    }
    void stage_key(const uint8_t* k, int64_t i) {
        Ops::widen(reinterpret_cast<const uint16_t*>(k), kt.data() + i * dk, dk);
    }
    void scores(size_t nq, int64_t n, float scale, float (*s)[kTile]) const {
        for (size_t h = 0; h < nq; ++h) {
            const float* qh = qf.data() + h * static_cast<size_t>(dk);
            if constexpr (requires { Ops::dot_cells(kt.data(), qh, n, dk, scale, s[h]); }) {
                Ops::dot_cells(kt.data(), qh, n, dk, scale, s[h]);
            } else {
                for (int64_t i = 0; i < n; ++i) s[h][i] = Ops::dot(kt.data() + i * dk, qh, dk) * scale;
            }
        }
    }
};

// bf16 halves to floats (exact: a bf16 is the top half of an f32).
inline void widen_bf16(const uint16_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
    for (; i < n; ++i) dst[i] = quant::bf16_to_fp32(src[i]);
}

// A BF16 or F32 K: keys widened into the tile (exact) and dotted in the
// order of those types' block dot kernels (quant::dot::float_dot: 16 lanes
// of fused multiply-add chains, lane l + lane l + 8, the tree of eight)
// against the queries in K's partner (BF16: rounded by its activation
// quantizer; F32: as they are), so the same bits as BlockKeys. The ISA's
// float_dot_cells reduces several cells' lanes together, where the block
// dot kernel reduced each (key, query) alone and widened each key again
// for every few queries.
template <class Ops>
struct FloatKeys {
    int64_t dk;
    bool bf16;
    std::vector<float> qf, kt;
    FloatKeys(const float* q, size_t nq, int64_t dk_, const KvCacheView& kv, DotFn)
        : dk(dk_),
          bf16(kv.k_type == quant::Type::BF16),
          qf(q, q + nq * static_cast<size_t>(dk_)),
          kt(static_cast<size_t>(kTile * dk_)) {
        if (bf16) {
            std::vector<uint16_t> bits(static_cast<size_t>(dk));
            for (size_t h = 0; h < nq; ++h) {
                float* row = qf.data() + h * static_cast<size_t>(dk);
                scalar_activation_quantizer(quant::Type::BF16)(row, bits.data(), dk);
                widen_bf16(bits.data(), row, dk);
            }
        }
    }
    void stage_key(const uint8_t* k, int64_t i) {
        float* row = kt.data() + i * dk;
        if (bf16) {
            widen_bf16(reinterpret_cast<const uint16_t*>(k), row, dk);
        } else {
            std::memcpy(row, k, static_cast<size_t>(dk) * sizeof(float));
        }
    }
    void scores(size_t nq, int64_t n, float scale, float (*s)[kTile]) const {
        for (size_t h = 0; h < nq; ++h) {
            const float* qh = qf.data() + h * static_cast<size_t>(dk);
            if constexpr (requires { Ops::float_dot_cells(kt.data(), qh, n, dk, scale, s[h]); }) {
                Ops::float_dot_cells(kt.data(), qh, n, dk, scale, s[h]);
            } else {
                for (int64_t i = 0; i < n; ++i) s[h][i] = quant::dot::float_dot<float>(dk, kt.data() + i * dk, qh) * scale;
            }
        }
    }
};

// Any other K: K.Q by the per-head path's block dot kernel on the stored
// blocks against the queries in K's activation partner (as ggml's CPU
// backend converts them).
template <class Ops>
struct BlockKeys {
    int64_t dk;
    quant::Type k_type, q_type;
    size_t q_bytes;
    std::vector<uint8_t> q_act;
    const uint8_t* keys[kTile] = {};
    DotFn dot;
    BlockKeys(const float* q, size_t nq, int64_t dk_, const KvCacheView& kv, DotFn block_dot)
        : dk(dk_),
          k_type(kv.k_type),
          q_type(quant::dot_type(kv.k_type)),
          q_bytes(*quant::row_bytes(q_type, dk_)),
          q_act(nq * q_bytes),
          dot(block_dot) {
        TANDEM_CHECK(dot != nullptr, "attention: no K.Q kernel for the cache's K type");
        for (size_t h = 0; h < nq; ++h) {
            scalar_activation_quantizer(q_type)(q + h * static_cast<size_t>(dk), q_act.data() + h * q_bytes, dk);
        }
    }
    void stage_key(const uint8_t* k, int64_t i) { keys[i] = k; }
    // Up to kMaxTileTokens heads a call: the key's blocks unpacked once for
    // them, each head's sum in its own accumulators as alone (same bits).
    // The ISA file's kernels for some K types take the queries in eights
    // first (the same bits as the block dot kernel).
    void scores(size_t nq, int64_t n, float scale, float (*s)[kTile]) const {
        size_t done = 0;  // queries the ISA's own kernel took
        if constexpr (requires { Ops::scores_legacy(k_type, keys, n, q_act.data(), q_bytes, nq, dk, scale, s); }) {
            done = Ops::scores_legacy(k_type, keys, n, q_act.data(), q_bytes, nq, dk, scale, s);
        }
        float qk[kMaxTileTokens];
        for (int64_t i = 0; i < n; ++i) {
            for (size_t h = done; h < nq; h += kMaxTileTokens) {
                const int nt = static_cast<int>(std::min<size_t>(kMaxTileTokens, nq - h));
                dot(dk, keys[i], q_act.data() + h * q_bytes, q_bytes, nt, qk, 1);
                for (int t = 0; t < nt; ++t) s[h + static_cast<size_t>(t)][i] = qk[t] * scale;
            }
        }
    }
};

// An F16 V: rows widened, sums kept in fp16 (f16_scale's and f16_mad's
// roundings).
template <class Ops>
struct F16Values {
    using Acc = uint16_t;
    int64_t dv;
    F16Values(int64_t dv_, const KvCacheView&) : dv(dv_) {}
    void stage_value(const uint8_t* v, float* row) const { Ops::widen(reinterpret_cast<const uint16_t*>(v), row, dv); }
    void accumulate(Acc* acc, size_t nq, const float* vt, int64_t n, const SoftmaxSteps* st) const {
        if constexpr (requires { Ops::accumulate_f16_in_registers(acc, nq, vt, n, dv, st); }) {
            if (Ops::accumulate_f16_in_registers(acc, nq, vt, n, dv, st)) return;
        }
        accumulate_rows<Ops::scale, Ops::mad>(acc, nq, vt, n, dv, st);
    }
    static float value(Acc a) { return quant::fp16_to_fp32(a); }
};

// Any other V: rows dequantized (Q8_0 by the ISA's dequantizer, same
// bits), sums kept in f32.
template <class Ops>
struct F32Values {
    using Acc = float;
    int64_t dv;
    quant::Type v_type;
    F32Values(int64_t dv_, const KvCacheView& kv) : dv(dv_), v_type(kv.v_type) {}
    void stage_value(const uint8_t* v, float* row) const {
        if (v_type == quant::Type::Q8_0) {
            Ops::dequantize_q8_0(v, row, dv);
        } else if (v_type == quant::Type::BF16) {
            widen_bf16(reinterpret_cast<const uint16_t*>(v), row, dv);
        } else if (v_type == quant::Type::F32) {
            std::memcpy(row, v, static_cast<size_t>(dv) * sizeof(float));
        } else {
            quant::dequantize_row(v_type, v, row, dv);
        }
    }
    void accumulate(Acc* acc, size_t nq, const float* vt, int64_t n, const SoftmaxSteps* st) const {
        if constexpr (requires { Ops::accumulate_f32_in_registers(acc, nq, vt, n, dv, st); }) {
            if (Ops::accumulate_f32_in_registers(acc, nq, vt, n, dv, st)) return;
        }
        accumulate_rows<Ops::scale_f32, Ops::mad_f32>(acc, nq, vt, n, dv, st);
    }
    static float value(Acc a) { return a; }
};

// A cache of one K side and one V side.
template <class Ops, template <class> class Keys, template <class> class Values>
struct Cache : Keys<Ops>, Values<Ops> {
    using IsaOps = Ops;
    using Acc = typename Values<Ops>::Acc;
    Cache(const float* q, size_t nq, int64_t dk, int64_t dv, const KvCacheView& kv, DotFn block_dot)
        : Keys<Ops>(q, nq, dk, kv, block_dot), Values<Ops>(dv, kv) {}
};

// Which of a block's tokens see a cell (bit tt: token tt), as the per-head
// loop masks it: stored, not after the token, inside its window.
static_assert(kMaxBlockQueries <= 64, "a block's tokens are bits of one mask");
inline uint64_t seen_by(int32_t kp, const int32_t* pos, int64_t n_tokens, int64_t window) {
    if (kp < 0) return 0;
    uint64_t mask = 0;
    for (int64_t tt = 0; tt < n_tokens; ++tt) {
        const bool visible = kp <= pos[tt] && !(window > 0 && pos[tt] - kp >= window);
        mask |= static_cast<uint64_t>(visible) << tt;
    }
    return mask;
}

template <class Cache>
void shared_kv_attention(const SharedQueries& qs, const AttentionShape& shape, const KvCacheView& kv, DotFn block_dot,
                         const ChunkRange& range) {
    TANDEM_CHECK(qs.n_q > 0 && qs.n_q <= kMaxSharedHeads, "attention: query heads per KV head out of range");
    TANDEM_CHECK(qs.n_tokens > 0 && qs.n_tokens * qs.n_q <= kMaxBlockQueries, "attention: query block out of range");
    TANDEM_CHECK(range.begin % kCellChunk == 0, "attention: a cell range starts inside a chunk");
    const int64_t dk = shape.head_dim_k, dv = shape.head_dim_v;
    const auto n_q = static_cast<size_t>(qs.n_q);
    const auto nq = static_cast<size_t>(qs.n_tokens) * n_q;  // queries: token-major, then head
    const auto udv = static_cast<size_t>(dv);
    const auto k_head_bytes = quant::row_bytes(kv.k_type, dk), v_head_bytes = quant::row_bytes(kv.v_type, dv);
    TANDEM_CHECK(k_head_bytes && v_head_bytes, "attention: head size not a multiple of the cache block");
    // The block's query rows side by side (copies: the same values).
    std::vector<float> q_rows;
    const float* q = qs.q;
    if (qs.n_tokens > 1) {
        q_rows.resize(nq * static_cast<size_t>(dk));
        for (int64_t tt = 0; tt < qs.n_tokens; ++tt) {
            std::copy_n(qs.q + tt * qs.token_stride, n_q * static_cast<size_t>(dk),
                        q_rows.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(tt) * n_q * static_cast<size_t>(dk)));
        }
        q = q_rows.data();
    }
    Cache cache(q, nq, dk, dv, kv, block_dot);
    // vt: the tile's V rows of the cells any token sees; vg: those of one
    // token that sees only some of them, in cell order.
    std::vector<float> vt(static_cast<size_t>(kTile) * udv), vg(static_cast<size_t>(kTile) * udv);
    std::vector<typename Cache::Acc> acc(nq * udv);
    float running_max[kMaxBlockQueries], running_sum[kMaxBlockQueries], scores[kMaxBlockQueries][kTile];
    // Each chunk (attention_chunks.h) starts its softmax afresh and leaves
    // its state in range.partials.
    const auto start_chunk = [&] {
        std::fill(acc.begin(), acc.end(), typename Cache::Acc{0});
        for (size_t h = 0; h < nq; ++h) {
            running_max[h] = -std::numeric_limits<float>::infinity();
            running_sum[h] = 0.0f;
        }
    };
    const auto end_chunk = [&](int64_t chunk) {
        for (size_t h = 0; h < nq; ++h) {
            float* p = range.partials + static_cast<int64_t>(h) * range.head_stride + chunk * chunk_floats(dv);
            store_chunk(p, running_max[h], running_sum[h]);
            for (size_t d = 0; d < udv; ++d) p[2 + d] = Cache::value(acc[h * udv + d]);
        }
    };
    SoftmaxSteps steps[kMaxBlockQueries];
    // Queries [j0, j1) over n cells of scores s (s[j] for query j) and V rows v.
    const auto step_queries = [&](size_t j0, size_t j1, float (*s)[kTile], const float* v, int64_t n) {
        for (size_t j = j0; j < j1; ++j) softmax_steps<typename Cache::IsaOps>(s[j], n, running_max[j], steps[j]);
        running_sums(steps + j0, j1 - j0, n, running_sum + j0);
        cache.accumulate(acc.data() + j0 * udv, j1 - j0, v, n, steps + j0);
    };
    // A soft cap (Gemma 2) as the per-head loop applies it: cap * tanh(Q.K *
    // (scale / cap)).
    const float cap = shape.softcap;
    const float qk_scale = cap > 0.0f ? shape.scale / cap : shape.scale;
    const int64_t kv_head = qs.head / (shape.n_head / shape.n_head_kv);
    const uint64_t k_offset = static_cast<uint64_t>(kv_head) * *k_head_bytes;
    const uint64_t v_offset = static_cast<uint64_t>(kv_head) * *v_head_bytes;
    // The group's slice of a cell is a few lines at a stride of the whole
    // row, a new 4 KiB page every few cells: the hardware prefetchers miss
    // most of them, so the slices kAhead cells on are requested here. The
    // staging takes a tile's cells in a burst, so kAhead is two tiles (8
    // came a few cells before their use: AVX2 on one Zen 3 thread, a layer
    // 2.7 -> 2.4-2.55 ms). Into L2, not L1: with T0 the tile's burst of
    // requests filled L1's miss buffers and the staging still waited on
    // most slices (Zen 4, 32 heads over 4 KV heads of 64, 16384 cells from
    // memory, two threads, ms a layer: AVX-512 3.53-3.77 -> 2.94-3.02 (T0
    // 8 cells on: 3.44-3.68), AVX2 3.69-3.86 -> 3.30-3.45).
    constexpr int64_t kAhead = 2 * kTile;
    const auto prefetch_slice = [](const uint8_t* p, uint64_t bytes) {
        for (uint64_t b = 0; b < bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(p + b), _MM_HINT_T1);
    };
    static_assert(kCellChunk % kTile == 0, "a tile never straddles two chunks");
    const int64_t end = std::min(range.end, kv.n_cells);
    uint64_t seen[kTile];  // which tokens see each staged cell
    for (int64_t c0 = range.begin; c0 < end; c0 += kTile) {
        if (c0 % kCellChunk == 0) start_chunk();
        // The tile's cells that any token sees, in storage order, staged once.
        int64_t n = 0;
        for (int64_t c = c0; c < std::min(end, c0 + kTile); ++c) {
            if (c + kAhead < end) {
                prefetch_slice(kv.k + static_cast<uint64_t>(c + kAhead) * kv.k_row_bytes + k_offset, *k_head_bytes);
                prefetch_slice(kv.v + static_cast<uint64_t>(c + kAhead) * kv.v_row_bytes + v_offset, *v_head_bytes);
            }
            const uint64_t mask = seen_by(kv.cell_pos[c], qs.pos, qs.n_tokens, shape.window);
            if (mask == 0) continue;
            cache.stage_key(kv.k + static_cast<uint64_t>(c) * kv.k_row_bytes + k_offset, n);
            cache.stage_value(kv.v + static_cast<uint64_t>(c) * kv.v_row_bytes + v_offset,
                              vt.data() + static_cast<size_t>(n) * udv);
            seen[n++] = mask;
        }
        if (n > 0) {
            cache.scores(nq, n, qk_scale, scores);
            if (cap > 0.0f) {
                for (size_t j = 0; j < nq; ++j) {
                    for (int64_t i = 0; i < n; ++i) scores[j][i] = cap * std::tanh(scores[j][i]);
                }
            }
            // Each query takes the cells its token sees, in order, as the
            // per-head loop does: the tokens that see all of the staged ones
            // straight from the tile (a run of them together), the others
            // from their cells gathered.
            const auto sees_all = [&](int64_t tt) {
                for (int64_t i = 0; i < n; ++i) {
                    if (!(seen[i] >> tt & 1)) return false;
                }
                return true;
            };
            for (int64_t tt = 0; tt < qs.n_tokens;) {
                if (sees_all(tt)) {
                    int64_t t1 = tt + 1;
                    while (t1 < qs.n_tokens && sees_all(t1)) ++t1;
                    step_queries(static_cast<size_t>(tt) * n_q, static_cast<size_t>(t1) * n_q, scores, vt.data(), n);
                    tt = t1;
                    continue;
                }
                int64_t m = 0;
                const size_t j0 = static_cast<size_t>(tt) * n_q;
                for (int64_t i = 0; i < n; ++i) {
                    if (!(seen[i] >> tt & 1)) continue;
                    for (size_t j = j0; j < j0 + n_q; ++j) scores[j][m] = scores[j][i];  // m <= i: in place
                    std::copy_n(vt.data() + static_cast<size_t>(i) * udv, udv, vg.data() + static_cast<size_t>(m) * udv);
                    ++m;
                }
                if (m > 0) step_queries(j0, j0 + n_q, scores, vg.data(), m);
                ++tt;
            }
        }
        if ((c0 + kTile) % kCellChunk == 0 || c0 + kTile >= end) end_chunk((c0 - range.begin) / kCellChunk);
    }
    // The range's chunks that start past the view's last cell: none visible.
    const int64_t n_chunks = (range.end - range.begin + kCellChunk - 1) / kCellChunk;
    const int64_t written = end > range.begin ? (end - range.begin + kCellChunk - 1) / kCellChunk : 0;
    for (int64_t chunk = written; chunk < n_chunks; ++chunk) {
        for (size_t h = 0; h < nq; ++h) {
            store_chunk(range.partials + static_cast<int64_t>(h) * range.head_stride + chunk * chunk_floats(dv),
                        -std::numeric_limits<float>::infinity(), 0.0f);
        }
    }
}

// The entry point of one ISA's file: the halves of the cache's K/V pair.
template <class Ops>
void shared_kv_attention_for(const SharedQueries& qs, const AttentionShape& shape, const KvCacheView& kv,
                             DotFn block_dot, const ChunkRange& range) {
    const bool k_f16 = kv.k_type == quant::Type::F16, v_f16 = kv.v_type == quant::Type::F16;
    const bool k_float = kv.k_type == quant::Type::BF16 || kv.k_type == quant::Type::F32;
    // K's side, then V's: an F16 V keeps fp16 sums, any other f32 ones.
    const auto run = [&]<template <class> class Keys>() {
        if (v_f16) {
            shared_kv_attention<Cache<Ops, Keys, F16Values>>(qs, shape, kv, block_dot, range);
        } else {
            shared_kv_attention<Cache<Ops, Keys, F32Values>>(qs, shape, kv, block_dot, range);
        }
    };
    if (k_f16) {
        run.template operator()<F16Keys>();
    } else if (k_float) {
        run.template operator()<FloatKeys>();
    } else {
        run.template operator()<BlockKeys>();
    }
}

}  // namespace
}  // namespace tandem::cpu::detail
