// Reference quantizers and dequantizers, type by type:
//  * traits table geometry agrees with the block structs;
//  * F32/F16/BF16 round-trip every non-NaN bit pattern byte for byte;
//  * every quantized type reproduces random data (several distributions)
//    within an error bound set by the format's step size; the bounds are
//    tight enough that a scrambled element order or a wrong scale cannot
//    meet them (checked below, not assumed);
//  * per-element error bounds where the format makes them derivable;
//  * hand-built blocks decode to hand-computed values, which pins each bit
//    layout itself (a quantizer and dequantizer that agree on a wrong layout
//    pass the round trips, but not these).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/common/error.h"
#include "runtime/quant/fp16.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_types.h"
#include "tests/random_blocks.h"

namespace tq = tandem::quant;
using tq::Type;

namespace {

constexpr int64_t kN = 64 * 256;  // 64 K-quant super-blocks, 512 legacy blocks

enum class Dist { Gaussian, Uniform, Outliers, Offset };

const char* dist_name(Dist d) {
    switch (d) {
        case Dist::Gaussian: return "gaussian";
        case Dist::Uniform: return "uniform";
        case Dist::Outliers: return "outliers";
        case Dist::Offset: return "offset";
    }
    return "?";
}

std::vector<float> make_data(Dist dist, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        float v = 0.0f;
        switch (dist) {
            case Dist::Gaussian: v = gauss(rng); break;
            case Dist::Uniform: v = uni(rng); break;
            // Real weight matrices have a few large outliers per row; about
            // one element in 50 is 8x larger than the rest.
            case Dist::Outliers: v = gauss(rng) * (rng() % 50 == 0 ? 8.0f : 1.0f); break;
            // All-positive values away from 0 exercise the minimum of the
            // asymmetric formats (and hurt the symmetric ones).
            case Dist::Offset: v = 1.0f + 0.5f * uni(rng); break;
        }
        x[static_cast<size_t>(i)] = v;
    }
    return x;
}

double rms(const std::vector<float>& x) {
    double s = 0.0;
    for (float v : x) s += static_cast<double>(v) * v;
    return std::sqrt(s / static_cast<double>(x.size()));
}

double rel_rmse(const std::vector<float>& x, const std::vector<float>& y) {
    double s = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
        const double d = static_cast<double>(x[i]) - y[i];
        s += d * d;
    }
    return std::sqrt(s / static_cast<double>(x.size())) / rms(x);
}

std::vector<float> round_trip(Type t, const std::vector<float>& x) {
    const auto n = static_cast<int64_t>(x.size());
    std::vector<uint8_t> q(*tq::row_bytes(t, n));
    tq::quantize_row(t, x.data(), q.data(), n);
    std::vector<float> y(x.size());
    tq::dequantize_row(t, q.data(), y.data(), n);
    return y;
}

// Error model: each format rounds every value to a grid whose step is
// fixed by its group: amax/8 for Q4_0 (codes -8..7), range/15 for Q4_1 with
// range = max - min, and so on. Rounding to a grid leaves uniform noise of
// RMS step/sqrt(12), so the expected relative RMSE of a row is
// sqrt(mean(step^2) / 12) / rms(x), computed from the data itself. The
// K-quants search for better scales than the naive one (errors below the
// model), but also round their group scales to 4-8 bits (above it). Each
// type's bound is the model times a factor a few percent above what the
// ggml-equivalent quantizers reach (the measured ratio is printed), so a
// quantizer that loses the scale search or rounds worse fails.
// A layout bug (values in the wrong place) gives a relative RMSE near 1.4,
// far above every bound; BoundsRejectScrambledElementOrder checks that.
enum class Grid {
    Symmetric,    // step = amax / intervals
    MinMax,       // step = (max - min) / intervals (Q4_1, Q5_1 store any min)
    ZeroMinMax,   // as MinMax with min clamped to <= 0 (K-quants subtract a min >= 0)
};
struct ErrorModel {
    Type type;
    int group;          // elements sharing one step
    Grid grid;
    double intervals;   // steps across the span: amax/intervals or range/intervals
    double factor;      // bound = factor * predicted
};
constexpr ErrorModel kModels[] = {
    // Plain rounding: the model is exact up to sampling noise; Q4_0 and
    // Q5_0 lose a little more where the clamp at +7/+15 bites (uniform data).
    {Type::Q4_0, 32, Grid::Symmetric, 8, 1.12},
    {Type::Q4_1, 32, Grid::MinMax, 15, 1.04},
    {Type::Q5_0, 32, Grid::Symmetric, 16, 1.07},
    {Type::Q5_1, 32, Grid::MinMax, 31, 1.04},
    {Type::Q8_0, 32, Grid::Symmetric, 127, 1.04},
    {Type::Q8_1, 32, Grid::Symmetric, 127, 1.04},
    {Type::Q8_K, 256, Grid::Symmetric, 127, 1.04},
    // Scale searches: measured 0.79-0.88 of the model for Q2_K, 0.87-0.90
    // for Q4_K, 0.87-0.97 for Q5_K/Q6_K; Q3_K's clamp at +3 (codes -4..3)
    // costs up to 1.07 on uniform data.
    {Type::Q2_K, 16, Grid::ZeroMinMax, 3, 0.95},
    {Type::Q3_K, 16, Grid::Symmetric, 4, 1.12},
    {Type::Q4_K, 32, Grid::ZeroMinMax, 15, 0.97},
    {Type::Q5_K, 32, Grid::ZeroMinMax, 31, 1.00},
    {Type::Q6_K, 16, Grid::Symmetric, 32, 1.02},
};

// The model's relative RMSE for x (see above).
double predicted_rel_rmse(const ErrorModel& m, const std::vector<float>& x) {
    double sum_step2 = 0.0;
    const size_t g = static_cast<size_t>(m.group);
    for (size_t i = 0; i < x.size(); i += g) {
        float lo = m.grid == Grid::MinMax ? x[i] : 0.0f;
        float hi = lo;
        float amax = 0.0f;
        for (size_t j = i; j < i + g; ++j) {
            lo = std::min(lo, x[j]);
            hi = std::max(hi, x[j]);
            amax = std::max(amax, std::fabs(x[j]));
        }
        const double step = (m.grid == Grid::Symmetric ? amax : hi - lo) / m.intervals;
        sum_step2 += step * step * static_cast<double>(g);
    }
    return std::sqrt(sum_step2 / static_cast<double>(x.size()) / 12.0) / rms(x);
}

constexpr Dist kDists[] = {Dist::Gaussian, Dist::Uniform, Dist::Outliers, Dist::Offset};

}  // namespace

// ---- Traits -------------------------------------------------------------------

TEST(QuantTraits, BlockBytesMatchStructSizes) {
    EXPECT_EQ(tq::traits(Type::F32).block_bytes, 4u);
    EXPECT_EQ(tq::traits(Type::F16).block_bytes, 2u);
    EXPECT_EQ(tq::traits(Type::BF16).block_bytes, 2u);
    EXPECT_EQ(tq::traits(Type::Q4_0).block_bytes, sizeof(tq::block_q4_0));
    EXPECT_EQ(tq::traits(Type::Q4_1).block_bytes, sizeof(tq::block_q4_1));
    EXPECT_EQ(tq::traits(Type::Q5_0).block_bytes, sizeof(tq::block_q5_0));
    EXPECT_EQ(tq::traits(Type::Q5_1).block_bytes, sizeof(tq::block_q5_1));
    EXPECT_EQ(tq::traits(Type::Q8_0).block_bytes, sizeof(tq::block_q8_0));
    EXPECT_EQ(tq::traits(Type::Q8_1).block_bytes, sizeof(tq::block_q8_1));
    EXPECT_EQ(tq::traits(Type::Q2_K).block_bytes, sizeof(tq::block_q2_K));
    EXPECT_EQ(tq::traits(Type::Q3_K).block_bytes, sizeof(tq::block_q3_K));
    EXPECT_EQ(tq::traits(Type::Q4_K).block_bytes, sizeof(tq::block_q4_K));
    EXPECT_EQ(tq::traits(Type::Q5_K).block_bytes, sizeof(tq::block_q5_K));
    EXPECT_EQ(tq::traits(Type::Q6_K).block_bytes, sizeof(tq::block_q6_K));
    EXPECT_EQ(tq::traits(Type::Q8_K).block_bytes, sizeof(tq::block_q8_K));
    // GGUF's published sizes, independent of the structs.
    EXPECT_EQ(sizeof(tq::block_q4_K), 144u);
    EXPECT_EQ(sizeof(tq::block_q6_K), 210u);
    EXPECT_EQ(sizeof(tq::block_q2_K), 84u);
    EXPECT_EQ(sizeof(tq::block_q3_K), 110u);
}

TEST(QuantTraits, RowBytesRejectsPartialBlocks) {
    for (const auto& tr : tq::all_traits()) {
        SCOPED_TRACE(std::string(tr.name));
        EXPECT_EQ(tq::row_bytes(tr.type, 0), 0u);
        EXPECT_EQ(tq::row_bytes(tr.type, 4096), static_cast<uint64_t>(4096 / tr.block_elems) * tr.block_bytes);
        EXPECT_FALSE(tq::row_bytes(tr.type, -tr.block_elems).has_value());
        if (tr.block_elems > 1) {
            EXPECT_FALSE(tq::row_bytes(tr.type, tr.block_elems + 1).has_value());
            EXPECT_FALSE(tq::row_bytes(tr.type, tr.block_elems / 2).has_value());
        }
    }
}

// IQ2_XXS, IQ2_XS and IQ1_S are made only with importance weights (as in
// ggml): quantize_row says so, naming the type, instead of writing
// anything; with weights they are made.
TEST(QuantTraits, TypesThatNeedImportanceWeightsRefuseWithoutThem) {
    int needs = 0;
    for (const auto& tr : tq::all_traits()) {
        if (!tr.needs_weights) continue;
        ++needs;
        SCOPED_TRACE(std::string(tr.name));
        EXPECT_NE(tr.quantize_weighted, nullptr);
        std::vector<float> x(256, 1.0f);
        for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
        std::vector<uint8_t> q(*tq::row_bytes(tr.type, 256), 0xa5);
        for (int weighted_call = 0; weighted_call < 2; ++weighted_call) {
            try {
                if (weighted_call) {
                    tq::quantize_row_weighted(tr.type, x.data(), q.data(), 256, nullptr);
                } else {
                    tq::quantize_row(tr.type, x.data(), q.data(), 256);
                }
                ADD_FAILURE() << "quantize wrote " << tr.name << " without weights";
            } catch (const tandem::Error& e) {
                EXPECT_NE(std::string(e.what()).find(std::string(tr.name)), std::string::npos) << e.what();
            }
            for (uint8_t b : q) ASSERT_EQ(b, 0xa5);
        }
        const std::vector<float> qw(256, 1.0f);
        tq::quantize_row_weighted(tr.type, x.data(), q.data(), 256, qw.data());
        std::vector<float> y(256);
        tq::dequantize_row(tr.type, q.data(), y.data(), 256);
        EXPECT_LT(rel_rmse(x, y), 0.7) << "weighted quantization of a sine";
    }
    EXPECT_EQ(needs, 3);
}

// Every type Tandem makes on a uniform grid has a bound here; the grid
// types (i-quants, MXFP4) have theirs beside their quantizers
// (test_quant_make_*.cpp).
TEST(QuantTraits, EveryQuantizedTypeHasAnErrorBound) {
    for (const auto& tr : tq::all_traits()) {
        if (!tr.is_quantized || tandem::testing::tested_on_random_codes(tr.type)) continue;
        const bool found =
            std::any_of(std::begin(kModels), std::end(kModels), [&](const ErrorModel& m) { return m.type == tr.type; });
        EXPECT_TRUE(found) << tr.name << " has no round-trip bound";
    }
}

// ---- Float formats: byte-exact --------------------------------------------------

TEST(QuantRoundTrip, F32CopiesBytesExactly) {
    std::mt19937 rng(7);
    std::vector<uint32_t> bits(4096);
    for (auto& b : bits) {
        do b = rng();
        while ((b & 0x7fffffffu) > 0x7f800000u);  // no NaN
    }
    std::vector<float> f(bits.size());
    tq::dequantize_row(Type::F32, bits.data(), f.data(), 4096);
    std::vector<uint32_t> back(bits.size());
    tq::quantize_row(Type::F32, f.data(), back.data(), 4096);
    EXPECT_EQ(back, bits);
}

TEST(QuantRoundTrip, F16AndBf16RoundTripEveryNonNanPatternExactly) {
    for (Type t : {Type::F16, Type::BF16}) {
        SCOPED_TRACE(std::string(tq::traits(t).name));
        std::vector<uint16_t> bits;
        for (uint32_t h = 0; h < 0x10000u; ++h) {
            const bool nan = t == Type::F16 ? ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0)
                                            : ((h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0);
            if (!nan) bits.push_back(static_cast<uint16_t>(h));
        }
        // Shuffled so neighbouring elements are unrelated (a row routine that
        // mixes up elements cannot pass by accident).
        std::shuffle(bits.begin(), bits.end(), std::mt19937(11));
        const auto n = static_cast<int64_t>(bits.size());
        std::vector<float> f(bits.size());
        tq::dequantize_row(t, bits.data(), f.data(), n);
        std::vector<uint16_t> back(bits.size());
        tq::quantize_row(t, f.data(), back.data(), n);
        EXPECT_EQ(back, bits);
    }
}

TEST(QuantRoundTrip, F16AndBf16RoundFloatsWithinHalfAnUlp) {
    const auto x = make_data(Dist::Gaussian, 4096, 3);
    const auto y16 = round_trip(Type::F16, x);
    const auto yb = round_trip(Type::BF16, x);
    for (size_t i = 0; i < x.size(); ++i) {
        // Relative half-ulp: 2^-11 for binary16, 2^-8 for bfloat16 (values
        // here are far from the half subnormal range).
        ASSERT_LE(std::fabs(y16[i] - x[i]), std::fabs(x[i]) * 0x1p-11f) << i;
        ASSERT_LE(std::fabs(yb[i] - x[i]), std::fabs(x[i]) * 0x1p-8f) << i;
    }
}

// ---- Quantized formats: error bounds ---------------------------------------------

TEST(QuantRoundTrip, EveryTypeMeetsItsRmseBoundOnEveryDistribution) {
    for (const ErrorModel& m : kModels) {
        for (Dist d : kDists) {
            for (uint32_t seed : {1u, 2u}) {
                const auto x = make_data(d, kN, seed);
                const double err = rel_rmse(x, round_trip(m.type, x));
                const double model = predicted_rel_rmse(m, x);
                EXPECT_LE(err, m.factor * model)
                    << tq::traits(m.type).name << " " << dist_name(d) << " seed " << seed << " model " << model;
                if (seed == 1) {
                    std::printf("  %-5s %-9s rel RMSE %.5f  model %.5f  ratio %.3f\n",
                                std::string(tq::traits(m.type).name).c_str(), dist_name(d), err, model, err / model);
                }
            }
        }
    }
}

TEST(QuantRoundTrip, BoundsRejectScrambledElementOrder) {
    // What a layout bug looks like after dequantization: right values, wrong
    // places. Reversing each block's elements (and, separately, swapping
    // its halves, the nibble-order mistake) must exceed every bound by far.
    for (const ErrorModel& m : kModels) {
        const int64_t qk = tq::traits(m.type).block_elems;
        const auto x = make_data(Dist::Gaussian, kN, 5);
        const double bound = m.factor * predicted_rel_rmse(m, x);
        auto y = round_trip(m.type, x);
        auto rev = y;
        auto swp = y;
        for (int64_t i = 0; i < kN; i += qk) {
            std::reverse(rev.begin() + i, rev.begin() + i + qk);
            std::rotate(swp.begin() + i, swp.begin() + i + qk / 2, swp.begin() + i + qk);
        }
        EXPECT_GT(rel_rmse(x, rev), 3 * bound) << tq::traits(m.type).name;
        EXPECT_GT(rel_rmse(x, swp), 3 * bound) << tq::traits(m.type).name;
    }
}

TEST(QuantRoundTrip, ZeroAndTinyInputsGiveFiniteOutput) {
    for (const ErrorModel& m : kModels) {
        const Type t = m.type;
        SCOPED_TRACE(std::string(tq::traits(t).name));
        std::vector<float> zeros(1024, 0.0f);
        for (float v : round_trip(t, zeros)) ASSERT_EQ(v, 0.0f);
        // Below the fp16 range of the scales: the scale underflows to 0 and
        // the result must be 0 (or tiny), never NaN from a 0 * inf.
        std::vector<float> tiny = make_data(Dist::Gaussian, 1024, 9);
        for (float& v : tiny) v *= 1e-12f;
        for (float v : round_trip(t, tiny)) ASSERT_TRUE(std::isfinite(v) && std::fabs(v) < 1e-9f);
        // Float subnormals (1/d would overflow): must still give zeros.
        std::vector<float> denormal = make_data(Dist::Gaussian, 1024, 10);
        for (float& v : denormal) v *= 1e-40f;
        for (float v : round_trip(t, denormal)) ASSERT_TRUE(std::isfinite(v) && std::fabs(v) < 1e-30f);
        // A constant block.
        std::vector<float> ones(1024, 0.75f);
        const auto y = round_trip(t, ones);
        EXPECT_LE(rel_rmse(ones, y), 0.02);
    }
}

TEST(QuantRoundTrip, QuantizeWritesExactlyRowBytesAndDequantizeExactlyN) {
    constexpr uint8_t kCanary = 0xa5;
    for (const auto& tr : tq::all_traits()) {
        SCOPED_TRACE(std::string(tr.name));
        const int64_t n = 2 * 256;
        const auto x = make_data(Dist::Gaussian, n, 4);
        const std::vector<float> qw(static_cast<size_t>(n), 1.0f);
        const uint64_t rb = *tq::row_bytes(tr.type, n);
        std::vector<uint8_t> q(rb + 64, kCanary);
        tq::quantize_row_weighted(tr.type, x.data(), q.data(), n, tr.needs_weights ? qw.data() : nullptr);
        for (uint64_t i = rb; i < q.size(); ++i) ASSERT_EQ(q[i], kCanary) << "byte " << i;
        std::vector<float> y(static_cast<size_t>(n) + 16, 123.0f);
        tq::dequantize_row(tr.type, q.data(), y.data(), n);
        for (size_t i = static_cast<size_t>(n); i < y.size(); ++i) ASSERT_EQ(y[i], 123.0f);
    }
}

// Per-element bounds. Legacy formats round each x/d to the nearest code, so
// |err| <= step/2, plus the effect of storing d (and m) as fp16: up to
// (max code) * |d| * 2^-11 (+ |m| * 2^-11). Symmetric Q4_0/Q5_0 put the
// extreme at -8/-16; a value of the opposite sign within half a step of
// the extreme's magnitude rounds to +8/+16 and is clamped to +7/+15, an
// error of up to one full step.
TEST(QuantRoundTrip, LegacyFormatsMeetPerElementBounds) {
    struct Case {
        Type type;
        int qk;
        int half_levels;  // symmetric: 8 or 16; asymmetric / 8-bit: 0
        int max_code;
    };
    const Case cases[] = {{Type::Q4_0, 32, 8, 8},  {Type::Q5_0, 32, 16, 16}, {Type::Q4_1, 32, 0, 15},
                          {Type::Q5_1, 32, 0, 31}, {Type::Q8_0, 32, 0, 127}, {Type::Q8_1, 32, 0, 127}};
    for (const Case& c : cases) {
        for (Dist dist : kDists) {
            SCOPED_TRACE(std::string(tq::traits(c.type).name) + " " + dist_name(dist));
            const auto x = make_data(dist, kN, 21);
            std::vector<uint8_t> q(*tq::row_bytes(c.type, kN));
            tq::quantize_row(c.type, x.data(), q.data(), kN);
            std::vector<float> y(x.size());
            tq::dequantize_row(c.type, q.data(), y.data(), kN);
            const size_t bb = tq::traits(c.type).block_bytes;
            for (int64_t blk = 0; blk < kN / c.qk; ++blk) {
                // Every legacy block starts with its fp16 d; *_1 follow with m.
                const uint8_t* p = q.data() + blk * bb;
                uint16_t dbits = 0;
                uint16_t mbits = 0;
                std::memcpy(&dbits, p, 2);
                std::memcpy(&mbits, p + 2, 2);
                const float d = std::fabs(tq::fp16_to_fp32(dbits));
                const bool has_min = c.type == Type::Q4_1 || c.type == Type::Q5_1;
                const float m = has_min ? std::fabs(tq::fp16_to_fp32(mbits)) : 0.0f;
                const float fp16_slack = (static_cast<float>(c.max_code) * d + m) * 0x1p-11f * 1.01f + 1e-7f;
                float amax = 0.0f;
                for (int j = 0; j < c.qk; ++j) amax = std::max(amax, std::fabs(x[blk * c.qk + j]));
                for (int j = 0; j < c.qk; ++j) {
                    const int64_t i = blk * c.qk + j;
                    const bool clamp_zone = c.half_levels > 0 && std::fabs(x[i]) > (c.half_levels - 0.5f) * d * 0.999f;
                    const float step_bound = clamp_zone ? d : 0.5f * d;
                    ASSERT_LE(std::fabs(y[i] - x[i]), step_bound * 1.0001f + fp16_slack)
                        << "block " << blk << " element " << j << " x " << x[i] << " d " << d;
                }
            }
        }
    }
}

// Q8_K keeps a float scale, d = max/-127: every element within half a step.
TEST(QuantRoundTrip, Q8KMeetsPerElementBoundAndBlockSums) {
    const auto x = make_data(Dist::Outliers, kN, 8);
    std::vector<tq::block_q8_K> q(kN / 256);
    tq::quantize_row(Type::Q8_K, x.data(), q.data(), kN);
    std::vector<float> y(x.size());
    tq::dequantize_row(Type::Q8_K, q.data(), y.data(), kN);
    for (int64_t b = 0; b < kN / 256; ++b) {
        for (int j = 0; j < 256; ++j) {
            const int64_t i = b * 256 + j;
            ASSERT_LE(std::fabs(y[i] - x[i]), std::fabs(q[b].d) * 0.5f * 1.0001f) << i;
        }
        for (int g = 0; g < 16; ++g) {
            int sum = 0;
            for (int j = 0; j < 16; ++j) sum += q[b].qs[16 * g + j];
            ASSERT_EQ(q[b].bsums[g], sum) << "block " << b << " group " << g;
        }
    }
}

// Q8_1's s is d * sum(q) as the *_1 dot products use it.
TEST(QuantRoundTrip, Q81StoresScaledSumOfCodes) {
    const auto x = make_data(Dist::Offset, 1024, 12);
    std::vector<tq::block_q8_1> q(1024 / 32);
    tq::quantize_row(Type::Q8_1, x.data(), q.data(), 1024);
    for (const auto& b : q) {
        int sum = 0;
        for (int8_t v : b.qs) sum += v;
        const float d = tq::fp16_to_fp32(b.d);
        const float s = tq::fp16_to_fp32(b.s);
        // s was computed from the float d before rounding: allow both
        // roundings (2^-11 each) plus the code range.
        EXPECT_NEAR(s, d * static_cast<float>(sum), std::fabs(d * static_cast<float>(sum)) * 0x1p-10f + 1e-6f);
    }
}

// ---- Bit layouts, pinned by hand-built blocks --------------------------------------
//
// Each test sets a few fields of one zeroed block to chosen bit patterns and
// checks the decoded value of elements whose position in the bytes differs
// in the interesting ways (low vs high nibble, first vs second 128-half,
// the 2-bit shift groups). Expected values are worked out in the comments
// from the format definitions in quant_blocks.h / ggml-common.h.

namespace {

constexpr uint16_t kHalfOne = 0x3c00;      // 1.0
constexpr uint16_t kHalfHalf = 0x3800;     // 0.5
constexpr uint16_t kHalfTwo = 0x4000;      // 2.0
constexpr uint16_t kHalfQuarter = 0x3400;  // 0.25
constexpr uint16_t kHalfMinusOne = 0xbc00; // -1.0

template <typename Block>
std::vector<float> decode(Type t, const Block& b) {
    const auto n = tq::traits(t).block_elems;
    std::vector<float> y(static_cast<size_t>(n));
    tq::dequantize_row(t, &b, y.data(), n);
    return y;
}

}  // namespace

TEST(QuantLayout, Q4_0NibbleOrder) {
    tq::block_q4_0 b{};
    b.d = kHalfOne;
    b.qs[0] = 0x21;   // element 0 = low nibble 1 -> (1-8) = -7; element 16 = high nibble 2 -> -6
    b.qs[15] = 0xf0;  // element 15 = 0 -> -8; element 31 = 15 -> 7
    const auto y = decode(Type::Q4_0, b);
    EXPECT_EQ(y[0], -7.0f);
    EXPECT_EQ(y[16], -6.0f);
    EXPECT_EQ(y[15], -8.0f);
    EXPECT_EQ(y[31], 7.0f);
    EXPECT_EQ(y[1], -8.0f);  // zero byte: code 0
}

TEST(QuantLayout, Q4_1ScaleMinAndNibbleOrder) {
    tq::block_q4_1 b{};
    b.d = kHalfHalf;
    b.m = kHalfMinusOne;
    b.qs[3] = 0x5a;  // element 3 = 10 -> 10*0.5 - 1 = 4; element 19 = 5 -> 1.5
    const auto y = decode(Type::Q4_1, b);
    EXPECT_EQ(y[3], 4.0f);
    EXPECT_EQ(y[19], 1.5f);
    EXPECT_EQ(y[0], -1.0f);
}

TEST(QuantLayout, Q5_0HighBitsAreLittleEndianBitJ) {
    tq::block_q5_0 b{};
    b.d = kHalfTwo;
    b.qs[1] = 0x3c;   // element 1 low nibble 12, element 17 low nibble 3
    b.qs[15] = 0x50;  // element 15 low 0, element 31 low 5
    b.qh[0] = 0x02;   // bit 1: element 1 gets +16
    b.qh[3] = 0x80;   // bit 31: element 31 gets +16
    const auto y = decode(Type::Q5_0, b);
    EXPECT_EQ(y[1], 2.0f * (28 - 16));   // 24
    EXPECT_EQ(y[17], 2.0f * (3 - 16));   // -26
    EXPECT_EQ(y[15], 2.0f * (0 - 16));   // -32
    EXPECT_EQ(y[31], 2.0f * (21 - 16));  // 10
}

TEST(QuantLayout, Q5_1HighBitsAndMin) {
    tq::block_q5_1 b{};
    b.d = kHalfQuarter;
    b.m = kHalfOne;
    b.qs[4] = 0x97;   // element 4 low 7, element 20 low 9
    b.qh[2] = 0x10;   // bit 20: element 20 gets +16
    const auto y = decode(Type::Q5_1, b);
    EXPECT_EQ(y[4], 0.25f * 7 + 1.0f);    // 2.75
    EXPECT_EQ(y[20], 0.25f * 25 + 1.0f);  // 7.25
}

TEST(QuantLayout, Q8_0AndQ8_1SignedCodes) {
    tq::block_q8_0 a{};
    a.d = kHalfQuarter;
    a.qs[5] = -100;
    a.qs[31] = 127;
    const auto ya = decode(Type::Q8_0, a);
    EXPECT_EQ(ya[5], -25.0f);
    EXPECT_EQ(ya[31], 31.75f);
    tq::block_q8_1 b{};
    b.d = kHalfHalf;
    b.s = 0x7bff;  // s is for dot products only; must not affect values
    b.qs[0] = -3;
    const auto yb = decode(Type::Q8_1, b);
    EXPECT_EQ(yb[0], -1.5f);
    EXPECT_EQ(yb[1], 0.0f);
}

TEST(QuantLayout, Q2_KShiftGroupsAndScaleNibbles) {
    // Element e: half h = e/128, r = e%128, shift group g = r/32 (bits 2g),
    // byte qs[32h + r%32], scale byte scales[8h + 2g + (r%32)/16];
    // x = d * (sc & 15) * q - dmin * (sc >> 4).
    tq::block_q2_K b{};
    b.d = kHalfOne;
    b.dmin = kHalfHalf;
    b.qs[0] = 0x0b;       // e0: bits 0-1 = 3; e32: bits 2-3 = 2
    b.scales[0] = 0x21;   // sc 1, m 2 -> e0 = 3 - 1 = 2
    b.scales[2] = 0x45;   // sc 5, m 4 -> e32 = 10 - 2 = 8
    b.qs[16] = 0x01;      // e16: code 1, scales[1]
    b.scales[1] = 0x03;   // e16 = 3
    b.qs[40] = 0x30;      // e200: h 1, r 72, g 2, byte 32+8, bits 4-5 = 3
    b.scales[12] = 0xf7;  // sc 7, m 15 -> e200 = 21 - 7.5 = 13.5
    const auto y = decode(Type::Q2_K, b);
    EXPECT_EQ(y[0], 2.0f);
    EXPECT_EQ(y[32], 8.0f);
    EXPECT_EQ(y[16], 3.0f);
    EXPECT_EQ(y[200], 13.5f);
    EXPECT_EQ(y[8], 2.0f * 0 - 1.0f);  // code 0 in group 0: -dmin*m = -1
}

TEST(QuantLayout, Q3_KSignedPackedScalesAndHighMask) {
    // 6-bit scales stored +32: scale j's low nibble is scales[j] (j < 8) or
    // the high nibble of scales[j-8]; its top 2 bits are in scales[8 + j%4]
    // at bit 2*(j/4). Element e's low 2 bits are as in Q2_K; its third bit is
    // hmask[e%32] bit e/32, and a CLEAR bit means "subtract 4".
    tq::block_q3_K b{};
    b.d = kHalfOne;
    // scale 0 = 1: stored 33 = 0b10'0001 -> low nibble 1, top bits 2.
    b.scales[0] = 0x01;
    b.scales[8] = 0x02;
    // scale 9 = -3: stored 29 = 0b01'1101 -> high nibble of scales[1] = 0xd,
    // top bits 1 into scales[9] at bit 4.
    b.scales[1] = 0xd0;
    b.scales[9] = 0x10;
    // scale 15 = 31: stored 63 -> high nibble of scales[7], top bits 3 into
    // scales[11] at bit 6.
    b.scales[7] = 0xf0;
    b.scales[11] = 0xc0;
    // All other scales are stored 0, i.e. -32.
    b.qs[0] = 0x03;       // e0 low bits 3
    b.hmask[0] = 0x01;    // e0 high bit set: 3 -> e0 = 1*3 = 3; e1 stays -4
    b.qs[48] = 0x01;      // e144 (h 1, r 16, g 0): low bits 1, hmask[16] bit 4 clear
    b.qs[63] = 0x80;      // e255 (h 1, r 127, g 3): bits 6-7 = 2
    b.hmask[31] = 0x80;   // e255 high bit set -> 2 * 31 = 62
    const auto y = decode(Type::Q3_K, b);
    EXPECT_EQ(y[0], 3.0f);
    EXPECT_EQ(y[1], -4.0f);             // scale 1 * (0 - 4)
    EXPECT_EQ(y[144], -3.0f * (1 - 4)); // 9
    EXPECT_EQ(y[255], 62.0f);
    EXPECT_EQ(y[16], -32.0f * -4.0f);   // scale 1 is stored 0 -> -32; code -4
}

TEST(QuantLayout, Q4_KSixBitScaleMinPacking) {
    // Sub-block j (32 elements): pair p = j/2; even j in low nibbles of
    // qs[32p..32p+31], odd j in high nibbles. x = d*sc_j*q - dmin*m_j.
    tq::block_q4_K b{};
    b.d = kHalfOne;
    b.dmin = kHalfHalf;
    b.scales[0] = 2;            // sc0 = 2
    b.scales[4] = 4;            // m0 = 4
    b.scales[1] = 0x80 | 0x01;  // sc1 = 1; top bits of sc5 = 2
    b.scales[5] = 0xc0;         // m1 = 0; top bits of m5 = 3
    b.scales[9] = 0x1a;         // sc5 low 0xa -> 42, m5 low 1 -> 49
    b.scales[8] = 0x13;         // sc4 = 3, m4 = 1
    b.qs[0] = 0x5f;             // e0 = 15 (sub 0), e32 = 5 (sub 1)
    b.qs[74] = 0x73;            // e138 = 3 (sub 4), e170 = 7 (sub 5)
    const auto y = decode(Type::Q4_K, b);
    EXPECT_EQ(y[0], 2.0f * 15 - 0.5f * 4);   // 28
    EXPECT_EQ(y[32], 5.0f);
    EXPECT_EQ(y[138], 3.0f * 3 - 0.5f * 1);  // 8.5
    EXPECT_EQ(y[170], 42.0f * 7 - 0.5f * 49);  // 269.5
}

TEST(QuantLayout, Q5_KHighBitPairs) {
    // As Q4_K, plus bit 4 of element 64p + l in qh[l] bit 2p (l < 32) and of
    // element 64p + 32 + l in qh[l] bit 2p + 1.
    tq::block_q5_K b{};
    b.d = kHalfOne;
    b.dmin = kHalfHalf;
    b.scales[0] = 1;     // sc0 = 1, m0 = 0
    b.scales[11] = 0x21; // sc7 = 1, m7 = 2
    b.qs[0] = 0x03;      // e0 low 3
    b.qh[0] = 0x01;      // e0 +16 -> 19
    b.qs[127] = 0xe0;    // e255 (p 3, l 63): high nibble of qs[96+31] = 14
    b.qh[31] = 0x80;     // bit 7: +16 -> 30 -> 30 - 1 = 29
    b.qs[96] = 0x20;     // e224: high nibble 2, qh[0] bit 7 clear -> 2 - 1 = 1
    const auto y = decode(Type::Q5_K, b);
    EXPECT_EQ(y[0], 19.0f);
    EXPECT_EQ(y[255], 29.0f);
    EXPECT_EQ(y[224], 1.0f);
    EXPECT_EQ(y[192], 0.0f);  // sub-block 6 has scale 0
}

TEST(QuantLayout, Q6_KLowAndHighBitInterleaving) {
    // Element e: half h = e/128, r = e%128, quarter g = r/32, l = r%32.
    // Low 4 bits: ql[64h + l + 32*(g&1)], low nibble for g < 2, high for
    // g >= 2. High 2 bits: qh[32h + l] bits 2g. Scale: scales[8h + 2g + l/16].
    // x = d * scale * (q - 32).
    tq::block_q6_K b{};
    b.d = kHalfHalf;
    b.scales[0] = 2;
    b.scales[4] = 1;
    b.scales[7] = -3;
    b.scales[10] = 5;
    b.scales[15] = 4;
    b.ql[0] = 0x95;   // e0 low 5; e64 (g 2) low 9
    b.qh[0] = 0x21;   // e0 high 1 -> 21; e64 high (bits 4-5) 2 -> 41
    b.ql[63] = 0xf0;  // e127 (g 3, l 31): high nibble 15
    b.qh[31] = 0xc0;  // e127 high 3 -> 63
    b.ql[96] = 0x0a;  // e160 (h 1, g 1, l 0): low nibble of ql[64+32] = 10
    b.qh[32] = 0x0c;  // e160 high (bits 2-3) 3 -> 58
    const auto y = decode(Type::Q6_K, b);
    EXPECT_EQ(y[0], 0.5f * 2 * (21 - 32));   // -11
    EXPECT_EQ(y[64], 0.5f * 1 * (41 - 32));  // 4.5
    EXPECT_EQ(y[127], 0.5f * -3 * (63 - 32));  // -46.5
    EXPECT_EQ(y[160], 0.5f * 5 * (58 - 32));   // 65
    EXPECT_EQ(y[255], 0.5f * 4 * (0 - 32));    // -64
}

TEST(QuantLayout, Q8_KFloatScale) {
    tq::block_q8_K b{};
    b.d = -0.25f;
    b.qs[200] = -7;
    b.bsums[12] = 1000;  // dot-product helper only
    const auto y = decode(Type::Q8_K, b);
    EXPECT_EQ(y[200], 1.75f);
    EXPECT_EQ(y[0], 0.0f);
}
