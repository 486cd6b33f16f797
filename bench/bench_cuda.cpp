// CUDA matmul throughput per weight type, registered only when a GPU is
// present (on a machine without one this file adds no benchmarks, so the
// CPU suites run alone):
//
//   cuda_matvec/<type>/4096x4096   one token: bytes/s of weights streamed
//       from device memory (GB/s counter), to compare with the copy bandwidth
//       of `tandem bench --calibrate`.
//   cuda_matmul/<type>/4096x4096/512tok   a prompt batch: GFLOP/s.
//
// Timed on the device with CUDA events over many launches, no host copies.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kernels_cuda/cuda_api.h"
#include "tests/cuda_ops/cuda_test_ops.h"
#include "runtime/quant/quant_types.h"

namespace {

using tandem::quant::Type;

constexpr Type kTypes[] = {Type::F16,  Type::Q4_0, Type::Q4_1, Type::Q5_0, Type::Q5_1, Type::Q8_0,
                           Type::Q2_K, Type::Q3_K, Type::Q4_K, Type::Q5_K, Type::Q6_K};

std::vector<uint8_t> quantized_matrix(Type t, int64_t rows, int64_t cols) {
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 0.05f);
    const uint64_t row_bytes = *tandem::quant::row_bytes(t, cols);
    std::vector<uint8_t> m(row_bytes * static_cast<size_t>(rows));
    std::vector<float> f(static_cast<size_t>(cols));
    // 16 distinct rows repeated: the reference quantizers are slow, and the
    // kernels have no data-dependent branches.
    for (int64_t r = 0; r < rows; ++r) {
        if (r < 16) {
            for (float& v : f) v = dist(rng);
            tandem::quant::quantize_row(t, f.data(), m.data() + r * row_bytes, cols);
        } else {
            std::copy_n(m.data() + (r % 16) * row_bytes, row_bytes, m.data() + r * row_bytes);
        }
    }
    return m;
}

void run(benchmark::State& state, int device, Type t, int64_t n_tokens) {
    constexpr int64_t kRows = 4096, kCols = 4096;
    const auto w = quantized_matrix(t, kRows, kCols);
    std::vector<float> x(static_cast<size_t>(n_tokens * kCols), 0.01f);
    double seconds = 0.0;
    for (auto _ : state) {
        seconds = tandem::cuda::time_matmul_on_device(device, t, w.data(), kRows, kCols, x.data(), n_tokens, 50);
        state.SetIterationTime(seconds);
    }
    const double bytes = static_cast<double>(w.size());
    state.counters["GB/s"] = benchmark::Counter(bytes / seconds / 1e9);
    state.counters["GFLOP/s"] = benchmark::Counter(2.0 * kRows * kCols * n_tokens / seconds / 1e9);
}

// Registered before main runs; nothing when there is no GPU.
const bool kRegistered = [] {
    const auto devices = tandem::cuda::list_devices();
    if (devices.empty()) return false;
    const int device = devices.front().index;
    for (Type t : kTypes) {
        const std::string name(tandem::quant::traits(t).name);
        benchmark::RegisterBenchmark(("cuda_matvec/" + name + "/4096x4096").c_str(),
                                     [=](benchmark::State& s) { run(s, device, t, 1); })
            ->UseManualTime()
            ->Iterations(3);
        benchmark::RegisterBenchmark(("cuda_matmul/" + name + "/4096x4096/512tok").c_str(),
                                     [=](benchmark::State& s) { run(s, device, t, 512); })
            ->UseManualTime()
            ->Iterations(3);
    }
    return true;
}();

}  // namespace
