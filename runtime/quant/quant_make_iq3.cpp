// Importance-weighted quantizers of IQ3_XXS and IQ3_S, byte for byte what
// ggml's quantize_iq3_xxs / quantize_iq3_s write for one row (same float
// operations in the same order; see quant_ref.h).
//
// The math, per super-block of 256 and chunk of 32 weights x:
//  * weights w_i = qw_i * sqrt(sigma2 + x_i^2), sigma2 = 2 * sum(x^2) / 256
//    (w_i = x_i^2 without qw); the search below uses sqrt(w_i) for picking
//    grid neighbours and w_i for the least-squares scale.
//  * signs are split off (xval = |x|); IQ3_XXS stores 7 signs a group of 8,
//    so when a group has an odd count of negatives the element with the
//    smallest w x^2 has its sign flipped (xval becomes -|x| there).
//  * scale search: for 2*n+1 trial inverse scales id = (15 + 0.2 is) / max,
//    each group of 4 gets levels l = round((id xval - 1) / 2) in 0..7; a
//    tuple off the grid is replaced by the best of its listed neighbours
//    (least sum w (s q - xval)^2 with q = 2 l + 1). The trial with the
//    largest (sum w xval q)^2 / sum w q^2 wins, scale = sumqx / sumq2.
//  * refinement: if a group of the winner was off the grid, the groups (all
//    of them for IQ3_S, the off-grid ones for IQ3_XXS) are re-fitted at
//    1/scale and the scale recomputed.
//  * the 8 chunk scales are stored as 4 bits against d = max_scale / 31:
//    s = round((scale / d - 1) / 2), the decoder's factor being 2 s + 1;
//    the stored fp16 d carries a small fudge factor (1.0125, resp. 1.033).
#include <cfloat>
#include <cmath>
#include <cstring>

#include "runtime/common/error.h"
#include "runtime/quant/fp16.h"
#include "runtime/quant/iq_grid_search.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_ref.h"
#include "runtime/quant/quant_ref_kquants_scales.h"

namespace tandem::quant::ref {
namespace {

using detail::nearest_int;

constexpr int kChunk = 32;
constexpr int kGroups = kChunk / 4;
constexpr int kMaxLevel = 7;
constexpr float kXxsChunkEps = 1e-8f;  // IQ3_XXS chunks below this are zero

// How the two formats run the shared scale search.
struct SearchPlan {
    const iq::Iq3Search& table;
    int half_steps;  // trial scales is = -half_steps..half_steps
    // IQ3_S: the refinement re-fits every group, and runs whenever the
    // trials never improved on the start (groups count as off the grid
    // until a trial wins). IQ3_XXS: only off-grid groups, and only when
    // the winning trial had some.
    bool refit_all;
};

int clamp_level(int l) { return l < 0 ? 0 : (l > kMaxLevel ? kMaxLevel : l); }

int position(uint32_t packed, int k) { return static_cast<int>(static_cast<int8_t>((packed >> (8 * k)) & 0xFFu)); }

// Key of the levels of group L[0..3].
int key_of(const int8_t* L) {
    int u = 0;
    for (int i = 0; i < 4; ++i) u |= L[i] << (3 * i);
    return u;
}

// Levels of one group of 4 at inverse scale id.
void levels_at(float id, const float* xval, int8_t* L) {
    for (int i = 0; i < 4; ++i) L[i] = static_cast<int8_t>(clamp_level(nearest_int(0.5f * (id * xval[i] - 1))));
}

// The listed neighbour with the least sum w (scale q - xval)^2 (the first
// of equals); its levels go to L.
void best_neighbour(const iq::Iq3Search& t, int key, const float* xval, const float* w, float scale, int8_t* L) {
    const uint16_t* list = t.neighbours.data() + (-t.map[key] - 1);
    const int count = list[0];
    TANDEM_CHECK(count > 0, "IQ3 search: empty neighbour list");
    float best_d2 = FLT_MAX;
    int best = -1;
    for (int j = 1; j <= count; ++j) {
        const uint32_t g = t.grid[list[j]];
        float d2 = 0;
        for (int i = 0; i < 4; ++i) {
            const float diff = scale * static_cast<float>(position(g, i)) - xval[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best_d2) {
            best_d2 = d2;
            best = list[j];
        }
    }
    TANDEM_CHECK(best >= 0, "IQ3 search: no neighbour with a finite error");
    for (int i = 0; i < 4; ++i) L[i] = static_cast<int8_t>((position(t.grid[best], i) - 1) / 2);
}

// Fit group k at inverse scale id (neighbour search at `scale`); returns
// whether the rounded levels were on the grid.
bool fit_group(const iq::Iq3Search& t, float id, float scale, const float* xval, const float* waux, int8_t* L) {
    levels_at(id, xval, L);
    const int u = key_of(L);
    if (t.map[u] >= 0) return true;
    best_neighbour(t, u, xval, waux, scale, L);
    return false;
}

// sum w xval q and sum w q^2 with q = 2 L + 1.
void weighted_sums(const float* xval, const float* weight, const int8_t* L, float* sumqx, float* sumq2) {
    float sx = 0, s2 = 0;
    for (int i = 0; i < kChunk; ++i) {
        const float w = weight[i];
        const float q = static_cast<float>(2 * L[i] + 1);
        sx += w * xval[i] * q;
        s2 += w * q * q;
    }
    *sumqx = sx;
    *sumq2 = s2;
}

// The scale search of one chunk (max > 0 its largest xval): levels in L
// (all on the grid), the chunk's scale returned (negative only in the
// degenerate case the callers flip).
float search_chunk(const SearchPlan& p, const float* xval, const float* weight, const float* waux, float max,
                   int8_t* L) {
    int8_t Laux[kChunk];
    bool on_grid[kGroups];
    bool on_grid_aux[kGroups];
    std::memset(L, 0, kChunk);
    float best = 0;
    float scale = max / 15;
    for (bool& g : on_grid) g = !p.refit_all;
    for (int is = -p.half_steps; is <= p.half_steps; ++is) {
        const float id = (15 + static_cast<float>(is) * 0.2f) / max;
        const float this_scale = 1 / id;
        for (int k = 0; k < kGroups; ++k) {
            on_grid_aux[k] = fit_group(p.table, id, this_scale, xval + 4 * k, waux + 4 * k, Laux + 4 * k);
        }
        float sumqx, sumq2;
        weighted_sums(xval, weight, Laux, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            std::memcpy(L, Laux, kChunk);
            std::memcpy(on_grid, on_grid_aux, sizeof on_grid);
        }
    }
    int off_grid = 0;
    for (bool g : on_grid) off_grid += g ? 0 : 1;
    if (off_grid > 0 && scale > 0) {
        const float id = 1 / scale;
        for (int k = 0; k < kGroups; ++k) {
            if (!p.refit_all && on_grid[k]) continue;
            fit_group(p.table, id, scale, xval + 4 * k, waux + 4 * k, L + 4 * k);
        }
        float sumqx, sumq2;
        weighted_sums(xval, weight, L, &sumqx, &sumq2);
        if (sumq2 > 0) scale = sumqx / sumq2;
    }
    return scale;
}

// Grid index of group k of L (must be on the grid).
int grid_index(const iq::Iq3Search& t, const int8_t* L) {
    const int index = t.map[key_of(L)];
    TANDEM_CHECK(index >= 0, "IQ3 quantizer: levels off the grid");
    return index;
}

// sigma2 = 2 sum(x^2) / 256 of a super-block.
float super_block_sigma2(const float* xbl) {
    return 2 * detail::sum_of_squares(xbl, kQK_K) / kQK_K;
}

// Weights of a chunk and their square roots.
void chunk_weights(const float* xb, const float* qw, float sigma2, float* weight, float* waux) {
    for (int i = 0; i < kChunk; ++i) {
        weight[i] = qw ? qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]) : xb[i] * xb[i];
    }
    for (int i = 0; i < kChunk; ++i) waux[i] = std::sqrt(weight[i]);
}

float max_of(const float* xval) {
    float max = xval[0];
    for (int i = 1; i < kChunk; ++i) max = max > xval[i] ? max : xval[i];
    return max;
}

// IQ3_XXS signs of group k of 8: |x| into xval, 7 sign bits returned; an
// odd count of negatives flips the element with the least w x^2 back.
uint8_t xxs_signs(const float* xb, const float* weight, float* xval) {
    int nflip = 0;
    uint8_t s = 0;
    for (int i = 0; i < 8; ++i) {
        if (xb[i] >= 0) {
            xval[i] = xb[i];
        } else {
            xval[i] = -xb[i];
            ++nflip;
            s |= static_cast<uint8_t>(1u << i);
        }
    }
    if (nflip % 2) {
        int imin = 0;
        float min = weight[0] * xb[0] * xb[0];
        for (int i = 1; i < 8; ++i) {
            const float ax = weight[i] * xb[i] * xb[i];
            if (ax < min) {
                min = ax;
                imin = i;
            }
        }
        xval[imin] = -xval[imin];
        s ^= static_cast<uint8_t>(1u << imin);
    }
    return s & 127;
}

// The 4-bit code of a chunk scale against d (1/d = id).
uint32_t scale_code(float id, float scale) { return static_cast<uint32_t>(detail::iq_scale_code(id, scale)); }

void quantize_block_iq3_xxs(const float* xbl, const float* qw, block_iq3_xxs* y) {
    const SearchPlan plan{iq::iq3_search(Type::IQ3_XXS), 15, false};
    // qs[0..63]: grid indices; then one word per chunk: 4 x 7 sign bits
    // and the 4-bit scale on top.
    uint8_t q3[3 * kQK_K / 8] = {};
    uint32_t words[kQK_K / kChunk] = {};
    float scales[kQK_K / kChunk];
    float max_scale = 0;
    const float sigma2 = super_block_sigma2(xbl);
    for (int ib = 0; ib < kQK_K / kChunk; ++ib) {
        const float* xb = xbl + kChunk * ib;
        float weight[kChunk], waux[kChunk], xval[kChunk];
        int8_t L[kChunk];
        chunk_weights(xb, qw ? qw + kChunk * ib : nullptr, sigma2, weight, waux);
        uint8_t signs[4];
        for (int k = 0; k < 4; ++k) signs[k] = xxs_signs(xb + 8 * k, weight + 8 * k, xval + 8 * k);
        const float max = max_of(xval);
        if (max < kXxsChunkEps) {
            scales[ib] = 0;
            continue;
        }
        float scale = search_chunk(plan, xval, weight, waux, max, L);
        if (scale < 0) {  // degenerate; the stored scale is unsigned
            scale = -scale;
            for (uint8_t& s : signs) s = static_cast<uint8_t>(~s & 127);
        }
        for (int k = 0; k < kGroups; ++k) q3[kGroups * ib + k] = static_cast<uint8_t>(grid_index(plan.table, L + 4 * k));
        words[ib] = signs[0] | (signs[1] << 7) | (signs[2] << 14) | (static_cast<uint32_t>(signs[3]) << 21);
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    std::memset(y, 0, sizeof *y);
    if (!max_scale) return;
    const float d = max_scale / 31;
    y->d = fp32_to_fp16(d * 1.0125f);
    const float id = 1 / d;
    for (int ib = 0; ib < kQK_K / kChunk; ++ib) words[ib] |= scale_code(id, scales[ib]) << 28;
    std::memcpy(y->qs, q3, kQK_K / 4);
    std::memcpy(y->qs + kQK_K / 4, words, sizeof words);
}

void quantize_block_iq3_s(const float* xbl, const float* qw, block_iq3_s* y) {
    const SearchPlan plan{iq::iq3_search(Type::IQ3_S), 9, true};
    std::memset(y, 0, sizeof *y);
    float scales[kQK_K / kChunk];
    float max_scale = 0;
    // ggml advances its qs / signs cursors only past chunks it quantized, so
    // a chunk after an all-zero one lands in the zero chunk's slots (qh and
    // the scales are indexed by chunk). Kept for byte equality.
    int slot = 0;
    const float sigma2 = super_block_sigma2(xbl);
    for (int ib = 0; ib < kQK_K / kChunk; ++ib) {
        const float* xb = xbl + kChunk * ib;
        float weight[kChunk], waux[kChunk], xval[kChunk];
        int8_t L[kChunk];
        chunk_weights(xb, qw ? qw + kChunk * ib : nullptr, sigma2, weight, waux);
        uint8_t signs[4];
        for (int k = 0; k < 4; ++k) {
            signs[k] = 0;
            for (int i = 0; i < 8; ++i) {
                const float v = xb[8 * k + i];
                xval[8 * k + i] = v >= 0 ? v : -v;
                if (!(v >= 0)) signs[k] |= static_cast<uint8_t>(1u << i);
            }
        }
        const float max = max_of(xval);
        if (!max) {
            scales[ib] = 0;
            continue;
        }
        float scale = search_chunk(plan, xval, weight, waux, max, L);
        if (scale < 0) {
            scale = -scale;
            for (uint8_t& s : signs) s = static_cast<uint8_t>(~s);
        }
        for (int k = 0; k < kGroups; ++k) {
            const int index = grid_index(plan.table, L + 4 * k);
            y->qs[kGroups * slot + k] = static_cast<uint8_t>(index & 255);
            y->qh[ib] |= static_cast<uint8_t>((index >> 8) << k);
        }
        std::memcpy(y->signs + 4 * slot, signs, 4);
        ++slot;
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) return;
    const float d = max_scale / 31;
    y->d = fp32_to_fp16(d * 1.033f);
    const float id = 1 / d;
    for (int ib = 0; ib < kQK_K / kChunk; ib += 2) {
        y->scales[ib / 2] = static_cast<uint8_t>(scale_code(id, scales[ib]) | (scale_code(id, scales[ib + 1]) << 4));
    }
}

template <class Block, void (*QuantizeBlock)(const float*, const float*, Block*)>
void quantize_row(const float* src, void* dst, int64_t n, const float* qw) {
    TANDEM_CHECK(n % kQK_K == 0, "IQ3 rows must be a multiple of 256");
    auto* y = static_cast<Block*>(dst);
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        QuantizeBlock(src + kQK_K * i, qw ? qw + kQK_K * i : nullptr, y + i);
    }
}

}  // namespace

// Without qw both use w = x^2, as ggml does.
void quantize_row_iq3_xxs_w(const float* src, void* dst, int64_t n, const float* qw) {
    quantize_row<block_iq3_xxs, quantize_block_iq3_xxs>(src, dst, n, qw);
}

void quantize_row_iq3_s_w(const float* src, void* dst, int64_t n, const float* qw) {
    quantize_row<block_iq3_s, quantize_block_iq3_s>(src, dst, n, qw);
}

}  // namespace tandem::quant::ref
