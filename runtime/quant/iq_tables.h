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

// A 7-bit sign set of IQ2_XXS/IQ2_XS/IQ3_XXS as 8 sign bits (bit j set:
// weight j negative): the eighth bit makes the count of set bits even.
TANDEM_HOST_DEVICE constexpr uint32_t signs_of7(uint32_t s7) {
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
