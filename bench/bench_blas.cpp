// Float-weight prompt batches: Tandem's kernels against OpenBLAS sgemm
// (only in builds that link OpenBLAS, TANDEM_HAVE_BLAS).
//
//   blas/<type>/<level>/<tokens>x<rows>x<cols>/<impl>   GFLOP/s = 2 t r c / time
//
// impl:
//   tandem  detail::native_matmul, Tandem's own kernels, on the pool.
//   tiles   detail::blas_matmul, what cpu::matmul dispatches to (from
//           blas_min_tokens() on): each pool thread widens a tile of rows
//           to f32 (F16/BF16) and runs a single-threaded sgemm on it.
// The BLAS paths are checked against Tandem's kernels once after timing
// (counter max_rel_diff: largest difference over the largest output).
//   sgemm   llama.cpp's BLAS backend: the whole matrix widened to f32 on the
//           pool (F16/BF16; that time counted), then one cblas_sgemm with
//           openblas_set_num_threads(pool threads).
// Threads: physical cores (pool and OpenBLAS alike). The level changes only
// Tandem's kernels and the F16 widening.
//
//   build-blas/bench/tandem_bench_kernels --benchmark_filter='^blas/' --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#if defined(TANDEM_HAVE_BLAS)
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels_cpu/attention_tiled.h"
#include "kernels_cpu/blas_matmul.h"
#include "kernels_cpu/cpu_info.h"
#include "kernels_cpu/matmul.h"
#include "runtime/quant/quant_types.h"

namespace {

using tandem::cpu::SimdLevel;
using tandem::quant::Type;

enum class Impl { Tandem, Tiles, Sgemm };
constexpr const char* kImplNames[] = {"tandem", "tiles", "sgemm"};

struct Problem {
    int64_t tokens, rows, cols;
};

// llama.cpp's BLAS backend: widen everything, then one multi-threaded sgemm.
void whole_matrix_sgemm(const tandem::cpu::WeightView& w, const float* x, int64_t tokens, float* y,
                        std::vector<float>& wf, tandem::cpu::ThreadPool& pool, SimdLevel level) {
    const int64_t k = w.n_cols;
    const float* b = static_cast<const float*>(w.data);
    if (w.type != Type::F32) {
        const auto widen16 = tandem::cpu::detail::tiled_attention_kernels(level).widen;
        pool.parallel_for(w.n_rows, 16, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
                const auto* src = static_cast<const uint16_t*>(w.data) + r * k;
                if (w.type == Type::F16) {
                    widen16(src, wf.data() + r * k, k);
                } else {
                    tandem::quant::dequantize_row(Type::BF16, src, wf.data() + r * k, k);
                }
            }
        });
        b = wf.data();
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(tokens), static_cast<int>(w.n_rows),
                static_cast<int>(k), 1.0f, x, static_cast<int>(k), b, static_cast<int>(k), 0.0f, y,
                static_cast<int>(w.n_rows));
}

void BM_blas(benchmark::State& state, Type t, SimdLevel level, Problem p, Impl impl, int threads) {
    tandem::cpu::ThreadPool pool(threads, true);
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 0.05f);
    std::vector<float> wsrc(static_cast<size_t>(p.rows * p.cols));
    for (float& v : wsrc) v = dist(rng);
    const uint64_t row_bytes = *tandem::quant::row_bytes(t, p.cols);
    std::vector<uint8_t> wq(row_bytes * static_cast<size_t>(p.rows));
    for (int64_t r = 0; r < p.rows; ++r) {
        tandem::quant::quantize_row(t, wsrc.data() + r * p.cols, wq.data() + r * row_bytes, p.cols);
    }
    std::vector<float> x(static_cast<size_t>(p.tokens * p.cols));
    for (float& v : x) v = dist(rng) * 20.0f;
    std::vector<float> y(static_cast<size_t>(p.tokens * p.rows));
    std::vector<float> wf(impl == Impl::Sgemm && t != Type::F32 ? wsrc.size() : 0);
    const tandem::cpu::WeightView w{t, wq.data(), p.rows, p.cols, row_bytes};
    if (impl == Impl::Sgemm) openblas_set_num_threads(threads);
    for (auto _ : state) {
        switch (impl) {
            case Impl::Tandem:
                tandem::cpu::detail::native_matmul(w, x.data(), p.cols, p.tokens, y.data(), p.rows, pool, level);
                break;
            case Impl::Tiles:
                tandem::cpu::detail::blas_matmul(w, x.data(), p.cols, p.tokens, y.data(), p.rows, pool, level);
                break;
            case Impl::Sgemm:
                whole_matrix_sgemm(w, x.data(), p.tokens, y.data(), wf, pool, level);
                break;
        }
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    if (impl == Impl::Sgemm) openblas_set_num_threads(1);
    // Each path against Tandem's kernels: the same products, other sums.
    if (impl != Impl::Tandem) {
        std::vector<float> ref(y.size());
        // At the best level: the float types' bits are the same at every one.
        tandem::cpu::detail::native_matmul(w, x.data(), p.cols, p.tokens, ref.data(), p.rows, pool,
                                           tandem::cpu::best_simd_level());
        double worst = 0, scale = 0;
        for (size_t i = 0; i < y.size(); ++i) {
            worst = std::max(worst, static_cast<double>(std::fabs(y[i] - ref[i])));
            scale = std::max(scale, static_cast<double>(std::fabs(ref[i])));
        }
        // F16/BF16 tiles round the activations as Tandem does; the
        // llama.cpp-style sgemm path keeps them f32 (a BF16 rounding is 2^-9).
        const double tol = impl == Impl::Sgemm && t != Type::F32 ? 1e-2 : 1e-4;
        if (worst > tol * scale) state.SkipWithError("results differ from Tandem's kernels");
        state.counters["max_rel_diff"] = worst / scale;
    }
    const double flops = 2.0 * static_cast<double>(p.tokens) * static_cast<double>(p.rows) * static_cast<double>(p.cols);
    state.counters["GFLOP/s"] =
        benchmark::Counter(flops * 1e-9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

[[maybe_unused]] const bool kRegistered = [] {
    const int threads = tandem::cpu::physical_core_count();
    // A Llama-1B-like layer's products (Q/O 2048x2048, gate/up 8192x2048,
    // down 2048x8192) at 512-, 256- and 64-token prompt batches.
    const Problem problems[] = {{512, 2048, 2048}, {512, 8192, 2048}, {512, 2048, 8192}, {256, 2048, 2048},
                                {256, 8192, 2048}, {64, 2048, 2048},  {64, 8192, 2048}};
    for (Type t : {Type::F32, Type::F16, Type::BF16}) {
        for (SimdLevel level : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx2Vnni, SimdLevel::Avx512, SimdLevel::Avx512Vnni}) {
            if (!tandem::cpu::simd_level_supported(level)) continue;
            for (const Problem& p : problems) {
                for (Impl impl : {Impl::Tandem, Impl::Tiles, Impl::Sgemm}) {
                    // Scalar kernels on the large products take minutes.
                    if (impl == Impl::Tandem && level == SimdLevel::Scalar && p.tokens * p.rows * p.cols > int64_t{512} * 2048 * 2048) {
                        continue;
                    }
                    // OpenBLAS ignores the level except for F16 widening.
                    if (impl != Impl::Tandem && level != SimdLevel::Avx512 && t != Type::F16 &&
                        tandem::cpu::simd_level_supported(SimdLevel::Avx512)) {
                        continue;
                    }
                    const std::string name = "blas/" + std::string(tandem::quant::traits(t).name) + "/" +
                                             std::string(tandem::cpu::simd_level_name(level)) + "/" +
                                             std::to_string(p.tokens) + "x" + std::to_string(p.rows) + "x" +
                                             std::to_string(p.cols) + "/" + kImplNames[static_cast<int>(impl)];
                    benchmark::RegisterBenchmark(name.c_str(), BM_blas, t, level, p, impl, threads)
                        ->UseRealTime()
                        ->Unit(benchmark::kMillisecond);
                }
            }
        }
    }
    return true;
}();

}  // namespace
#endif  // TANDEM_HAVE_BLAS
