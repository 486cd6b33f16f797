// IQ1_S and IQ1_M quantizers: what ggml's quantize_iq1_s / quantize_iq1_m
// write for one row, byte for byte.
//
// The math. A block of 256 weights is cut into groups (32 for IQ1_S, 16 for
// IQ1_M) and each group into chunks of 8. A weight is stored as
// x ~ s * (v + delta) with v in {-1, 0, 1}, delta = +-1/8 (one sign per
// group for IQ1_S, per chunk of 8 for IQ1_M), s the group's scale, and each
// chunk's 8 values a point of the 2048-point IQ1 grid. Importance of weight
// i: w_i = qw_i * sqrt(sigma2 + x_i^2), sigma2 = 2 * sum(x^2) / 256 over the
// block (IQ1_M without a matrix: w_i = x_i^2).
//
//  1. Split search. With three levels the best assignment, ignoring the grid,
//     puts the sorted x into three runs: sorted positions [0, i1) get -1,
//     [i1, i2) get 0, [i2, n) get +1. With prefix sums S (of w*x) and W (of
//     w) over the sorted order, every (i1, i2) and shift sign costs O(1):
//     sumqx = sum_runs (S diff) * level, sumq2 = sum_runs (W diff) * level^2,
//     and the best split maximises sumqx^2 / sumq2 (scale sumqx / sumq2).
//     IQ1_M keeps S and W per chunk so each chunk can take its own sign;
//     the levels of a sign differ by 1, so a run sum collapses to
//     T * v[2] - S(i1) - S(i2), with T the chunk total.
//  2. A negative scale is made positive by mirroring the levels (v -> -v),
//     which also flips the shift signs.
//  3. Each chunk's levels are looked up in the grid map; a tuple off the
//     grid takes the listed neighbour with the least weighted squared error
//     sum w * (s * (v + delta) - x)^2 at the scale of step 1, and then the
//     group's scale is refitted by least squares on the chosen points.
//  4. The block scale d = max group scale / 15; each group stores the 3-bit
//     l = round((s / d - 1) / 2) clamped to [0, 7], its scale being
//     d * (2l + 1). IQ1_S stores d * 1.125 as fp16; IQ1_M refits d by least
//     squares over the whole block with the chosen l and stores d * 1.1125
//     (both factors are ggml's empirical fudge factors).
//
// The float operations run in ggml's order (the same sums, left to right,
// no fused multiply-add), and ties in the sort keep the original order (as
// glibc's merge-sort qsort does), so the chosen codes are the same.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "runtime/common/error.h"
#include "runtime/quant/fp16.h"
#include "runtime/quant/iq_grid_search.h"
#include "runtime/quant/iq_tables.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_ref.h"
#include "runtime/quant/quant_ref_kquants_scales.h"

namespace tandem::quant::ref {
namespace {

using detail::nearest_int;
using iq::Iq2Search;
using iq::kIq1Delta;

constexpr int kIq1sGroup = 32;
constexpr int kIq1mGroup = 16;
constexpr int kChunk = 8;
constexpr int kGridPoints = 2048;
// Groups whose largest magnitude is below these are stored as zeros.
constexpr float kIq1sGroupEps = 1e-12f;
constexpr float kIq1mGroupEps = 1e-7f;

// The three levels -1, 0, 1 with the positive or the negative shift.
constexpr float kPlus[3] = {-1 + kIq1Delta, kIq1Delta, 1 + kIq1Delta};
constexpr float kMinus[3] = {-1 - kIq1Delta, -kIq1Delta, 1 - kIq1Delta};

// ggml's MAX(a, b): a > b ? a : b (which of two zeros it keeps matters to
// nobody, but the form is kept).
inline float max_of(float a, float b) { return a > b ? a : b; }

// The level (0, 1, 2 for -1, 0, 1) of coordinate k of grid point g.
inline int grid_level(const Iq2Search& s, int g, int k) {
    return (static_cast<int>((s.grid[g] >> (8 * k)) & 0xffu) - 1) / 2;
}

// 2 * mean(x^2) over the block of 256.
float block_sigma2(const float* xbl) {
    return 2 * detail::sum_of_squares(xbl, kQK_K) / kQK_K;
}

// The importance of each of the n weights of a group (qw: the group's
// columns of the matrix, or nullptr).
void group_weights(const float* xb, const float* qw, float sigma2, int n, float* w) {
    if (qw != nullptr) {
        for (int i = 0; i < n; ++i) w[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
    } else {
        for (int i = 0; i < n; ++i) w[i] = xb[i] * xb[i];
    }
}

float group_max_abs(const float* xb, int n) {
    float m = std::fabs(xb[0]);
    for (int i = 1; i < n; ++i) m = max_of(m, std::fabs(xb[i]));
    return m;
}

// order[j]: the index of the j-th smallest x; equal values keep their order.
void sorted_order(const float* xb, int n, int* order) {
    for (int j = 0; j < n; ++j) order[j] = j;
    std::stable_sort(order, order + n, [xb](int a, int b) { return xb[a] < xb[b]; });
}

// The levels of a split: sorted positions [0, i1) -> 0, [i1, i2) -> 1, the
// rest -> 2.
void levels_of_split(const int* order, int n, int i1, int i2, int8_t* L) {
    for (int j = 0; j < n; ++j) L[order[j]] = static_cast<int8_t>(j < i1 ? 0 : j < i2 ? 1 : 2);
}

// Mirrors the levels (v -> -v) so that a negative scale becomes positive.
void mirror_levels(int8_t* L, int n) {
    for (int j = 0; j < n; ++j) L[j] = static_cast<int8_t>(2 - L[j]);
}

// Of the grid points listed in `nb` (a count, then indices), the one
// nearest to x with shifted levels xg at `scale`:
// min sum w * (scale * xg[level] - x)^2, the first on ties. Writes its
// levels to L. If every distance is non-finite (non-finite input), the
// first listed point.
int best_neighbour(const Iq2Search& s, const uint16_t* nb, const float* x, const float* w, float scale,
                   const float* xg, int8_t* L) {
    float best = FLT_MAX;
    int best_index = nb[1];
    for (int j = 1; j <= nb[0]; ++j) {
        float d2 = 0;
        for (int i = 0; i < kChunk; ++i) {
            const float diff = scale * xg[grid_level(s, nb[j], i)] - x[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best) {
            best = d2;
            best_index = nb[j];
        }
    }
    for (int i = 0; i < kChunk; ++i) L[i] = static_cast<int8_t>(grid_level(s, best_index, i));
    return best_index;
}

// The grid index of chunk `L` (8 levels), or, off the grid, its best
// listed neighbour (L then becomes that point's levels). Sets *off_grid.
int snap_chunk(const Iq2Search& s, const float* x, const float* w, float scale, const float* xg, int8_t* L,
               bool* off_grid) {
    int u = 0;
    for (int j = 0; j < kChunk; ++j) u |= L[j] << (2 * j);
    const int g = s.map[u];
    if (g >= 0) return g;
    *off_grid = true;
    return best_neighbour(s, s.neighbours.data() + (-g - 1), x, w, scale, xg, L);
}

// Least-squares scale sum(w q x) / sum(w q^2) of the chosen grid points
// (q their shifted levels, chunk k using xg[k]); `scale` if not positive.
float refit_scale(const Iq2Search& s, const float* xb, const float* w, const uint16_t* index, int chunks,
                  const float* const* xg, float scale) {
    float sumqx = 0, sumq2 = 0;
    for (int k = 0; k < chunks; ++k) {
        for (int j = 0; j < kChunk; ++j) {
            const float wj = w[kChunk * k + j];
            const float q = xg[k][grid_level(s, index[k], j)];
            sumqx += wj * q * xb[kChunk * k + j];
            sumq2 += wj * q * q;
        }
    }
    return sumqx > 0 && sumq2 > 0 ? sumqx / sumq2 : scale;
}

// ---- IQ1_S ----------------------------------------------------------------

// Step 1 for a group of 32 with one shift sign: the split (i1, i2) and
// sign (+1, -1) maximising sumqx^2 / sumq2; shift 0 if no split has
// sumq2 > 0.
struct Iq1sSplit {
    int i1 = -1, i2 = -1, shift = 0;
    float scale = 0;
};

Iq1sSplit search_split_iq1s(const float* xb, const float* w, const int* order, float max) {
    constexpr int n = kIq1sGroup;
    float sumx[n + 1], sumw[n + 1];
    sumx[0] = sumw[0] = 0;
    for (int j = 0; j < n; ++j) {
        const int i = order[j];
        sumx[j + 1] = sumx[j] + w[i] * xb[i];
        sumw[j + 1] = sumw[j] + w[i];
    }
    Iq1sSplit best;
    best.scale = max;
    float best_score = -FLT_MAX;
    auto consider = [&](const float* v, int i1, int i2, int shift) {
        const float sumqx = (sumx[i1] - sumx[0]) * v[0] + (sumx[i2] - sumx[i1]) * v[1] + (sumx[n] - sumx[i2]) * v[2];
        const float sumq2 = (sumw[i1] - sumw[0]) * v[0] * v[0] + (sumw[i2] - sumw[i1]) * v[1] * v[1] +
                            (sumw[n] - sumw[i2]) * v[2] * v[2];
        if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
            best.scale = sumqx / sumq2;
            best_score = best.scale * sumqx;
            best.i1 = i1;
            best.i2 = i2;
            best.shift = shift;
        }
    };
    for (int i1 = 0; i1 <= n; ++i1) {
        for (int i2 = i1; i2 <= n; ++i2) {
            consider(kPlus, i1, i2, 1);
            consider(kMinus, i1, i2, -1);
        }
    }
    return best;
}

// Steps 1-3 for group ib of block y. Returns the group's scale (0 for a
// group stored as zeros) and sets *shift (+1 or -1).
float quantize_group_iq1s(const Iq2Search& s, const float* xb, const float* w, block_iq1_s& y, int ib,
                          int* shift) {
    constexpr int n = kIq1sGroup;
    *shift = 1;
    const float max = group_max_abs(xb, n);
    if (max < kIq1sGroupEps) return 0;
    int order[n];
    sorted_order(xb, n, order);
    Iq1sSplit split = search_split_iq1s(xb, w, order, max);
    if (split.i1 < 0 || split.i2 < 0 || split.shift == 0) return 0;
    int8_t L[n];
    levels_of_split(order, n, split.i1, split.i2, L);
    float scale = split.scale;
    if (scale < 0) {
        mirror_levels(L, n);
        scale = -scale;
        split.shift = -split.shift;
    }
    const float* xx = split.shift == 1 ? kPlus : kMinus;
    constexpr int chunks = n / kChunk;
    uint16_t index[chunks];
    bool off_grid = false;
    for (int k = 0; k < chunks; ++k) {
        index[k] = static_cast<uint16_t>(
            snap_chunk(s, xb + kChunk * k, w + kChunk * k, scale, xx, L + kChunk * k, &off_grid));
    }
    if (off_grid) {
        const float* xg[chunks] = {xx, xx, xx, xx};
        scale = refit_scale(s, xb, w, index, chunks, xg, scale);
    }
    uint16_t h = 0;
    for (int k = 0; k < chunks; ++k) {
        y.qs[chunks * ib + k] = static_cast<uint8_t>(index[k] & 255);
        h = static_cast<uint16_t>(h | ((index[k] >> 8) << (3 * k)));
    }
    y.qh[ib] = h;
    *shift = split.shift;
    return scale;
}

// One block of 256: the groups, then the block scale and the 3-bit group
// scales (qh bits 12-14) and shift signs (bit 15).
void quantize_block_iq1s(const Iq2Search& s, const float* xbl, const float* qw, block_iq1_s& y) {
    constexpr int groups = kQK_K / kIq1sGroup;
    y.d = fp32_to_fp16(0.f);
    std::memset(y.qs, 0, sizeof y.qs);
    std::memset(y.qh, 0, sizeof y.qh);
    const float sigma2 = block_sigma2(xbl);
    float scales[groups];
    int shifts[groups];
    float max_scale = 0;
    for (int ib = 0; ib < groups; ++ib) {
        const float* xb = xbl + kIq1sGroup * ib;
        float w[kIq1sGroup];
        group_weights(xb, qw + kIq1sGroup * ib, sigma2, kIq1sGroup, w);
        scales[ib] = quantize_group_iq1s(s, xb, w, y, ib, &shifts[ib]);
        max_scale = max_of(max_scale, scales[ib]);
    }
    if (!max_scale) return;
    const float d = max_scale / 15;
    y.d = fp32_to_fp16(d * 1.125f);
    const float id = 1 / d;
    for (int ib = 0; ib < groups; ++ib) {
        int l = std::clamp(nearest_int(0.5f * (id * scales[ib] - 1)), 0, 7);
        if (shifts[ib] == -1) l |= 8;
        y.qh[ib] = static_cast<uint16_t>(y.qh[ib] | (l << 12));
    }
}

// ---- IQ1_M ----------------------------------------------------------------

// Shift pattern of a group of 16: bit 1 set = chunk 0 uses the negative
// shift, bit 0 set = chunk 1 does (ggml's 0: ++, 1: +-, 2: -+, 3: --).
inline const float* chunk_levels(int pattern, int k) {
    const bool negative = k == 0 ? pattern >= 2 : pattern % 2 != 0;
    return negative ? kMinus : kPlus;
}

struct Iq1mSplit {
    int i1 = -1, i2 = -1, pattern = -1;
    float scale = 0;
};

// Step 1 for a group of 16 with a shift sign per chunk: prefix sums kept per
// chunk (px, pw) over the sorted order; each split tries the four sign
// patterns.
Iq1mSplit search_split_iq1m(const float* xb, const float* w, const int* order, float max) {
    constexpr int n = kIq1mGroup;
    float px[2][n + 1], pw[2][n + 1];
    px[0][0] = px[1][0] = 0;
    pw[0][0] = pw[1][0] = 0;
    for (int j = 0; j < n; ++j) {
        const int i = order[j];
        const int h = i < n / 2 ? 0 : 1;
        px[h][j + 1] = px[h][j] + w[i] * xb[i];
        px[1 - h][j + 1] = px[1 - h][j];
        pw[h][j + 1] = pw[h][j] + w[i];
        pw[1 - h][j + 1] = pw[1 - h][j];
    }
    const float txs[2] = {px[0][n], px[1][n]};
    const float tws[2] = {pw[0][n], pw[1][n]};
    const float p2 = kPlus[2], m2 = kMinus[2];
    const float cp1 = kPlus[0] * kPlus[0] - kPlus[1] * kPlus[1];
    const float cp2 = kPlus[1] * kPlus[1] - kPlus[2] * kPlus[2];
    const float cm1 = kMinus[0] * kMinus[0] - kMinus[1] * kMinus[1];
    const float cm2 = kMinus[1] * kMinus[1] - kMinus[2] * kMinus[2];
    Iq1mSplit best;
    best.scale = max;
    float best_score = -FLT_MAX;
    for (int i1 = 0; i1 <= n; ++i1) {
        for (int i2 = i1; i2 <= n; ++i2) {
            float qx_p[2], qx_m[2], q2_p[2], q2_m[2];
            for (int h = 0; h < 2; ++h) {
                const float sx = px[h][i1] + px[h][i2];
                qx_p[h] = txs[h] * p2 - sx;
                qx_m[h] = txs[h] * m2 - sx;
                q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
                q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
            }
            const float sumqx[4] = {qx_p[0] + qx_p[1], qx_p[0] + qx_m[1], qx_m[0] + qx_p[1], qx_m[0] + qx_m[1]};
            const float sumq2[4] = {q2_p[0] + q2_p[1], q2_p[0] + q2_m[1], q2_m[0] + q2_p[1], q2_m[0] + q2_m[1]};
            for (int k = 0; k < 4; ++k) {
                if (sumq2[k] > 0 && sumqx[k] * sumqx[k] > best_score * sumq2[k]) {
                    best.scale = sumqx[k] / sumq2[k];
                    best_score = best.scale * sumqx[k];
                    best.i1 = i1;
                    best.i2 = i2;
                    best.pattern = k;
                }
            }
        }
    }
    return best;
}

// Steps 1-3 for group ib of block y (indices into qs and the low 3 bits of
// each qh nibble). Returns the group's scale (0 for a group stored as
// zeros) and sets *pattern.
float quantize_group_iq1m(const Iq2Search& s, const float* xb, const float* w, block_iq1_m& y, int ib,
                          int* pattern) {
    constexpr int n = kIq1mGroup;
    *pattern = 0;
    const float max = group_max_abs(xb, n);
    if (max < kIq1mGroupEps) return 0;
    int order[n];
    sorted_order(xb, n, order);
    Iq1mSplit split = search_split_iq1m(xb, w, order, max);
    if (split.i1 < 0 || split.i2 < 0 || split.pattern < 0) return 0;
    int8_t L[n];
    levels_of_split(order, n, split.i1, split.i2, L);
    float scale = split.scale;
    if (scale < 0) {
        mirror_levels(L, n);
        scale = -scale;
        split.pattern = 3 - split.pattern;  // both signs flip
    }
    constexpr int chunks = n / kChunk;
    const float* xg[chunks] = {chunk_levels(split.pattern, 0), chunk_levels(split.pattern, 1)};
    uint16_t index[chunks];
    bool off_grid = false;
    for (int k = 0; k < chunks; ++k) {
        index[k] = static_cast<uint16_t>(
            snap_chunk(s, xb + kChunk * k, w + kChunk * k, scale, xg[k], L + kChunk * k, &off_grid));
    }
    if (off_grid) scale = refit_scale(s, xb, w, index, chunks, xg, scale);
    y.qs[2 * ib + 0] = static_cast<uint8_t>(index[0] & 255);
    y.qs[2 * ib + 1] = static_cast<uint8_t>(index[1] & 255);
    y.qh[ib] = static_cast<uint8_t>((index[0] >> 8) | ((index[1] >> 8) << 4));
    *pattern = split.pattern;
    return scale;
}

// The 16-bit scale word j of an IQ1_M block (little-endian bytes).
inline uint16_t scale_word(const block_iq1_m& y, int j) {
    return static_cast<uint16_t>(y.scales[2 * j] | (y.scales[2 * j + 1] << 8));
}
inline void set_scale_word(block_iq1_m& y, int j, uint16_t v) {
    y.scales[2 * j] = static_cast<uint8_t>(v & 0xff);
    y.scales[2 * j + 1] = static_cast<uint8_t>(v >> 8);
}

// One block of 256: the groups; then the 3-bit group scales l (word ib/4,
// bits 3*(ib%4)), the shift bits (qh bits 3 and 7), and the block scale
// refitted as sum(w q x) / sum(w q^2) with q = (v + delta) * (2l + 1) over
// every group (zero groups included, as grid point 0), stored as fp16 in
// the top nibbles of the four scale words.
void quantize_block_iq1m(const Iq2Search& s, const float* xbl, const float* qw, block_iq1_m& y) {
    constexpr int groups = kQK_K / kIq1mGroup;
    constexpr uint8_t kShiftMasks[4] = {0x00, 0x80, 0x08, 0x88};
    std::memset(y.qs, 0, sizeof y.qs);
    std::memset(y.qh, 0, sizeof y.qh);
    std::memset(y.scales, 0, sizeof y.scales);
    const float sigma2 = block_sigma2(xbl);
    float scales[groups];
    int patterns[groups];
    float max_scale = 0;
    for (int ib = 0; ib < groups; ++ib) {
        const float* xb = xbl + kIq1mGroup * ib;
        float w[kIq1mGroup];
        group_weights(xb, qw ? qw + kIq1mGroup * ib : nullptr, sigma2, kIq1mGroup, w);
        scales[ib] = quantize_group_iq1m(s, xb, w, y, ib, &patterns[ib]);
        max_scale = max_of(max_scale, scales[ib]);
    }
    if (!max_scale) return;
    float d = max_scale / 15;
    const float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int ib = 0; ib < groups; ++ib) {
        const int l = std::clamp(nearest_int(0.5f * (id * scales[ib] - 1)), 0, 7);
        set_scale_word(y, ib / 4, static_cast<uint16_t>(scale_word(y, ib / 4) | (l << (3 * (ib % 4)))));
        y.qh[ib] = static_cast<uint8_t>(y.qh[ib] | kShiftMasks[patterns[ib]]);
        const float* xb = xbl + kIq1mGroup * ib;
        float w[kIq1mGroup];
        group_weights(xb, qw ? qw + kIq1mGroup * ib : nullptr, sigma2, kIq1mGroup, w);
        for (int k = 0; k < kIq1mGroup / kChunk; ++k) {
            const float* xx = chunk_levels(patterns[ib], k);
            const int g = y.qs[2 * ib + k] | ((y.qh[ib] >> (4 * k)) & 7) << 8;
            for (int j = 0; j < kChunk; ++j) {
                const float wj = w[kChunk * k + j];
                const float q = xx[grid_level(s, g, j)] * static_cast<float>(2 * l + 1);
                sumqx += wj * q * xb[kChunk * k + j];
                sumq2 += wj * q * q;
            }
        }
    }
    if (sumq2 > 0) d = sumqx / sumq2;
    const uint16_t h = fp32_to_fp16(d * 1.1125f);
    set_scale_word(y, 0, static_cast<uint16_t>(scale_word(y, 0) | ((h & 0x000f) << 12)));
    set_scale_word(y, 1, static_cast<uint16_t>(scale_word(y, 1) | ((h & 0x00f0) << 8)));
    set_scale_word(y, 2, static_cast<uint16_t>(scale_word(y, 2) | ((h & 0x0f00) << 4)));
    set_scale_word(y, 3, static_cast<uint16_t>(scale_word(y, 3) | (h & 0xf000)));
}

}  // namespace

// qw is required: ggml asserts on a missing matrix for IQ1_S (llama-quantize
// never makes IQ1_S without one); here that is an Error.
void quantize_row_iq1_s_w(const float* src, void* dst, int64_t n, const float* qw) {
    if (qw == nullptr) throw Error("IQ1_S needs an importance matrix (qw is null)");
    const Iq2Search& s = iq::iq2_search(Type::IQ1_S);
    auto* y = static_cast<block_iq1_s*>(dst);
    for (int64_t ib = 0; ib < n / kQK_K; ++ib) quantize_block_iq1s(s, src + kQK_K * ib, qw + kQK_K * ib, y[ib]);
}

// qw == nullptr: ggml weighs each weight by x^2 (llama-quantize makes IQ1_M
// without a matrix for token_embd / output when asked to).
void quantize_row_iq1_m_w(const float* src, void* dst, int64_t n, const float* qw) {
    const Iq2Search& s = iq::iq2_search(Type::IQ1_M);
    auto* y = static_cast<block_iq1_m*>(dst);
    for (int64_t ib = 0; ib < n / kQK_K; ++ib) {
        quantize_block_iq1m(s, src + kQK_K * ib, qw ? qw + kQK_K * ib : nullptr, y[ib]);
    }
}

}  // namespace tandem::quant::ref
