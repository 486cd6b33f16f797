// The IQ3_XXS / IQ3_S / IQ4_NL / IQ4_XS / MXFP4 quantizers
// (runtime/quant/quant_make_iq3.cpp, quant_make_iq4.cpp) and the IQ3 grid
// search tables (iq_grid_search_iq3.cpp). Byte equality with ggml is checked
// by a harness against llama.cpp outside this suite; these tests check what
// holds without it: the tables are what their definition says, the
// quantizers reproduce exactly representable inputs, use the importance
// weights, stay within error bounds, treat blocks independently, and
// handle zero rows and the formats' rounding rules as documented.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "runtime/common/error.h"
#include "runtime/quant/fp16.h"
#include "runtime/quant/iq_grid_search.h"
#include "runtime/quant/iq_tables.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_ref.h"
#include "runtime/quant/quant_types.h"

namespace {

namespace iq = tandem::quant::iq;
namespace ref = tandem::quant::ref;
using tandem::quant::Type;

// ---- helpers ------------------------------------------------------------------------------

using QuantizeW = void (*)(const float*, void*, int64_t, const float*);
using Dequantize = void (*)(const void*, float*, int64_t);

struct WeightedFormat {
    const char* name;
    QuantizeW quantize;
    Dequantize dequantize;
    size_t block_bytes;
    int block_elems;
};

void mxfp4_w(const float* src, void* dst, int64_t n, const float*) { ref::quantize_row_mxfp4(src, dst, n); }

const WeightedFormat kIq3xxs{"IQ3_XXS", ref::quantize_row_iq3_xxs_w, ref::dequantize_row_iq3_xxs,
                     sizeof(tandem::quant::block_iq3_xxs), 256};
const WeightedFormat kIq3s{"IQ3_S", ref::quantize_row_iq3_s_w, ref::dequantize_row_iq3_s, sizeof(tandem::quant::block_iq3_s),
                   256};
const WeightedFormat kIq4nl{"IQ4_NL", ref::quantize_row_iq4_nl_w, ref::dequantize_row_iq4_nl,
                    sizeof(tandem::quant::block_iq4_nl), 32};
const WeightedFormat kIq4xs{"IQ4_XS", ref::quantize_row_iq4_xs_w, ref::dequantize_row_iq4_xs,
                    sizeof(tandem::quant::block_iq4_xs), 256};
const WeightedFormat kMxfp4{"MXFP4", mxfp4_w, ref::dequantize_row_mxfp4, sizeof(tandem::quant::block_mxfp4), 32};

std::vector<uint8_t> quantize(const WeightedFormat& f, const std::vector<float>& x, const float* qw) {
    std::vector<uint8_t> q(x.size() / f.block_elems * f.block_bytes, 0xA5);
    f.quantize(x.data(), q.data(), static_cast<int64_t>(x.size()), qw);
    return q;
}

std::vector<float> roundtrip(const WeightedFormat& f, const std::vector<float>& x, const float* qw) {
    const std::vector<uint8_t> q = quantize(f, x, qw);
    std::vector<float> y(x.size());
    f.dequantize(q.data(), y.data(), static_cast<int64_t>(x.size()));
    return y;
}

std::vector<float> gaussian_values(std::mt19937& rng, size_t n, float sigma = 1.0f) {
    std::normal_distribution<float> N(0.0f, sigma);
    std::vector<float> x(n);
    for (float& v : x) v = N(rng);
    return x;
}

// Importance weights spread over about two orders of magnitude.
std::vector<float> log_normal_importance(std::mt19937& rng, size_t n) {
    std::normal_distribution<float> N(0.0f, 1.5f);
    std::vector<float> w(n);
    for (float& v : w) v = std::exp(N(rng));
    return w;
}

// sum w (x - y)^2 (w = 1 when empty) and sum w x^2.
double weighted_sq_error(const std::vector<float>& x, const std::vector<float>& y, const std::vector<float>& w) {
    double e = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        const double d = static_cast<double>(x[i]) - y[i];
        e += (w.empty() ? 1.0 : w[i]) * d * d;
    }
    return e;
}

double weighted_sq_norm(const std::vector<float>& x, const std::vector<float>& w) {
    return weighted_sq_error(x, std::vector<float>(x.size(), 0.0f), w);
}

// Mean relative squared error of gaussian rows of 1024.
double mean_relative_error(const WeightedFormat& f, bool with_weights, uint32_t seed) {
    std::mt19937 rng(seed);
    double sum = 0;
    constexpr int kRows = 20;
    for (int r = 0; r < kRows; ++r) {
        const std::vector<float> x = gaussian_values(rng, 1024);
        const std::vector<float> w = with_weights ? log_normal_importance(rng, x.size()) : std::vector<float>{};
        const std::vector<float> y = roundtrip(f, x, w.empty() ? nullptr : w.data());
        sum += weighted_sq_error(x, y, w) / weighted_sq_norm(x, w);
    }
    return sum / kRows;
}

// Over many rows: the importance-weighted error with the weights passed
// is below `ratio` times the same error when the quantizer is given none
// (measured: 0.35 IQ3_XXS, 0.41 IQ3_S, 0.68 IQ4_NL, 0.75 IQ4_XS).
void expect_weights_help(const WeightedFormat& f, uint32_t seed, double ratio) {
    std::mt19937 rng(seed);
    double with = 0, without = 0;
    for (int r = 0; r < 20; ++r) {
        const std::vector<float> x = gaussian_values(rng, 512);
        const std::vector<float> w = log_normal_importance(rng, x.size());
        with += weighted_sq_error(x, roundtrip(f, x, w.data()), w);
        without += weighted_sq_error(x, roundtrip(f, x, nullptr), w);
    }
    EXPECT_LT(with, ratio * without) << f.name;
}

// Over many rows: column 5 of every 32 has a smaller error when its weight
// is 1000 times the others' than with uniform weights (measured: 0.05 to
// 0.11 times as large).
void expect_heavy_column_wins(const WeightedFormat& f, uint32_t seed) {
    std::mt19937 rng(seed);
    double heavy = 0, uniform = 0;
    for (int r = 0; r < 20; ++r) {
        const std::vector<float> x = gaussian_values(rng, 512);
        std::vector<float> w(x.size(), 1.0f);
        const std::vector<float> y_uniform = roundtrip(f, x, w.data());
        for (size_t i = 5; i < w.size(); i += 32) w[i] = 1000.0f;
        const std::vector<float> y_heavy = roundtrip(f, x, w.data());
        for (size_t i = 5; i < x.size(); i += 32) {
            heavy += std::pow(x[i] - y_heavy[i], 2.0);
            uniform += std::pow(x[i] - y_uniform[i], 2.0);
        }
    }
    EXPECT_LT(heavy, 0.5 * uniform) << f.name;
}

// A row of several blocks quantizes to the concatenation of its blocks
// quantized alone (and twice to the same bytes).
void expect_blocks_independent(const WeightedFormat& f, uint32_t seed) {
    std::mt19937 rng(seed);
    const std::vector<float> x = gaussian_values(rng, 1024);
    const std::vector<float> w = log_normal_importance(rng, x.size());
    for (const float* qw : {static_cast<const float*>(nullptr), w.data()}) {
        const std::vector<uint8_t> whole = quantize(f, x, qw);
        EXPECT_EQ(whole, quantize(f, x, qw)) << f.name;
        for (size_t b = 0; b < x.size() / f.block_elems; ++b) {
            const std::vector<float> xb(x.begin() + b * f.block_elems, x.begin() + (b + 1) * f.block_elems);
            const std::vector<uint8_t> part = quantize(f, xb, qw ? qw + b * f.block_elems : nullptr);
            EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + b * f.block_bytes)) << f.name << " block " << b;
        }
    }
}

// Multiplying a row (and nothing else) by 4 gives the same codes and a
// scale 4 times as large: every step of the search is invariant under an
// exact power-of-two scaling.
void expect_scaling_invariance(const WeightedFormat& f, uint32_t seed) {
    std::mt19937 rng(seed);
    const std::vector<float> x = gaussian_values(rng, 512);
    const std::vector<float> w = log_normal_importance(rng, x.size());
    std::vector<float> x4 = x;
    for (float& v : x4) v *= 4.0f;
    for (const float* qw : {static_cast<const float*>(nullptr), w.data()}) {
        const std::vector<float> y = roundtrip(f, x, qw);
        const std::vector<float> y4 = roundtrip(f, x4, qw);
        for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(4.0f * y[i], y4[i]) << f.name << " element " << i;
    }
}

void expect_zero_row(const WeightedFormat& f) {
    const std::vector<float> x(512, 0.0f);
    const std::vector<float> w(x.size(), 1.0f);
    for (const float* qw : {static_cast<const float*>(nullptr), w.data()}) {
        for (float v : roundtrip(f, x, qw)) ASSERT_EQ(v, 0.0f) << f.name;
    }
}

// ---- IQ3 search tables --------------------------------------------------------------------

struct Iq3Case {
    Type type;
    const uint32_t* values;
    int size;
    int nwant;  // distinct nearest distances each neighbour list covers
};
const Iq3Case kIq3Cases[] = {{Type::IQ3_XXS, iq::kIq3xxsGrid, 256, 2}, {Type::IQ3_S, iq::kIq3sGrid, 512, 3}};

int position(uint32_t packed, int k) { return static_cast<int>((packed >> (8 * k)) & 0xFFu); }

int distance2(uint32_t grid_point, int key) {
    int d2 = 0;
    for (int k = 0; k < 4; ++k) {
        const int diff = position(grid_point, k) - (2 * ((key >> (3 * k)) & 7) + 1);
        d2 += diff * diff;
    }
    return d2;
}

TEST(QuantMakeIq3, SearchGridPointsMapToThemselves) {
    for (const Iq3Case& c : kIq3Cases) {
        const iq::Iq3Search& s = iq::iq3_search(c.type);
        ASSERT_EQ(s.grid.size(), static_cast<size_t>(c.size));
        ASSERT_EQ(s.map.size(), 4096u);
        int on_grid = 0;
        for (int j = 0; j < c.size; ++j) {
            int key = 0;
            for (int k = 0; k < 4; ++k) {
                const int p = position(s.grid[j], k);
                ASSERT_TRUE(p % 2 == 1 && p <= 15) << "position " << p;
                key |= ((p - 1) / 2) << (3 * k);
            }
            EXPECT_EQ(s.map[key], j);
        }
        for (int32_t m : s.map) on_grid += m >= 0 ? 1 : 0;
        EXPECT_EQ(on_grid, c.size);  // no other key claims a grid point
    }
}

// Positions order as the grid's values do: position p of coordinate k of
// point j is 2 * (rank of the value among the grid's 8 values) + 1.
TEST(QuantMakeIq3, SearchLevelsFollowGridValues) {
    for (const Iq3Case& c : kIq3Cases) {
        const iq::Iq3Search& s = iq::iq3_search(c.type);
        std::set<int> values;
        for (int j = 0; j < c.size; ++j) {
            for (int k = 0; k < 4; ++k) values.insert(iq::grid_byte(c.values[j], k));
        }
        ASSERT_EQ(values.size(), 8u);
        const std::vector<int> sorted(values.begin(), values.end());
        for (int j = 0; j < c.size; ++j) {
            for (int k = 0; k < 4; ++k) {
                const int rank = static_cast<int>(std::find(sorted.begin(), sorted.end(), iq::grid_byte(c.values[j], k)) -
                                                  sorted.begin());
                EXPECT_EQ(position(s.grid[j], k), 2 * rank + 1);
            }
        }
    }
}

// Off-grid keys: a non-empty list of distinct valid indices, sorted by
// (distance, index), holding the nearest grid point, exactly the points
// of the first `nwant` distinct distances, and nothing farther.
TEST(QuantMakeIq3, SearchNeighboursAreNearestGridPoints) {
    for (const Iq3Case& c : kIq3Cases) {
        const iq::Iq3Search& s = iq::iq3_search(c.type);
        for (int key = 0; key < 4096; ++key) {
            if (s.map[key] >= 0) continue;
            const size_t at = static_cast<size_t>(-s.map[key] - 1);
            ASSERT_LT(at, s.neighbours.size());
            const int count = s.neighbours[at];
            ASSERT_GT(count, 0) << "key " << key;
            ASSERT_LE(at + 1 + count, s.neighbours.size());
            std::vector<int> d2(c.size);
            for (int j = 0; j < c.size; ++j) d2[j] = distance2(s.grid[j], key);
            std::set<int> distances(d2.begin(), d2.end());
            std::vector<int> want;  // the nearest nwant distances, every point at them
            auto it = distances.begin();
            for (int n = 0; n < c.nwant && it != distances.end(); ++n, ++it) {
                for (int j = 0; j < c.size; ++j) {
                    if (d2[j] == *it) want.push_back(j);
                }
            }
            std::sort(want.begin(), want.end(), [&](int a, int b) { return d2[a] != d2[b] ? d2[a] < d2[b] : a < b; });
            std::vector<int> got(s.neighbours.begin() + at + 1, s.neighbours.begin() + at + 1 + count);
            for (int j : got) ASSERT_LT(j, c.size);
            EXPECT_EQ(got, want) << "key " << key;
            EXPECT_EQ(d2[got[0]], *distances.begin()) << "key " << key;
        }
    }
}

TEST(QuantMakeIq3, SearchIsBuiltOnceAcrossThreads) {
    std::vector<const iq::Iq3Search*> seen(8);
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&seen, t] { seen[t] = &iq::iq3_search(t % 2 ? Type::IQ3_S : Type::IQ3_XXS); });
    }
    for (std::thread& th : threads) th.join();
    for (int t = 0; t < 8; ++t) EXPECT_EQ(seen[t], &iq::iq3_search(t % 2 ? Type::IQ3_S : Type::IQ3_XXS));
    EXPECT_NE(seen[0], seen[1]);
}

TEST(QuantMakeIq3, SearchRejectsOtherTypes) {
    EXPECT_THROW(iq::iq3_search(Type::IQ2_XXS), tandem::InternalError);
    EXPECT_THROW(iq::iq3_search(Type::Q4_0), tandem::InternalError);
}

// ---- IQ3 quantizers -----------------------------------------------------------------------

TEST(QuantMakeIq3, ErrorBelowBound) {
    // Measured: 0.046 (IQ3_XXS) and 0.028 (IQ3_S) without weights, 0.017
    // and 0.011 with them (the weighted error).
    EXPECT_LT(mean_relative_error(kIq3xxs, false, 1), 0.065);
    EXPECT_LT(mean_relative_error(kIq3s, false, 2), 0.04);
    EXPECT_LT(mean_relative_error(kIq3xxs, true, 3), 0.03);
    EXPECT_LT(mean_relative_error(kIq3s, true, 4), 0.02);
}

TEST(QuantMakeIq3, ImportanceWeightsReduceWeightedError) {
    expect_weights_help(kIq3xxs, 5, 0.6);
    expect_weights_help(kIq3s, 6, 0.6);
}

TEST(QuantMakeIq3, HeavyColumnGetsSmallerError) {
    expect_heavy_column_wins(kIq3xxs, 7);
    expect_heavy_column_wins(kIq3s, 8);
}

TEST(QuantMakeIq3, AllZeroRowIsZero) {
    expect_zero_row(kIq3xxs);
    expect_zero_row(kIq3s);
    const std::vector<float> x(256, 0.0f);
    for (const WeightedFormat* f : {&kIq3xxs, &kIq3s}) {
        for (uint8_t b : quantize(*f, x, nullptr)) ASSERT_EQ(b, 0) << f->name;
    }
}

TEST(QuantMakeIq3, BlocksAreIndependentAndDeterministic) {
    expect_blocks_independent(kIq3xxs, 9);
    expect_blocks_independent(kIq3s, 10);
}

TEST(QuantMakeIq3, PowerOfTwoScalingScalesOnlyTheScale) {
    expect_scaling_invariance(kIq3xxs, 11);
    expect_scaling_invariance(kIq3s, 12);
}

// A row built from grid points, x = step * (2 l + 1) * sign, with one step
// for the whole row and a point holding level 7 first in every chunk: the
// trial inverse scale 15 / max fits every group exactly, so each group's
// stored index is the point it was built from, every sign is kept (IQ3_XXS:
// an even count of negatives in each group of 8), and every chunk gets
// the scale code 15 (the largest, as all chunk scales are equal).
struct LatticeRow {
    std::vector<float> x;
    std::vector<int> index;  // grid index of each group of 4
};

LatticeRow lattice_row(Type t, int grid_size, uint32_t seed) {
    const iq::Iq3Search& s = iq::iq3_search(t);
    std::mt19937 rng(seed);
    int top = -1;  // a grid point with a coordinate at level 7
    for (int j = 0; j < grid_size && top < 0; ++j) {
        for (int k = 0; k < 4; ++k) {
            if (position(s.grid[j], k) == 15) top = j;
        }
    }
    LatticeRow r;
    r.x.resize(512);
    for (size_t g = 0; g < r.x.size() / 4; ++g) {
        const int j = g % 8 == 0 ? top : static_cast<int>(rng() % grid_size);
        r.index.push_back(j);
        for (int k = 0; k < 4; ++k) r.x[4 * g + k] = 0.01f * static_cast<float>(position(s.grid[j], k));
    }
    for (size_t g = 0; g < r.x.size() / 8; ++g) {
        int negatives = 0;
        for (int i = 0; i < 7; ++i) {
            if (rng() % 2) {
                r.x[8 * g + i] = -r.x[8 * g + i];
                ++negatives;
            }
        }
        if (negatives % 2) r.x[8 * g + 7] = -r.x[8 * g + 7];
    }
    return r;
}

TEST(QuantMakeIq3, Iq3sKeepsLatticeRows) {
    const LatticeRow r = lattice_row(Type::IQ3_S, 512, 13);
    const std::vector<uint8_t> q = quantize(kIq3s, r.x, nullptr);
    for (size_t ibl = 0; ibl < 2; ++ibl) {
        tandem::quant::block_iq3_s b;
        std::memcpy(&b, q.data() + ibl * sizeof b, sizeof b);
        for (int g = 0; g < 64; ++g) {
            const int index = b.qs[g] | (((b.qh[g / 8] >> (g % 8)) & 1) << 8);
            EXPECT_EQ(index, r.index[64 * ibl + g]) << "group " << g;
        }
        for (int i = 0; i < 256; ++i) {
            EXPECT_EQ((b.signs[i / 8] >> (i % 8)) & 1, r.x[256 * ibl + i] < 0 ? 1 : 0) << "element " << i;
        }
        for (uint8_t sc : b.scales) EXPECT_EQ(sc, 0xFF);
    }
}

TEST(QuantMakeIq3, Iq3xxsKeepsLatticeRows) {
    const LatticeRow r = lattice_row(Type::IQ3_XXS, 256, 14);
    const std::vector<uint8_t> q = quantize(kIq3xxs, r.x, nullptr);
    for (size_t ibl = 0; ibl < 2; ++ibl) {
        tandem::quant::block_iq3_xxs b;
        std::memcpy(&b, q.data() + ibl * sizeof b, sizeof b);
        for (int g = 0; g < 64; ++g) EXPECT_EQ(b.qs[g], r.index[64 * ibl + g]) << "group " << g;
        for (int c = 0; c < 8; ++c) {
            uint32_t word;
            std::memcpy(&word, b.qs + 64 + 4 * c, 4);
            EXPECT_EQ(word >> 28, 15u);
            for (int i = 0; i < 32; ++i) {
                const uint32_t signs = iq::signs_of7((word >> (7 * (i / 8))) & 127);
                EXPECT_EQ((signs >> (i % 8)) & 1, r.x[256 * ibl + 32 * c + i] < 0 ? 1u : 0u) << "element " << i;
            }
        }
    }
}

// IQ3_S stores all 8 signs: negating the row negates the output exactly.
TEST(QuantMakeIq3, Iq3sNegationNegatesOutput) {
    std::mt19937 rng(15);
    const std::vector<float> x = gaussian_values(rng, 512);
    const std::vector<float> w = log_normal_importance(rng, x.size());
    std::vector<float> neg = x;
    for (float& v : neg) v = -v;
    const std::vector<float> y = roundtrip(kIq3s, x, w.data());
    const std::vector<float> yn = roundtrip(kIq3s, neg, w.data());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(yn[i], -y[i]) << "element " << i;
}

TEST(QuantMakeIq3, RejectsPartialBlocks) {
    std::vector<float> x(200, 1.0f);
    std::vector<uint8_t> q(1024);
    EXPECT_THROW(ref::quantize_row_iq3_xxs_w(x.data(), q.data(), 200, nullptr), tandem::InternalError);
    EXPECT_THROW(ref::quantize_row_iq3_s_w(x.data(), q.data(), 200, nullptr), tandem::InternalError);
}

// ---- IQ4_NL / IQ4_XS ---------------------------------------------------------------------

// The naive 4-bit non-linear quantization: d = max / -127 (the signed
// extreme onto the table's -127), each code the nearest table value.
double naive_iq4nl_error(const std::vector<float>& x, const std::vector<float>& w) {
    double e = 0;
    for (size_t b = 0; b < x.size() / 32; ++b) {
        float max = 0;
        for (size_t j = 32 * b; j < 32 * (b + 1); ++j) {
            if (std::fabs(x[j]) > std::fabs(max)) max = x[j];
        }
        const float d = max / -127.0f;
        for (size_t j = 32 * b; j < 32 * (b + 1); ++j) {
            float best = 0, best_err = INFINITY;
            for (int q = 0; q < 16; ++q) {
                const float v = d * iq::iq4nl_value(q);
                if (std::fabs(v - x[j]) < best_err) {
                    best_err = std::fabs(v - x[j]);
                    best = v;
                }
            }
            e += (w.empty() ? 1.0 : w[j]) * std::pow(static_cast<double>(x[j]) - best, 2.0);
        }
    }
    return e;
}

TEST(QuantMakeIq4, ErrorBelowBoundAndBelowNaive) {
    // Measured: 0.0058 for both without weights, 0.0042 and 0.0044 with
    // them; the search's error is 0.91 of the naive one.
    EXPECT_LT(mean_relative_error(kIq4nl, false, 21), 0.009);
    EXPECT_LT(mean_relative_error(kIq4xs, false, 22), 0.009);
    EXPECT_LT(mean_relative_error(kIq4nl, true, 23), 0.007);
    EXPECT_LT(mean_relative_error(kIq4xs, true, 24), 0.007);
    std::mt19937 rng(25);
    double ours = 0, naive = 0;
    for (int r = 0; r < 20; ++r) {
        const std::vector<float> x = gaussian_values(rng, 512);
        ours += weighted_sq_error(x, roundtrip(kIq4nl, x, nullptr), {});
        naive += naive_iq4nl_error(x, {});
    }
    EXPECT_LT(ours, 0.95 * naive);
}

TEST(QuantMakeIq4, ImportanceWeightsReduceWeightedError) {
    expect_weights_help(kIq4nl, 26, 0.85);
    expect_weights_help(kIq4xs, 27, 0.85);
}

TEST(QuantMakeIq4, HeavyColumnGetsSmallerError) {
    expect_heavy_column_wins(kIq4nl, 28);
    expect_heavy_column_wins(kIq4xs, 29);
}

TEST(QuantMakeIq4, AllZeroRowIsZero) {
    expect_zero_row(kIq4nl);
    expect_zero_row(kIq4xs);
}

TEST(QuantMakeIq4, BlocksAreIndependentAndDeterministic) {
    expect_blocks_independent(kIq4nl, 30);
    expect_blocks_independent(kIq4xs, 31);
}

TEST(QuantMakeIq4, PowerOfTwoScalingScalesOnlyTheScale) {
    expect_scaling_invariance(kIq4nl, 32);
    expect_scaling_invariance(kIq4xs, 33);
}

// x = d * table[q] with d a power of two and every block holding a -127:
// the trial inverse scale 1/d fits exactly, so both formats return x.
TEST(QuantMakeIq4, ReproducesTableRowsExactly) {
    std::mt19937 rng(34);
    const float d = 1.0f / 64;
    std::vector<float> x(512);
    for (size_t j = 0; j < x.size(); ++j) x[j] = d * static_cast<float>(iq::iq4nl_value(j % 32 == 3 ? 0 : rng() % 16));
    const std::vector<float> w = log_normal_importance(rng, x.size());
    for (const WeightedFormat* f : {&kIq4nl, &kIq4xs}) {
        for (const float* qw : {static_cast<const float*>(nullptr), w.data()}) {
            const std::vector<float> y = roundtrip(*f, x, qw);
            for (size_t j = 0; j < x.size(); ++j) ASSERT_EQ(y[j], x[j]) << f->name << " element " << j;
        }
    }
}

// IQ4_XS: the super-block scale is -max_scale / 32, so the block with the
// largest scale gets the 6-bit code -32 (stored 0) and the others their
// ratio to it: a row whose blocks are one table row scaled by 1, 1/2, 1/4
// keeps those ratios exactly.
TEST(QuantMakeIq4, Iq4xsBlockScalesKeepPowerOfTwoRatios) {
    std::mt19937 rng(35);
    std::vector<float> base(32);
    for (size_t j = 0; j < 32; ++j) base[j] = static_cast<float>(iq::iq4nl_value(j == 7 ? 0 : rng() % 16)) / 64;
    std::vector<float> x(256);
    for (size_t j = 0; j < x.size(); ++j) x[j] = base[j % 32] * std::ldexp(1.0f, -static_cast<int>(j / 32 % 3));
    const std::vector<uint8_t> q = quantize(kIq4xs, x, nullptr);
    tandem::quant::block_iq4_xs b;
    std::memcpy(&b, q.data(), sizeof b);
    for (int ib = 0; ib < 8; ++ib) {
        const int l = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4);
        EXPECT_EQ(l - 32, -32 >> (ib % 3)) << "block " << ib;
    }
    const std::vector<float> y = roundtrip(kIq4xs, x, nullptr);
    for (size_t j = 0; j < x.size(); ++j) ASSERT_EQ(y[j], x[j]) << "element " << j;
}

// ---- MXFP4 --------------------------------------------------------------------------------

tandem::quant::block_mxfp4 mxfp4_block(const std::vector<float>& x) {
    tandem::quant::block_mxfp4 b;
    ref::quantize_row_mxfp4(x.data(), &b, 32);
    return b;
}

// e = floor(log2(amax)) - 2 + 127: the block scale 2^(e - 127) puts amax
// in [4, 8) times it, at or above E2M1's 4 and below 8.
TEST(QuantMakeMxfp4, ExponentFromLargestMagnitude) {
    struct Case {
        float amax;
        int e;
    };
    for (const Case& c : {Case{6.0f, 127}, Case{4.0f, 127}, Case{7.99f, 127}, Case{8.0f, 128}, Case{0.75f, 124},
                          Case{-0.5f, 124}, Case{1e-3f, 115}, Case{3.0e38f, 252}}) {
        std::vector<float> x(32, 0.0f);
        x[9] = c.amax;
        x[3] = c.amax / 3;
        EXPECT_EQ(mxfp4_block(x).e, c.e) << "amax " << c.amax;
    }
    EXPECT_EQ(mxfp4_block(std::vector<float>(32, 0.0f)).e, 0);
}

// Each code is the E2M1 value nearest to x / 2^(e - 127); of two equally
// near, the first in table order (the smaller magnitude, and +0 for a
// value halfway to the least nonzero one).
TEST(QuantMakeMxfp4, RoundsToNearestFirstOfEquals) {
    std::vector<float> x(32, 0.0f);
    x[0] = 6.0f;  // e = 127: scale 1, table / 2 = 0, 0.5, 1, 1.5, 2, 3, 4, 6
    const float in[] = {5.0f, 5.01f, 3.5f, -2.5f, 0.25f, -0.25f, 0.26f, 1.25f, 7.9f, -7.5f, 0.74f};
    const float out[] = {4.0f, 6.0f, 3.0f, -2.0f, 0.0f, 0.0f, 0.5f, 1.0f, 6.0f, -6.0f, 0.5f};
    for (size_t i = 0; i < std::size(in); ++i) x[1 + i] = in[i];
    const tandem::quant::block_mxfp4 b = mxfp4_block(x);
    std::vector<float> y(32);
    ref::dequantize_row_mxfp4(&b, y.data(), 32);
    for (size_t i = 0; i < std::size(in); ++i) EXPECT_EQ(y[1 + i], out[i]) << "input " << in[i];
    // -0.25 (element 6) ties between +0 (index 0) and -0 (index 8): index 0
    // comes first.
    EXPECT_EQ(b.qs[6] & 0xF, 0);
}

// Values that are E2M1 numbers times a power of two come back exactly.
TEST(QuantMakeMxfp4, ReproducesE2m1RowsExactly) {
    std::mt19937 rng(41);
    std::vector<float> x(1024);
    for (size_t b = 0; b < x.size() / 32; ++b) {
        const float scale = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);
        for (size_t j = 0; j < 32; ++j) {
            x[32 * b + j] = scale * 0.5f * static_cast<float>(iq::mxfp4_value(j == 11 ? 7 : rng() % 16));
        }
    }
    const std::vector<float> y = roundtrip(kMxfp4, x, nullptr);
    for (size_t j = 0; j < x.size(); ++j) ASSERT_EQ(y[j], x[j]) << "element " << j;
}

TEST(QuantMakeMxfp4, ErrorBelowBoundAndZeroRow) {
    // Measured: 0.013.
    EXPECT_LT(mean_relative_error(kMxfp4, false, 42), 0.02);
    expect_zero_row(kMxfp4);
    expect_blocks_independent(kMxfp4, 43);
    expect_scaling_invariance(kMxfp4, 44);
}

}  // namespace
