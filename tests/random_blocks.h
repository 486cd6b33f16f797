// Blocks of any stored type for kernel tests: quantized Gaussian floats,
// or for the grid types (the i-quants, MXFP4) random bytes, which are all
// valid codes, with the scale fields set to finite values of a realistic
// size.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/quant/fp16.h"
#include "runtime/quant/quant_types.h"

namespace tandem::testing {

// The grid types: every byte pattern is a valid block, so kernel tests fill
// them with random codes, which reach every grid point and sign pattern,
// not only the ones a quantizer picks for Gaussian data. (Their quantizers
// are tested on their own: test_quant_make_*.cpp.)
inline bool tested_on_random_codes(quant::Type t) {
    return t == quant::Type::MXFP4 || quant::traits(t).name.starts_with("IQ");
}

// Sets the scale of one block of a grid type to `scale` (fp16, or
// for MXFP4 the nearest power of two at or below it).
inline void set_block_scale(quant::Type t, uint8_t* block, float scale) {
    if (t == quant::Type::MXFP4) {
        int e = 128;  // 2^(e - 128)
        while (e > 1 && static_cast<double>(scale) < std::ldexp(1.0, e - 128)) --e;
        while (e < 254 && static_cast<double>(scale) >= std::ldexp(1.0, e - 127)) ++e;
        block[0] = static_cast<uint8_t>(e);
        return;
    }
    const uint16_t h = quant::fp32_to_fp16(scale);
    if (t == quant::Type::IQ1_M) {
        // The fp16 scale in the top nibbles of the four scale words (bytes 48-55).
        for (int w = 0; w < 4; ++w) {
            uint8_t& hi = block[48 + 2 * w + 1];
            hi = static_cast<uint8_t>((hi & 0x0F) | (((h >> (4 * w)) & 0xF) << 4));
        }
        return;
    }
    std::memcpy(block, &h, sizeof h);  // every other type starts with its fp16 d
}

// n elements of type t (n a multiple of its block) into dst.
inline void fill_random_blocks(quant::Type t, int64_t n, uint32_t seed, void* dst, float scale = 1.0f) {
    const quant::TypeTraits& tr = quant::traits(t);
    std::mt19937 rng(seed);
    if (!tested_on_random_codes(t)) {
        std::normal_distribution<float> dist(0.0f, scale);
        std::vector<float> x(static_cast<size_t>(n));
        for (auto& v : x) v = dist(rng);
        quant::quantize_row(t, x.data(), dst, n);
        return;
    }
    auto* bytes = static_cast<uint8_t*>(dst);
    const size_t total = *quant::row_bytes(t, n);
    for (size_t i = 0; i < total; ++i) bytes[i] = static_cast<uint8_t>(rng());
    // A block scale near scale / 64 (the codes reach about 64 in size).
    std::uniform_real_distribution<float> d(0.25f * scale / 64.0f, 2.0f * scale / 64.0f);
    for (size_t b = 0; b < total / tr.block_bytes; ++b) set_block_scale(t, bytes + b * tr.block_bytes, d(rng));
}

inline std::vector<uint8_t> random_blocks(quant::Type t, int64_t n, uint32_t seed, float scale = 1.0f) {
    std::vector<uint8_t> out(*quant::row_bytes(t, n));
    fill_random_blocks(t, n, seed, out.data(), scale);
    return out;
}

}  // namespace tandem::testing
