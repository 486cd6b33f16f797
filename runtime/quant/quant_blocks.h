// Block layouts of the GGUF quantization formats, byte for byte as files
// store them. This header is the single definition shared by the CPU code
// (C++20) and the CUDA kernels (nvcc): it must stay free of anything either
// compiler cannot read (no <vector>, no exceptions, no CUDA types).
//
// Half-precision fields are kept as raw uint16_t bit patterns so that no
// compiler-specific half type leaks into the layout; each side converts with
// its own intrinsics (fp16.h on the host, __half2float on the device).
#pragma once

#include <cstdint>

namespace tandem::quant {

using fp16_bits = uint16_t;  // IEEE 754 binary16, stored as bits
using bf16_bits = uint16_t;  // bfloat16, the top half of a float32

// Legacy formats: 32 weights per block, one scale (and for *_1 a minimum).
inline constexpr int kQK4_0 = 32;
inline constexpr int kQK4_1 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK5_1 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK8_1 = 32;

// K-quants: 256-weight super-blocks split into 16 or 8 sub-blocks whose
// scales are themselves quantized against one or two fp16 super-scales.
inline constexpr int kQK_K = 256;
inline constexpr int kKScaleSize = 12;  // 8 sub-block scales + 8 mins, 6 bits each

// x = d * (q - 8), q in [0, 15]; element j in the low nibble of qs[j],
// element j + 16 in the high nibble.
struct block_q4_0 {
    fp16_bits d;
    uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(block_q4_0) == 2 + kQK4_0 / 2, "block_q4_0 must be 18 bytes");

// x = d * q + m, q in [0, 15]; same nibble order as q4_0.
struct block_q4_1 {
    fp16_bits d;
    fp16_bits m;
    uint8_t qs[kQK4_1 / 2];
};
static_assert(sizeof(block_q4_1) == 2 * 2 + kQK4_1 / 2, "block_q4_1 must be 20 bytes");

// x = d * (q - 16), q in [0, 31]; bit 4 of element j is bit j of qh.
struct block_q5_0 {
    fp16_bits d;
    uint8_t qh[4];
    uint8_t qs[kQK5_0 / 2];
};
static_assert(sizeof(block_q5_0) == 2 + 4 + kQK5_0 / 2, "block_q5_0 must be 22 bytes");

// x = d * q + m, q in [0, 31].
struct block_q5_1 {
    fp16_bits d;
    fp16_bits m;
    uint8_t qh[4];
    uint8_t qs[kQK5_1 / 2];
};
static_assert(sizeof(block_q5_1) == 2 * 2 + 4 + kQK5_1 / 2, "block_q5_1 must be 24 bytes");

// x = d * q, q in [-127, 127].
struct block_q8_0 {
    fp16_bits d;
    int8_t qs[kQK8_0];
};
static_assert(sizeof(block_q8_0) == 2 + kQK8_0, "block_q8_0 must be 34 bytes");

// Activation format: s = d * sum(qs), kept so dot products with *_1 weights
// can fold the minimum in once per block.
struct block_q8_1 {
    fp16_bits d;
    fp16_bits s;
    int8_t qs[kQK8_1];
};
static_assert(sizeof(block_q8_1) == 2 * 2 + kQK8_1, "block_q8_1 must be 36 bytes");

// 2.625 bits per weight: 16 sub-blocks of 16; each scales byte holds a 4-bit
// scale (low nibble) and a 4-bit minimum (high nibble).
struct block_q2_K {
    uint8_t scales[kQK_K / 16];
    uint8_t qs[kQK_K / 4];
    fp16_bits d;
    fp16_bits dmin;
};
static_assert(sizeof(block_q2_K) == 2 * 2 + kQK_K / 16 + kQK_K / 4, "block_q2_K must be 84 bytes");

// 3.4375 bits per weight: low 2 bits in qs, high bit in hmask, 16 signed
// 6-bit sub-block scales packed into 12 bytes.
struct block_q3_K {
    uint8_t hmask[kQK_K / 8];
    uint8_t qs[kQK_K / 4];
    uint8_t scales[12];
    fp16_bits d;
};
static_assert(sizeof(block_q3_K) == 2 + kQK_K / 4 + kQK_K / 8 + 12, "block_q3_K must be 110 bytes");

// 4.5 bits per weight: 8 sub-blocks of 32, 6-bit scales and mins.
struct block_q4_K {
    fp16_bits d;
    fp16_bits dmin;
    uint8_t scales[kKScaleSize];
    uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(block_q4_K) == 2 * 2 + kKScaleSize + kQK_K / 2, "block_q4_K must be 144 bytes");

// 5.5 bits per weight: as q4_K plus one high bit per weight in qh.
struct block_q5_K {
    fp16_bits d;
    fp16_bits dmin;
    uint8_t scales[kKScaleSize];
    uint8_t qh[kQK_K / 8];
    uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(block_q5_K) == 2 * 2 + kKScaleSize + kQK_K / 8 + kQK_K / 2,
              "block_q5_K must be 176 bytes");

// 6.5625 bits per weight: low 4 bits in ql, high 2 in qh, 16 int8 scales.
struct block_q6_K {
    uint8_t ql[kQK_K / 2];
    uint8_t qh[kQK_K / 4];
    int8_t scales[kQK_K / 16];
    fp16_bits d;
};
static_assert(sizeof(block_q6_K) == 2 + kQK_K / 16 + 3 * kQK_K / 4, "block_q6_K must be 210 bytes");

// Activation format for K-quant dot products: float scale, and the sums of
// each group of 16 so the minimum terms cost one multiply per group.
struct block_q8_K {
    float d;
    int8_t qs[kQK_K];
    int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(block_q8_K) == 4 + kQK_K + kQK_K / 16 * 2, "block_q8_K must be 292 bytes");

// ---- i-quants and MXFP4 -------------------------------------------------------------------
// The i-quants store, for each group of 8 (IQ3: 4) weights, an index into a
// lattice grid (iq_tables.h) of magnitudes, 7 sign bits (the 8th sign makes
// the count of minus signs even, except in IQ2_S and IQ3_S, which store all
// 8), and a few-bit scale per 16 or 32 weights against one fp16 scale per
// 256. IQ4_NL/IQ4_XS and MXFP4 store 4-bit indices into a table of 16
// values (kIq4nlValues, kMxfp4Values).
inline constexpr int kQK4_NL = 32;
inline constexpr int kQK_MXFP4 = 32;

// 2.0625 bits per weight. qs[4c..4c+3] for 32-element chunk c: bytes 0-3
// of the first 32-bit word are grid indices (iq2xxs grid), the second word
// holds four 7-bit sign sets (bits 0-27) and the chunk's 4-bit scale s
// (bits 28-31): x = d * (0.5 + s) / 4 * grid * sign.
struct block_iq2_xxs {
    fp16_bits d;
    uint16_t qs[kQK_K / 8];
};
static_assert(sizeof(block_iq2_xxs) == 2 + kQK_K / 4, "block_iq2_xxs must be 66 bytes");

// 2.3125 bits per weight: qs[g] a 9-bit grid index (iq2xs grid) and 7 sign
// bits for group g of 8; scales[c] two 4-bit scales, one per 16 elements.
struct block_iq2_xs {
    fp16_bits d;
    uint16_t qs[kQK_K / 8];
    uint8_t scales[kQK_K / 32];
};
static_assert(sizeof(block_iq2_xs) == 2 + kQK_K / 4 + kQK_K / 32, "block_iq2_xs must be 74 bytes");

// 2.5625 bits per weight: qs[0..31] low 8 bits of 10-bit indices (iq2s
// grid), qs[32..63] 8 sign bits per group, qh[c] the top 2 bits of chunk
// c's four indices, scales[c] two 4-bit scales (per 16 elements).
struct block_iq2_s {
    fp16_bits d;
    uint8_t qs[kQK_K / 4];
    uint8_t qh[kQK_K / 32];
    uint8_t scales[kQK_K / 32];
};
static_assert(sizeof(block_iq2_s) == 2 + kQK_K / 4 + kQK_K / 16, "block_iq2_s must be 82 bytes");

// 3.0625 bits per weight: qs[0..63] grid indices (iq3xxs grid, 4 weights
// each), then per chunk a 32-bit word of four 7-bit sign sets and a 4-bit
// scale: x = d * (0.5 + s) / 2 * grid * sign.
struct block_iq3_xxs {
    fp16_bits d;
    uint8_t qs[3 * kQK_K / 8];
};
static_assert(sizeof(block_iq3_xxs) == 2 + 3 * kQK_K / 8, "block_iq3_xxs must be 98 bytes");

// 3.4375 bits per weight: 9-bit indices (iq3s grid; low 8 bits in qs, the
// 9th in qh), 8 sign bits per group of 8, and a 4-bit scale per chunk:
// x = d * (1 + 2 s) * grid * sign.
struct block_iq3_s {
    fp16_bits d;
    uint8_t qs[kQK_K / 4];
    uint8_t qh[kQK_K / 32];
    uint8_t signs[kQK_K / 8];
    uint8_t scales[kQK_K / 64];
};
static_assert(sizeof(block_iq3_s) == 2 + 13 * (kQK_K / 32) + kQK_K / 64, "block_iq3_s must be 110 bytes");

// 1.5625 bits per weight: 11-bit indices into the iq1s grid (values -1, 0,
// 1), qh[c]: the top 3 bits of chunk c's four indices (bits 0-11), its
// 3-bit scale s (bits 12-14) and the sign of its shift (bit 15):
// x = d * (2 s + 1) * (grid +- 1/8).
struct block_iq1_s {
    fp16_bits d;
    uint8_t qs[kQK_K / 8];
    uint16_t qh[kQK_K / 32];
};
static_assert(sizeof(block_iq1_s) == 2 + kQK_K / 8 + kQK_K / 16, "block_iq1_s must be 50 bytes");

// 1.75 bits per weight: as IQ1_S but a shift sign per group of 8 (bit 3
// of each nibble of qh), a 3-bit scale per 16 elements, and the block's
// fp16 scale spread over the top nibbles of the four 16-bit scale words.
struct block_iq1_m {
    uint8_t qs[kQK_K / 8];
    uint8_t qh[kQK_K / 16];
    uint8_t scales[kQK_K / 32];
};
static_assert(sizeof(block_iq1_m) == kQK_K / 8 + kQK_K / 16 + kQK_K / 32, "block_iq1_m must be 56 bytes");

// 4.5 bits per weight: x = d * kIq4nlValues[q], nibbles as in q4_0.
struct block_iq4_nl {
    fp16_bits d;
    uint8_t qs[kQK4_NL / 2];
};
static_assert(sizeof(block_iq4_nl) == 2 + kQK4_NL / 2, "block_iq4_nl must be 18 bytes");

// 4.25 bits per weight: 6-bit scales (low 4 bits in scales_l, high 2 in
// scales_h) minus 32, per 32 elements: x = d * (s - 32) * kIq4nlValues[q].
struct block_iq4_xs {
    fp16_bits d;
    uint16_t scales_h;
    uint8_t scales_l[kQK_K / 64];
    uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(block_iq4_xs) == 2 + 2 + kQK_K / 64 + kQK_K / 2, "block_iq4_xs must be 136 bytes");

// 4.25 bits per weight: an E8M0 exponent e and 32 E2M1 values, nibbles as
// in q4_0: x = 2^(e - 128) * kMxfp4Values[q] (the table holds twice the
// E2M1 values, so the scale is half of 2^(e - 127)).
struct block_mxfp4 {
    uint8_t e;
    uint8_t qs[kQK_MXFP4 / 2];
};
static_assert(sizeof(block_mxfp4) == 1 + kQK_MXFP4 / 2, "block_mxfp4 must be 17 bytes");

}  // namespace tandem::quant
