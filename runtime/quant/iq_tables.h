// The tables the i-quants and MXFP4 index: the lattice grids (data in
// iq_grid_data.h), the two 16-value tables of the 4-bit non-linear formats,
// and the sign and scale rules, for the host and the CUDA device alike.
// On the device each translation unit holds its own copy of the grids in
// global memory (read through the cache, as random lookups want); the
// host reads the constexpr arrays.
#pragma once

#include <cstdint>

#include "runtime/quant/iq_grid_data.h"
#include "runtime/quant/host_device.h"

namespace tandem::quant::iq {

inline constexpr uint64_t kIq2xxsGrid[256] = {TANDEM_IQ2XXS_GRID};
inline constexpr uint64_t kIq2xsGrid[512] = {TANDEM_IQ2XS_GRID};
inline constexpr uint64_t kIq2sGrid[1024] = {TANDEM_IQ2S_GRID};
inline constexpr uint32_t kIq3xxsGrid[256] = {TANDEM_IQ3XXS_GRID};
inline constexpr uint32_t kIq3sGrid[512] = {TANDEM_IQ3S_GRID};
inline constexpr uint64_t kIq1sGrid[2048] = {TANDEM_IQ1S_GRID};

// The 4-bit codes of IQ4_NL/IQ4_XS and of MXFP4 (twice the E2M1 values).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// IQ1_S/IQ1_M: each group of 8 is shifted by +-1/8 before scaling.
inline constexpr float kIq1Delta = 0.125f;

#if defined(__CUDACC__)
namespace dev {
static __device__ const uint64_t kIq2xxsGrid[256] = {TANDEM_IQ2XXS_GRID};
static __device__ const uint64_t kIq2xsGrid[512] = {TANDEM_IQ2XS_GRID};
static __device__ const uint64_t kIq2sGrid[1024] = {TANDEM_IQ2S_GRID};
static __device__ const uint32_t kIq3xxsGrid[256] = {TANDEM_IQ3XXS_GRID};
static __device__ const uint32_t kIq3sGrid[512] = {TANDEM_IQ3S_GRID};
static __device__ const uint64_t kIq1sGrid[2048] = {TANDEM_IQ1S_GRID};
static __device__ const int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                   1,    13,   25,  38,  53,  69,  89,  113};
static __device__ const int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
}  // namespace dev
#endif
// The device pass reads the device copy, the host (and nvcc's host pass)
// the constexpr array.
#if defined(__CUDA_ARCH__)
#define TANDEM_IQ_TABLE(name) dev::name
#else
#define TANDEM_IQ_TABLE(name) name
#endif

// Byte j (the weight j of a group) of a grid row.
TANDEM_HOST_DEVICE int grid_byte(uint64_t row, int j) { return static_cast<int>((row >> (8 * j)) & 0xFFu); }

// Each grid as a pointer (the decoders' grid(); a CUDA kernel may pass its
// shared-memory copy instead).
TANDEM_HOST_DEVICE const uint64_t* iq2xxs_grid() { return TANDEM_IQ_TABLE(kIq2xxsGrid); }
TANDEM_HOST_DEVICE const uint64_t* iq2xs_grid() { return TANDEM_IQ_TABLE(kIq2xsGrid); }
TANDEM_HOST_DEVICE const uint64_t* iq2s_grid() { return TANDEM_IQ_TABLE(kIq2sGrid); }
TANDEM_HOST_DEVICE const uint32_t* iq3xxs_grid() { return TANDEM_IQ_TABLE(kIq3xxsGrid); }
TANDEM_HOST_DEVICE const uint32_t* iq3s_grid() { return TANDEM_IQ_TABLE(kIq3sGrid); }
TANDEM_HOST_DEVICE const uint64_t* iq1s_grid() { return TANDEM_IQ_TABLE(kIq1sGrid); }
TANDEM_HOST_DEVICE int iq4nl_value(int q) { return TANDEM_IQ_TABLE(kIq4nlValues)[q]; }
TANDEM_HOST_DEVICE int mxfp4_value(int q) { return TANDEM_IQ_TABLE(kMxfp4Values)[q]; }
#undef TANDEM_IQ_TABLE

// PTX's prmt (CUDA's __byte_perm) for selectors whose nibbles are 0-7:
// byte i of the result is byte (s >> 4i) & 7 of y:x.
TANDEM_HOST_DEVICE uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
    return __byte_perm(x, y, s);
#else
    const uint64_t xy = static_cast<uint64_t>(y) << 32 | x;
    uint32_t r = 0;
    for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>((xy >> (8 * ((s >> (4 * i)) & 7u))) & 0xFFu) << (8 * i);
    return r;
#endif
}
// Four 4-bit codes (bytes of q, each 0-15) looked up in a 16-byte table
// held as four words (t[j] = entries 4j..4j+3): two byte permutes for the
// table's halves, one to pick each byte's half by bit 3 of its code.
TANDEM_HOST_DEVICE uint32_t table16_codes4(uint32_t q, const uint32_t* t) {
    const uint32_t packed = q | q >> 4;  // codes 0 and 1 in byte 0, 2 and 3 in byte 2
    const uint32_t sel = byte_perm(packed, 0, 0x0020);  // the four codes as nibbles
    const uint32_t low = byte_perm(t[0], t[1], sel & 0x7777u), high = byte_perm(t[2], t[3], sel & 0x7777u);
    return byte_perm(low, high, 0x3210u | (sel & 0x8888u) >> 1);
}
// kIq4nlValues as table16_codes4's words.
struct Table16 {
    uint32_t w[4];
};
constexpr Table16 table16_words(const int8_t* v) {
    Table16 t{};
    for (int i = 0; i < 16; ++i) t.w[i / 4] |= static_cast<uint32_t>(static_cast<uint8_t>(v[i])) << (8 * (i % 4));
    return t;
}
inline constexpr Table16 kIq4nlWords = table16_words(kIq4nlValues);
// Codes q (bytes 0-15) to IQ4_NL's values, four at a time.
TANDEM_HOST_DEVICE uint32_t iq4nl_codes4(uint32_t q) {
#if defined(__CUDA_ARCH__)
    constexpr uint32_t t[4] = {kIq4nlWords.w[0], kIq4nlWords.w[1], kIq4nlWords.w[2], kIq4nlWords.w[3]};
    return table16_codes4(q, t);
#else
    return table16_codes4(q, kIq4nlWords.w);
#endif
}

// A 7-bit sign set of IQ2_XXS/IQ2_XS/IQ3_XXS as 8 sign bits (bit j set:
// weight j negative): the eighth bit makes the count of set bits even.
TANDEM_HOST_DEVICE constexpr uint32_t signs_of7(uint32_t s7) {
#if defined(__CUDA_ARCH__)
    return s7 | (static_cast<uint32_t>(__popc(s7)) & 1u) << 7;  // the parity by one popcount
#endif
    uint32_t p = s7 ^ (s7 >> 4);
    p ^= p >> 2;
    p ^= p >> 1;
    return s7 | ((p & 1u) << 7);
}

#if !defined(__CUDA_ARCH__)
// The 8 sign bits of every 7-bit set, for the host's SIMD kernels, which
// look four sets up at once: signs_7x4 turns bits 0..27 of a word (four
// sets) into 32 sign bits.
struct Signs8Table {
    uint8_t v[128];
};
inline constexpr Signs8Table kSigns8 = [] {
    Signs8Table t{};
    for (uint32_t s = 0; s < 128; ++s) t.v[s] = static_cast<uint8_t>(signs_of7(s));
    return t;
}();
inline uint32_t signs_7x4(uint32_t word) {
    return static_cast<uint32_t>(kSigns8.v[word & 127]) | static_cast<uint32_t>(kSigns8.v[(word >> 7) & 127]) << 8 |
           static_cast<uint32_t>(kSigns8.v[(word >> 14) & 127]) << 16 |
           static_cast<uint32_t>(kSigns8.v[(word >> 21) & 127]) << 24;
}
#endif

// MXFP4's E8M0 exponent as half its power of two, 2^(e - 128), exactly.
TANDEM_HOST_DEVICE float e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e) - 1u) << 23;
#if defined(__CUDA_ARCH__)
    return __uint_as_float(bits);
#else
    float f;
    __builtin_memcpy(&f, &bits, sizeof f);
    return f;
#endif
}

}  // namespace tandem::quant::iq
