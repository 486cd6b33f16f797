// CPU attention over an F16 KV cache, Llama-3.2-1B heads (32 query heads,
// 8 KV heads, head_dim 64; 8B has 128, Gemma 256), per SIMD level:
//
//   attention/<level>/prefill<N>/dim:D/threads:T   N causal queries over N
//       fresh cells (the tiled kernel from 64 queries): compute-bound,
//       GFLOP/s counts 2 (dk + dv) flops per visible (query head, cell) pair.
//   attention/<level>/decode/ctx:C/dim:D/threads:T  one query over C cells
//       (and dim 256, decode only):
//       reads the cache once, GB/s counts the K and V bytes. C is 4096,
//       and 32768 for dim 64: 64 MiB of K and V, more than any L3 here,
//       so the cache streams from memory as at depth in a real model.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels_cpu/attention.h"
#include "kernels_cpu/cpu_info.h"
#include "runtime/quant/fp16.h"

namespace {

using tandem::cpu::SimdLevel;

constexpr int64_t kHeads = 32, kKvHeads = 8;

void BM_attention(benchmark::State& state, SimdLevel level, int64_t n_tokens, int64_t n_cells, int64_t head_dim,
                  int threads) {
    tandem::cpu::ThreadPool pool(threads, true);
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const int64_t kv_dim = kKvHeads * head_dim;
    std::vector<uint16_t> k(static_cast<size_t>(n_cells * kv_dim)), v(k.size());
    for (auto& x : k) x = tandem::quant::fp32_to_fp16(dist(rng));
    for (auto& x : v) x = tandem::quant::fp32_to_fp16(dist(rng));
    std::vector<float> q(static_cast<size_t>(n_tokens * kHeads * head_dim));
    for (float& x : q) x = dist(rng);
    std::vector<int32_t> cell_pos(static_cast<size_t>(n_cells)), q_pos(static_cast<size_t>(n_tokens));
    for (int64_t c = 0; c < n_cells; ++c) cell_pos[static_cast<size_t>(c)] = static_cast<int32_t>(c);
    // The queries are the last n_tokens positions of the cache.
    for (int64_t t = 0; t < n_tokens; ++t) q_pos[static_cast<size_t>(t)] = static_cast<int32_t>(n_cells - n_tokens + t);
    const auto row_bytes = static_cast<uint64_t>(kv_dim) * 2;
    const tandem::cpu::KvCacheView kv{tandem::quant::Type::F16, tandem::quant::Type::F16, reinterpret_cast<const uint8_t*>(k.data()),
                                      reinterpret_cast<const uint8_t*>(v.data()), row_bytes, row_bytes, n_cells,
                                      cell_pos.data()};
    const tandem::cpu::AttentionShape shape{kHeads, kKvHeads, head_dim, head_dim, 0, 0.125f};
    std::vector<float> out(static_cast<size_t>(n_tokens * kHeads * head_dim));
    for (auto _ : state) {
        tandem::cpu::attention(q.data(), q_pos.data(), n_tokens, shape, kv, out.data(), pool, level);
        benchmark::DoNotOptimize(out.data());
        benchmark::ClobberMemory();
    }
    double pairs = 0;  // visible (query, cell) pairs per head
    for (int64_t t = 0; t < n_tokens; ++t) pairs += static_cast<double>(q_pos[static_cast<size_t>(t)] + 1);
    const double flops = pairs * static_cast<double>(kHeads) * 2.0 * static_cast<double>(2 * head_dim);
    const double bytes = 2.0 * static_cast<double>(n_cells) * static_cast<double>(row_bytes);
    const auto iters = static_cast<double>(state.iterations());
    state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9 * iters, benchmark::Counter::kIsRate);
    state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9 * iters, benchmark::Counter::kIsRate);
    if (n_tokens > 1) state.counters["tok/s"] = benchmark::Counter(static_cast<double>(n_tokens) * iters, benchmark::Counter::kIsRate);
}

[[maybe_unused]] const bool kRegistered = [] {
    const int th = tandem::cpu::physical_core_count();
    const std::string tname = "/threads:" + std::to_string(th);
    for (SimdLevel level : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
        if (!tandem::cpu::simd_level_supported(level)) continue;
        const std::string lname(tandem::cpu::simd_level_name(level));
        for (int64_t dim : {64, 128, 256}) {
            const std::string dname = "/dim:" + std::to_string(dim);
            if (dim <= 128) {
                benchmark::RegisterBenchmark(("attention/" + lname + "/prefill512" + dname + tname).c_str(),
                                             BM_attention, level, int64_t{512}, int64_t{512}, dim, th)
                    ->UseRealTime()
                    ->Unit(benchmark::kMillisecond);
            }
            for (int64_t ctx : {4096, 32768}) {
                if (ctx > 4096 && dim != 64) continue;
                benchmark::RegisterBenchmark(("attention/" + lname + "/decode/ctx:" + std::to_string(ctx) + dname + tname).c_str(),
                                             BM_attention, level, int64_t{1}, ctx, dim, th)
                    ->UseRealTime()
                    ->Unit(benchmark::kMicrosecond);
            }
        }
    }
    return true;
}();

}  // namespace
