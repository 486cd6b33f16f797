// Helpers of the CPU matmul tests (test_matmul.cpp, test_decode_rows.cpp):
// the weight types and SIMD levels to run, and rows to multiply (Gaussian
// floats quantized, or random codes for the grid types).
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels_cpu/cpu_info.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/quant_types.h"
#include "tests/random_blocks.h"

namespace tandem::testing {

// Every weight type with a CPU kernel.
#define TANDEM_TEST_TYPE(T, name) quant::Type::T,
inline const std::vector<quant::Type> kWeightTypes = {TANDEM_DOT_TYPES(TANDEM_TEST_TYPE)};
#undef TANDEM_TEST_TYPE

inline std::vector<cpu::SimdLevel> supported_levels() {
    using cpu::SimdLevel;
    std::vector<SimdLevel> out;
    for (SimdLevel l :
         {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx2Vnni, SimdLevel::Avx512, SimdLevel::Avx512Vnni}) {
        if (cpu::simd_level_supported(l)) out.push_back(l);
    }
    return out;
}

// The levels above Scalar this CPU has.
inline std::vector<cpu::SimdLevel> simd_levels() {
    std::vector<cpu::SimdLevel> out = supported_levels();
    out.erase(out.begin());  // Scalar is the reference
    return out;
}

inline int64_t block_elems(quant::Type t) { return quant::traits(t).block_elems; }
inline size_t row_size(quant::Type t, int64_t n) { return static_cast<size_t>(*quant::row_bytes(t, n)); }

inline std::vector<float> random_floats(std::mt19937& rng, size_t n, float scale = 1.0f) {
    std::normal_distribution<float> dist(0.0f, scale);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& f : v) {
        f = dist(rng);
        if (u(rng) < 0.01f) f *= 8.0f;  // a few outliers, as real activations have
    }
    return v;
}

// The grid types (i-quants, MXFP4) get random codes with sane
// scales instead (random_blocks.h), one seed a row from x's first value.
inline std::vector<uint8_t> quantize(quant::Type t, const std::vector<float>& x, int64_t n_rows, int64_t n) {
    std::vector<uint8_t> out(row_size(t, n) * static_cast<size_t>(n_rows));
    if (tested_on_random_codes(t)) {
        uint32_t seed = 0;
        std::memcpy(&seed, x.data(), sizeof seed);
        for (int64_t r = 0; r < n_rows; ++r) {
            fill_random_blocks(t, n, seed + static_cast<uint32_t>(r), out.data() + r * row_size(t, n));
        }
        return out;
    }
    for (int64_t r = 0; r < n_rows; ++r) {
        quant::quantize_row(t, x.data() + r * n, out.data() + r * row_size(t, n), n);
    }
    return out;
}

// One token through a row kernel.
inline float dot_fn(cpu::detail::DotFn fn, const void* w, const void* a, int64_t n) {
    float out = 0.0f;
    fn(n, w, a, 0, 1, &out, 0);
    return out;
}

}  // namespace tandem::testing
