// Reference quantize/dequantize for the 256-element K-quants. Every layout
// here must decode ggml's files bit for bit, so the element order of each
// dequantizer follows ggml-quants.c exactly; the quantizers use the scale
// searches of quant_ref_kquants_scales.h and produce the same bytes as
// ggml's reference quantizers (checked against llama.cpp-written files),
// except that integer sub-block scales are clamped to their field's range
// where ggml relies on the search never leaving it.
//
// Common shape: a 256-weight super-block is cut into 16 groups of 16 (Q2_K,
// Q3_K, Q6_K) or 8 groups of 32 (Q4_K, Q5_K); each group has a small integer
// scale (and min) that is itself quantized against one fp16 super-scale.
// Codes are interleaved in 128-element halves so that SIMD code extracts
// 32 consecutive weights with one shift and one mask:
//  * 2-bit fields (Q2_K qs, Q3_K low bits, Q6_K high bits): byte l of a
//    32-byte chunk holds elements l, l+32, l+64, l+96 at bits 0, 2, 4, 6.
//  * 4-bit fields (Q4_K/Q5_K qs): byte l of a 32-byte chunk holds elements
//    l (low nibble) and l+32 (high nibble) of a 64-element pair of groups.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/common/error.h"
#include "runtime/quant/fp16.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_ref.h"
#include "runtime/quant/quant_ref_kquants_scales.h"

namespace tandem::quant::ref {

using detail::get_scale_min_k4;
using detail::get_scale_q3_K;
using detail::nearest_int;

namespace {

void check_multiple(int64_t n) { TANDEM_CHECK(n % kQK_K == 0, "row length not a multiple of 256 (K-quant block)"); }

// Shared by Q4_K and Q5_K: per-group asymmetric search with ggml's weights
// (rms of the super-block's group plus |x|: large weights count more, but
// no weight is zero), then the 6-bit quantization of scales and mins.
// Writes d, dmin, the 12 scale bytes, and the codes L (0..nmax).
void quantize_k4_scales(const float* x, int nmax, float rmin, float rdelta, int nstep, fp16_bits* d_out,
                        fp16_bits* dmin_out, uint8_t* scales_out, uint8_t* L) {
    float scales[8];
    float mins[8];
    float weights[32];
    uint8_t aux[32];
    float max_scale = 0.0f;
    float max_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
        const float* xg = x + 32 * j;
        float sum_x2 = 0.0f;
        for (int l = 0; l < 32; ++l) sum_x2 += xg[l] * xg[l];
        const float av_x = std::sqrt(sum_x2 / 32.0f);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xg[l]);
        scales[j] = detail::make_qkx2_quants(32, nmax, xg, weights, L + 32 * j, &mins[j], aux, rmin, rdelta, nstep,
                                             false);
        max_scale = std::max(max_scale, scales[j]);
        max_min = std::max(max_min, mins[j]);
    }
    const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    uint8_t ls[8];
    uint8_t lm[8];
    for (int j = 0; j < 8; ++j) {
        ls[j] = static_cast<uint8_t>(std::clamp(nearest_int(inv_scale * scales[j]), 0, 63));
        lm[j] = static_cast<uint8_t>(std::clamp(nearest_int(inv_min * mins[j]), 0, 63));
    }
    detail::set_scale_mins_k4(ls, lm, scales_out);
    *d_out = fp32_to_fp16(max_scale / 63.0f);
    *dmin_out = fp32_to_fp16(max_min / 63.0f);
    detail::requantize_k4(x, scales_out, fp16_to_fp32(*d_out), fp16_to_fp32(*dmin_out), nmax, L);
}

}  // namespace

// ---- Q2_K: x = d*sc*q - dmin*m, q in [0,3], 4-bit sc and m per 16 --------------

void quantize_row_q2_K(const float* src, void* dst, int64_t n) {
    check_multiple(n);
    auto* y = static_cast<block_q2_K*>(dst);
    constexpr float kQ4Scale = 15.0f;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        const float* x = src + i * kQK_K;
        uint8_t L[kQK_K];
        uint8_t aux[16];
        float weights[16];
        float scales[16];
        float mins[16];
        float max_scale = 0.0f;
        float max_min = 0.0f;
        for (int j = 0; j < 16; ++j) {
            for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
            // Absolute-error criterion (use_mad): with only 4 levels the
            // squared error over-fits the outliers.
            scales[j] = detail::make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], aux, -0.5f, 0.1f,
                                                 15, true);
            max_scale = std::max(max_scale, scales[j]);
            max_min = std::max(max_min, mins[j]);
        }
        std::memset(y[i].scales, 0, sizeof(y[i].scales));
        y[i].d = 0;
        y[i].dmin = 0;
        if (max_scale > 0.0f) {
            const float iscale = kQ4Scale / max_scale;
            for (int j = 0; j < 16; ++j) {
                y[i].scales[j] = static_cast<uint8_t>(std::clamp(nearest_int(iscale * scales[j]), 0, 15));
            }
            y[i].d = fp32_to_fp16(max_scale / kQ4Scale);
        }
        if (max_min > 0.0f) {
            const float iscale = kQ4Scale / max_min;
            for (int j = 0; j < 16; ++j) {
                y[i].scales[j] |= static_cast<uint8_t>(std::clamp(nearest_int(iscale * mins[j]), 0, 15) << 4);
            }
            y[i].dmin = fp32_to_fp16(max_min / kQ4Scale);
        }
        const float d = fp16_to_fp32(y[i].d);
        const float dmin = fp16_to_fp32(y[i].dmin);
        for (int j = 0; j < 16; ++j) {
            const float dl = d * static_cast<float>(y[i].scales[j] & 0x0f);
            if (dl == 0.0f) continue;
            const float dm = dmin * static_cast<float>(y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                L[16 * j + ii] = static_cast<uint8_t>(std::clamp(nearest_int((x[16 * j + ii] + dm) / dl), 0, 3));
            }
        }
        detail::pack_2bit(L, y[i].qs);
    }
}

void dequantize_row_q2_K(const void* src, float* dst, int64_t n) {
    check_multiple(n);
    const auto* x = static_cast<const block_q2_K*>(src);
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        const float d = fp16_to_fp32(x[i].d);
        const float dmin = fp16_to_fp32(x[i].dmin);
        const uint8_t* q = x[i].qs;
        float* y = dst + i * kQK_K;
        int is = 0;
        // Groups come in the order the shifts visit them: for each 128-half,
        // shift 0 gives groups (l, l+16 of bytes 0..31), then shift 2, ...
        for (int half = 0; half < kQK_K; half += 128) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int part = 0; part < 2; ++part) {
                    const uint8_t sc = x[i].scales[is++];
                    const float dl = d * static_cast<float>(sc & 0x0f);
                    const float ml = dmin * static_cast<float>(sc >> 4);
                    for (int l = 0; l < 16; ++l) {
                        *y++ = dl * static_cast<float>((q[l + 16 * part] >> shift) & 3) - ml;
                    }
                }
            }
            q += 32;
        }
    }
}

// ---- Q3_K: x = d*(sc-32)*(q-4), q in [0,7], 6-bit sc per 16 -----------------------

void quantize_row_q3_K(const float* src, void* dst, int64_t n) {
    check_multiple(n);
    auto* y = static_cast<block_q3_K*>(dst);
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        const float* x = src + i * kQK_K;
        int8_t L[kQK_K];
        float scales[16];
        float max_scale = 0.0f;
        float amax = 0.0f;
        for (int j = 0; j < 16; ++j) {
            scales[j] = detail::make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            const float a = std::fabs(scales[j]);
            if (a > amax) {
                amax = a;
                max_scale = scales[j];
            }
        }
        std::memset(y[i].scales, 0, sizeof(y[i].scales));
        y[i].d = 0;
        if (max_scale != 0.0f) {
            // Signed 6-bit scales: the largest-magnitude one maps to -32.
            const float iscale = -32.0f / max_scale;
            for (int j = 0; j < 16; ++j) {
                int l = std::clamp(nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8) {
                    y[i].scales[j] = static_cast<uint8_t>(l & 0x0f);
                } else {
                    y[i].scales[j - 8] |= static_cast<uint8_t>((l & 0x0f) << 4);
                }
                l >>= 4;
                y[i].scales[j % 4 + 8] |= static_cast<uint8_t>(l << (2 * (j / 4)));
            }
            y[i].d = fp32_to_fp16(1.0f / iscale);
        }
        const float d_all = fp16_to_fp32(y[i].d);
        for (int j = 0; j < 16; ++j) {
            const float dl = d_all * static_cast<float>(get_scale_q3_K(j, y[i].scales));
            if (dl == 0.0f) continue;  // codes from make_q3_quants stay (their value is irrelevant)
            for (int ii = 0; ii < 16; ++ii) {
                L[16 * j + ii] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + ii] / dl), -4, 3) + 4);
            }
        }
        detail::pack_q3_K(L, y[i]);
    }
}

void dequantize_row_q3_K(const void* src, float* dst, int64_t n) {
    check_multiple(n);
    const auto* x = static_cast<const block_q3_K*>(src);
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        const float d_all = fp16_to_fp32(x[i].d);
        const uint8_t* q = x[i].qs;
        const uint8_t* hm = x[i].hmask;
        float* y = dst + i * kQK_K;
        int is = 0;
        uint8_t m = 1;  // hmask bit: one per 32 elements, across both halves
        for (int half = 0; half < kQK_K; half += 128) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int part = 0; part < 2; ++part) {
                    const float dl = d_all * static_cast<float>(get_scale_q3_K(is++, x[i].scales));
                    for (int l = 16 * part; l < 16 * part + 16; ++l) {
                        // A clear high bit means "subtract 4": codes are q-4 in [-4, 3].
                        const int v = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
                        *y++ = dl * static_cast<float>(v);
                    }
                }
                m = static_cast<uint8_t>(m << 1);
            }
            q += 32;
        }
    }
}

// ---- Q4_K: x = d*sc*q - dmin*m, q in [0,15], 6-bit sc and m per 32 -----------------

void quantize_row_q4_K(const float* src, void* dst, int64_t n) {
    check_multiple(n);
    auto* y = static_cast<block_q4_K*>(dst);
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        const float* x = src + i * kQK_K;
        uint8_t L[kQK_K];
        quantize_k4_scales(x, 15, -1.0f, 0.1f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
        detail::pack_q4_K(L, y[i]);
    }
}

void dequantize_row_q4_K(const void* src, float* dst, int64_t n) {
    check_multiple(n);
    const auto* x = static_cast<const block_q4_K*>(src);
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        const float d = fp16_to_fp32(x[i].d);
        const float dmin = fp16_to_fp32(x[i].dmin);
        const uint8_t* q = x[i].qs;
        float* y = dst + i * kQK_K;
        for (int is = 0; is < 8; is += 2) {
            uint8_t sc = 0;
            uint8_t m = 0;
            get_scale_min_k4(is, x[i].scales, &sc, &m);
            const float d1 = d * static_cast<float>(sc);
            const float m1 = dmin * static_cast<float>(m);
            get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * static_cast<float>(sc);
            const float m2 = dmin * static_cast<float>(m);
            for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
            q += 32;
        }
    }
}

// ---- Q5_K: as Q4_K with a fifth bit per weight in qh --------------------------------

void quantize_row_q5_K(const float* src, void* dst, int64_t n) {
    check_multiple(n);
    auto* y = static_cast<block_q5_K*>(dst);
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        const float* x = src + i * kQK_K;
        uint8_t L[kQK_K];
        quantize_k4_scales(x, 31, -0.5f, 0.1f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        detail::pack_q5_K(L, y[i]);
    }
}

void dequantize_row_q5_K(const void* src, float* dst, int64_t n) {
    check_multiple(n);
    const auto* x = static_cast<const block_q5_K*>(src);
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        const float d = fp16_to_fp32(x[i].d);
        const float dmin = fp16_to_fp32(x[i].dmin);
        const uint8_t* ql = x[i].qs;
        const uint8_t* qh = x[i].qh;
        float* y = dst + i * kQK_K;
        uint8_t u1 = 1;
        uint8_t u2 = 2;
        for (int is = 0; is < 8; is += 2) {
            uint8_t sc = 0;
            uint8_t m = 0;
            get_scale_min_k4(is, x[i].scales, &sc, &m);
            const float d1 = d * static_cast<float>(sc);
            const float m1 = dmin * static_cast<float>(m);
            get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * static_cast<float>(sc);
            const float m2 = dmin * static_cast<float>(m);
            for (int l = 0; l < 32; ++l) {
                *y++ = d1 * static_cast<float>((ql[l] & 0x0f) + ((qh[l] & u1) ? 16 : 0)) - m1;
            }
            for (int l = 0; l < 32; ++l) {
                *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
            }
            ql += 32;
            u1 = static_cast<uint8_t>(u1 << 2);
            u2 = static_cast<uint8_t>(u2 << 2);
        }
    }
}

// ---- Q6_K: x = d*sc*(q-32), q in [0,63], int8 sc per 16 -----------------------------

void quantize_row_q6_K(const float* src, void* dst, int64_t n) {
    check_multiple(n);
    auto* y = static_cast<block_q6_K*>(dst);
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        const float* x = src + i * kQK_K;
        int8_t L[kQK_K];
        float scales[16];
        float max_scale = 0.0f;
        float max_abs_scale = 0.0f;
        for (int ib = 0; ib < 16; ++ib) {
            scales[ib] = detail::make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            const float a = std::fabs(scales[ib]);
            if (a > max_abs_scale) {
                max_abs_scale = a;
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < detail::kGroupMaxEps) {
            std::memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        // Signed int8 scales, the largest-magnitude one at -128.
        const float iscale = -128.0f / max_scale;
        y[i].d = fp32_to_fp16(1.0f / iscale);
        for (int ib = 0; ib < 16; ++ib) {
            y[i].scales[ib] = static_cast<int8_t>(std::clamp(nearest_int(iscale * scales[ib]), -128, 127));
        }
        const float d = fp16_to_fp32(y[i].d);
        for (int j = 0; j < 16; ++j) {
            const float dl = d * static_cast<float>(y[i].scales[j]);
            if (dl == 0.0f) continue;
            for (int ii = 0; ii < 16; ++ii) {
                L[16 * j + ii] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + ii] / dl), -32, 31) + 32);
            }
        }
        detail::pack_q6_K(L, y[i]);
    }
}

void dequantize_row_q6_K(const void* src, float* dst, int64_t n) {
    check_multiple(n);
    const auto* x = static_cast<const block_q6_K*>(src);
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        const float d = fp16_to_fp32(x[i].d);
        float* y = dst + i * kQK_K;
        for (int h = 0; h < 2; ++h) {
            const uint8_t* ql = x[i].ql + 64 * h;
            const uint8_t* qh = x[i].qh + 32 * h;
            const int8_t* sc = x[i].scales + 8 * h;
            float* yh = y + 128 * h;
            // Two runs of 16 so each run's four scales are loop constants
            // (the scale index is l/16 + 2g for quarter g).
            for (int run = 0; run < 2; ++run) {
                const float s1 = d * static_cast<float>(sc[run + 0]);
                const float s2 = d * static_cast<float>(sc[run + 2]);
                const float s3 = d * static_cast<float>(sc[run + 4]);
                const float s4 = d * static_cast<float>(sc[run + 6]);
                for (int l = 16 * run; l < 16 * run + 16; ++l) {
                    const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                    const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                    const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                    const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                    yh[l] = s1 * static_cast<float>(q1);
                    yh[l + 32] = s2 * static_cast<float>(q2);
                    yh[l + 64] = s3 * static_cast<float>(q3);
                    yh[l + 96] = s4 * static_cast<float>(q4);
                }
            }
        }
    }
}

// ---- Q8_K: x = d*q, float d, plus sums of each 16 codes -----------------------------

void quantize_row_q8_K(const float* src, void* dst, int64_t n) {
    check_multiple(n);
    auto* y = static_cast<block_q8_K*>(dst);
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        const float* x = src + i * kQK_K;
        float amax = 0.0f;
        float max = 0.0f;
        for (int j = 0; j < kQK_K; ++j) {
            const float a = std::fabs(x[j]);
            if (a > amax) {
                amax = a;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            std::memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        // The extreme maps to -127 and the scale may be negative, as in
        // ggml; codes stay in [-127, 127] so int8 products fit int16 pairs.
        const float iscale = -127.0f / max;
        for (int j = 0; j < kQK_K; ++j) {
            y[i].qs[j] = static_cast<int8_t>(std::clamp(nearest_int(iscale * x[j]), -127, 127));
        }
        for (int j = 0; j < kQK_K / 16; ++j) {
            int sum = 0;
            for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[16 * j + ii];
            y[i].bsums[j] = static_cast<int16_t>(sum);
        }
        y[i].d = 1.0f / iscale;
    }
}

void dequantize_row_q8_K(const void* src, float* dst, int64_t n) {
    check_multiple(n);
    const auto* x = static_cast<const block_q8_K*>(src);
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        for (int j = 0; j < kQK_K; ++j) dst[i * kQK_K + j] = x[i].d * static_cast<float>(x[i].qs[j]);
    }
}

}  // namespace tandem::quant::ref
