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

}  // namespace tandem::quant
