// Host-side conversions between float and the 16-bit formats. F16C does
// this in one instruction, but the reference path must not depend on the
// CPU, so these are exact bit manipulations (round to nearest even).
#pragma once

#include <bit>
#include <cstdint>

#include "runtime/quant/quant_blocks.h"

namespace tandem::quant {

inline float fp16_to_fp32(fp16_bits h) {
    // Move exponent and mantissa to their float32 positions, then fix the
    // exponent per class. Written as selects, not branches, so loops over
    // rows of halves vectorize.
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t em = static_cast<uint32_t>(h & 0x7fffu) << 13;
    const uint32_t exp = em & 0x0f800000u;
    // Normal: rebias the exponent from 15 to 127.
    const uint32_t normal = em + ((127u - 15u) << 23);
    // Inf/NaN (exponent 31 -> 255), mantissa (NaN payload) kept.
    const uint32_t inf_nan = em + ((255u - 31u) << 23);
    // Zero/subnormal: mant * 2^-24. Giving the bits the exponent of 2^-14
    // makes 2^-14 * (1 + mant/1024); subtracting 2^-14 leaves exactly
    // mant * 2^-24 (exact: both operands share the exponent), 0 for 0.
    const float magic = std::bit_cast<float>(113u << 23);  // 2^-14
    const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(em + (113u << 23)) - magic);
    // Blend with all-ones/all-zeros masks: GCC will not if-convert the
    // equivalent ?: chain, and that blocks vectorization.
    const uint32_t m_inf_nan = 0u - static_cast<uint32_t>(exp == 0x0f800000u);
    const uint32_t m_sub = 0u - static_cast<uint32_t>(exp == 0);
    const uint32_t bits = (inf_nan & m_inf_nan) | (subnormal & m_sub) | (normal & ~(m_inf_nan | m_sub));
    return std::bit_cast<float>(bits | sign);
}

inline fp16_bits fp32_to_fp16(float f) {
    // Every class is computed and the right one picked with masks (no
    // branches, so row loops vectorize).
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t abs = x & 0x7fffffffu;
    // NaN stays NaN: quiet bit set, top payload bits kept (a payload only in
    // the low 13 bits would otherwise truncate to infinity).
    const uint32_t nan = 0x7e00u | ((abs >> 13) & 0x3ffu);
    // Normal range: rebias the exponent 127 -> 15 and round to nearest even
    // by adding 0xfff plus the lowest kept bit before dropping 13 bits; a
    // carry out of the mantissa correctly bumps the exponent, and for
    // [65520, 65536) carries all the way to infinity (0x7c00).
    const uint32_t normal = (abs - ((127u - 15u) << 23) + 0xfffu + ((abs >> 13) & 1u)) >> 13;
    // Below 2^-14 (half subnormals and zero): adding 0.5 puts the float's
    // ulp at 2^-24, the half subnormal step, so the FPU's own
    // round-to-nearest-even rounds, and the low mantissa bits are the
    // result (0x400 when it rounds up to the smallest normal).
    const float half_magic = 0.5f;
    const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(abs) + half_magic) -
                               std::bit_cast<uint32_t>(half_magic);
    const uint32_t m_nan = 0u - static_cast<uint32_t>(abs > 0x7f800000u);
    const uint32_t m_inf = ~m_nan & (0u - static_cast<uint32_t>(abs >= 0x47800000u));  // >= 65536 and inf
    const uint32_t m_sub = 0u - static_cast<uint32_t>(abs < 0x38800000u);
    const uint32_t m_normal = ~(m_nan | m_inf | m_sub);
    const uint32_t h = (nan & m_nan) | (0x7c00u & m_inf) | (subnormal & m_sub) | (normal & m_normal);
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
