// Quantizers of the 4-bit non-linear formats IQ4_NL and IQ4_XS (importance
// weighted) and of MXFP4, byte for byte what ggml's quantize_iq4_nl,
// quantize_iq4_xs and quantize_mxfp4 write for one row (same float
// operations in the same order; see quant_ref.h).
//
// IQ4_NL / IQ4_XS, per block of 32 weights x (IQ4_XS: 8 of them in a
// super-block of 256, sigma2 taken over the super-block):
//  * w_i = qw_i * sqrt(sigma2 + x_i^2), sigma2 = 2 sum(x^2) / size
//    (w_i = x_i^2 without qw).
//  * codes: q_i = the table value nearest to x_i / d (kIq4nlValues, ties to
//    the upper one); for a trial d the least-squares scale is
//    sumqx / sumq2 (sums of w q x and w q^2).
//  * the block scale starts from d = max / -127 (max the signed extreme,
//    which then maps to the table's -127) and tries the 15 inverse scales
//    (t - 127) / max, t = -7..7, keeping the one with the largest
//    sumqx^2 / sumq2.
//  * IQ4_NL stores that scale as fp16 and re-picks the codes at 1/scale.
//    IQ4_XS stores d = -max_scale / 32 (max_scale the block scale of the
//    largest magnitude) and 6-bit block scales l = round(scale / d) in
//    -32..31 (stored + 32), and re-picks the codes at 1 / (d l).
// MXFP4, per block of 32: an E8M0 exponent e = floor(log2(amax)) - 2 + 127
// (so amax / 2^(e-127) < 8, the range of E2M1 being +-6) and each code the
// E2M1 value nearest to x / 2^(e-127) (the first of equals in table
// order).
#include <cmath>
#include <cstring>

#include "runtime/common/error.h"
#include "runtime/quant/fp16.h"
#include "runtime/quant/iq_tables.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_ref.h"
#include "runtime/quant/quant_ref_element.h"
#include "runtime/quant/quant_ref_kquants_scales.h"

namespace tandem::quant::ref {
namespace {

using detail::nearest_int;

constexpr int kBlock = 32;
constexpr int kTries = 7;               // trial scales t = -7..7
constexpr float kBlockMaxEps = 1e-15f;  // blocks below this get scale 0

// The table, nearest code and weighted sums are IQ4_NL's row conversion's
// too, shared with the CUDA KV cache (quant_ref_element.h).
using element::iq4nl_table;
using element::iq4nl_weighted_sums;

// sigma2 = 2 sum(x^2) / n.
float sigma2_of(const float* x, int n) {
    float sigma2 = 0;
    for (int j = 0; j < n; ++j) sigma2 += x[j] * x[j];
    sigma2 *= 2.f / static_cast<float>(n);
    return sigma2;
}

// The least-squares scale of one block of 32 (0 for a block below eps).
float block_scale(const float* xb, const float* qw, float sigma2) {
    float weight[kBlock];
    for (int j = 0; j < kBlock; ++j) weight[j] = qw ? qw[j] * std::sqrt(sigma2 + xb[j] * xb[j]) : xb[j] * xb[j];
    float amax = 0, max = 0;
    for (int j = 0; j < kBlock; ++j) {
        const float ax = std::fabs(xb[j]);
        if (ax > amax) {
            amax = ax;
            max = xb[j];
        }
    }
    if (amax < kBlockMaxEps) return 0;
    float sumqx, sumq2;
    iq4nl_weighted_sums(xb, weight, 1 / (-max / iq4nl_table(0)), &sumqx, &sumq2);
    float d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int t = -kTries; t <= kTries; ++t) {
        const float id = static_cast<float>(t + iq::kIq4nlValues[0]) / max;
        iq4nl_weighted_sums(xb, weight, id, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

// Codes of n weights at inverse scale id, packed two a byte: element j
// of each 32 in the low nibble of byte j, element j + 16 in the high one.
void pack_codes(const float* x, int n, const float* ids, uint8_t* qs) {
    for (int b = 0; b < n / kBlock; ++b) element::iq4nl_pack(x + kBlock * b, ids[b], qs + kBlock / 2 * b);
}

void quantize_block_iq4_nl(const float* x, const float* qw, block_iq4_nl* y) {
    const float scale = block_scale(x, qw, sigma2_of(x, kBlock));
    y->d = fp32_to_fp16(scale);
    const float id = scale ? 1 / scale : 0;
    pack_codes(x, kBlock, &id, y->qs);
}

void quantize_block_iq4_xs(const float* x, const float* qw, block_iq4_xs* y) {
    constexpr int kBlocks = kQK_K / kBlock;
    const float sigma2 = sigma2_of(x, kQK_K);
    float scales[kBlocks];
    float amax_scale = 0, max_scale = 0;
    for (int ib = 0; ib < kBlocks; ++ib) {
        scales[ib] = block_scale(x + kBlock * ib, qw ? qw + kBlock * ib : nullptr, sigma2);
        const float abs_d = std::fabs(scales[ib]);
        if (abs_d > amax_scale) {
            amax_scale = abs_d;
            max_scale = scales[ib];
        }
    }
    const float d = -max_scale / 32;
    y->d = fp32_to_fp16(d);
    const float id = d ? 1 / d : 0.f;
    float ids[kBlocks];
    y->scales_h = 0;
    std::memset(y->scales_l, 0, sizeof y->scales_l);
    for (int ib = 0; ib < kBlocks; ++ib) {
        int l = nearest_int(id * scales[ib]);
        l = l < -32 ? -32 : (l > 31 ? 31 : l);
        const float dl = d * static_cast<float>(l);
        ids[ib] = dl ? 1 / dl : 0.f;
        const unsigned stored = static_cast<unsigned>(l + 32);
        y->scales_l[ib / 2] |= static_cast<uint8_t>((stored & 0xF) << (4 * (ib % 2)));
        y->scales_h |= static_cast<uint16_t>((stored >> 4) << (2 * ib));
    }
    pack_codes(x, kQK_K, ids, y->qs);
}

// Index of the E2M1 value (times the half scale e) nearest to x, the
// first of equals in table order.
int nearest_mxfp4(float x, float e) {
    int best = 0;
    float best_err = std::fabs(static_cast<float>(iq::kMxfp4Values[0]) * e - x);
    for (int i = 1; i < 16; ++i) {
        const float err = std::fabs(static_cast<float>(iq::kMxfp4Values[i]) * e - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

// floor(log2(amax)) - 2 + 127 as ggml computes it (libm's log2f). Below
// 2^-125 the value is negative; ggml's conversion to uint8_t then keeps the
// low byte of the int, as this does.
uint8_t mxfp4_exponent(float amax) {
    if (!(amax > 0.0f)) return 0;
    const float e = std::floor(std::log2(amax)) - 2 + 127;
    return static_cast<uint8_t>(static_cast<int>(e));
}

void quantize_block_mxfp4(const float* x, block_mxfp4* y) {
    float amax = 0.0f;
    for (int j = 0; j < kQK_MXFP4; ++j) {
        if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
    }
    y->e = mxfp4_exponent(amax);
    const float d = iq::e8m0_half(y->e);
    for (int j = 0; j < kQK_MXFP4 / 2; ++j) {
        const int lo = nearest_mxfp4(x[j], d);
        const int hi = nearest_mxfp4(x[kQK_MXFP4 / 2 + j], d);
        y->qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
}

// ggml's quantize_row_iq4_nl_impl with ntry -1 and no importance weights.
void quantize_block_iq4_nl_plain(const float* x, const float*, block_iq4_nl* y) { element::ref_block(x, *y); }

template <class Block, int kSize, void (*QuantizeBlock)(const float*, const float*, Block*)>
void quantize_row(const float* src, void* dst, int64_t n, const float* qw) {
    TANDEM_CHECK(n % kSize == 0, "IQ4 row length must be a multiple of the block size");
    auto* y = static_cast<Block*>(dst);
    for (int64_t i = 0; i < n / kSize; ++i) QuantizeBlock(src + kSize * i, qw ? qw + kSize * i : nullptr, y + i);
}

}  // namespace

// Without qw both use w = x^2 and the same 15 trial scales, as ggml's
// quantize_iq4_nl / quantize_iq4_xs do.
void quantize_row_iq4_nl_w(const float* src, void* dst, int64_t n, const float* qw) {
    quantize_row<block_iq4_nl, kQK4_NL, quantize_block_iq4_nl>(src, dst, n, qw);
}

void quantize_row_iq4_nl_plain(const float* src, void* dst, int64_t n) {
    quantize_row<block_iq4_nl, kQK4_NL, quantize_block_iq4_nl_plain>(src, dst, n, nullptr);
}

void quantize_row_iq4_xs_w(const float* src, void* dst, int64_t n, const float* qw) {
    quantize_row<block_iq4_xs, kQK_K, quantize_block_iq4_xs>(src, dst, n, qw);
}

// MXFP4 has no importance weights (ggml's quantize_mxfp4 ignores them).
void quantize_row_mxfp4(const float* src, void* dst, int64_t n) {
    TANDEM_CHECK(n % kQK_MXFP4 == 0, "MXFP4 row length must be a multiple of 32");
    auto* y = static_cast<block_mxfp4*>(dst);
    for (int64_t i = 0; i < n / kQK_MXFP4; ++i) quantize_block_mxfp4(src + kQK_MXFP4 * i, y + i);
}

}  // namespace tandem::quant::ref
