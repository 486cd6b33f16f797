#include "kernels_cpu/attention_tiled.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels_cpu/elementwise.h"
#include "kernels_cpu/f16_accumulate.h"
#include "runtime/common/error.h"
#include "runtime/quant/fp16.h"

namespace tandem::cpu::detail {

void tiled_scores_scalar(const float* q, const float* kt, int64_t dk, float* s) {
    for (int64_t t = 0; t < kAttentionTile; ++t) {
        float acc = 0.0f;
        for (int64_t k = 0; k < dk; ++k) acc = std::fma(q[k], kt[k * kAttentionTile + t], acc);
        s[t] = acc;
    }
}

double tiled_softmax_scalar(const float* s, float max, float* p) {
    // Groups of 16 lanes, each reduced in float, then added in double.
    double sum = 0.0;
    for (int64_t g = 0; g < kAttentionTile; g += 16) {
        for (int64_t l = 0; l < 16; ++l) p[g + l] = ggml_expf_poly(s[g + l] - max);
        sum += static_cast<double>(reduce16_ggml(p + g));
    }
    return sum;
}

void tiled_accumulate_scalar(const float* p, const float* v, int64_t dv, float* acc) {
    for (int64_t d = 0; d < dv; ++d) {
        float a = acc[d];
        for (int64_t t = 0; t < kAttentionTile; ++t) a = std::fma(p[t], v[t * dv + d], a);
        acc[d] = a;
    }
}

void widen_f16_scalar(const uint16_t* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = quant::fp16_to_fp32(src[i]);
}

TiledAttentionKernels tiled_attention_kernels(SimdLevel level) {
#if defined(__x86_64__)
    if (level != SimdLevel::Scalar) {
        return {tiled_scores_avx2, tiled_softmax_avx2, tiled_accumulate_avx2, widen_f16_avx2};
    }
#endif
    (void)level;
    return {tiled_scores_scalar, tiled_softmax_scalar, tiled_accumulate_scalar, widen_f16_scalar};
}

void attention_tiled(const float* q, const int32_t* q_pos, int64_t n_tokens, const AttentionShape& shape,
                     const KvCacheView& kv, float* out, ThreadPool& pool, SimdLevel level) {
    TANDEM_CHECK(kv.type == quant::Type::F16, "tiled attention: the cache must be F16");
    const int64_t dk = shape.head_dim_k, dv = shape.head_dim_v;
    const int64_t gqa = shape.n_head / shape.n_head_kv;
    const int64_t n_qtiles = (n_tokens + kAttentionTile - 1) / kAttentionTile;
    const TiledAttentionKernels kern = tiled_attention_kernels(level);
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    // One task per (KV head, tile of up to 64 queries): the query heads that
    // share the KV head share its widened K and V tiles (llama.cpp widens
    // them per query head; the values are the same either way).
    pool.parallel_for(shape.n_head_kv * n_qtiles, 1, [&](int64_t begin, int64_t end) {
        std::vector<float> kt(static_cast<size_t>(dk * kAttentionTile));
        std::vector<float> vt(static_cast<size_t>(kAttentionTile * dv));
        std::vector<float> krow(static_cast<size_t>(dk));
        std::vector<float> s(kAttentionTile), p(kAttentionTile);
        const auto slots = static_cast<size_t>(gqa * kAttentionTile);
        std::vector<float> acc(slots * static_cast<size_t>(dv));
        std::vector<float> m(slots), sum(slots);
        for (int64_t task = begin; task < end; ++task) {
            const int64_t g = task / n_qtiles;
            const int64_t t0 = (task % n_qtiles) * kAttentionTile;
            const int64_t nq = std::min(kAttentionTile, n_tokens - t0);
            std::fill(acc.begin(), acc.end(), 0.0f);
            std::fill(m.begin(), m.end(), kNegInf);
            std::fill(sum.begin(), sum.end(), 0.0f);
            for (int64_t c0 = 0; c0 < kv.n_cells; c0 += kAttentionTile) {
                const int64_t nc = std::min(kAttentionTile, kv.n_cells - c0);
                // Skip a tile no query of this tile sees (all masked: no effect).
                bool any = false;
                for (int64_t c = 0; c < nc && !any; ++c) {
                    const int32_t kp = kv.cell_pos[c0 + c];
                    for (int64_t i = 0; i < nq && !any; ++i) {
                        const int32_t pos = q_pos[t0 + i];
                        any = kp >= 0 && kp <= pos && (shape.window <= 0 || pos - kp < shape.window);
                    }
                }
                if (!any) continue;
                // Widen the tile's keys (transposed) and values; missing cells are zeros.
                std::fill(kt.begin(), kt.end(), 0.0f);
                std::fill(vt.begin(), vt.end(), 0.0f);
                for (int64_t c = 0; c < nc; ++c) {
                    const auto* kh = reinterpret_cast<const uint16_t*>(kv.k + (c0 + c) * kv.k_row_bytes) + g * dk;
                    const auto* vh = reinterpret_cast<const uint16_t*>(kv.v + (c0 + c) * kv.v_row_bytes) + g * dv;
                    kern.widen(kh, krow.data(), dk);
                    for (int64_t k = 0; k < dk; ++k) kt[static_cast<size_t>(k * kAttentionTile + c)] = krow[static_cast<size_t>(k)];
                    kern.widen(vh, vt.data() + c * dv, dv);
                }
                // A full tile whose cells are all in the past of a query (and
                // inside its window) needs no per-cell mask for it: most
                // tiles of a long prompt, which would otherwise pay a
                // branchy loop over 64 positions for every query and head.
                int32_t kmin = std::numeric_limits<int32_t>::max(), kmax = -1;
                for (int64_t c = 0; c < nc; ++c) {
                    kmin = std::min(kmin, kv.cell_pos[c0 + c]);
                    kmax = std::max(kmax, kv.cell_pos[c0 + c]);
                }
                const bool full_tile = nc == kAttentionTile && kmin >= 0;
                for (int64_t hh = 0; hh < gqa; ++hh) {
                    const int64_t h = g * gqa + hh;
                    for (int64_t i = 0; i < nq; ++i) {
                        const int64_t t = t0 + i;
                        const int32_t pos = q_pos[t];
                        const size_t slot = static_cast<size_t>(hh * kAttentionTile + i);
                        kern.scores(q + (t * shape.n_head + h) * dk, kt.data(), dk, s.data());
                        float tile_max = kNegInf;
                        if (full_tile && kmax <= pos && (shape.window <= 0 || pos - kmin < shape.window)) {
                            for (int64_t c = 0; c < kAttentionTile; ++c) s[c] *= shape.scale;
                            for (int64_t c = 0; c < kAttentionTile; ++c) tile_max = std::max(tile_max, s[c]);
                        } else {
                            for (int64_t c = 0; c < kAttentionTile; ++c) {
                                const int32_t kp = c < nc ? kv.cell_pos[c0 + c] : -1;
                                const bool visible =
                                    kp >= 0 && kp <= pos && (shape.window <= 0 || pos - kp < shape.window);
                                s[c] = visible ? s[c] * shape.scale : kNegInf;
                                tile_max = std::max(tile_max, s[c]);
                            }
                        }
                        if (tile_max == kNegInf) continue;  // nothing visible in this tile
                        float* a = acc.data() + slot * static_cast<size_t>(dv);
                        const float m_new = std::fmax(m[slot], tile_max);
                        if (m_new > m[slot]) {
                            const float ms = std::exp(m[slot] - m_new);
                            for (int64_t d = 0; d < dv; ++d) a[d] *= ms;
                            sum[slot] *= ms;
                        }
                        m[slot] = m_new;
                        sum[slot] = static_cast<float>(static_cast<double>(sum[slot]) + kern.softmax(s.data(), m_new, p.data()));
                        kern.accumulate(p.data(), vt.data(), dv, a);
                    }
                }
            }
            for (int64_t hh = 0; hh < gqa; ++hh) {
                const int64_t h = g * gqa + hh;
                for (int64_t i = 0; i < nq; ++i) {
                    const size_t slot = static_cast<size_t>(hh * kAttentionTile + i);
                    const float inv = sum[slot] == 0.0f ? 0.0f : 1.0f / sum[slot];
                    float* o = out + ((t0 + i) * shape.n_head + h) * dv;
                    const float* a = acc.data() + slot * static_cast<size_t>(dv);
                    for (int64_t d = 0; d < dv; ++d) o[d] = a[d] * inv;
                }
            }
        }
    });
}

}  // namespace tandem::cpu::detail
