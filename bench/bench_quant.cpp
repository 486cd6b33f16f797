// Throughput of the scalar reference quantizers and dequantizers, per type,
// on a 4096 x 16 matrix (one 4096-wide row at a time, as the loader and the
// activation quantizers use them). Bytes/s counts the quantized side (what
// a dequantizer reads, what a quantizer writes); items/s counts elements.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "runtime/quant/quant_types.h"

namespace {

using tandem::quant::Type;

constexpr int64_t kRowLen = 4096;
constexpr int64_t kRows = 16;

std::vector<float> random_rows() {
    std::mt19937 rng(1234);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(kRowLen * kRows));
    for (float& f : v) f = dist(rng);
    return v;
}

void BM_dequantize_row(benchmark::State& state, Type t) {
    const auto& tr = tandem::quant::traits(t);
    const uint64_t row_bytes = *tandem::quant::row_bytes(t, kRowLen);
    const std::vector<float> src = random_rows();
    std::vector<uint8_t> q(row_bytes * kRows);
    for (int64_t r = 0; r < kRows; ++r) tr.quantize_row(src.data() + r * kRowLen, q.data() + r * row_bytes, kRowLen);
    std::vector<float> out(static_cast<size_t>(kRowLen));
    for (auto _ : state) {
        for (int64_t r = 0; r < kRows; ++r) {
            tr.dequantize_row(q.data() + r * row_bytes, out.data(), kRowLen);
            benchmark::DoNotOptimize(out.data());
            benchmark::ClobberMemory();
        }
    }
    state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(row_bytes) * kRows);
    state.SetItemsProcessed(state.iterations() * kRowLen * kRows);
}

void BM_quantize_row(benchmark::State& state, Type t) {
    const auto& tr = tandem::quant::traits(t);
    const uint64_t row_bytes = *tandem::quant::row_bytes(t, kRowLen);
    const std::vector<float> src = random_rows();
    std::vector<uint8_t> q(row_bytes);
    for (auto _ : state) {
        for (int64_t r = 0; r < kRows; ++r) {
            tr.quantize_row(src.data() + r * kRowLen, q.data(), kRowLen);
            benchmark::DoNotOptimize(q.data());
            benchmark::ClobberMemory();
        }
    }
    state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(row_bytes) * kRows);
    state.SetItemsProcessed(state.iterations() * kRowLen * kRows);
}

// One benchmark pair per row of the traits table, named after the type, so
// a new type is benchmarked without touching this file.
[[maybe_unused]] const bool kRegistered = [] {
    for (const auto& tr : tandem::quant::all_traits()) {
        const std::string name(tr.name);
        benchmark::RegisterBenchmark(("BM_dequantize_row/" + name).c_str(), BM_dequantize_row, tr.type);
        benchmark::RegisterBenchmark(("BM_quantize_row/" + name).c_str(), BM_quantize_row, tr.type);
    }
    return true;
}();

}  // namespace
