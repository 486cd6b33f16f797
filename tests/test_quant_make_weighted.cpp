// The importance-weighted K-quant and legacy quantizers
// (runtime/quant/quant_make_weighted.cpp). Byte equality with ggml's
// quantize_<type> was checked against llama.cpp itself; here the checks
// that need no llama.cpp: the documented fallback to the reference
// quantizers, that the weights steer the error where they should, that a
// weighted search is not worse than the plain one, degenerate rows, block
// independence, and pinned hashes of ggml's bytes for fixed inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_ref.h"

namespace {

namespace ref = tandem::quant::ref;

using WeightedFn = void (*)(const float*, void*, int64_t, const float*);
using PlainFn = void (*)(const float*, void*, int64_t);
using DequantFn = void (*)(const void*, float*, int64_t);

struct WType {
    const char* name;
    WeightedFn quantize_w;
    PlainFn quantize;
    DequantFn dequantize;
    int block_elems;
    size_t block_bytes;
};

const std::vector<WType>& all_types() {
    static const std::vector<WType> types = {
        {"Q2_K", ref::quantize_row_q2_K_w, ref::quantize_row_q2_K, ref::dequantize_row_q2_K, 256,
         sizeof(tandem::quant::block_q2_K)},
        {"Q3_K", ref::quantize_row_q3_K_w, ref::quantize_row_q3_K, ref::dequantize_row_q3_K, 256,
         sizeof(tandem::quant::block_q3_K)},
        {"Q4_K", ref::quantize_row_q4_K_w, ref::quantize_row_q4_K, ref::dequantize_row_q4_K, 256,
         sizeof(tandem::quant::block_q4_K)},
        {"Q5_K", ref::quantize_row_q5_K_w, ref::quantize_row_q5_K, ref::dequantize_row_q5_K, 256,
         sizeof(tandem::quant::block_q5_K)},
        {"Q6_K", ref::quantize_row_q6_K_w, ref::quantize_row_q6_K, ref::dequantize_row_q6_K, 256,
         sizeof(tandem::quant::block_q6_K)},
        {"Q4_0", ref::quantize_row_q4_0_w, ref::quantize_row_q4_0, ref::dequantize_row_q4_0, 32,
         sizeof(tandem::quant::block_q4_0)},
        {"Q4_1", ref::quantize_row_q4_1_w, ref::quantize_row_q4_1, ref::dequantize_row_q4_1, 32,
         sizeof(tandem::quant::block_q4_1)},
        {"Q5_0", ref::quantize_row_q5_0_w, ref::quantize_row_q5_0, ref::dequantize_row_q5_0, 32,
         sizeof(tandem::quant::block_q5_0)},
        {"Q5_1", ref::quantize_row_q5_1_w, ref::quantize_row_q5_1, ref::dequantize_row_q5_1, 32,
         sizeof(tandem::quant::block_q5_1)},
    };
    return types;
}

size_t row_bytes(const WType& t, int64_t n) { return static_cast<size_t>(n / t.block_elems) * t.block_bytes; }

// Deterministic inputs from a 32-bit LCG, using only exact float
// operations so that every platform gets the same values (the pinned
// hashes below depend on them).
struct Lcg {
    uint32_t state;
    uint32_t next() {
        state = state * 1664525u + 1013904223u;
        return state;
    }
    // Uniform in [-1, 1): 24 random bits scaled by 2^-23, exact.
    float uniform() { return static_cast<float>(next() >> 8) * (1.0f / 8388608.0f) - 1.0f; }
    // Bell-shaped (sum of four uniforms), with a rare outlier.
    float value() {
        const float v = uniform() + uniform() + uniform() + uniform();
        return (next() >> 24) == 0 ? 8.0f * v : v;
    }
    // A positive importance in [0.01, 4.01); one column in 16 is 0.
    float weight() {
        const float u = uniform() + 1.0f;
        return (next() >> 28) == 0 ? 0.0f : 0.01f + u * u;
    }
};

std::vector<float> make_row(Lcg& rng, int64_t n, float scale) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = scale * rng.value();
    return x;
}

std::vector<float> make_weights(Lcg& rng, int64_t n) {
    std::vector<float> w(static_cast<size_t>(n));
    for (auto& v : w) v = rng.weight();
    return w;
}

std::vector<float> roundtrip(const WType& t, const std::vector<float>& x, const float* qw) {
    const auto n = static_cast<int64_t>(x.size());
    std::vector<uint8_t> q(row_bytes(t, n));
    t.quantize_w(x.data(), q.data(), n, qw);
    std::vector<float> y(x.size());
    t.dequantize(q.data(), y.data(), n);
    return y;
}

std::vector<float> roundtrip_plain(const WType& t, const std::vector<float>& x) {
    const auto n = static_cast<int64_t>(x.size());
    std::vector<uint8_t> q(row_bytes(t, n));
    t.quantize(x.data(), q.data(), n);
    std::vector<float> y(x.size());
    t.dequantize(q.data(), y.data(), n);
    return y;
}

// sum_i w_i (x_i - y_i)^2 in double (w == nullptr: all ones).
double weighted_error(const std::vector<float>& x, const std::vector<float>& y, const float* w) {
    double e = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
        const double d = static_cast<double>(x[i]) - y[i];
        e += (w ? w[i] : 1.0) * d * d;
    }
    return e;
}

uint64_t fnv1a(const std::vector<uint8_t>& bytes, uint64_t h = 14695981039346656037ull) {
    for (const uint8_t b : bytes) h = (h ^ b) * 1099511628211ull;
    return h;
}

}  // namespace

// ggml quantizes without an imatrix through its reference quantizer; so do
// the _w entry points.
TEST(QuantMakeWeighted, NullWeightsGiveReferenceBytes) {
    for (const WType& t : all_types()) {
        Lcg rng{11};
        for (int64_t n : {256, 768}) {
            const auto x = make_row(rng, n, 0.05f);
            std::vector<uint8_t> a(row_bytes(t, n), 0x11);
            std::vector<uint8_t> b(row_bytes(t, n), 0x22);
            t.quantize_w(x.data(), a.data(), n, nullptr);
            t.quantize(x.data(), b.data(), n);
            EXPECT_EQ(a, b) << t.name << " n=" << n;
        }
    }
}

// The weights change the result: a row quantized with non-uniform weights
// is not the reference quantizer's row (the search differs), yet with any
// weights the same input gives the same bytes.
TEST(QuantMakeWeighted, DeterministicAndWeightSensitive) {
    for (const WType& t : all_types()) {
        Lcg rng{5};
        const int64_t n = 512;
        const auto x = make_row(rng, n, 1.0f);
        const auto w = make_weights(rng, n);
        std::vector<uint8_t> a(row_bytes(t, n)), b(row_bytes(t, n)), c(row_bytes(t, n));
        t.quantize_w(x.data(), a.data(), n, w.data());
        t.quantize_w(x.data(), b.data(), n, w.data());
        EXPECT_EQ(a, b) << t.name;
        std::vector<float> w2(w);
        for (size_t i = 0; i < w2.size(); i += 3) w2[i] *= 50.0f;
        t.quantize_w(x.data(), c.data(), n, w2.data());
        EXPECT_NE(a, c) << t.name << ": changing the weights changed nothing";
    }
}

// With uniform importance the weighted search optimises (nearly) the plain
// squared error, so it must not be much worse than the reference search.
TEST(QuantMakeWeighted, UniformWeightsNotWorseThanReference) {
    for (const WType& t : all_types()) {
        Lcg rng{21};
        const int64_t n = 1024;
        const std::vector<float> ones(static_cast<size_t>(n), 1.0f);
        double e_w = 0.0;
        double e_ref = 0.0;
        double energy = 0.0;
        for (int r = 0; r < 16; ++r) {
            const auto x = make_row(rng, n, 0.02f);
            e_w += weighted_error(x, roundtrip(t, x, ones.data()), nullptr);
            e_ref += weighted_error(x, roundtrip_plain(t, x), nullptr);
            energy += weighted_error(x, std::vector<float>(x.size(), 0.0f), nullptr);
        }
        EXPECT_LT(e_w, 1.15 * e_ref) << t.name;
        EXPECT_LT(e_w, 0.2 * energy) << t.name << ": error not small against the signal";
    }
}

// With random importances the weighted quantizer has a lower weighted
// error than the reference one, which ignores them.
TEST(QuantMakeWeighted, WeightedErrorBelowReference) {
    for (const WType& t : all_types()) {
        Lcg rng{33};
        const int64_t n = 1024;
        double e_w = 0.0;
        double e_ref = 0.0;
        for (int r = 0; r < 16; ++r) {
            const auto x = make_row(rng, n, 0.02f);
            std::vector<float> w(static_cast<size_t>(n));
            for (auto& v : w) {
                const float u = rng.uniform() + 1.0f;  // [0, 2)
                v = u * u * u * u + 0.01f;             // spread over ~3 decades
            }
            e_w += weighted_error(x, roundtrip(t, x, w.data()), w.data());
            e_ref += weighted_error(x, roundtrip_plain(t, x), w.data());
        }
        EXPECT_LT(e_w, e_ref) << t.name;
    }
}

// One column with a huge importance is reproduced more accurately than
// when all columns weigh the same (summed over rows: a single row can be
// lucky either way).
TEST(QuantMakeWeighted, HeavyColumnReproducedBetter) {
    for (const WType& t : all_types()) {
        Lcg rng{44};
        const int64_t n = 512;
        const size_t heavy = 37;
        const std::vector<float> ones(static_cast<size_t>(n), 1.0f);
        std::vector<float> w(ones);
        w[heavy] = 1.0e4f;
        double err_heavy = 0.0;
        double err_uniform = 0.0;
        for (int r = 0; r < 32; ++r) {
            const auto x = make_row(rng, n, 0.03f);
            err_heavy += std::fabs(x[heavy] - roundtrip(t, x, w.data())[heavy]);
            err_uniform += std::fabs(x[heavy] - roundtrip(t, x, ones.data())[heavy]);
        }
        EXPECT_LT(err_heavy, 0.5 * err_uniform) << t.name;
    }
}

// Degenerate rows: all zeros decode to zeros; tiny values, zero weights
// and constant rows decode to finite values near the input.
TEST(QuantMakeWeighted, DegenerateRows) {
    for (const WType& t : all_types()) {
        const int64_t n = 256;
        Lcg rng{9};
        const auto w = make_weights(rng, n);
        const std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
        for (const float y : roundtrip(t, zeros, w.data())) EXPECT_EQ(y, 0.0f) << t.name;

        auto tiny = make_row(rng, n, 1e-20f);
        for (const float y : roundtrip(t, tiny, w.data())) {
            EXPECT_TRUE(std::isfinite(y)) << t.name;
            EXPECT_LT(std::fabs(y), 1e-6f) << t.name;
        }
        const auto x = make_row(rng, n, 1.0f);
        for (const float y : roundtrip(t, x, zeros.data())) EXPECT_TRUE(std::isfinite(y)) << t.name;

        const std::vector<float> constant(static_cast<size_t>(n), -0.75f);
        for (const float y : roundtrip(t, constant, w.data())) EXPECT_NEAR(y, -0.75f, 0.02f) << t.name;
    }
}

// K-quants take sigma2 per super-block, so a row is the concatenation of
// its super-blocks quantized alone (the legacy types take it per row).
TEST(QuantMakeWeighted, KQuantSuperBlocksIndependent) {
    for (const WType& t : all_types()) {
        if (t.block_elems != 256) continue;
        Lcg rng{77};
        const int64_t n = 768;
        const auto x = make_row(rng, n, 0.1f);
        const auto w = make_weights(rng, n);
        std::vector<uint8_t> whole(row_bytes(t, n));
        t.quantize_w(x.data(), whole.data(), n, w.data());
        for (int64_t b = 0; b < n / 256; ++b) {
            std::vector<uint8_t> one(t.block_bytes);
            t.quantize_w(x.data() + 256 * b, one.data(), 256, w.data() + 256 * b);
            EXPECT_EQ(0, std::memcmp(one.data(), whole.data() + b * t.block_bytes, t.block_bytes))
                << t.name << " super-block " << b;
        }
    }
}

// FNV-1a hashes of what ggml (llama.cpp 0.3.36, quantize_<type>(x, dst, 1,
// 512, qw)) writes for rows from Lcg{2024}: make_row(scale 0.05) then
// make_weights, row after row; with the weights (qw = w, 4 rows) and
// without them (qw = null, 256 rows: ggml's reference quantizers, Tandem's
// quantize_row). Any
// deviation from ggml's bytes shows here.
struct Pin {
    const char* name;
    uint64_t hash;
};

template <class Quantize>
void expect_pinned(const Pin (&pins)[9], int n_rows, Quantize quantize) {
    for (const WType& t : all_types()) {
        Lcg rng{2024};
        const int64_t n = 512;
        uint64_t h = 14695981039346656037ull;
        for (int r = 0; r < n_rows; ++r) {
            const auto x = make_row(rng, n, 0.05f);
            const auto w = make_weights(rng, n);
            std::vector<uint8_t> q(row_bytes(t, n));
            quantize(t, x.data(), q.data(), n, w.data());
            h = fnv1a(q, h);
        }
        int found = 0;
        for (const Pin& p : pins) {
            if (std::string(p.name) != t.name) continue;
            ++found;
            EXPECT_EQ(h, p.hash) << t.name << std::hex << " got 0x" << h;
        }
        EXPECT_EQ(found, 1) << t.name;
    }
}

TEST(QuantMakeWeighted, MatchesGgmlPinnedHashes) {
    const Pin pins[] = {
        {"Q2_K", 0xfde9396624629c4dull}, {"Q3_K", 0xba11e7b428a945e3ull}, {"Q4_K", 0x42046b8c92986bc1ull},
        {"Q5_K", 0xc4c608e14a5ac387ull}, {"Q6_K", 0xf9e209a7ceb4e9a2ull}, {"Q4_0", 0xf76c6daed01feb2cull},
        {"Q4_1", 0xf3c829c2265fc301ull}, {"Q5_0", 0x629269177364ccf7ull}, {"Q5_1", 0x4aeabe3e6285bd52ull},
    };
    expect_pinned(pins, 4, [](const WType& t, const float* x, void* q, int64_t n, const float* w) {
        t.quantize_w(x, q, n, w);
    });
}

// ggml's reference quantizers sum w*l*l as (w*l)*l; w*(l*l) rounds
// differently and changed some Q3_K/Q6_K blocks.
TEST(QuantMakeWeighted, ReferenceQuantizersMatchGgmlPinnedHashes) {
    const Pin pins[] = {
        {"Q2_K", 0x9b0ba1a7150e1d56ull}, {"Q3_K", 0xa846af848dba76f5ull}, {"Q4_K", 0xef76cb88eb03cdbbull},
        {"Q5_K", 0x0284e1d73801c2ecull}, {"Q6_K", 0x0607c44910fabff4ull}, {"Q4_0", 0x9df070bc18a98bebull},
        {"Q4_1", 0xf052d37be17a4322ull}, {"Q5_0", 0x6dfc8f631a300e86ull}, {"Q5_1", 0x630475bf9beeca34ull},
    };
    expect_pinned(pins, 256, [](const WType& t, const float* x, void* q, int64_t n, const float*) { t.quantize(x, q, n); });
}
