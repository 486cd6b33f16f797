// Scalar reference dot products: the definition every SIMD kernel is tested
// against, and the fallback on CPUs without AVX2.
//
// The arithmetic follows ggml's reference kernels so the numbers match
// llama.cpp: per block, an exact integer sum of weight code times
// activation code, then one float combination with the block scales
// (d_w * d_a * isum, plus the minimum term for the *_1 and K formats, which
// uses the activation's precomputed block sums: Q8_1's s, Q8_K's bsums).
// Float formats accumulate in double here so the reference is the most
// accurate of the implementations; the SIMD versions agree to within
// summation-order rounding.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/fp16.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_element.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;

float h2f(fp16_bits h) { return fp16_to_fp32(h); }

// Float formats in the order of the AVX2 kernel (FloatDot in
// vec_dot_avx2.cpp), which is llama.cpp's order for F16: two sets of eight
// lanes over steps of 16 elements (elements i..i+7 and i+8..i+15), one
// fused multiply-add per element, a last step of 8 into the first set, the
// sets added lane by lane and the lanes summed as ((0+4)+(2+6)) +
// ((1+5)+(3+7)), then any remaining elements one by one.
template <class T, float (*Widen)(T)>
float dot_float_lanes(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const T*>(w);
    const auto* y = static_cast<const T*>(a);
    float acc0[8] = {}, acc1[8] = {};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int l = 0; l < 8; ++l) {
            acc0[l] = std::fma(Widen(x[i + l]), Widen(y[i + l]), acc0[l]);
            acc1[l] = std::fma(Widen(x[i + 8 + l]), Widen(y[i + 8 + l]), acc1[l]);
        }
    }
    for (; i + 8 <= n; i += 8) {
        for (int l = 0; l < 8; ++l) acc0[l] = std::fma(Widen(x[i + l]), Widen(y[i + l]), acc0[l]);
    }
    float v[8];
    for (int l = 0; l < 8; ++l) v[l] = acc0[l] + acc1[l];
    float sum = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
    for (; i < n; ++i) sum += Widen(x[i]) * Widen(y[i]);
    return sum;
}

inline float widen_f32(float v) { return v; }
inline float widen_f16(fp16_bits v) { return fp16_to_fp32(v); }
inline float widen_bf16(bf16_bits v) { return bf16_to_fp32(v); }

float dot_f32(int64_t n, const void* w, const void* a) { return dot_float_lanes<float, widen_f32>(n, w, a); }
float dot_f16(int64_t n, const void* w, const void* a) { return dot_float_lanes<fp16_bits, widen_f16>(n, w, a); }
float dot_bf16(int64_t n, const void* w, const void* a) { return dot_float_lanes<bf16_bits, widen_bf16>(n, w, a); }

// ---- 32-element formats ----------------------------------------------------------------
// Each block decoded to 32 signed integer values (the offset already
// subtracted, for Q4_1/Q5_1 the unsigned code), its weight scale, and the
// weight minimum for Q4_1/Q5_1. The float order is llama.cpp's on x86:
// Q4_0 (repacked there) one fused multiply-add of the block's integer total
// per block; the others eight lanes of four consecutive elements, one fused
// multiply-add per lane and block, lanes summed as ((0+4)+(2+6)) +
// ((1+5)+(3+7)), and for Q4_1/Q5_1 the minimum terms m * s in a scalar
// chain of fused multiply-adds added last.
struct LegacyBlock {
    int v[32];
    float d = 0.0f, m = 0.0f;
};

void decode(const block_q4_0& b, LegacyBlock& o) {
    for (int j = 0; j < 16; ++j) {
        o.v[j] = (b.qs[j] & 0xF) - 8;
        o.v[j + 16] = (b.qs[j] >> 4) - 8;
    }
    o.d = h2f(b.d);
}
void decode(const block_q4_1& b, LegacyBlock& o) {
    for (int j = 0; j < 16; ++j) {
        o.v[j] = b.qs[j] & 0xF;
        o.v[j + 16] = b.qs[j] >> 4;
    }
    o.d = h2f(b.d);
    o.m = h2f(b.m);
}
void decode(const block_q5_0& b, LegacyBlock& o) {
    for (int j = 0; j < 32; ++j) o.v[j] = element::q5_value(b.qh, b.qs, j) - 16;
    o.d = h2f(b.d);
}
void decode(const block_q5_1& b, LegacyBlock& o) {
    for (int j = 0; j < 32; ++j) o.v[j] = element::q5_value(b.qh, b.qs, j);
    o.d = h2f(b.d);
    o.m = h2f(b.m);
}
void decode(const block_q8_0& b, LegacyBlock& o) {
    for (int j = 0; j < 32; ++j) o.v[j] = b.qs[j];
    o.d = h2f(b.d);
}

inline float scale_of(const block_q8_0& y) { return h2f(y.d); }
inline float scale_of(const block_q8_1& y) { return h2f(y.d); }
inline float sum_of(const block_q8_1& y) { return h2f(y.s); }

template <class Block, class Act>
float dot_legacy_lanes(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const Block*>(w);
    const auto* y = static_cast<const Act*>(a);
    constexpr bool kMin = std::is_same_v<Act, block_q8_1>;
    float acc[8] = {};
    float acc_min = 0.0f;
    LegacyBlock b;
    for (int64_t i = 0; i < n / 32; ++i) {
        decode(x[i], b);
        const float d = b.d * scale_of(y[i]);
        for (int l = 0; l < 8; ++l) {
            int lane = 0;
            for (int e = 4 * l; e < 4 * l + 4; ++e) lane += b.v[e] * y[i].qs[e];
            acc[l] = std::fma(d, static_cast<float>(lane), acc[l]);
        }
        if constexpr (kMin) acc_min = std::fma(b.m, sum_of(y[i]), acc_min);
    }
    return (((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))) + acc_min;
}

float dot_q4_0(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const block_q4_0*>(w);
    const auto* y = static_cast<const block_q8_0*>(a);
    float acc = 0.0f;
    LegacyBlock b;
    for (int64_t i = 0; i < n / 32; ++i) {
        decode(x[i], b);
        int total = 0;
        for (int e = 0; e < 32; ++e) total += b.v[e] * y[i].qs[e];
        acc = std::fma(static_cast<float>(total), b.d * h2f(y[i].d), acc);
    }
    return acc;
}
float dot_q4_1(int64_t n, const void* w, const void* a) { return dot_legacy_lanes<block_q4_1, block_q8_1>(n, w, a); }
float dot_q5_0(int64_t n, const void* w, const void* a) { return dot_legacy_lanes<block_q5_0, block_q8_0>(n, w, a); }
float dot_q5_1(int64_t n, const void* w, const void* a) { return dot_legacy_lanes<block_q5_1, block_q8_1>(n, w, a); }
float dot_q8_0(int64_t n, const void* w, const void* a) { return dot_legacy_lanes<block_q8_0, block_q8_0>(n, w, a); }

// ---- K-quants ----------------------------------------------------------------------------
// A super-block decoded to what the integer work needs: for each element an
// unsigned code and the signed scale of its group, and per 16-element group
// the coefficient of the activation group sum (bsums): the minimum for
// Q2_K/Q4_K/Q5_K (subtracted with dmin), offset * scale for Q3_K/Q6_K
// (subtracted inside the integer sum). Sums of code * scale * y are exact
// in int32 for every format, so only the float steps below differ between
// the orders, and those are chosen to be llama.cpp's.
struct KBlock {
    uint8_t code[kQK_K];
    int8_t scale[kQK_K];  // fits: 6-bit (Q4_K/Q5_K unsigned <= 63), signed for Q3_K/Q6_K
    int coef[16];
    float d = 0.0f, dmin = 0.0f;
    bool min_term = false;
    // How llama.cpp's single-row kernel places the offset or minimum term
    // in its lanes (see dot_k_lanes).
    enum class Lane { MinLanes, MinScalar, OffsetBsum, OffsetInline } lane = Lane::OffsetBsum;
    int inline_offset = 0;  // OffsetInline: subtracted from each code
};

void decode(const block_q2_K& b, KBlock& o) {
    for (int k = 0; k < kQK_K; ++k) {
        const element::KLowBitIndex ix = element::k_low_bit_index(k);
        o.code[k] = static_cast<uint8_t>((b.qs[ix.byte] >> ix.shift) & 3);
        o.scale[k] = static_cast<int8_t>(b.scales[ix.scale] & 0xF);
    }
    for (int g = 0; g < 16; ++g) o.coef[g] = b.scales[g] >> 4;
    o.d = h2f(b.d);
    o.dmin = h2f(b.dmin);
    o.min_term = true;
    o.lane = KBlock::Lane::MinLanes;
}

void decode(const block_q3_K& b, KBlock& o) {
    for (int k = 0; k < kQK_K; ++k) {
        const element::KLowBitIndex ix = element::k_low_bit_index(k);
        const int low = (b.qs[ix.byte] >> ix.shift) & 3;
        const int high = (b.hmask[ix.hbyte] >> ix.hbit) & 1;
        o.code[k] = static_cast<uint8_t>(low | high << 2);  // value = code - 4
        o.scale[k] = static_cast<int8_t>(element::q3_K_scale(b.scales, ix.scale));
    }
    for (int g = 0; g < 16; ++g) o.coef[g] = 4 * element::q3_K_scale(b.scales, g);
    o.d = h2f(b.d);
    o.lane = KBlock::Lane::OffsetInline;
    o.inline_offset = 4;
}

template <class Block, bool kFive>
void decode_q45(const Block& b, KBlock& o) {
    for (int sb = 0; sb < 8; ++sb) {
        int sc = 0, m = 0;
        element::q4_K_scale_min(b.scales, sb, sc, m);
        const uint8_t* qs = b.qs + 32 * (sb / 2);
        for (int l = 0; l < 32; ++l) {
            int q = (sb % 2 == 0) ? (qs[l] & 0xF) : (qs[l] >> 4);
            if constexpr (kFive) q |= ((b.qh[l] >> sb) & 1) << 4;
            o.code[32 * sb + l] = static_cast<uint8_t>(q);
            o.scale[32 * sb + l] = static_cast<int8_t>(sc);
        }
        o.coef[2 * sb] = o.coef[2 * sb + 1] = m;
    }
    o.d = h2f(b.d);
    o.dmin = h2f(b.dmin);
    o.min_term = true;
    o.lane = KBlock::Lane::MinScalar;
}
void decode(const block_q4_K& b, KBlock& o) { decode_q45<block_q4_K, false>(b, o); }
void decode(const block_q5_K& b, KBlock& o) { decode_q45<block_q5_K, true>(b, o); }

void decode(const block_q6_K& b, KBlock& o) {
    for (int k = 0; k < kQK_K; ++k) {
        const int half = k / 128, r = k % 128, quarter = r / 32, e = r % 32;
        const uint8_t lbyte = b.ql[half * 64 + e + (quarter & 1) * 32];
        const int low = quarter < 2 ? (lbyte & 0xF) : (lbyte >> 4);
        const int high = (b.qh[half * 32 + e] >> (2 * quarter)) & 3;
        o.code[k] = static_cast<uint8_t>(low | high << 4);  // value = code - 32
        o.scale[k] = b.scales[k / 16];
    }
    for (int g = 0; g < 16; ++g) o.coef[g] = 32 * b.scales[g];
    o.d = h2f(b.d);
}

// Integer sums of code * scale * y over elements [k0, k1) and the bsum
// term of groups [k0/16, k1/16).
int code_sum(const KBlock& b, const block_q8_K& y, int k0, int k1) {
    int s = 0;
    for (int k = k0; k < k1; ++k) s += b.scale[k] * b.code[k] * y.qs[k];
    return s;
}
int coef_sum(const KBlock& b, const block_q8_K& y, int k0, int k1) {
    int s = 0;
    for (int g = k0 / 16; g < k1 / 16; ++g) s += b.coef[g] * y.bsums[g];
    return s;
}

// Single rows (decode, and the last n % 4 rows of a batch) in the order of
// llama.cpp's AVX2 vec_dot: eight int32 lanes, lane l holding elements
// 4l..4l+3 of every 32-element chunk; per super-block one fused
// multiply-add per lane; lanes added as ((0+4)+(2+6)) + ((1+5)+(3+7)). The
// offset or minimum term goes where that kernel puts it (KBlock::Lane):
// into lane l through the bsums of groups 2l and 2l+1 (with its own
// multiply-add per lane for a minimum), per element inside each lane, or
// summed to one integer in a scalar accumulator added at the end.
template <class Block>
float dot_k_lanes(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const Block*>(w);
    const auto* y = static_cast<const block_q8_K*>(a);
    float acc[8] = {};
    float acc_min = 0.0f;
    KBlock b;
    using Lane = KBlock::Lane;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        decode(x[i], b);
        const float d = b.d * y[i].d;
        const float dmin = b.dmin * y[i].d;
        if (b.lane == Lane::MinScalar) {
            acc_min = std::fma(-dmin, static_cast<float>(coef_sum(b, y[i], 0, kQK_K)), acc_min);
        }
        for (int l = 0; l < 8; ++l) {
            const int corr = b.coef[2 * l] * y[i].bsums[2 * l] + b.coef[2 * l + 1] * y[i].bsums[2 * l + 1];
            int lane = 0;
            if (b.lane == Lane::OffsetBsum) lane = -corr;
            if (b.lane == Lane::MinLanes) acc[l] = std::fma(-dmin, static_cast<float>(corr), acc[l]);
            for (int c = 0; c < 8; ++c) {
                for (int k = 32 * c + 4 * l; k < 32 * c + 4 * l + 4; ++k) {
                    lane += b.scale[k] * (b.code[k] - b.inline_offset) * y[i].qs[k];
                }
            }
            acc[l] = std::fma(d, static_cast<float>(lane), acc[l]);
        }
    }
    return (((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))) + acc_min;
}

// Q3_K, Q5_K and Q6_K rows of a batch of 8 or more, as llama.cpp's tiled
// kernels compute them: per super-block v = d * total, minus dmin * the
// minimum term with one fused multiply-add (Q5_K), then one fused
// multiply-add with the activation scale.
template <class Block>
float dot_k_tiled(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const Block*>(w);
    const auto* y = static_cast<const block_q8_K*>(a);
    float acc = 0.0f;
    KBlock b;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        decode(x[i], b);
        float v = 0.0f;
        if (b.min_term) {
            const float dot = static_cast<float>(code_sum(b, y[i], 0, kQK_K)) * b.d;
            v = std::fma(-b.dmin, static_cast<float>(coef_sum(b, y[i], 0, kQK_K)), dot);
        } else {
            v = static_cast<float>(code_sum(b, y[i], 0, kQK_K) - coef_sum(b, y[i], 0, kQK_K)) * b.d;
        }
        acc = std::fma(y[i].d, v, acc);
    }
    return acc;
}

// Q2_K and Q4_K, which llama.cpp runs through repacked kernels: integer
// totals over spans of Span 32-element chunks, one fused multiply-add each
// for the scale and the minimum terms, in separate accumulators subtracted
// at the end. Span 8 (whole super-blocks) for single rows; for batch rows 2
// (Q4_K) or 4 (Q2_K).
template <class Block, int Span>
float dot_k_spans(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const Block*>(w);
    const auto* y = static_cast<const block_q8_K*>(a);
    float acc = 0.0f, acc_min = 0.0f;
    KBlock b;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        decode(x[i], b);
        const float d = b.d * y[i].d;
        const float dmin = b.dmin * y[i].d;
        for (int k0 = 0; k0 < kQK_K; k0 += 32 * Span) {
            acc = std::fma(static_cast<float>(code_sum(b, y[i], k0, k0 + 32 * Span)), d, acc);
            acc_min = std::fma(static_cast<float>(coef_sum(b, y[i], k0, k0 + 32 * Span)), dmin, acc_min);
        }
    }
    return acc - acc_min;
}

float dot_q2_K(int64_t n, const void* w, const void* a) { return dot_k_spans<block_q2_K, 8>(n, w, a); }
float dot_q3_K(int64_t n, const void* w, const void* a) { return dot_k_lanes<block_q3_K>(n, w, a); }
float dot_q4_K(int64_t n, const void* w, const void* a) { return dot_k_spans<block_q4_K, 8>(n, w, a); }
float dot_q5_K(int64_t n, const void* w, const void* a) { return dot_k_lanes<block_q5_K>(n, w, a); }
float dot_q6_K(int64_t n, const void* w, const void* a) { return dot_k_lanes<block_q6_K>(n, w, a); }
float dot_q3_K_batch(int64_t n, const void* w, const void* a) { return dot_k_tiled<block_q3_K>(n, w, a); }
float dot_q6_K_batch(int64_t n, const void* w, const void* a) { return dot_k_tiled<block_q6_K>(n, w, a); }
float dot_q2_K_batch(int64_t n, const void* w, const void* a) { return dot_k_spans<block_q2_K, 4>(n, w, a); }
float dot_q4_K_batch(int64_t n, const void* w, const void* a) { return dot_k_spans<block_q4_K, 2>(n, w, a); }
float dot_q5_K_batch(int64_t n, const void* w, const void* a) { return dot_k_tiled<block_q5_K>(n, w, a); }

}  // namespace

void dot_q2_K_batch_scalar(TANDEM_DOT_ARGS) { each_token<dot_q2_K_batch>(n, w, a, a_stride, nt, y, ldy); }
void dot_q4_K_batch_scalar(TANDEM_DOT_ARGS) { each_token<dot_q4_K_batch>(n, w, a, a_stride, nt, y, ldy); }
void dot_q3_K_batch_scalar(TANDEM_DOT_ARGS) { each_token<dot_q3_K_batch>(n, w, a, a_stride, nt, y, ldy); }
void dot_q6_K_batch_scalar(TANDEM_DOT_ARGS) { each_token<dot_q6_K_batch>(n, w, a, a_stride, nt, y, ldy); }
void dot_q5_K_batch_scalar(TANDEM_DOT_ARGS) { each_token<dot_q5_K_batch>(n, w, a, a_stride, nt, y, ldy); }


#define TANDEM_DEFINE_SCALAR(T, name) \
    void dot_##name##_scalar(TANDEM_DOT_ARGS) { each_token<dot_##name>(n, w, a, a_stride, nt, y, ldy); }
TANDEM_DOT_TYPES(TANDEM_DEFINE_SCALAR)
#undef TANDEM_DEFINE_SCALAR

}  // namespace tandem::cpu::detail
