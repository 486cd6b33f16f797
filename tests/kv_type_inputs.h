// Inputs of the KV cache type tests: the K/V type pairs they run (each
// type alike, and pairs that cross the kernels' choices: fp16 V sums with
// a block K, float V sums with an fp16 K, different partners and row sizes
// on the two sides), and rows that tell quantizers' roundings apart.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "runtime/model/model_spec.h"

namespace tandem::model {

// gtest prints a pair by its flag names.
inline void PrintTo(const CacheType& t, std::ostream* os) { *os << cache_type_name(t); }

}  // namespace tandem::model

namespace tandem::testing {

inline std::vector<model::CacheType> kv_type_pairs() {
    using quant::Type;
    std::vector<model::CacheType> pairs;
    for (const Type t : model::cache_element_types()) pairs.push_back({t, t});
    pairs.push_back({Type::Q8_0, Type::F16});
    pairs.push_back({Type::F16, Type::Q4_0});
    pairs.push_back({Type::Q4_1, Type::Q5_0});
    pairs.push_back({Type::BF16, Type::IQ4_NL});
    pairs.push_back({Type::F32, Type::Q5_1});
    return pairs;
}

// A pair as a test name: "q8_0_f16".
inline std::string kv_pair_test_name(const model::CacheType& t) {
    return model::cache_element_name(t.k) + "_" + model::cache_element_name(t.v);
}

// n floats (a multiple of 32) with exact ties in every block of 32: the
// extreme 127 makes a Q8_0 scale of 1, so each x.5 rounds by the
// quantizer's rule (half to even or half away from zero).
inline std::vector<float> q8_ties_row(int64_t n) {
    std::vector<float> ties(static_cast<size_t>(n), 0.0f);
    for (int64_t b = 0; b < n / 32; ++b) {
        ties[static_cast<size_t>(b * 32)] = 127.0f;
        for (int j = 1; j < 32; ++j) {
            ties[static_cast<size_t>(b * 32 + j)] = 0.5f + static_cast<float>((j + b) % 9) - 4.0f;
        }
    }
    return ties;
}

}  // namespace tandem::testing
