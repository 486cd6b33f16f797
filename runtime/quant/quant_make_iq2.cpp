// Importance-weighted quantizers of IQ2_XXS, IQ2_XS and IQ2_S, byte for
// byte what ggml's quantize_iq2_xxs / quantize_iq2_xs / quantize_iq2_s
// write for one row (same float operations in the same order; see
// quant_ref.h).
//
// The math, per super-block of 256 and chunk of 32 (IQ2_XXS) or 16 (IQ2_XS,
// IQ2_S) weights x:
//  * weights w_i = qw_i * sqrt(sigma2 + x_i^2), sigma2 = sum(x^2) / 256
//    (IQ2_S: 2 * sum(x^2) / 256, and without qw w_i = sigma2 / 4 + x_i^2);
//    the neighbour choice uses sqrt(w_i), the least-squares scale w_i.
//  * signs are split off (xval = |x|). IQ2_XXS and IQ2_XS store 7 signs a
//    group of 8, so when a group has an odd count of negatives the element
//    with the smallest w x^2 keeps its sign in xval (xval = -|x| there).
//  * scale search: for trial inverse scales id = (5 + 0.1 is) / m, each
//    group of 8 gets levels l = round((id xval - 1) / 2) in 0..2; a tuple
//    off the grid is replaced by the best of its listed neighbours (least
//    sum sqrt(w) (s q - xval)^2, s = 1/id, q = 2 l + 1). The trial with the
//    largest (sum w xval q)^2 / sum w q^2 wins, scale = sumqx / sumq2.
//    IQ2_XXS: is = -6..6, m = 3 x the scale make_qp_quants fits to xval
//    with levels 0..4, which is also the start. IQ2_XS/S: is = -9..9, m =
//    max xval, start max / 5.
//  * refinement: the groups (IQ2_XXS: all of them; IQ2_XS/S: those of the
//    winner that were off the grid, if any) are re-fitted at 1/scale and
//    the scale recomputed. A negative scale is made positive by flipping
//    the stored signs.
//  * chunk scales are stored as 4 bits against d = max_scale / 31:
//    s = round((scale / d - 1) / 2), the decoder's factor being 2 s + 1;
//    IQ2_S stores d * 0.9875 as its fp16 d.
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

using detail::kGroupMaxEps;  // IQ2_XXS, IQ2_XS: smaller chunks are zero
using detail::nearest_int;

constexpr int kMaxQ = 3;                // levels 0..kMaxQ-1, positions 1, 3, 5
constexpr float kIq2sMaxEps = 1e-8f;    // IQ2_S
constexpr int kMaxChunk = 32;

float max_of(float a, float b) { return a > b ? a : b; }
int clamp_level(int l) { return l < 0 ? 0 : (l > kMaxQ - 1 ? kMaxQ - 1 : l); }

// Key of the levels of one group L[0..7] (coordinate k at bits 2k).
int key_of(const int8_t* L) {
    int u = 0;
    for (int i = 0; i < 8; ++i) u |= L[i] << (2 * i);
    return u;
}

// The listed neighbour minimising sum sw_i (scale q_i - xval_i)^2 (the
// first of equals); writes its levels to L and returns its index.
int best_neighbour(const iq::Iq2Search& s, const uint16_t* list, const float* xval, const float* sw, float scale,
                   int8_t* L) {
    float best_d2 = FLT_MAX;
    int best = -1;
    for (int j = 1; j <= list[0]; ++j) {
        const uint64_t point = s.grid[list[j]];
        float d2 = 0;
        for (int i = 0; i < 8; ++i) {
            const float q = static_cast<float>(static_cast<int8_t>(point >> (8 * i)));
            const float diff = scale * q - xval[i];
            d2 += sw[i] * diff * diff;
        }
        if (d2 < best_d2) {
            best_d2 = d2;
            best = list[j];
        }
    }
    TANDEM_CHECK(best >= 0, "IQ2 neighbour search found no grid point");
    const uint64_t point = s.grid[best];
    for (int i = 0; i < 8; ++i) L[i] = static_cast<int8_t>((static_cast<int8_t>(point >> (8 * i)) - 1) / 2);
    return best;
}

// Levels of one group at inverse scale id; off the grid, the best
// neighbour at scale `scale` replaces them. Returns whether the levels
// were on the grid.
bool fit_group(const iq::Iq2Search& s, float id, float scale, const float* xval, const float* sw, int8_t* L) {
    for (int i = 0; i < 8; ++i) L[i] = static_cast<int8_t>(clamp_level(nearest_int(0.5f * (id * xval[i] - 1))));
    const int32_t m = s.map[key_of(L)];
    if (m >= 0) return true;
    best_neighbour(s, s.neighbours.data() + (-m - 1), xval, sw, scale, L);
    return false;
}

void weighted_sums(int n, const float* w, const float* xval, const int8_t* L, float& sumqx, float& sumq2) {
    sumqx = 0;
    sumq2 = 0;
    for (int i = 0; i < n; ++i) {
        const float q = 2 * L[i] + 1;
        sumqx += w[i] * xval[i] * q;
        sumq2 += w[i] * q * q;
    }
}

// One chunk of n = 8 * groups weights, its |x| (sign-adjusted), weights
// and their square roots.
struct Chunk {
    int groups;
    float xval[kMaxChunk];
    float w[kMaxChunk];
    float sw[kMaxChunk];
};

// The trial scales id = (5 + 0.1 is) / m, is = -steps..steps, starting
// from `scale`; L gets the winner's levels, on_grid whether each group of
// the winner was on the grid (all true if no trial won). Returns the scale.
float search_scale(const iq::Iq2Search& s, const Chunk& c, float m, int steps, float scale, int8_t* L, bool* on_grid) {
    const int n = 8 * c.groups;
    int8_t aux[kMaxChunk];
    bool aux_on_grid[kMaxChunk / 8];
    float best = 0;
    for (int g = 0; g < c.groups; ++g) on_grid[g] = true;
    for (int is = -steps; is <= steps; ++is) {
        const float id = (2 * kMaxQ - 1 + is * 0.1f) / m;
        const float this_scale = 1 / id;
        for (int g = 0; g < c.groups; ++g) {
            aux_on_grid[g] = fit_group(s, id, this_scale, c.xval + 8 * g, c.sw + 8 * g, aux + 8 * g);
        }
        float sumqx, sumq2;
        weighted_sums(n, c.w, c.xval, aux, sumqx, sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            std::memcpy(L, aux, n);
            for (int g = 0; g < c.groups; ++g) on_grid[g] = aux_on_grid[g];
        }
    }
    return scale;
}

// Re-fits the groups with refit[g] at 1/scale (when there are any and
// scale > 0) and returns the recomputed least-squares scale.
float refine(const iq::Iq2Search& s, const Chunk& c, const bool* refit, float scale, int8_t* L) {
    bool any = false;
    for (int g = 0; g < c.groups; ++g) any = any || refit[g];
    if (!any || !(scale > 0)) return scale;
    const float id = 1 / scale;
    for (int g = 0; g < c.groups; ++g) {
        if (refit[g]) fit_group(s, id, scale, c.xval + 8 * g, c.sw + 8 * g, L + 8 * g);
    }
    float sumqx, sumq2;
    weighted_sums(8 * c.groups, c.w, c.xval, L, sumqx, sumq2);
    return sumq2 > 0 ? sumqx / sumq2 : scale;
}

// Splits the signs off: xval = |x|, bit i of signs[g] set for x_i < 0.
// With even_signs (7 stored bits a group), a group with an odd count of
// negatives keeps the sign of its element of least w x^2 in xval instead.
void split_signs(const float* x, Chunk& c, bool even_signs, uint8_t* signs) {
    for (int g = 0; g < c.groups; ++g) {
        const float* xg = x + 8 * g;
        float* xv = c.xval + 8 * g;
        const float* wg = c.w + 8 * g;
        int nflip = 0;
        uint8_t bits = 0;
        for (int i = 0; i < 8; ++i) {
            if (xg[i] >= 0) {
                xv[i] = xg[i];
            } else {
                xv[i] = -xg[i];
                ++nflip;
                bits |= static_cast<uint8_t>(1 << i);
            }
        }
        if (even_signs && nflip % 2) {
            int imin = 0;
            float min = wg[0] * xg[0] * xg[0];
            for (int i = 1; i < 8; ++i) {
                const float ax = wg[i] * xg[i] * xg[i];
                if (ax < min) {
                    min = ax;
                    imin = i;
                }
            }
            xv[imin] = -xv[imin];
            bits ^= static_cast<uint8_t>(1 << imin);
        }
        signs[g] = even_signs ? (bits & 127) : bits;
    }
}

// The chunk's weights: qw * sqrt(sigma2 + x^2), or without qw (IQ2_S)
// sigma2 / 4 + x^2; and their square roots.
void chunk_weights(const float* x, const float* qw, float sigma2, Chunk& c) {
    const int n = 8 * c.groups;
    for (int i = 0; i < n; ++i) c.w[i] = qw ? qw[i] * sqrtf(sigma2 + x[i] * x[i]) : 0.25f * sigma2 + x[i] * x[i];
    for (int i = 0; i < n; ++i) c.sw[i] = sqrtf(c.w[i]);
}

// A chunk's result: grid index and sign bits per group, and its scale. A
// chunk below the format's epsilon is all zeros.
struct ChunkResult {
    int index[kMaxChunk / 8];
    uint8_t signs[kMaxChunk / 8];
    float scale;
};

// Makes the scale positive (flipping the signs) and reads the grid index
// of each group's levels.
void finish_chunk(const iq::Iq2Search& s, int groups, bool even_signs, float scale, const int8_t* L, ChunkResult& r) {
    if (scale < 0) {
        scale = -scale;
        for (int g = 0; g < groups; ++g) {
            r.signs[g] = even_signs ? (~r.signs[g] & 127) : static_cast<uint8_t>(~r.signs[g]);
        }
    }
    for (int g = 0; g < groups; ++g) {
        const int32_t m = s.map[key_of(L + 8 * g)];
        TANDEM_CHECK(m >= 0, "IQ2 quantizer produced a point off the grid");
        r.index[g] = m;
    }
    r.scale = scale;
}

// IQ2_XXS chunk of 32: the search starts from make_qp_quants and re-fits
// every group.
ChunkResult quantize_chunk_xxs(const iq::Iq2Search& s, const float* x, const float* qw, float sigma2) {
    ChunkResult r{};
    Chunk c{};
    c.groups = 4;
    chunk_weights(x, qw, sigma2, c);
    uint8_t signs[4];
    split_signs(x, c, true, signs);
    float max = c.xval[0];
    for (int i = 1; i < 32; ++i) max = max_of(max, c.xval[i]);
    if (max < kGroupMaxEps) return r;
    int8_t L[32];
    float scale = detail::make_qp_quants(32, kMaxQ + 1, c.xval, reinterpret_cast<uint8_t*>(L), c.w);
    const float eff_max = scale * kMaxQ;
    if (eff_max <= 0) return r;
    bool on_grid[4];
    scale = search_scale(s, c, eff_max, 6, scale, L, on_grid);
    const bool all[4] = {true, true, true, true};
    scale = refine(s, c, all, scale, L);
    std::memcpy(r.signs, signs, sizeof signs);
    finish_chunk(s, 4, true, scale, L, r);
    return r;
}

// IQ2_XS / IQ2_S chunk of 16: the search starts from max / 5 and re-fits
// the off-grid groups of the winner.
ChunkResult quantize_chunk_16(const iq::Iq2Search& s, const float* x, const float* qw, float sigma2, bool even_signs,
                              float eps) {
    ChunkResult r{};
    Chunk c{};
    c.groups = 2;
    chunk_weights(x, qw, sigma2, c);
    split_signs(x, c, even_signs, r.signs);
    float max = c.xval[0];
    for (int i = 1; i < 16; ++i) max = max_of(max, c.xval[i]);
    if (max < eps) return ChunkResult{};
    int8_t L[16] = {};
    bool on_grid[2];
    float scale = search_scale(s, c, max, 9, max / (2 * kMaxQ - 1), L, on_grid);
    const bool off_grid[2] = {!on_grid[0], !on_grid[1]};
    scale = refine(s, c, off_grid, scale, L);
    finish_chunk(s, 2, even_signs, scale, L, r);
    return r;
}

void quantize_block_iq2_xxs(const float* x, const float* qw, block_iq2_xxs* y) {
    const iq::Iq2Search& s = iq::iq2_search(Type::IQ2_XXS);
    const float sigma2 = detail::sum_of_squares(x, kQK_K) / kQK_K;
    uint32_t q2[kQK_K / 16] = {};
    float scales[kQK_K / 32];
    float max_scale = 0;
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
        const ChunkResult r = quantize_chunk_xxs(s, x + 32 * ib, qw + 32 * ib, sigma2);
        scales[ib] = r.scale;
        for (int g = 0; g < 4; ++g) {
            q2[2 * ib] |= static_cast<uint32_t>(r.index[g]) << (8 * g);
            q2[2 * ib + 1] |= static_cast<uint32_t>(r.signs[g]) << (7 * g);
        }
        max_scale = max_of(max_scale, r.scale);
    }
    std::memset(y, 0, sizeof *y);
    if (!max_scale) return;
    const float d = max_scale / 31;
    y->d = fp32_to_fp16(d);
    const float id = 1 / d;
    for (int ib = 0; ib < kQK_K / 32; ++ib) q2[2 * ib + 1] |= static_cast<uint32_t>(detail::iq_scale_code(id, scales[ib])) << 28;
    std::memcpy(y->qs, q2, sizeof q2);
}

void quantize_block_iq2_xs(const float* x, const float* qw, block_iq2_xs* y) {
    const iq::Iq2Search& s = iq::iq2_search(Type::IQ2_XS);
    const float sigma2 = detail::sum_of_squares(x, kQK_K) / kQK_K;
    uint16_t q2[kQK_K / 8] = {};
    float scales[kQK_K / 16];
    float max_scale = 0;
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
        const ChunkResult r = quantize_chunk_16(s, x + 16 * ib, qw + 16 * ib, sigma2, true, kGroupMaxEps);
        scales[ib] = r.scale;
        for (int g = 0; g < 2; ++g) q2[2 * ib + g] = static_cast<uint16_t>(r.index[g] | (r.signs[g] << 9));
        max_scale = max_of(max_scale, r.scale);
    }
    std::memset(y, 0, sizeof *y);
    if (!max_scale) return;
    const float d = max_scale / 31;
    y->d = fp32_to_fp16(d);
    const float id = 1 / d;
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
        y->scales[ib / 2] |= static_cast<uint8_t>(detail::iq_scale_code(id, scales[ib]) << (4 * (ib % 2)));
    }
    std::memcpy(y->qs, q2, sizeof q2);
}

void quantize_block_iq2_s(const float* x, const float* qw, block_iq2_s* y) {
    const iq::Iq2Search& s = iq::iq2_search(Type::IQ2_S);
    const float sigma2 = 2 * detail::sum_of_squares(x, kQK_K) / kQK_K;
    std::memset(y, 0, sizeof *y);
    float scales[kQK_K / 16];
    float max_scale = 0;
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
        const ChunkResult r =
            quantize_chunk_16(s, x + 16 * ib, qw ? qw + 16 * ib : nullptr, sigma2, false, kIq2sMaxEps);
        scales[ib] = r.scale;
        for (int g = 0; g < 2; ++g) {
            const int i8 = 2 * ib + g;
            y->qs[i8] = static_cast<uint8_t>(r.index[g] & 255);
            y->qh[i8 / 4] |= static_cast<uint8_t>((r.index[g] >> 8) << (2 * (i8 % 4)));
            y->qs[kQK_K / 8 + i8] = r.signs[g];
        }
        max_scale = max_of(max_scale, r.scale);
    }
    if (!max_scale) return;  // d = 0; the indices and signs stay, as ggml leaves them
    const float d = max_scale / 31;
    y->d = fp32_to_fp16(d * 0.9875f);
    const float id = 1 / d;
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
        y->scales[ib / 2] |= static_cast<uint8_t>(detail::iq_scale_code(id, scales[ib]) << (4 * (ib % 2)));
    }
}

template <typename Block, void (*QuantizeBlock)(const float*, const float*, Block*)>
void quantize_row(const float* src, void* dst, int64_t n, const float* qw) {
    TANDEM_CHECK(n % kQK_K == 0, "IQ2 rows must be a multiple of 256");
    auto* y = static_cast<Block*>(dst);
    for (int64_t i = 0; i < n / kQK_K; ++i) QuantizeBlock(src + kQK_K * i, qw ? qw + kQK_K * i : nullptr, y + i);
}

}  // namespace

// ggml refuses IQ2_XXS and IQ2_XS without importance weights (an assert);
// here that is an Error.
void quantize_row_iq2_xxs_w(const float* src, void* dst, int64_t n, const float* qw) {
    if (!qw) throw Error("IQ2_XXS needs an importance matrix (imatrix)");
    quantize_row<block_iq2_xxs, quantize_block_iq2_xxs>(src, dst, n, qw);
}

void quantize_row_iq2_xs_w(const float* src, void* dst, int64_t n, const float* qw) {
    if (!qw) throw Error("IQ2_XS needs an importance matrix (imatrix)");
    quantize_row<block_iq2_xs, quantize_block_iq2_xs>(src, dst, n, qw);
}

// Without qw, IQ2_S weighs with sigma2 / 4 + x^2, as ggml does.
void quantize_row_iq2_s_w(const float* src, void* dst, int64_t n, const float* qw) {
    quantize_row<block_iq2_s, quantize_block_iq2_s>(src, dst, n, qw);
}

}  // namespace tandem::quant::ref
