// The i-quant grids and tables (runtime/quant/iq_tables.h): the format's
// published constants, so a damaged copy (a lost or reordered row) must
// not pass. Each grid is checked for its size, its value set, distinct
// rows, and an FNV-1a hash of its bytes (element order), computed from
// ggml's ggml-common.h when the tables were copied. The sign and scale
// rules are checked against their definitions.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <set>
#include <span>
#include <string>

#include "runtime/quant/iq_tables.h"
#include "runtime/quant/quant_element_iq.h"
#include "tests/random_blocks.h"

namespace {

namespace iq = tandem::quant::iq;

template <class T>
struct GridCase {
    std::string name;
    std::span<const T> rows;
    int bytes_a_row;
    std::set<int> values;
    uint64_t fnv;
};

template <class T>
void check_grid(const GridCase<T>& g, size_t rows) {
    SCOPED_TRACE(g.name);
    ASSERT_EQ(g.rows.size(), rows);
    uint64_t h = 0xcbf29ce484222325ull;
    std::set<T> distinct;
    for (T row : g.rows) {
        distinct.insert(row);
        for (int j = 0; j < g.bytes_a_row; ++j) {
            const int b = static_cast<int>((static_cast<uint64_t>(row) >> (8 * j)) & 0xFF);
            EXPECT_TRUE(g.values.count(b)) << "byte " << b;
            h = (h ^ static_cast<uint64_t>(b)) * 0x100000001b3ull;
        }
    }
    EXPECT_EQ(distinct.size(), rows);
    EXPECT_EQ(h, g.fnv);
}

TEST(IqTables, GridsHoldTheFormatsLattices) {
    const std::set<int> iq2{8, 25, 43};
    check_grid<uint64_t>({"iq2xxs", iq::kIq2xxsGrid, 8, iq2, 0xbb4ee025b5ac6e8eull}, 256);
    check_grid<uint64_t>({"iq2xs", iq::kIq2xsGrid, 8, iq2, 0xc9b1ee61e79909bdull}, 512);
    check_grid<uint64_t>({"iq2s", iq::kIq2sGrid, 8, iq2, 0x123edd38a3b62b90ull}, 1024);
    check_grid<uint32_t>({"iq3xxs", iq::kIq3xxsGrid, 4, {4, 12, 20, 28, 36, 44, 52, 62}, 0xdfa5dc83d6a155d5ull}, 256);
    check_grid<uint32_t>({"iq3s", iq::kIq3sGrid, 4, {1, 3, 5, 7, 9, 11, 13, 15}, 0xfa37020c25b44829ull}, 512);
    check_grid<uint64_t>({"iq1s", iq::kIq1sGrid, 8, {0x00, 0x01, 0xFF}, 0x6703ed863501ae2eull}, 2048);
}

TEST(IqTables, SevenSignBitsGetAnEvenParityEighth) {
    for (uint32_t s = 0; s < 128; ++s) {
        const uint32_t full = iq::signs_of7(s);
        EXPECT_EQ(full & 127u, s);
        EXPECT_EQ(std::popcount(full) % 2, 0) << s;
    }
}

TEST(IqTables, Mxfp4ScaleIsHalfItsPowerOfTwo) {
    EXPECT_EQ(iq::e8m0_half(127), 0.5f);
    EXPECT_EQ(iq::e8m0_half(128), 1.0f);
    EXPECT_EQ(iq::e8m0_half(130), 4.0f);
    EXPECT_EQ(iq::e8m0_half(2), std::ldexp(1.0f, -126));
    EXPECT_EQ(iq::e8m0_half(1), std::ldexp(1.0f, -127));  // subnormal
    EXPECT_EQ(iq::e8m0_half(0), std::ldexp(1.0f, -128));
    // Twice E2M1: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives.
    for (int q = 0; q < 8; ++q) EXPECT_EQ(iq::kMxfp4Values[q + 8], -iq::kMxfp4Values[q]);
    EXPECT_EQ(iq::kMxfp4Values[7], 12);
}

// One hand-built block per grid family, its elements worked out from the
// format's definition.
TEST(IqTables, HandBuiltBlocksDecode) {
    {
        tandem::quant::block_iq2_xxs b{};
        b.d = 0x3C00;  // 1.0
        b.qs[0] = 0x0001;                             // group 0 -> row 1, group 1 -> row 0
        b.qs[2] = 0x0003;                             // group 0 signs: weights 0, 1 negative (parity even)
        b.qs[3] = 0x3000;                             // scale 3 (bits 28-31)
        const uint64_t row1 = iq::kIq2xxsGrid[1];
        EXPECT_EQ(iq::Iq2xxs::code(b, 0), -static_cast<int>(row1 & 0xFF));
        EXPECT_EQ(iq::Iq2xxs::code(b, 2), static_cast<int>((row1 >> 16) & 0xFF));
        EXPECT_EQ(iq::Iq2xxs::mult(b, 5), 7);
        // (0.5 + 3) / 4 * grid
        EXPECT_EQ(iq::Iq2xxs::value(b, 7), 3.5f / 4.0f * static_cast<float>((row1 >> 56) & 0xFF));
    }
    {
        tandem::quant::block_iq1_s b{};
        b.d = 0x3C00;
        b.qs[0] = 5;
        b.qh[0] = static_cast<uint16_t>((2u << 12) | 0x8000u);  // scale 2 -> 5, shift -1/8
        const int8_t g = static_cast<int8_t>(iq::kIq1sGrid[5] & 0xFF);
        EXPECT_EQ(iq::Iq1s::code(b, 0), g);
        EXPECT_EQ(iq::Iq1s::value(b, 0), 5.0f * (static_cast<float>(g) - 0.125f));
    }
    {
        tandem::quant::block_iq4_xs b{};
        b.d = 0x3C00;
        b.scales_l[0] = 0x01;   // chunk 0: low bits 1
        b.scales_h = 0x0002;    // chunk 0: high bits 2 -> 33 - 32 = 1
        b.qs[0] = 0xF0;         // element 0 -> code 0 (-127), element 16 -> code 15 (113)
        EXPECT_EQ(iq::Iq4xs::value(b, 0), -127.0f);
        EXPECT_EQ(iq::Iq4xs::value(b, 16), 113.0f);
    }
}

// Each decoder's four-at-a-time codes (one grid row, four sign bits) are
// its codes one at a time, on random blocks (every index and sign pattern
// is a valid code).
template <class D>
void expect_codes4_by_element(tandem::quant::Type t) {
    SCOPED_TRACE(std::string(tandem::quant::traits(t).name));
    constexpr int64_t kN = 64 * 256;
    const auto bytes = tandem::testing::random_blocks(t, kN, 7);
    const auto* blocks = reinterpret_cast<const typename D::Block*>(bytes.data());
    const int per_block = static_cast<int>(tandem::quant::traits(t).block_elems);
    int bad = 0;
    for (int64_t i = 0; i < kN / per_block; ++i) {
        for (int k = 0; k < per_block; k += 4) {
            if (iq::codes4<D>(blocks[i], k) != iq::codes4_by_element<D>(blocks[i], k) && ++bad < 4) {
                ADD_FAILURE() << "block " << i << " element " << k;
            }
            if (k % 8 == 0 && per_block % 8 == 0) {  // eight at once, the CUDA kernel's groups
                const iq::Codes8 c8 = iq::codes8<D>(blocks[i], k, iq::grid_of<D>());
                if ((c8.lo != iq::codes4_by_element<D>(blocks[i], k) ||
                     c8.hi != iq::codes4_by_element<D>(blocks[i], k + 4)) &&
                    ++bad < 4) {
                    ADD_FAILURE() << "codes8: block " << i << " element " << k;
                }
            }
        }
    }
    EXPECT_EQ(bad, 0);
}

TEST(IqTables, FourCodesAtOnceAreTheCodesOneAtATime) {
    using tandem::quant::Type;
    expect_codes4_by_element<iq::Iq2xxs>(Type::IQ2_XXS);
    expect_codes4_by_element<iq::Iq2xs>(Type::IQ2_XS);
    expect_codes4_by_element<iq::Iq2s>(Type::IQ2_S);
    expect_codes4_by_element<iq::Iq3xxs>(Type::IQ3_XXS);
    expect_codes4_by_element<iq::Iq3s>(Type::IQ3_S);
    expect_codes4_by_element<iq::Iq1s>(Type::IQ1_S);
    expect_codes4_by_element<iq::Iq1m>(Type::IQ1_M);
    expect_codes4_by_element<iq::Iq4nl>(Type::IQ4_NL);
    expect_codes4_by_element<iq::Iq4xs>(Type::IQ4_XS);
}

}  // namespace
