// Dequantization of one element of one block, written once for the host
// and the device. GPU kernels give each thread its own element, so they need
// random access into a block rather than the sequential loops of the scalar
// reference; the same functions compiled for the host let CPU-only tests
// check this indexing against the reference without a GPU.
#pragma once

#include <cstdint>

#include "runtime/quant/quant_blocks.h"

#include "runtime/quant/host_device.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

#if !defined(__CUDA_ARCH__)
#include "runtime/quant/fp16.h"
#endif

namespace tandem::quant::element {

TANDEM_HOST_DEVICE float half_to_float(fp16_bits h) {
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(h));
#else
    return fp16_to_fp32(h);
#endif
}

TANDEM_HOST_DEVICE float bf16_to_float(bf16_bits h) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(static_cast<uint32_t>(h) << 16);
#else
    return bf16_to_fp32(h);
#endif
}

// Elements j and j+16 share byte qs[j]: low nibble, then high nibble.
TANDEM_HOST_DEVICE int nibble32(const uint8_t* qs, int k) {
    return k < 16 ? (qs[k] & 0xF) : (qs[k - 16] >> 4);
}

TANDEM_HOST_DEVICE uint32_t load_u32(const uint8_t* p) {
    return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
           (static_cast<uint32_t>(p[3]) << 24);
}

TANDEM_HOST_DEVICE float q4_0(const block_q4_0& b, int k) {
    return half_to_float(b.d) * static_cast<float>(nibble32(b.qs, k) - 8);
}

TANDEM_HOST_DEVICE float q4_1(const block_q4_1& b, int k) {
    return half_to_float(b.d) * static_cast<float>(nibble32(b.qs, k)) + half_to_float(b.m);
}

// Bit k of the 32-bit qh is the fifth bit of element k.
TANDEM_HOST_DEVICE int q5_value(const uint8_t* qh, const uint8_t* qs, int k) {
    return nibble32(qs, k) | static_cast<int>(((load_u32(qh) >> k) & 1u) << 4);
}

TANDEM_HOST_DEVICE float q5_0(const block_q5_0& b, int k) {
    return half_to_float(b.d) * static_cast<float>(q5_value(b.qh, b.qs, k) - 16);
}

TANDEM_HOST_DEVICE float q5_1(const block_q5_1& b, int k) {
    return half_to_float(b.d) * static_cast<float>(q5_value(b.qh, b.qs, k)) + half_to_float(b.m);
}

TANDEM_HOST_DEVICE float q8_0(const block_q8_0& b, int k) { return half_to_float(b.d) * static_cast<float>(b.qs[k]); }

TANDEM_HOST_DEVICE float q8_1(const block_q8_1& b, int k) { return half_to_float(b.d) * static_cast<float>(b.qs[k]); }

// Q2_K and Q3_K walk a super-block as two halves of 128; in each half, byte
// qs[32*half + l] holds four 2-bit values (shifts 0, 2, 4, 6) belonging to
// four groups of 32, and each group of 32 uses two sub-block scales.
struct KLowBitIndex {
    int byte;    // index into qs
    int shift;   // 0, 2, 4, 6
    int scale;   // sub-block (0..15)
    int hbyte;   // Q3_K: index into hmask
    int hbit;    // Q3_K: bit of hmask[hbyte]
};

TANDEM_HOST_DEVICE KLowBitIndex k_low_bit_index(int k) {
    const int half = k / 128;
    const int r = k % 128;
    const int group = r / 32;       // which shift
    const int second = (r % 32) / 16;
    const int l = r % 16;
    KLowBitIndex ix;
    ix.byte = half * 32 + second * 16 + l;
    ix.shift = 2 * group;
    ix.scale = half * 8 + group * 2 + second;
    ix.hbyte = second * 16 + l;
    ix.hbit = half * 4 + group;
    return ix;
}

TANDEM_HOST_DEVICE float q2_K(const block_q2_K& b, int k) {
    const KLowBitIndex ix = k_low_bit_index(k);
    const int sc = b.scales[ix.scale];
    const int q = (b.qs[ix.byte] >> ix.shift) & 3;
    return half_to_float(b.d) * static_cast<float>(sc & 0xF) * static_cast<float>(q) -
           half_to_float(b.dmin) * static_cast<float>(sc >> 4);
}

// Sixteen 6-bit scales in 12 bytes: low nibbles in bytes 0..7 (scales 8..15
// use the high nibbles), the top two bits in bytes 8..11, two per scale.
TANDEM_HOST_DEVICE int q3_K_scale(const uint8_t* scales, int is) {
    const int low = is < 8 ? (scales[is] & 0xF) : (scales[is - 8] >> 4);
    const int high = (scales[8 + is % 4] >> (2 * (is / 4))) & 3;
    return (low | (high << 4)) - 32;
}

TANDEM_HOST_DEVICE float q3_K(const block_q3_K& b, int k) {
    const KLowBitIndex ix = k_low_bit_index(k);
    const int low = (b.qs[ix.byte] >> ix.shift) & 3;
    const int q = low - (((b.hmask[ix.hbyte] >> ix.hbit) & 1) ? 0 : 4);
    return half_to_float(b.d) * static_cast<float>(q3_K_scale(b.scales, ix.scale)) * static_cast<float>(q);
}

// Q4_K/Q5_K: eight 6-bit scales and eight 6-bit mins in 12 bytes.
TANDEM_HOST_DEVICE void q4_K_scale_min(const uint8_t* s, int j, int& scale, int& min) {
    if (j < 4) {
        scale = s[j] & 63;
        min = s[j + 4] & 63;
    } else {
        scale = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// Groups of 64 share 32 bytes of qs: low nibbles are sub-block 2g, high
// nibbles sub-block 2g+1.
TANDEM_HOST_DEVICE float q4_K(const block_q4_K& b, int k) {
    const int g = k / 64;
    const int r = k % 64;
    const int sub = 2 * g + r / 32;
    const uint8_t byte = b.qs[g * 32 + r % 32];
    const int q = r < 32 ? (byte & 0xF) : (byte >> 4);
    int sc, m;
    q4_K_scale_min(b.scales, sub, sc, m);
    return half_to_float(b.d) * static_cast<float>(sc) * static_cast<float>(q) -
           half_to_float(b.dmin) * static_cast<float>(m);
}

TANDEM_HOST_DEVICE float q5_K(const block_q5_K& b, int k) {
    const int g = k / 64;
    const int r = k % 64;
    const int sub = 2 * g + r / 32;
    const uint8_t byte = b.qs[g * 32 + r % 32];
    const int low = r < 32 ? (byte & 0xF) : (byte >> 4);
    const int q = low | (((b.qh[r % 32] >> sub) & 1) << 4);
    int sc, m;
    q4_K_scale_min(b.scales, sub, sc, m);
    return half_to_float(b.d) * static_cast<float>(sc) * static_cast<float>(q) -
           half_to_float(b.dmin) * static_cast<float>(m);
}

// Q6_K: halves of 128; in each, ql holds 64 bytes (low nibbles for quarters
// 0-1, high nibbles for quarters 2-3) and qh 32 bytes (2 bits per quarter).
TANDEM_HOST_DEVICE float q6_K(const block_q6_K& b, int k) {
    const int half = k / 128;
    const int r = k % 128;
    const int quarter = r / 32;
    const int l = r % 32;
    const uint8_t lbyte = b.ql[half * 64 + l + (quarter & 1) * 32];
    const int low = quarter < 2 ? (lbyte & 0xF) : (lbyte >> 4);
    const int high = (b.qh[half * 32 + l] >> (2 * quarter)) & 3;
    const int q = (low | (high << 4)) - 32;
    const int is = half * 8 + l / 16 + 2 * quarter;
    return half_to_float(b.d) * static_cast<float>(b.scales[is]) * static_cast<float>(q);
}

TANDEM_HOST_DEVICE float q8_K(const block_q8_K& b, int k) { return b.d * static_cast<float>(b.qs[k]); }

}  // namespace tandem::quant::element

namespace tandem::quant::element {

// The 16-bit float formats as one-element "blocks", so every type goes
// through the same row_element template below.
TANDEM_HOST_DEVICE float f32(const float& v, int) { return v; }
TANDEM_HOST_DEVICE float f16(const fp16_bits& v, int) { return half_to_float(v); }
TANDEM_HOST_DEVICE float bf16(const bf16_bits& v, int) { return bf16_to_float(v); }

// Element i of a row stored as consecutive blocks.
template <class Block, float (*Fn)(const Block&, int), int BlockElems>
TANDEM_HOST_DEVICE float row_element(const void* row, int64_t i) {
    const Block* blocks = static_cast<const Block*>(row);
    return Fn(blocks[i / BlockElems], static_cast<int>(i % BlockElems));
}

}  // namespace tandem::quant::element

// Table of every stored type: X(TypeName, BlockStruct, element function,
// elements per block). Host tests and CUDA kernels instantiate from it, so
// a type added here is covered by both.
#define TANDEM_FOR_EACH_ELEMENT_TYPE(X)                                  \
    X(F32, float, f32, 1)                                                \
    X(F16, ::tandem::quant::fp16_bits, f16, 1)                           \
    X(BF16, ::tandem::quant::bf16_bits, bf16, 1)                         \
    X(Q4_0, ::tandem::quant::block_q4_0, q4_0, ::tandem::quant::kQK4_0) \
    X(Q4_1, ::tandem::quant::block_q4_1, q4_1, ::tandem::quant::kQK4_1) \
    X(Q5_0, ::tandem::quant::block_q5_0, q5_0, ::tandem::quant::kQK5_0) \
    X(Q5_1, ::tandem::quant::block_q5_1, q5_1, ::tandem::quant::kQK5_1) \
    X(Q8_0, ::tandem::quant::block_q8_0, q8_0, ::tandem::quant::kQK8_0) \
    X(Q8_1, ::tandem::quant::block_q8_1, q8_1, ::tandem::quant::kQK8_1) \
    X(Q2_K, ::tandem::quant::block_q2_K, q2_K, ::tandem::quant::kQK_K)  \
    X(Q3_K, ::tandem::quant::block_q3_K, q3_K, ::tandem::quant::kQK_K)  \
    X(Q4_K, ::tandem::quant::block_q4_K, q4_K, ::tandem::quant::kQK_K)  \
    X(Q5_K, ::tandem::quant::block_q5_K, q5_K, ::tandem::quant::kQK_K)  \
    X(Q6_K, ::tandem::quant::block_q6_K, q6_K, ::tandem::quant::kQK_K)  \
    X(Q8_K, ::tandem::quant::block_q8_K, q8_K, ::tandem::quant::kQK_K)  \
    X(IQ2_XXS, ::tandem::quant::block_iq2_xxs, iq2_xxs, ::tandem::quant::kQK_K) \
    X(IQ2_XS, ::tandem::quant::block_iq2_xs, iq2_xs, ::tandem::quant::kQK_K) \
    X(IQ2_S, ::tandem::quant::block_iq2_s, iq2_s, ::tandem::quant::kQK_K) \
    X(IQ3_XXS, ::tandem::quant::block_iq3_xxs, iq3_xxs, ::tandem::quant::kQK_K) \
    X(IQ3_S, ::tandem::quant::block_iq3_s, iq3_s, ::tandem::quant::kQK_K) \
    X(IQ1_S, ::tandem::quant::block_iq1_s, iq1_s, ::tandem::quant::kQK_K) \
    X(IQ1_M, ::tandem::quant::block_iq1_m, iq1_m, ::tandem::quant::kQK_K) \
    X(IQ4_NL, ::tandem::quant::block_iq4_nl, iq4_nl, ::tandem::quant::kQK4_NL) \
    X(IQ4_XS, ::tandem::quant::block_iq4_xs, iq4_xs, ::tandem::quant::kQK_K) \
    X(MXFP4, ::tandem::quant::block_mxfp4, mxfp4, ::tandem::quant::kQK_MXFP4)

// The i-quants' and MXFP4's element functions, named in the table above.
#include "runtime/quant/quant_element_iq.h"
