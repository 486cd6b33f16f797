#include "kernels_cpu/attention_tiled.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels_cpu/attention_sink.h"
#include "kernels_cpu/elementwise.h"
#include "kernels_cpu/f16_accumulate.h"
#include "runtime/common/error.h"
#include "runtime/quant/fp16.h"

namespace tandem::cpu::detail {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}  // namespace

void tiled_scores_scalar(const float* const* q, int nq, const float* kt, int64_t dk, float scale, float* s, float* smax) {
    for (int j = 0; j < nq; ++j) {
        float mx = kNegInf;
        for (int64_t t = 0; t < kAttentionTile; ++t) {
            float acc = 0.0f;
            for (int64_t k = 0; k < dk; ++k) acc = std::fma(q[j][k], kt[k * kAttentionTile + t], acc);
            s[j * kAttentionTile + t] = acc * scale;
            mx = std::max(mx, acc * scale);
        }
        smax[j] = mx;
    }
}

float tiled_mask_scalar(const int32_t* cell_pos, int32_t pos, int64_t window, float* s) {
    float mx = kNegInf;
    for (int64_t t = 0; t < kAttentionTile; ++t) {
        const int32_t kp = cell_pos[t];
        const bool visible = kp >= 0 && kp <= pos && (window <= 0 || pos - kp < window);
        if (!visible) s[t] = kNegInf;
        mx = std::max(mx, s[t]);
    }
    return mx;
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

void tiled_accumulate_scalar(const float* p, int nq, const float* v, int64_t dv, const float* rescale, float* const* acc) {
    for (int j = 0; j < nq; ++j) {
        for (int64_t d = 0; d < dv; ++d) {
            float a = acc[j][d] * rescale[j];
            for (int64_t t = 0; t < kAttentionTile; ++t) a = std::fma(p[j * kAttentionTile + t], v[t * dv + d], a);
            acc[j][d] = a;
        }
    }
}

void widen_keys_scalar(const uint8_t* keys, uint64_t row_bytes, int64_t nc, int64_t dk, float* kt) {
    for (int64_t c = 0; c < kAttentionTile; ++c) {
        uint16_t h = 0;
        for (int64_t k = 0; k < dk; ++k) {
            if (c < nc) std::memcpy(&h, keys + static_cast<uint64_t>(c) * row_bytes + 2 * k, 2);
            kt[k * kAttentionTile + c] = c < nc ? quant::fp16_to_fp32(h) : 0.0f;
        }
    }
}

void widen_f16_scalar(const uint16_t* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = quant::fp16_to_fp32(src[i]);
}

TiledAttentionKernels tiled_attention_kernels(SimdLevel level) {
#if defined(__x86_64__)
    if (is_avx512(level)) {
        return {tiled_scores_avx512, tiled_mask_avx2,  tiled_softmax_avx512,
                tiled_accumulate_avx512, widen_keys_avx2, widen_f16_avx2};
    }
    if (level != SimdLevel::Scalar) {
        return {tiled_scores_avx2, tiled_mask_avx2, tiled_softmax_avx2, tiled_accumulate_avx2, widen_keys_avx2, widen_f16_avx2};
    }
#endif
    (void)level;
    return {tiled_scores_scalar,     tiled_mask_scalar, tiled_softmax_scalar,
            tiled_accumulate_scalar, widen_keys_scalar, widen_f16_scalar};
}

void attention_tiled(const float* q, const int32_t* q_pos, int64_t n_tokens, const AttentionShape& shape,
                     const KvCacheView& kv, float* out, ThreadPool& pool, SimdLevel level) {
    TANDEM_CHECK(kv.k_type == quant::Type::F16 && kv.v_type == quant::Type::F16,
                 "tiled attention: the cache must be F16");
    const int64_t dk = shape.head_dim_k, dv = shape.head_dim_v;
    const int64_t gqa = shape.n_head / shape.n_head_kv;
    const int64_t n_qtiles = (n_tokens + kAttentionTile - 1) / kAttentionTile;
    const TiledAttentionKernels kern = tiled_attention_kernels(level);
    // One task per (KV head, tile of up to 64 queries): the query heads that
    // share the KV head share its widened K and V tiles (llama.cpp widens
    // them per query head; the values are the same either way).
    const float cap = shape.softcap;
    const float qk_scale = cap > 0.0f ? shape.scale / cap : shape.scale;
    // Tasks are split by the key tiles they visit (a causal prompt's later
    // query tiles see more; an equal split of one KV head's tiles gave one
    // thread most of the work); any split gives the same bits.
    const auto cost = [&](int64_t task) {
        const int64_t t0 = (task % n_qtiles) * kAttentionTile;
        const int64_t t1 = std::min(n_tokens, t0 + kAttentionTile);
        int32_t qmax = -1;
        for (int64_t i = t0; i < t1; ++i) qmax = std::max(qmax, q_pos[i]);
        int64_t seen = std::min<int64_t>(kv.n_cells, int64_t{qmax} + 1);
        if (shape.window > 0) seen = std::min<int64_t>(seen, shape.window + (t1 - t0));
        return static_cast<double>((seen + kAttentionTile - 1) / kAttentionTile + 1);
    };
    pool.parallel_for_cost(shape.n_head_kv * n_qtiles, cost, [&](int64_t begin, int64_t end) {
        std::vector<float> kt(static_cast<size_t>(dk * kAttentionTile));
        std::vector<float> vt(static_cast<size_t>(kAttentionTile * dv));
        std::vector<float> s(kQueryBlock * kAttentionTile), p(kQueryBlock * kAttentionTile);
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
            int32_t qmax = -1;
            for (int64_t i = 0; i < nq; ++i) qmax = std::max(qmax, q_pos[t0 + i]);
            for (int64_t c0 = 0; c0 < kv.n_cells; c0 += kAttentionTile) {
                const int64_t nc = std::min(kAttentionTile, kv.n_cells - c0);
                int32_t tile_pos[kAttentionTile];  // -1 past the last cell: never visible
                for (int64_t c = 0; c < kAttentionTile; ++c) tile_pos[c] = c < nc ? kv.cell_pos[c0 + c] : -1;
                // Skip a tile no query of this tile sees (all masked: no
                // effect). The bounds decide most tiles (a causal prompt's
                // future tiles); the scan is left for windows.
                int32_t kmin = std::numeric_limits<int32_t>::max(), kmax = -1;
                bool filled = true;  // all 64 cells hold a position
                for (int32_t kp : tile_pos) {
                    filled = filled && kp >= 0;
                    if (kp >= 0) kmin = std::min(kmin, kp), kmax = std::max(kmax, kp);
                }
                if (kmax < 0 || kmin > qmax) continue;
                if (shape.window > 0) {
                    bool any = false;
                    for (int64_t c = 0; c < nc && !any; ++c) {
                        for (int64_t i = 0; i < nq && !any; ++i) {
                            const int32_t pos = q_pos[t0 + i];
                            any = tile_pos[c] >= 0 && tile_pos[c] <= pos && pos - tile_pos[c] < shape.window;
                        }
                    }
                    if (!any) continue;
                }
                // Widen the tile's keys (transposed) and values; missing cells are zeros.
                kern.widen_keys(kv.k + c0 * kv.k_row_bytes + g * dk * 2, kv.k_row_bytes, nc, dk, kt.data());
                for (int64_t c = 0; c < nc; ++c) {
                    kern.widen(reinterpret_cast<const uint16_t*>(kv.v + (c0 + c) * kv.v_row_bytes) + g * dv,
                               vt.data() + c * dv, dv);
                }
                std::fill(vt.begin() + nc * dv, vt.end(), 0.0f);
                for (int64_t hh = 0; hh < gqa; ++hh) {
                    const int64_t h = g * gqa + hh;
                    for (int64_t i0 = 0; i0 < nq; i0 += kQueryBlock) {
                        const int nb = static_cast<int>(std::min<int64_t>(kQueryBlock, nq - i0));
                        const float* qs[kQueryBlock];
                        for (int j = 0; j < nb; ++j) qs[j] = q + ((t0 + i0 + j) * shape.n_head + h) * dk;
                        float smax[kQueryBlock];
                        kern.scores(qs, nb, kt.data(), dk, qk_scale, s.data(), smax);
                        if (cap > 0.0f) {  // monotonic: the maximum stays the maximum
                            for (int j = 0; j < nb; ++j) {
                                for (int64_t c = 0; c < kAttentionTile; ++c) {
                                    float& v = s[static_cast<size_t>(j * kAttentionTile + c)];
                                    v = cap * std::tanh(v);
                                }
                                smax[j] = cap * std::tanh(smax[j]);
                            }
                        }
                        // The softmax of each query; the ones that see a
                        // cell of this tile are gathered for one accumulate.
                        float* accs[kQueryBlock];
                        float rescale[kQueryBlock];
                        int n_active = 0;
                        for (int j = 0; j < nb; ++j) {
                            const int32_t pos = q_pos[t0 + i0 + j];
                            float* sj = s.data() + j * kAttentionTile;
                            // A filled tile all in the past of the query (and
                            // inside its window) needs no mask: most tiles of
                            // a long prompt.
                            const bool unmasked =
                                filled && kmax <= pos && (shape.window <= 0 || pos - kmin < shape.window);
                            const float tile_max = unmasked ? smax[j] : kern.mask(tile_pos, pos, shape.window, sj);
                            if (tile_max == kNegInf) continue;  // nothing visible in this tile
                            const size_t slot = static_cast<size_t>(hh * kAttentionTile + i0 + j);
                            const float m_new = std::fmax(m[slot], tile_max);
                            const float ms = m_new > m[slot] ? std::exp(m[slot] - m_new) : 1.0f;
                            sum[slot] *= ms;
                            m[slot] = m_new;
                            const double tile_sum = kern.softmax(sj, m_new, p.data() + n_active * kAttentionTile);
                            sum[slot] = static_cast<float>(static_cast<double>(sum[slot]) + tile_sum);
                            rescale[n_active] = ms;
                            accs[n_active++] = acc.data() + slot * static_cast<size_t>(dv);
                        }
                        if (n_active > 0) kern.accumulate(p.data(), n_active, vt.data(), dv, rescale, accs);
                    }
                }
            }
            for (int64_t hh = 0; hh < gqa; ++hh) {
                const int64_t h = g * gqa + hh;
                for (int64_t i = 0; i < nq; ++i) {
                    const size_t slot = static_cast<size_t>(hh * kAttentionTile + i);
                    const quant::attn::Finish f =
                        finish_softmax(m[slot], sum[slot], shape.sinks ? shape.sinks + h : nullptr);
                    float* o = out + ((t0 + i) * shape.n_head + h) * dv;
                    const float* a = acc.data() + slot * static_cast<size_t>(dv);
                    for (int64_t d = 0; d < dv; ++d) o[d] = a[d] * f.ms * f.inv;
                }
            }
        }
    });
}

}  // namespace tandem::cpu::detail
