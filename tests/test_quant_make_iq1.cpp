// The IQ1_S / IQ1_M quantizers (runtime/quant/quant_make_iq1.cpp), checked
// without llama.cpp (byte equality with ggml is checked by a harness that
// links it):
//  * IQ1_S refuses a missing importance matrix; IQ1_M takes none (ggml
//    weighs by x^2 then);
//  * the weighted squared error of a round trip is well below the signal's
//    and below that of the same blocks with chunks moved to other grid
//    points or with a shift sign flipped; rows of one sign too;
//  * IQ1_M's block scale is the least-squares fit over its codes (times
//    ggml's 1.1125);
//  * a column with a large importance weight is reproduced more closely;
//  * all-zero rows give all-zero blocks; results are deterministic; a row of
//    several blocks is the concatenation of its blocks; scaling the input by
//    2 keeps every code and doubles the stored scale exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/common/error.h"
#include "runtime/quant/fp16.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_ref.h"

namespace tq = tandem::quant;
namespace ref = tandem::quant::ref;

namespace {

using QuantFn = void (*)(const float*, void*, int64_t, const float*);
using DequantFn = void (*)(const void*, float*, int64_t);

struct Iq1Type {
    const char* name;
    QuantFn quantize;
    DequantFn dequantize;
    size_t block_bytes;
};

const Iq1Type kIq1s{"IQ1_S", ref::quantize_row_iq1_s_w, ref::dequantize_row_iq1_s, sizeof(tq::block_iq1_s)};
const Iq1Type kIq1m{"IQ1_M", ref::quantize_row_iq1_m_w, ref::dequantize_row_iq1_m, sizeof(tq::block_iq1_m)};

std::vector<float> gaussian_row(int64_t n, uint32_t seed, float sigma = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0.0f, sigma);
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = g(rng);
    return x;
}

std::vector<float> positive_weights(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::lognormal_distribution<float> ln(0.0f, 1.0f);
    std::vector<float> w(static_cast<size_t>(n));
    for (auto& v : w) v = ln(rng);
    return w;
}

std::vector<uint8_t> quantize(const Iq1Type& t, const std::vector<float>& x, const float* qw) {
    std::vector<uint8_t> q(x.size() / tq::kQK_K * t.block_bytes);
    t.quantize(x.data(), q.data(), static_cast<int64_t>(x.size()), qw);
    return q;
}

std::vector<float> dequantize(const Iq1Type& t, const std::vector<uint8_t>& q, size_t n) {
    std::vector<float> y(n);
    t.dequantize(q.data(), y.data(), static_cast<int64_t>(n));
    return y;
}

double weighted_error(const std::vector<float>& x, const std::vector<float>& y, const std::vector<float>& w) {
    double e = 0;
    for (size_t i = 0; i < x.size(); ++i) e += static_cast<double>(w[i]) * (x[i] - y[i]) * (x[i] - y[i]);
    return e;
}

double weighted_energy(const std::vector<float>& x, const std::vector<float>& w) {
    double e = 0;
    for (size_t i = 0; i < x.size(); ++i) e += static_cast<double>(w[i]) * x[i] * x[i];
    return e;
}

// Moves chunk c (8 weights) of block b to grid point g (11-bit index),
// keeping its scale and shift.
void set_chunk_index(const Iq1Type& t, std::vector<uint8_t>& q, int b, int c, int g) {
    uint8_t* block = q.data() + static_cast<size_t>(b) * t.block_bytes;
    if (&t == &kIq1s) {
        auto* y = reinterpret_cast<tq::block_iq1_s*>(block);
        y->qs[c] = static_cast<uint8_t>(g & 255);
        const int shift = 3 * (c % 4);
        y->qh[c / 4] = static_cast<uint16_t>((y->qh[c / 4] & ~(7 << shift)) | ((g >> 8) << shift));
    } else {
        auto* y = reinterpret_cast<tq::block_iq1_m*>(block);
        y->qs[c] = static_cast<uint8_t>(g & 255);
        const int shift = 4 * (c % 2);
        y->qh[c / 2] = static_cast<uint8_t>((y->qh[c / 2] & ~(7 << shift)) | ((g >> 8) << shift));
    }
}

}  // namespace

TEST(QuantMakeIq1, Iq1sNeedsImportanceMatrix) {
    const auto x = gaussian_row(256, 1);
    std::vector<uint8_t> q(sizeof(tq::block_iq1_s));
    try {
        ref::quantize_row_iq1_s_w(x.data(), q.data(), 256, nullptr);
        FAIL() << "IQ1_S quantized without an importance matrix";
    } catch (const tandem::Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("IQ1_S"), std::string::npos) << what;
        EXPECT_NE(what.find("importance matrix"), std::string::npos) << what;
        EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
}

TEST(QuantMakeIq1, Iq1mTakesNoMatrix) {
    // ggml's IQ1_M without a matrix weighs weight i by x_i^2; that must still
    // reproduce the row about as well as with a flat matrix.
    const auto x = gaussian_row(4 * 256, 2);
    const std::vector<float> flat(x.size(), 1.0f);
    const auto y_null = dequantize(kIq1m, quantize(kIq1m, x, nullptr), x.size());
    const auto y_flat = dequantize(kIq1m, quantize(kIq1m, x, flat.data()), x.size());
    const double energy = weighted_energy(x, flat);
    EXPECT_LT(weighted_error(x, y_null, flat), 0.5 * energy);
    EXPECT_LT(weighted_error(x, y_flat, flat), 0.5 * energy);
}

TEST(QuantMakeIq1, ErrorWellBelowSignal) {
    // About 1.6-1.8 bits a weight: on Gaussian rows the weighted relative
    // error comes out near 0.2 (IQ1_S) and 0.15 (IQ1_M).
    for (const Iq1Type* t : {&kIq1s, &kIq1m}) {
        for (uint32_t seed = 10; seed < 14; ++seed) {
            const auto x = gaussian_row(8 * 256, seed, 0.02f);
            const auto w = positive_weights(x.size(), seed + 100);
            const auto y = dequantize(*t, quantize(*t, x, w.data()), x.size());
            const double rel = weighted_error(x, y, w) / weighted_energy(x, w);
            EXPECT_LT(rel, 0.3) << t->name << " seed " << seed;
            EXPECT_GT(rel, 0.0) << t->name << " seed " << seed;
        }
    }
}

TEST(QuantMakeIq1, ChosenGridPointsBeatOtherPoints) {
    // Moving one chunk of 8 to another grid point (scale and shift kept)
    // should almost never lower the block's weighted error: the search picks
    // the points, the scales follow them.
    std::mt19937 rng(5);
    for (const Iq1Type* t : {&kIq1s, &kIq1m}) {
        const auto x = gaussian_row(16 * 256, 20);
        const auto w = positive_weights(x.size(), 21);
        const auto q = quantize(*t, x, w.data());
        const double base = weighted_error(x, dequantize(*t, q, x.size()), w);
        int better = 0, trials = 0;
        for (int b = 0; b < 16; ++b) {
            for (int rep = 0; rep < 8; ++rep) {
                auto moved = q;
                set_chunk_index(*t, moved, b, static_cast<int>(rng() % 32), static_cast<int>(rng() % 2048));
                if (moved == q) continue;
                ++trials;
                if (weighted_error(x, dequantize(*t, moved, x.size()), w) < base) ++better;
            }
        }
        ASSERT_GT(trials, 100) << t->name;
        EXPECT_LE(better, trials / 50) << t->name << ": " << better << " of " << trials << " moves improved";
    }
}

TEST(QuantMakeIq1, ChosenShiftsBeatFlippedShifts) {
    // The shift sign (+-1/8) of each IQ1_S group of 32 (qh bit 15) and of
    // each IQ1_M chunk of 8 (qh bits 3 and 7) is chosen with the split;
    // flipping one should rarely lower the block's weighted error.
    const auto x = gaussian_row(16 * 256, 80);
    const auto w = positive_weights(x.size(), 81);
    for (const Iq1Type* t : {&kIq1s, &kIq1m}) {
        const auto q = quantize(*t, x, w.data());
        const double base = weighted_error(x, dequantize(*t, q, x.size()), w);
        int better = 0, trials = 0;
        for (int b = 0; b < 16; ++b) {
            const int flips = t == &kIq1s ? 8 : 16;
            for (int f = 0; f < flips; ++f) {
                auto moved = q;
                uint8_t* block = moved.data() + static_cast<size_t>(b) * t->block_bytes;
                if (t == &kIq1s) {
                    reinterpret_cast<tq::block_iq1_s*>(block)->qh[f] ^= 0x8000;
                } else {
                    reinterpret_cast<tq::block_iq1_m*>(block)->qh[f / 2] ^= (f % 2 ? 0x80 : 0x08);
                }
                ++trials;
                if (weighted_error(x, dequantize(*t, moved, x.size()), w) < base) ++better;
            }
        }
        EXPECT_LE(better, trials / 10) << t->name << ": " << better << " of " << trials << " flips improved";
    }
}

TEST(QuantMakeIq1, Iq1mBlockScaleIsRefitted) {
    // IQ1_M's block scale is the least-squares fit over the chosen codes
    // q (element value / block scale) with w = qw * sqrt(sigma2 + x^2),
    // times ggml's factor 1.1125, rounded to fp16.
    constexpr int kBlocks = 8;
    const auto x = gaussian_row(kBlocks * 256, 90);
    const auto qw = positive_weights(x.size(), 91);
    const auto q = quantize(kIq1m, x, qw.data());
    const auto y = dequantize(kIq1m, q, x.size());
    for (int b = 0; b < kBlocks; ++b) {
        tq::block_iq1_m blk;
        std::memcpy(&blk, q.data() + b * sizeof blk, sizeof blk);
        uint16_t sc[4];
        std::memcpy(sc, blk.scales, sizeof sc);
        const auto h = static_cast<tq::fp16_bits>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) |
                                                  (sc[3] & 0xf000));
        const double d = tq::fp16_to_fp32(h);
        ASSERT_GT(d, 0.0);
        double sumx2 = 0;
        for (int i = 0; i < 256; ++i) sumx2 += static_cast<double>(x[b * 256 + i]) * x[b * 256 + i];
        const double sigma2 = 2 * sumx2 / 256;
        double sumqx = 0, sumq2 = 0;
        for (int i = b * 256; i < (b + 1) * 256; ++i) {
            const double w = qw[i] * std::sqrt(sigma2 + static_cast<double>(x[i]) * x[i]);
            const double qi = y[i] / d;
            sumqx += w * qi * x[i];
            sumq2 += w * qi * qi;
        }
        EXPECT_NEAR(d, 1.1125 * sumqx / sumq2, 1e-3 * d) << "block " << b;
    }
}

TEST(QuantMakeIq1, HeavyColumnIsReproducedMoreClosely) {
    // Column 37 of every block weighted 1e4 times the rest: over many rows
    // its error must drop well below what a flat matrix gives it.
    constexpr int kRows = 64, kN = 2 * 256, kCol = 37;
    for (const Iq1Type* t : {&kIq1s, &kIq1m}) {
        std::vector<float> flat(kN, 1.0f), heavy(kN, 1.0f);
        heavy[kCol] = heavy[256 + kCol] = 1e4f;
        double err_flat = 0, err_heavy = 0;
        for (int r = 0; r < kRows; ++r) {
            const auto x = gaussian_row(kN, 300 + r);
            const auto yf = dequantize(*t, quantize(*t, x, flat.data()), kN);
            const auto yh = dequantize(*t, quantize(*t, x, heavy.data()), kN);
            for (int c : {kCol, 256 + kCol}) {
                err_flat += (x[c] - yf[c]) * (x[c] - yf[c]);
                err_heavy += (x[c] - yh[c]) * (x[c] - yh[c]);
            }
        }
        EXPECT_LT(err_heavy, 0.5 * err_flat) << t->name << ": heavy " << err_heavy << " flat " << err_flat;
    }
}

TEST(QuantMakeIq1, AllZeroRowGivesZeroBlocks) {
    const std::vector<float> x(3 * 256, 0.0f);
    const auto w = positive_weights(x.size(), 7);
    for (const Iq1Type* t : {&kIq1s, &kIq1m}) {
        for (const float* qw : {w.data(), static_cast<const float*>(nullptr)}) {
            if (qw == nullptr && t == &kIq1s) continue;
            std::vector<uint8_t> q(3 * t->block_bytes, 0xAB);  // must all be overwritten
            t->quantize(x.data(), q.data(), static_cast<int64_t>(x.size()), qw);
            for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(q[i], 0) << t->name << " byte " << i;
            for (float v : dequantize(*t, q, x.size())) ASSERT_EQ(v, 0.0f) << t->name;
        }
    }
}

TEST(QuantMakeIq1, DeterministicAndBlockwise) {
    // Each block depends only on its own 256 weights and importances.
    constexpr int kBlocks = 5;
    for (const Iq1Type* t : {&kIq1s, &kIq1m}) {
        auto x = gaussian_row(kBlocks * 256, 40);
        for (int i = 256; i < 512; ++i) x[i] *= 100.0f;  // blocks of different magnitude
        const auto w = positive_weights(x.size(), 41);
        const auto whole = quantize(*t, x, w.data());
        EXPECT_EQ(whole, quantize(*t, x, w.data())) << t->name;
        for (int b = 0; b < kBlocks; ++b) {
            const std::vector<float> xb(x.begin() + b * 256, x.begin() + (b + 1) * 256);
            const std::vector<float> wb(w.begin() + b * 256, w.begin() + (b + 1) * 256);
            const auto single = quantize(*t, xb, wb.data());
            const std::vector<uint8_t> part(whole.begin() + b * t->block_bytes,
                                            whole.begin() + (b + 1) * t->block_bytes);
            EXPECT_EQ(single, part) << t->name << " block " << b;
        }
    }
}

TEST(QuantMakeIq1, DoublingInputDoublesOnlyTheScale) {
    // x -> 2x multiplies every weight, sum and candidate scale by a power of
    // two, exactly, so every choice is the same: the codes are identical and
    // the fp16 block scale's exponent goes up by one.
    const auto x = gaussian_row(4 * 256, 50);
    std::vector<float> x2(x);
    for (auto& v : x2) v *= 2.0f;
    const auto w = positive_weights(x.size(), 51);
    {
        const auto a = quantize(kIq1s, x, w.data()), b = quantize(kIq1s, x2, w.data());
        for (int i = 0; i < 4; ++i) {
            tq::block_iq1_s ba, bb;
            std::memcpy(&ba, a.data() + i * sizeof ba, sizeof ba);
            std::memcpy(&bb, b.data() + i * sizeof bb, sizeof bb);
            EXPECT_EQ(0, std::memcmp(ba.qs, bb.qs, sizeof ba.qs)) << "IQ1_S block " << i;
            EXPECT_EQ(0, std::memcmp(ba.qh, bb.qh, sizeof ba.qh)) << "IQ1_S block " << i;
            EXPECT_EQ(tq::fp16_to_fp32(bb.d), 2.0f * tq::fp16_to_fp32(ba.d)) << "IQ1_S block " << i;
        }
    }
    for (const float* qw : {w.data(), static_cast<const float*>(nullptr)}) {
        const auto a = quantize(kIq1m, x, qw), b = quantize(kIq1m, x2, qw);
        const auto ya = dequantize(kIq1m, a, x.size()), yb = dequantize(kIq1m, b, x.size());
        for (int i = 0; i < 4; ++i) {
            tq::block_iq1_m ba, bb;
            std::memcpy(&ba, a.data() + i * sizeof ba, sizeof ba);
            std::memcpy(&bb, b.data() + i * sizeof bb, sizeof bb);
            EXPECT_EQ(0, std::memcmp(ba.qs, bb.qs, sizeof ba.qs)) << "IQ1_M block " << i;
            EXPECT_EQ(0, std::memcmp(ba.qh, bb.qh, sizeof ba.qh)) << "IQ1_M block " << i;
        }
        for (size_t i = 0; i < ya.size(); ++i) ASSERT_EQ(yb[i], 2.0f * ya[i]) << "IQ1_M element " << i;
    }
}

TEST(QuantMakeIq1, AllPositiveRowsReproduced) {
    // Rows away from zero on one side: the split search can end on a
    // negative scale there (the levels are then mirrored and the shifts
    // flipped), which must still reproduce every group of 16.
    std::mt19937 rng(70);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> x(8 * 256);
    for (auto& v : x) v = std::fabs(g(rng)) + 0.5f;
    const auto w = positive_weights(x.size(), 71);
    for (const Iq1Type* t : {&kIq1s, &kIq1m}) {
        for (float sign : {1.0f, -1.0f}) {
            std::vector<float> xs(x);
            for (auto& v : xs) v *= sign;
            const auto y = dequantize(*t, quantize(*t, xs, w.data()), xs.size());
            double worst = 0;
            for (size_t g0 = 0; g0 < xs.size(); g0 += 16) {
                double e = 0, s = 0;
                for (size_t i = g0; i < g0 + 16; ++i) {
                    e += w[i] * (xs[i] - y[i]) * (xs[i] - y[i]);
                    s += w[i] * xs[i] * xs[i];
                }
                worst = std::max(worst, e / s);
            }
            EXPECT_LT(worst, 0.6) << t->name << " sign " << sign;
        }
    }
}

TEST(QuantMakeIq1, ZeroImportanceColumnsAreTolerated) {
    // Columns with zero importance (an imatrix that never saw them) and a
    // whole group of them: the rest must still be reproduced.
    auto w = positive_weights(2 * 256, 60);
    for (size_t i = 0; i < w.size(); i += 3) w[i] = 0.0f;
    for (int i = 32; i < 64; ++i) w[i] = 0.0f;  // an IQ1_S group, two IQ1_M groups
    const auto x = gaussian_row(w.size(), 61);
    for (const Iq1Type* t : {&kIq1s, &kIq1m}) {
        const auto y = dequantize(*t, quantize(*t, x, w.data()), x.size());
        for (float v : y) ASSERT_TRUE(std::isfinite(v)) << t->name;
        EXPECT_LT(weighted_error(x, y, w), 0.5 * weighted_energy(x, w)) << t->name;
    }
}
