// fp16 / bf16 conversions (runtime/quant/fp16.h): exhaustive round trips
// over every 16-bit pattern, exact decoded values, and the rounding cases
// that a bit-twiddling converter most often gets wrong (ties to even,
// overflow, subnormals, a subnormal rounding up into the normal range,
// NaN that must not turn into infinity).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "runtime/quant/fp16.h"

namespace tq = tandem::quant;

namespace {

float bits_to_float(uint32_t b) { return std::bit_cast<float>(b); }

bool fp16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0; }
bool bf16_is_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0; }

// The value a binary16 pattern denotes, from the IEEE definition rather
// than from bit shuffling, so the decoder is checked against arithmetic.
double fp16_value(uint16_t h) {
    const int sign = (h & 0x8000u) ? -1 : 1;
    const int exp = (h >> 10) & 0x1f;
    const int mant = h & 0x3ff;
    if (exp == 0) return sign * std::ldexp(static_cast<double>(mant), -24);
    if (exp == 31) return mant == 0 ? sign * std::numeric_limits<double>::infinity()
                                    : std::numeric_limits<double>::quiet_NaN();
    return sign * std::ldexp(1.0 + mant / 1024.0, exp - 15);
}

}  // namespace

TEST(QuantFloat, Fp16DecodesEveryPatternToItsIeeeValue) {
    for (uint32_t h = 0; h < 0x10000u; ++h) {
        const auto bits = static_cast<uint16_t>(h);
        const float f = tq::fp16_to_fp32(bits);
        if (fp16_is_nan(bits)) {
            ASSERT_TRUE(std::isnan(f)) << std::hex << h;
        } else {
            ASSERT_EQ(static_cast<double>(f), fp16_value(bits)) << std::hex << h;
            ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << std::hex << h;  // -0 stays -0
        }
    }
}

TEST(QuantFloat, Fp16RoundTripsEveryPatternExactly) {
    for (uint32_t h = 0; h < 0x10000u; ++h) {
        const auto bits = static_cast<uint16_t>(h);
        const uint16_t back = tq::fp32_to_fp16(tq::fp16_to_fp32(bits));
        if (fp16_is_nan(bits)) {
            ASSERT_TRUE(fp16_is_nan(back)) << std::hex << h << " -> " << back;
            ASSERT_EQ(back & 0x8000u, bits & 0x8000u) << std::hex << h;
        } else {
            ASSERT_EQ(back, bits) << std::hex << h;
        }
    }
}

TEST(QuantFloat, Fp16RoundsHalfwayCasesToEven) {
    // 1 + 2^-11 is halfway between 1 (0x3c00, even) and 1 + 2^-10 (odd).
    EXPECT_EQ(tq::fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00u);
    // 1 + 3*2^-11 is halfway between 0x3c01 (odd) and 0x3c02 (even).
    EXPECT_EQ(tq::fp32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02u);
    // Just above halfway rounds up, just below rounds down.
    EXPECT_EQ(tq::fp32_to_fp16(bits_to_float(std::bit_cast<uint32_t>(1.0f + 0x1p-11f) + 1)), 0x3c01u);
    EXPECT_EQ(tq::fp32_to_fp16(bits_to_float(std::bit_cast<uint32_t>(1.0f + 0x1p-11f) - 1)), 0x3c00u);
    // Carry out of the mantissa into the exponent: 2 - 2^-12 rounds to 2.
    EXPECT_EQ(tq::fp32_to_fp16(2.0f - 0x1p-12f), 0x4000u);
    EXPECT_EQ(tq::fp32_to_fp16(-1.0f - 0x1p-11f), 0xbc00u);
    EXPECT_EQ(tq::fp32_to_fp16(0.0f), 0x0000u);
    EXPECT_EQ(tq::fp32_to_fp16(-0.0f), 0x8000u);
}

TEST(QuantFloat, Fp16OverflowsToInfinityOnlyPastTheRoundingThreshold) {
    EXPECT_EQ(tq::fp32_to_fp16(65504.0f), 0x7bffu);  // largest finite half
    // 65520 is halfway between 65504 (odd mantissa) and 65536 (= inf): ties
    // to even means infinity; anything below stays finite.
    EXPECT_EQ(tq::fp32_to_fp16(std::nextafter(65520.0f, 0.0f)), 0x7bffu);
    EXPECT_EQ(tq::fp32_to_fp16(65520.0f), 0x7c00u);
    EXPECT_EQ(tq::fp32_to_fp16(1e10f), 0x7c00u);
    EXPECT_EQ(tq::fp32_to_fp16(-1e10f), 0xfc00u);
    EXPECT_EQ(tq::fp32_to_fp16(std::numeric_limits<float>::infinity()), 0x7c00u);
    EXPECT_EQ(tq::fp32_to_fp16(-std::numeric_limits<float>::infinity()), 0xfc00u);
    EXPECT_EQ(tq::fp32_to_fp16(std::numeric_limits<float>::max()), 0x7c00u);
}

TEST(QuantFloat, Fp16RoundsSubnormalsCorrectly) {
    EXPECT_EQ(tq::fp32_to_fp16(0x1p-24f), 0x0001u);  // smallest subnormal
    EXPECT_EQ(tq::fp32_to_fp16(0x1p-25f), 0x0000u);  // halfway to 0: ties to even (0)
    EXPECT_EQ(tq::fp32_to_fp16(std::nextafter(0x1p-25f, 1.0f)), 0x0001u);
    EXPECT_EQ(tq::fp32_to_fp16(3 * 0x1p-25f), 0x0002u);  // halfway between 1 and 2 -> 2
    EXPECT_EQ(tq::fp32_to_fp16(5 * 0x1p-25f), 0x0002u);  // halfway between 2 and 3 -> 2
    EXPECT_EQ(tq::fp32_to_fp16(-0x1p-24f), 0x8001u);
    EXPECT_EQ(tq::fp32_to_fp16(1e-30f), 0x0000u);
    EXPECT_EQ(tq::fp32_to_fp16(-1e-30f), 0x8000u);
    EXPECT_EQ(tq::fp32_to_fp16(1023 * 0x1p-24f), 0x03ffu);  // largest subnormal
    // Halfway between the largest subnormal (odd) and the smallest normal
    // 2^-14 (0x0400, even): must round up across the boundary.
    EXPECT_EQ(tq::fp32_to_fp16(1023.5f * 0x1p-24f), 0x0400u);
    EXPECT_EQ(tq::fp32_to_fp16(0x1p-14f), 0x0400u);
    // A float subnormal is far below the half range.
    EXPECT_EQ(tq::fp32_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000u);
}

TEST(QuantFloat, Fp16NanStaysNanNeverInfinity) {
    // A float NaN whose payload lives only in the low 13 bits would become
    // infinity if the mantissa were simply truncated.
    for (uint32_t bits : {0x7f800001u, 0x7fc00000u, 0xff800001u, 0x7fffffffu, 0x7f801000u}) {
        const uint16_t h = tq::fp32_to_fp16(bits_to_float(bits));
        EXPECT_TRUE(fp16_is_nan(h)) << std::hex << bits << " -> " << h;
        EXPECT_EQ(h & 0x8000u, (bits >> 16) & 0x8000u);
    }
}

#if defined(__FLT16_MAX__)
// Where the compiler has _Float16, its (correctly rounded, libgcc) float ->
// half conversion is an independent oracle for random float patterns.
TEST(QuantFloat, Fp16MatchesCompilerConversionOnRandomFloats) {
    std::mt19937 rng(42);
    for (int i = 0; i < 1 << 20; ++i) {
        uint32_t bits = rng();
        // Bias half the samples into the half-precision exponent range, where
        // the interesting rounding happens.
        if (i & 1) bits = (bits & 0x83ffffffu) | (static_cast<uint32_t>(0x30 + (rng() % 0x18)) << 23);
        const float f = bits_to_float(bits);
        if (std::isnan(f)) continue;
        const auto expect = std::bit_cast<uint16_t>(static_cast<_Float16>(f));
        ASSERT_EQ(tq::fp32_to_fp16(f), expect) << std::hex << bits;
    }
}
#endif

TEST(QuantFloat, Bf16RoundTripsEveryPatternExactly) {
    for (uint32_t h = 0; h < 0x10000u; ++h) {
        const auto bits = static_cast<uint16_t>(h);
        const float f = tq::bf16_to_fp32(bits);
        ASSERT_EQ(std::bit_cast<uint32_t>(f), h << 16);  // bf16 is the top half of a float
        const uint16_t back = tq::fp32_to_bf16(f);
        if (bf16_is_nan(bits)) {
            ASSERT_TRUE(bf16_is_nan(back)) << std::hex << h;
            ASSERT_EQ(back & 0x8000u, bits & 0x8000u);
        } else {
            ASSERT_EQ(back, bits) << std::hex << h;
        }
    }
}

TEST(QuantFloat, Bf16RoundsToNearestEven) {
    EXPECT_EQ(tq::fp32_to_bf16(bits_to_float(0x3f808000u)), 0x3f80u);  // halfway, 0x3f80 even
    EXPECT_EQ(tq::fp32_to_bf16(bits_to_float(0x3f818000u)), 0x3f82u);  // halfway, 0x3f81 odd -> up
    EXPECT_EQ(tq::fp32_to_bf16(bits_to_float(0x3f808001u)), 0x3f81u);  // above halfway
    EXPECT_EQ(tq::fp32_to_bf16(bits_to_float(0x3f807fffu)), 0x3f80u);  // below halfway
    EXPECT_EQ(tq::fp32_to_bf16(bits_to_float(0xbf818000u)), 0xbf82u);  // sign does not matter
    EXPECT_EQ(tq::fp32_to_bf16(bits_to_float(0x3fffffffu)), 0x4000u);  // carry into the exponent
}

TEST(QuantFloat, Bf16OverflowAndSubnormals) {
    // The largest finite bf16 is 0x7f7f; floats from halfway above it round
    // to infinity (0x7f7f is odd).
    EXPECT_EQ(tq::fp32_to_bf16(bits_to_float(0x7f7f7fffu)), 0x7f7fu);
    EXPECT_EQ(tq::fp32_to_bf16(bits_to_float(0x7f7f8000u)), 0x7f80u);
    EXPECT_EQ(tq::fp32_to_bf16(std::numeric_limits<float>::max()), 0x7f80u);
    EXPECT_EQ(tq::fp32_to_bf16(-std::numeric_limits<float>::max()), 0xff80u);
    EXPECT_EQ(tq::fp32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80u);
    // bf16 keeps float's exponent range, so float subnormals round within
    // the bf16 subnormals, with the same tie rule.
    EXPECT_EQ(tq::fp32_to_bf16(bits_to_float(0x00008000u)), 0x0000u);
    EXPECT_EQ(tq::fp32_to_bf16(bits_to_float(0x00018000u)), 0x0002u);
    EXPECT_EQ(tq::fp32_to_bf16(bits_to_float(0x00010001u)), 0x0001u);
    EXPECT_EQ(tq::fp32_to_bf16(bits_to_float(0x007fffffu)), 0x0080u);  // up into the normals
    EXPECT_EQ(tq::fp32_to_bf16(-0.0f), 0x8000u);
}

TEST(QuantFloat, Bf16NanStaysNanNeverInfinity) {
    for (uint32_t bits : {0x7f800001u, 0x7fc00000u, 0xff800001u, 0x7fffffffu, 0x7f80ffffu}) {
        const uint16_t h = tq::fp32_to_bf16(bits_to_float(bits));
        EXPECT_TRUE(bf16_is_nan(h)) << std::hex << bits << " -> " << h;
        EXPECT_EQ(h & 0x8000u, (bits >> 16) & 0x8000u);
    }
}
