// CPU matmul throughput per weight type, SIMD level and thread count.
//
//   matvec/<type>/<level>/<rows>x<cols>/threads:N   one token (decode):
//       memory-bound; bytes/s counts the weight bytes streamed, GB/s the same
//       as a counter, GFLOP/s = 2 rows cols / time.
//   matvec/.../128x4096                              a matrix that stays in L2:
//       the kernels' compute ceiling.
//   matvec/.../dram                                  the same over enough
//       4096x4096 matrices in turn (>= 128 MiB) that nothing stays in the
//       32 MiB L3: the number to compare with DRAM bandwidth.
//   matvec/.../dram-<rows>x<cols>                    likewise for the decode
//       matrices of a Llama-1B shape (K/V, Q/O, gate/up, down) and rows as
//       wide as Llama 3 8B's down projection (14336 columns).
//   matmul/<type>/<level>/<tokens>tok/threads:N      prompt batches:
//       compute-bound, GFLOP/s.
//   streams/<type>/<level>/<rows>x<cols>/<tokens>tok/threads:N  (512x2048: from L2)
//                                                    a serving step: one token
//       of each of 1..8 streams in the single-token order (MatmulOrder::
//       SingleToken, each token's bits those of the token alone); tok/s over
//       the 1-token row is what several streams gain from one weight read.
//   smallbatch/<type>/<level>/<rows>x<cols>/<tokens>tok/threads:N  the same
//       shapes, a few tokens in the Fastest order (a speculative
//       verification's batch: the batch form and panels where they apply).
//   read_bandwidth/threads:N                         glibc memchr over 256 MiB:
//       a rough DRAM yardstick (`tandem bench --calibrate` is the one the
//       engine's % bw uses).
//
// Weights are a few distinct quantized rows repeated (the reference
// quantizers are too slow to fill 128 MiB per benchmark, and the kernels
// have no data-dependent branches, so the values do not change the speed;
// the grid types' rows are random codes, whose grid lookups hit all of
// their tables).
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <utility>
#include <string>
#include <vector>

#include "kernels_cpu/cpu_info.h"
#include "kernels_cpu/matmul.h"
#include "runtime/engine/host_weight_arena.h"
#include "runtime/quant/quant_types.h"
#include "tests/random_blocks.h"

namespace {

using tandem::cpu::SimdLevel;
using tandem::quant::Type;

constexpr Type kTypes[] = {Type::F32,    Type::F16,     Type::BF16,   Type::Q4_0,  Type::Q4_1,    Type::Q5_0,
                           Type::Q5_1,   Type::Q8_0,    Type::Q2_K,   Type::Q3_K,  Type::Q4_K,    Type::Q5_K,
                           Type::Q6_K,   Type::IQ4_NL,  Type::MXFP4,  Type::IQ2_XXS, Type::IQ2_XS, Type::IQ2_S,
                           Type::IQ3_XXS, Type::IQ3_S,  Type::IQ1_S,  Type::IQ1_M, Type::IQ4_XS};

// The bytes live in a HostWeightArena, the memory the engine copies CPU
// weights to (2 MiB pages where the kernel gives them): from ordinary 4 KiB
// pages the same kernels stream ~10-40% less (a TLB miss per page).
struct Matrix {
    std::span<uint8_t> bytes;
    uint64_t row_bytes = 0;
};

// rows x cols of `t`, built from 16 distinct random rows (random codes
// for the grid types, as the kernel tests use).
Matrix make_matrix(tandem::HostWeightArena& arena, Type t, int64_t rows, int64_t cols, uint32_t seed) {
    Matrix m;
    m.row_bytes = *tandem::quant::row_bytes(t, cols);
    constexpr int64_t kDistinct = 16;
    std::vector<uint8_t> seedrows(m.row_bytes * kDistinct);
    for (int64_t r = 0; r < kDistinct; ++r) {
        tandem::testing::fill_random_blocks(t, cols, seed * kDistinct + static_cast<uint32_t>(r), seedrows.data() + r * m.row_bytes,
                                            0.05f);
    }
    const size_t size = m.row_bytes * static_cast<size_t>(rows);
    m.bytes = {arena.allocate(size), size};
    for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(m.bytes.data() + r * m.row_bytes, seedrows.data() + (r % kDistinct) * m.row_bytes, m.row_bytes);
    }
    return m;
}

std::vector<float> make_activations(int64_t tokens, int64_t cols) {
    std::mt19937 rng(99);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(tokens * cols));
    for (float& v : x) v = dist(rng);
    return x;
}

struct Shape {
    int64_t rows, cols;
    int copies;  // > 1: cycle through this many matrices
};

void BM_matmul_order(benchmark::State& state, Type t, SimdLevel level, Shape shape, int64_t tokens, int threads,
                     tandem::cpu::MatmulOrder order) {
    tandem::cpu::ThreadPool pool(threads, true);
    tandem::HostWeightArena arena;
    std::vector<Matrix> mats;
    for (int c = 0; c < shape.copies; ++c) mats.push_back(make_matrix(arena, t, shape.rows, shape.cols, 1000u + c));
    const std::vector<float> x = make_activations(tokens, shape.cols);
    std::vector<float> y(static_cast<size_t>(tokens * shape.rows));
    size_t next = 0;
    for (auto _ : state) {
        const Matrix& m = mats[next];
        next = (next + 1) % mats.size();
        const tandem::cpu::WeightView w{t, m.bytes.data(), shape.rows, shape.cols, m.row_bytes};
        tandem::cpu::matmul(w, x.data(), shape.cols, tokens, y.data(), shape.rows, pool, level, order);
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    const double bytes = static_cast<double>(mats[0].bytes.size());
    const double flops = 2.0 * static_cast<double>(shape.rows) * static_cast<double>(shape.cols) * static_cast<double>(tokens);
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
    state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
    state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
    if (tokens > 1) {
        state.counters["tok/s"] = benchmark::Counter(static_cast<double>(tokens * state.iterations()), benchmark::Counter::kIsRate);
    }
}

void BM_matmul(benchmark::State& state, Type t, SimdLevel level, Shape shape, int64_t tokens, int threads) {
    BM_matmul_order(state, t, level, shape, tokens, threads, tandem::cpu::MatmulOrder::Fastest);
}

// A yardstick for the matvec numbers: plain reads of a 256 MiB buffer
// split over the pool's threads.
void BM_read_bandwidth(benchmark::State& state, int threads) {
    tandem::cpu::ThreadPool pool(threads, true);
    const size_t bytes = 256u << 20;
    tandem::HostWeightArena arena;
    uint8_t* const buf = arena.allocate(bytes);
    std::memset(buf, 1, bytes);
    std::atomic<int> found{0};
    for (auto _ : state) {
        // memchr for a byte that is not there: glibc's version streams
        // with the widest loads the CPU has, without this file needing
        // ISA flags.
        pool.parallel_for(static_cast<int64_t>(bytes), 1 << 20, [&](int64_t b, int64_t e) {
            if (std::memchr(buf + b, 0xFF, static_cast<size_t>(e - b)) != nullptr) found.fetch_add(1);
        });
        benchmark::DoNotOptimize(found.load());
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * static_cast<double>(bytes)));
    state.counters["GB/s"] =
        benchmark::Counter(static_cast<double>(bytes) * 1e-9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

std::string shape_name(const Shape& s) {
    if (s.copies > 1 && s.rows == 4096 && s.cols == 4096) return "dram";
    if (s.copies > 1) return "dram-" + std::to_string(s.rows) + "x" + std::to_string(s.cols);
    return std::to_string(s.rows) + "x" + std::to_string(s.cols);
}

[[maybe_unused]] const bool kRegistered = [] {
    const int cores = tandem::cpu::physical_core_count();
    std::vector<int> thread_counts{1};
    if (cores > 1) thread_counts.push_back(cores);
    for (int th : thread_counts) {
        benchmark::RegisterBenchmark(("read_bandwidth/threads:" + std::to_string(th)).c_str(), BM_read_bandwidth, th)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
    }
    for (Type t : kTypes) {
        const std::string tname(tandem::quant::traits(t).name);
        // Copies of a matrix enough to pass 128 MiB, so none is in L3 when read.
        auto from_dram = [&](int64_t rows, int64_t cols) {
            const uint64_t mat_bytes = *tandem::quant::row_bytes(t, cols) * static_cast<uint64_t>(rows);
            return Shape{rows, cols, static_cast<int>((128ull << 20) / mat_bytes + 1)};
        };
        for (SimdLevel level : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx2Vnni, SimdLevel::Avx512, SimdLevel::Avx512Vnni}) {
            if (!tandem::cpu::simd_level_supported(level)) continue;
            const std::string lname(tandem::cpu::simd_level_name(level));
            std::vector<Shape> shapes{Shape{128, 4096, 1}, Shape{4096, 4096, 1}, Shape{2048, 5632, 1}, from_dram(4096, 4096)};
            // The decode matrices of a Llama-1B shape, from DRAM as in a
            // model's step: K/V (512 rows), Q/O, gate/up, down. Small ones
            // show the cost of a pool hand-off and of the threads' uneven
            // ends; 1024x14336, rows whose activation fills half of L1.
            if (level != SimdLevel::Scalar && t != Type::F32) {
                for (auto [rows, cols] : {std::pair{512, 2048}, std::pair{2048, 2048}, std::pair{5632, 2048}, std::pair{2048, 5632}, std::pair{1024, 14336}}) {
                    shapes.push_back(from_dram(rows, cols));
                }
            }
            for (const Shape& s : shapes) {
                for (int th : thread_counts) {
                    const std::string name =
                        "matvec/" + tname + "/" + lname + "/" + shape_name(s) + "/threads:" + std::to_string(th);
                    benchmark::RegisterBenchmark(name.c_str(), BM_matmul, t, level, s, int64_t{1}, th)
                        ->UseRealTime()
                        ->Unit(benchmark::kMicrosecond);
                }
            }
            if (level == SimdLevel::Scalar) continue;  // batches at scalar speed take minutes
            // A small model's FFN matrix (SmolLM2-135M: 1536x576; 1536x768
            // for the 256-element blocks, which 576 columns cannot hold)
            // from L2/L3, a 1B one's K/V matrix from L2 (the kernels' compute
            // ceiling) and its Q/O from DRAM.
            const int64_t small_cols = 576 % tandem::quant::traits(t).block_elems == 0 ? 576 : 768;
            for (const Shape& s : {Shape{1536, small_cols, 1}, Shape{512, 2048, 1}, from_dram(2048, 2048)}) {
                for (int64_t tokens : {1, 2, 4, 8}) for (int th : thread_counts) {
                    const std::string name = "streams/" + tname + "/" + lname + "/" + shape_name(s) + "/" +
                                             std::to_string(tokens) + "tok/threads:" + std::to_string(th);
                    benchmark::RegisterBenchmark(name.c_str(), BM_matmul_order, t, level, s, tokens, th,
                                                 tandem::cpu::MatmulOrder::SingleToken)
                        ->UseRealTime()
                        ->Unit(benchmark::kMicrosecond);
                }
                for (int64_t tokens : {8, 16, 24}) for (int th : thread_counts) {
                    const std::string name = "smallbatch/" + tname + "/" + lname + "/" + shape_name(s) + "/" +
                                             std::to_string(tokens) + "tok/threads:" + std::to_string(th);
                    benchmark::RegisterBenchmark(name.c_str(), BM_matmul, t, level, s, tokens, th)
                        ->UseRealTime()
                        ->Unit(benchmark::kMicrosecond);
                }
            }
            for (int64_t tokens : {64, 512}) {
                const int th = thread_counts.back();
                const std::string name = "matmul/" + tname + "/" + lname + "/" + std::to_string(tokens) +
                                         "tok/threads:" + std::to_string(th);
                benchmark::RegisterBenchmark(name.c_str(), BM_matmul, t, level, Shape{4096, 4096, 1}, tokens, th)
                    ->UseRealTime()
                    ->Unit(benchmark::kMillisecond);
            }
        }
    }
    return true;
}();

}  // namespace
