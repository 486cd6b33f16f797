// Host-side conversions between float and the 16-bit formats. F16C does
// this in one instruction, but the reference path must not depend on the
// CPU, so these are exact bit manipulations (round to nearest even).
#pragma once

#include <bit>
#include <cstdint>

#include "runtime/quant/quant_blocks.h"

namespace tandem::quant {

inline float fp16_to_fp32(fp16_bits h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {
            // Subnormal half: renormalize into a float32 normal.
            int shift = 0;
            uint32_t m = mant;
            while ((m & 0x400u) == 0) {
                m <<= 1;
                ++shift;
            }
            m &= 0x3ffu;
            bits = sign | (static_cast<uint32_t>(127 - 15 - shift + 1) << 23) | (m << 13);
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);  // inf or NaN, payload kept
    } else {
        bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
    }
    return std::bit_cast<float>(bits);
}

inline fp16_bits fp32_to_fp16(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t abs = x & 0x7fffffffu;
    if (abs > 0x7f800000u) {
        return static_cast<fp16_bits>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));  // NaN stays NaN
    }
    if (abs >= 0x477ff000u) {  // rounds to >= 65520: overflow to infinity
        return static_cast<fp16_bits>(sign | 0x7c00u);
    }
    if (abs < 0x38800000u) {  // below the smallest normal half (2^-14)
        if (abs < 0x33000000u) {
            return static_cast<fp16_bits>(sign);  // under half the smallest subnormal
        }
        const uint32_t exp = abs >> 23;
        const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126 - exp;  // 14 + 113 - 1 - exp: bits dropped beyond the half mantissa
        uint32_t h = mant >> (shift);
        const uint32_t rem = mant & ((1u << shift) - 1);
        const uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (h & 1u))) {
            ++h;
        }
        return static_cast<fp16_bits>(sign | h);
    }
    uint32_t h = ((abs - 0x38000000u) >> 13);  // rebias exponent 127 -> 15
    const uint32_t rem = abs & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) {
        ++h;  // may carry into the exponent, which is the correct rounding
    }
    return static_cast<fp16_bits>(sign | h);
}

inline float bf16_to_fp32(bf16_bits h) {
    return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

inline bf16_bits fp32_to_bf16(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return static_cast<bf16_bits>((x >> 16) | 0x40u);  // quiet NaN
    }
    const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);  // nearest even
    return static_cast<bf16_bits>((x + rounding) >> 16);
}

}  // namespace tandem::quant
