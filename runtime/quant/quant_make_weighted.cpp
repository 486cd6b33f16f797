// Importance-weighted quantizers of the K-quants (Q2_K .. Q6_K) and of the
// legacy 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1): byte for byte what
// ggml's quantize_<type>(src, dst, 1, n, qw) writes for one row when qw is
// given (same float operations in the same order; see quant_ref.h). With
// qw == nullptr ggml falls back to its plain reference quantizer, and so do
// these (quant_ref_kquants.cpp, quant_ref_legacy.cpp).
//
// Weights. Column i of the row gets w_i = qw_i * sqrt(sigma2 + x_i^2): the
// imatrix says how much the column matters, sqrt(sigma2 + x^2) keeps large
// weights from being drowned by small ones. sigma2 is the mean square
// over the super-block (Q2_K: sum x^2 / 256; Q3_K, Q4_K, Q5_K:
// 2 sum x^2 / 256) or over the whole row (legacy: sum x^2 / n). Q6_K uses
// w_i = qw_i alone.
//
// Three searches, all minimising sum w_i (x_i - value_i)^2:
//  * symmetric (make_qx): x ~ d l, l in [-nmax, nmax-1]; tries the 19
//    inverse scales -(nmax + 0.1 t) / max (max the signed extreme,
//    t = -9..9) and keeps the codes with the largest sumlx^2 / suml2, the
//    scale being the least-squares d = sumlx / suml2 (Q3_K groups and
//    super-scale, Q6_K groups, Q4_0, Q5_0).
//  * asymmetric (make_qkx3): x ~ d l - m, l in [0, nmax], m >= 0; tries
//    the inverse scales (nmax - 0.9 + 0.05 t) / (max - min), t = 0..36,
//    fitting (d, m) in closed form for each code set, keeping the least
//    error (Q2_K, Q4_K, Q5_K groups, Q4_1, Q5_1).
//  * positive (make_qp): non-negative group scales s_j ~ D L_j with
//    L_j in [0, nmax], weighted by each group's total weight; tries 9
//    inverse scales, then moves single codes while the least-squares
//    objective improves (the super-scales of Q2_K, Q4_K, Q5_K).
// K-quants then round the super-scale(s) to fp16 and re-pick every code
// against the scale as it will be decoded.
//
// ggml keeps codes of make_qp in uint8_t without a lower clamp (a negative
// rounding would wrap); the code below keeps that storage so that even
// such a degenerate row gives ggml's bytes.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/common/error.h"
#include "runtime/quant/fp16.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_ref.h"
#include "runtime/quant/quant_ref_kquants_scales.h"

namespace tandem::quant::ref {
namespace {

using detail::check_multiple;
using detail::get_scale_min_k4;
using detail::get_scale_q3_K;
using detail::kGroupMaxEps;
using detail::make_qp_quants;
using detail::nearest_int;
using detail::pack_2bit;
using detail::sum_of_squares;


// ---- shared pieces ------------------------------------------------------------

// w_i = qw_i * sqrt(sigma2 + x_i^2) for n columns; returns sum w_i.
float importance(int n, const float* x, const float* qw, float sigma2, float* w) {
    float sum = 0.0f;
    for (int i = 0; i < n; ++i) w[i] = qw[i] * std::sqrt(sigma2 + x[i] * x[i]);
    for (int i = 0; i < n; ++i) sum += w[i];
    return sum;
}

// Asymmetric search with importance weights: ggml's make_qkx3_quants with
// the settings every weighted caller uses (squared error, rmin = -0.9,
// rdelta = 0.05, 36 steps), which given weights is make_qkx2_quants.
float make_qkx3_quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float* the_min, uint8_t* aux) {
    return detail::make_qkx2_quants(n, nmax, x, w, L, the_min, aux, -0.9f, 0.05f, 36, false);
}

// ---- Q2_K -------------------------------------------------------------------------

void quantize_block_q2_K(const float* x, const float* qw, block_q2_K* y) {
    uint8_t L[kQK_K];
    uint8_t aux[16];
    float weight[16];
    float scales[16];
    float mins[16];
    float sw[16];
    const float sigma2 = sum_of_squares(x, kQK_K) / static_cast<float>(kQK_K);
    for (int j = 0; j < 16; ++j) {
        sw[j] = importance(16, x + 16 * j, qw + 16 * j, sigma2, weight);
        scales[j] = make_qkx3_quants(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j], aux);
    }
    uint8_t Ls[16];
    uint8_t Lm[16];
    const float dm_f = make_qp_quants(16, 15, scales, Ls, sw);
    const float mm_f = make_qp_quants(16, 15, mins, Lm, sw);
    y->d = fp32_to_fp16(dm_f);
    y->dmin = fp32_to_fp16(mm_f);
    const float dm = fp16_to_fp32(y->d);
    const float mm = fp16_to_fp32(y->dmin);
    for (int j = 0; j < 16; ++j) y->scales[j] = static_cast<uint8_t>(Ls[j] | (Lm[j] << 4));
    for (int j = 0; j < 16; ++j) {
        const float d = dm * static_cast<float>(y->scales[j] & 0x0f);
        if (d == 0.0f) continue;  // the group's search codes stay
        const float m = mm * static_cast<float>(y->scales[j] >> 4);
        for (int ii = 0; ii < 16; ++ii) {
            L[16 * j + ii] = static_cast<uint8_t>(std::clamp(nearest_int((x[16 * j + ii] + m) / d), 0, 3));
        }
    }
    pack_2bit(L, y->qs);
}

// ---- Q3_K -------------------------------------------------------------------------

void quantize_block_q3_K(const float* x, const float* qw, block_q3_K* y) {
    int8_t L[kQK_K];
    float weight[16];
    float scales[16];
    float sw[16];
    const float sigma2 = 2.0f * sum_of_squares(x, kQK_K) / static_cast<float>(kQK_K);
    for (int j = 0; j < 16; ++j) {
        sw[j] = importance(16, x + 16 * j, qw + 16 * j, sigma2, weight);
        scales[j] = detail::make_qx_quants(16, 4, x + 16 * j, L + 16 * j, weight);
    }
    // The 16 signed group scales against one super-scale: 6-bit codes
    // stored with +32 (low nibble in bytes 0-7, top 2 bits in bytes 8-11).
    int8_t Ls[16];
    const float d_block = detail::make_qx_quants(16, 32, scales, Ls, sw);
    std::memset(y->scales, 0, sizeof(y->scales));
    for (int j = 0; j < 16; ++j) {
        const int l = Ls[j];
        if (j < 8) {
            y->scales[j] = static_cast<uint8_t>(l & 0x0f);
        } else {
            y->scales[j - 8] |= static_cast<uint8_t>((l & 0x0f) << 4);
        }
        y->scales[j % 4 + 8] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
    }
    y->d = fp32_to_fp16(d_block);
    const float d_all = fp16_to_fp32(y->d);
    for (int j = 0; j < 16; ++j) {
        const float d = d_all * static_cast<float>(get_scale_q3_K(j, y->scales));
        if (d == 0.0f) continue;
        for (int ii = 0; ii < 16; ++ii) {
            L[16 * j + ii] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
        }
    }
    detail::pack_q3_K(L, *y);
}

// ---- Q4_K / Q5_K ------------------------------------------------------------------

// Eight groups of 32: weighted asymmetric search per group, then the 6-bit
// scales and mins against two fp16 super-scales (make_qp), then the codes
// re-picked against the decoded scales. Q5_K clamps the 6-bit codes to 63
// before packing, Q4_K stores them as they are (clamp63).
void quantize_k4_weighted(const float* x, const float* qw, int nmax, bool clamp63, fp16_bits* d_out,
                          fp16_bits* dmin_out, uint8_t* scales_out, uint8_t* L) {
    uint8_t aux[32];
    float weights[32];
    float scales[8];
    float mins[8];
    float sw[8];
    const float sigma2 = 2.0f * sum_of_squares(x, kQK_K) / static_cast<float>(kQK_K);
    for (int j = 0; j < 8; ++j) {
        sw[j] = importance(32, x + 32 * j, qw + 32 * j, sigma2, weights);
        scales[j] = make_qkx3_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], aux);
    }
    uint8_t Ls[8];
    uint8_t Lm[8];
    const float d_block = make_qp_quants(8, 63, scales, Ls, sw);
    const float m_block = make_qp_quants(8, 63, mins, Lm, sw);
    if (clamp63) {
        for (int j = 0; j < 8; ++j) {
            Ls[j] = std::min<uint8_t>(63, Ls[j]);
            Lm[j] = std::min<uint8_t>(63, Lm[j]);
        }
    }
    detail::set_scale_mins_k4(Ls, Lm, scales_out);
    *d_out = fp32_to_fp16(d_block);
    *dmin_out = fp32_to_fp16(m_block);
    detail::requantize_k4(x, scales_out, fp16_to_fp32(*d_out), fp16_to_fp32(*dmin_out), nmax, L);
}

void quantize_block_q4_K(const float* x, const float* qw, block_q4_K* y) {
    uint8_t L[kQK_K];
    quantize_k4_weighted(x, qw, 15, false, &y->d, &y->dmin, y->scales, L);
    detail::pack_q4_K(L, *y);
}

void quantize_block_q5_K(const float* x, const float* qw, block_q5_K* y) {
    uint8_t L[kQK_K];
    quantize_k4_weighted(x, qw, 31, true, &y->d, &y->dmin, y->scales, L);
    detail::pack_q5_K(L, *y);
}

// ---- Q6_K -------------------------------------------------------------------------

void quantize_block_q6_K(const float* x, const float* qw, block_q6_K* y) {
    int8_t L[kQK_K];
    float scales[16];
    float max_scale = 0.0f;
    float max_abs_scale = 0.0f;
    for (int ib = 0; ib < 16; ++ib) {
        scales[ib] = detail::make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, qw + 16 * ib);
        const float a = std::fabs(scales[ib]);
        if (a > max_abs_scale) {
            max_abs_scale = a;
            max_scale = scales[ib];
        }
    }
    if (max_abs_scale < kGroupMaxEps) {
        std::memset(y, 0, sizeof(*y));
        return;
    }
    // Signed int8 group scales, the largest-magnitude one at -128.
    const float iscale = -128.0f / max_scale;
    y->d = fp32_to_fp16(1.0f / iscale);
    for (int ib = 0; ib < 16; ++ib) {
        y->scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    }
    const float d_all = fp16_to_fp32(y->d);
    for (int j = 0; j < 16; ++j) {
        const float d = d_all * static_cast<float>(y->scales[j]);
        if (d == 0.0f) continue;
        for (int ii = 0; ii < 16; ++ii) {
            L[16 * j + ii] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
        }
    }
    detail::pack_q6_K(L, *y);
}

// Runs a per-super-block quantizer over a row.
template <typename Block, typename Fn>
void for_each_super_block(const float* src, void* dst, int64_t n, const float* qw, Fn quantize_block) {
    check_multiple(n, kQK_K);
    auto* y = static_cast<Block*>(dst);
    for (int64_t i = 0; i < n / kQK_K; ++i) quantize_block(src + i * kQK_K, qw + i * kQK_K, &y[i]);
}

// ---- legacy -----------------------------------------------------------------------

// 5th bits of 32 codes as ggml's little-endian qh word: bit j for code j.
void store_high_bits(const uint8_t* L, uint8_t* qh_out) {
    uint32_t qh = 0;
    for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>((L[j] >> 4) & 1) << j;
    std::memcpy(qh_out, &qh, sizeof(qh));
}

// Low nibbles: element j in the low half of qs[j], element j+16 in the high.
void store_nibbles(const uint8_t* L, uint8_t* qs) {
    for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((L[j] & 0x0f) | ((L[j + 16] & 0x0f) << 4));
}

// Runs a per-block legacy quantizer over a row: blocks of 32, each with
// its weights w = qw sqrt(sigma2 + x^2), sigma2 the row's mean square.
template <typename Block, typename Fn>
void for_each_legacy_block(const float* src, void* dst, int64_t n, const float* qw, Fn quantize_block) {
    check_multiple(n, 32);
    auto* y = static_cast<Block*>(dst);
    const float sigma2 = sum_of_squares(src, n) / static_cast<float>(n);
    float weight[32];
    for (int64_t ib = 0; ib < n / 32; ++ib) {
        importance(32, src + 32 * ib, qw + 32 * ib, sigma2, weight);
        quantize_block(src + 32 * ib, weight, &y[ib]);
    }
}

// Symmetric legacy block (Q4_0: nmax 8, Q5_0: nmax 16): codes l + nmax.
float symmetric_block(const float* x, const float* weight, int nmax, uint8_t* codes) {
    int8_t L[32];
    const float d = detail::make_qx_quants(32, nmax, x, L, weight);
    for (int j = 0; j < 32; ++j) codes[j] = static_cast<uint8_t>(L[j]);
    return d;
}

}  // namespace

// ---- entry points ---------------------------------------------------------------

void quantize_row_q2_K_w(const float* src, void* dst, int64_t n, const float* qw) {
    if (qw == nullptr) return quantize_row_q2_K(src, dst, n);
    for_each_super_block<block_q2_K>(src, dst, n, qw, quantize_block_q2_K);
}

void quantize_row_q3_K_w(const float* src, void* dst, int64_t n, const float* qw) {
    if (qw == nullptr) return quantize_row_q3_K(src, dst, n);
    for_each_super_block<block_q3_K>(src, dst, n, qw, quantize_block_q3_K);
}

void quantize_row_q4_K_w(const float* src, void* dst, int64_t n, const float* qw) {
    if (qw == nullptr) return quantize_row_q4_K(src, dst, n);
    for_each_super_block<block_q4_K>(src, dst, n, qw, quantize_block_q4_K);
}

void quantize_row_q5_K_w(const float* src, void* dst, int64_t n, const float* qw) {
    if (qw == nullptr) return quantize_row_q5_K(src, dst, n);
    for_each_super_block<block_q5_K>(src, dst, n, qw, quantize_block_q5_K);
}

void quantize_row_q6_K_w(const float* src, void* dst, int64_t n, const float* qw) {
    if (qw == nullptr) return quantize_row_q6_K(src, dst, n);
    for_each_super_block<block_q6_K>(src, dst, n, qw, quantize_block_q6_K);
}

// x = d (q - 8), q in [0, 15].
void quantize_row_q4_0_w(const float* src, void* dst, int64_t n, const float* qw) {
    if (qw == nullptr) return quantize_row_q4_0(src, dst, n);
    for_each_legacy_block<block_q4_0>(src, dst, n, qw, [](const float* x, const float* w, block_q4_0* y) {
        uint8_t L[32];
        y->d = fp32_to_fp16(symmetric_block(x, w, 8, L));
        store_nibbles(L, y->qs);
    });
}

// x = d q + m, q in [0, 15], m <= 0.
void quantize_row_q4_1_w(const float* src, void* dst, int64_t n, const float* qw) {
    if (qw == nullptr) return quantize_row_q4_1(src, dst, n);
    for_each_legacy_block<block_q4_1>(src, dst, n, qw, [](const float* x, const float* w, block_q4_1* y) {
        uint8_t L[32];
        uint8_t aux[32];
        float min = 0.0f;
        const float d = make_qkx3_quants(32, 15, x, w, L, &min, aux);
        y->d = fp32_to_fp16(d);
        y->m = fp32_to_fp16(-min);
        store_nibbles(L, y->qs);
    });
}

// x = d (q - 16), q in [0, 31].
void quantize_row_q5_0_w(const float* src, void* dst, int64_t n, const float* qw) {
    if (qw == nullptr) return quantize_row_q5_0(src, dst, n);
    for_each_legacy_block<block_q5_0>(src, dst, n, qw, [](const float* x, const float* w, block_q5_0* y) {
        uint8_t L[32];
        y->d = fp32_to_fp16(symmetric_block(x, w, 16, L));
        store_nibbles(L, y->qs);
        store_high_bits(L, y->qh);
    });
}

// x = d q + m, q in [0, 31], m <= 0.
void quantize_row_q5_1_w(const float* src, void* dst, int64_t n, const float* qw) {
    if (qw == nullptr) return quantize_row_q5_1(src, dst, n);
    for_each_legacy_block<block_q5_1>(src, dst, n, qw, [](const float* x, const float* w, block_q5_1* y) {
        uint8_t L[32];
        uint8_t aux[32];
        float min = 0.0f;
        const float d = make_qkx3_quants(32, 31, x, w, L, &min, aux);
        y->d = fp32_to_fp16(d);
        y->m = fp32_to_fp16(-min);
        store_nibbles(L, y->qs);
        store_high_bits(L, y->qh);
    });
}

}  // namespace tandem::quant::ref
