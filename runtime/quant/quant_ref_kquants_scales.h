// Scale searches shared by the K-quant reference quantizers. Each one picks,
// for one small group of weights, the scale (and for asymmetric formats the
// minimum) that minimises a weighted squared error over integer codes, the
// way ggml's reference quantizers do: start from the naive max-based scale,
// then try nearby candidate scales and keep the least-squares optimum for
// each. Internal to runtime/quant.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "runtime/common/error.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::quant::ref::detail {

// Groups whose largest magnitude is below this are stored as all zeros:
// 1/max would overflow and nothing representable is lost.
inline constexpr float kGroupMaxEps = 1e-15f;

// A row of n elements must hold whole blocks of qk.
inline void check_multiple(int64_t n, int qk) {
    TANDEM_CHECK(n % qk == 0, "row length not a multiple of the block size");
}

// Round to nearest, ties to even, as ggml's nearest_int does. Adding
// 1.5 * 2^23 pushes the fraction bits out of the float's mantissa, so the
// FPU's own round-to-nearest-even does the rounding and the integer is read
// from the low mantissa bits. It is exact for |v| < 2^22 (callers stay far
// below), needs no libm call (lrintf is one unless -fno-math-errno), and
// vectorizes.
inline int nearest_int(float v) {
    const float shifted = v + 12582912.0f;  // 1.5 * 2^23
    const auto bits = std::bit_cast<int32_t>(shifted);
    return (bits & 0x007fffff) - 0x00400000;
}

// sum x_i^2, added left to right (the order fixes the rounding).
inline float sum_of_squares(const float* x, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
    return s;
}

// The 4-bit chunk-scale code of IQ2_XXS, IQ2_XS, IQ3_XXS and IQ3_S: the
// l in [0, 15] nearest to (scale / d - 1) / 2, given id = 1 / d.
inline int iq_scale_code(float id, float scale) {
    const int l = nearest_int(0.5f * (id * scale - 1));
    return l < 0 ? 0 : (l > 15 ? 15 : l);
}

// The largest group a search takes (a super-block).
inline constexpr int kMaxGroup = 256;

// Symmetric codes in [-nmax, nmax-1], stored in L as l + nmax, minimising
// sum w_i (x_i - d l_i)^2: the codes of the 19 inverse scales
// -(nmax + 0.1 t) / max (max the signed extreme, t = -9..9) with the
// largest sumlx^2 / suml2, d = sumlx / suml2. Returns d (0 for an all-zero
// group). Without w the weights are x^2 (rmse_type 1, what Q6_K uses).
float make_qx_quants(int n, int nmax, const float* x, int8_t* L, const float* w);
float make_qx_quants(int n, int nmax, const float* x, int8_t* L);

// Symmetric 3-bit-style codes in [-nmax, nmax-1] (stored as l + nmax), with
// a coordinate-descent refinement of individual codes (Q3_K). Returns d.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L);

// Asymmetric codes x ~ scale * L - min with L in [0, nmax] and min >= 0
// (the minimum is subtracted, so a group that is all positive still uses
// min = 0). Searches nstep+1 candidate inverse scales
// (nmax + rmin + rdelta*i) / (max - min); use_mad weighs |err| instead of
// err^2. `aux` is scratch of n codes. Returns scale, writes *the_min.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* aux, float rmin, float rdelta, int nstep, bool use_mad);

// Positive codes (ggml's make_qp_quants): x_i >= 0 (group scales or mins)
// ~ D L_i with L_i in [0, nmax], weights w; nine trial scales
// (nmax + 0.1 t) / max, then up to five sweeps moving single codes while
// sumlx^2 / suml2 improves. Codes are kept as uint8_t as ggml keeps them.
// Returns D.
float make_qp_quants(int n, int nmax, const float* x, uint8_t* L, const float* w);

// 256 2-bit codes, per 128-element half: byte l holds elements l, l+32,
// l+64, l+96 at bits 0, 2, 4, 6 (Q2_K's qs, Q3_K's low bits).
void pack_2bit(const uint8_t* L, uint8_t* qs);

// A super-block's codes into its block (ggml's layouts):
//  Q3_K: L in [0, 7]; bit 2 of element j to hmask[j % 32] bit j / 32, the
//        low 2 bits through pack_2bit.
//  Q4_K: L in [0, 15]; byte l of each 32-byte chunk holds element l (low
//        nibble) and l+32 (high) of a 64-element pair of groups.
//  Q5_K: L in [0, 31]; low nibbles as Q4_K; bit 4 of element 64p+l to qh[l]
//        bit 2p, of element 64p+32+l to qh[l] bit 2p+1.
//  Q6_K: L in [0, 63]; per 128-half, ql[l] the low nibbles of elements l
//        and l+64, ql[l+32] of l+32 and l+96; qh[l] the top 2 bits of l,
//        l+32, l+64, l+96 at bits 0, 2, 4, 6.
void pack_q3_K(const int8_t* L, block_q3_K& y);
void pack_q4_K(const uint8_t* L, block_q4_K& y);
void pack_q5_K(const uint8_t* L, block_q5_K& y);
void pack_q6_K(const int8_t* L, block_q6_K& y);

// Q4_K / Q5_K pack eight 6-bit scales and eight 6-bit mins in 12 bytes:
// bytes 0-3 hold scales 0-3 (low 6 bits) and the top 2 bits of scales 4-7;
// bytes 4-7 hold mins 0-3 and the top 2 bits of mins 4-7; bytes 8-11 hold
// the low nibbles of scales 4-7 (low half) and mins 4-7 (high half).
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = static_cast<uint8_t>((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// The inverse of get_scale_min_k4 for all eight pairs; ls, lm in [0, 63].
void set_scale_mins_k4(const uint8_t* ls, const uint8_t* lm, uint8_t* q);

// Q4_K / Q5_K: the codes of a super-block x against its scales as they
// will be decoded (the fp16 d and dmin, as floats, times each 32-group's
// 6-bit scale and min), so the scales' rounding is absorbed; a group whose
// scale decodes to 0 keeps its codes. L in [0, nmax].
void requantize_k4(const float* x, const uint8_t* scales, float d, float dmin, int nmax, uint8_t* L);

// Q3_K: sixteen 6-bit scales (stored with +32 offset) in 12 bytes. Scale j
// has its low nibble in byte j (j < 8, low half) or byte j-8 (high half),
// and its top 2 bits in byte 8 + j%4 at bit 2*(j/4).
inline int get_scale_q3_K(int j, const uint8_t* s) {
    const int lo = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
    const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

}  // namespace tandem::quant::ref::detail
