// `tandem bench --calibrate`'s measurements (see bench_calibrate.h).
#include "tools/bench_calibrate.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "kernels_cpu/attention.h"
#include "kernels_cpu/attention_tiled.h"
#include "kernels_cpu/cpu_info.h"
#include "kernels_cpu/elementwise.h"
#include "kernels_cpu/matmul.h"
#include "kernels_cpu/thread_pool.h"
#include "kernels_cuda/cuda_api.h"
#include "planner/calibration.h"
#include "runtime/common/error.h"
#include "runtime/engine/host_weight_arena.h"
#include "runtime/common/memory_ledger.h"
#include "runtime/model/model_shapes.h"
#include "runtime/model/synth_vocab.h"
#include "runtime/quant/fp16.h"
#include "runtime/quant/quant_mix.h"
#include "tools/bench_args.h"
#include "tools/bench_report.h"
#include "tools/bench_runner.h"
#include "tools/synth_model.h"

namespace tandem::tools {
namespace {

constexpr uint64_t kMinBufferBytes = 1ull << 30;
constexpr int kRuns = 4;
// Large enough that launch and setup costs vanish, small enough for any GPU.
constexpr size_t kGpuBufferBytes = size_t{1} << 30;

std::string cpu_model_name() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) != 0) continue;
        const size_t colon = line.find(':');
        if (colon == std::string::npos) break;
        std::string v = line.substr(colon + 1);
        v.erase(0, v.find_first_not_of(" \t"));
        return v;
    }
    return "unknown";
}

// 1 GiB, or 8x the last-level cache when that is larger, so the caches hold
// a negligible share of what is read; capped at a quarter of the RAM.
uint64_t buffer_bytes() {
    uint64_t bytes = kMinBufferBytes;
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0) bytes = std::max<uint64_t>(bytes, 8ull * static_cast<uint64_t>(l3));
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) bytes = std::min<uint64_t>(bytes, static_cast<uint64_t>(pages) * page / 4);
    return bytes & ~uint64_t{4095};
}

// Four independent accumulators over plain uint64 adds: the compiler
// vectorizes this without -ffast-math, so the loop is load-bound.
uint64_t sum_words(const uint64_t* p, size_t n) {
    uint64_t a = 0, b = 0, c = 0, d = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        a += p[i];
        b += p[i + 1];
        c += p[i + 2];
        d += p[i + 3];
    }
    for (; i < n; ++i) a += p[i];
    return a + b + c + d;
}

// Read bandwidth of all physical cores together, best of kRuns, in GB/s.
}  // namespace

double measure_cpu_read_gbps(int threads) {
    const uint64_t bytes = buffer_bytes();
    const size_t words = bytes / sizeof(uint64_t);
    // In the memory the CPU's weights are copied to (huge pages where the
    // kernel gives them), so "% bw" compares like with like.
    HostWeightArena arena;
    auto* const buf = reinterpret_cast<uint64_t*>(arena.allocate(words * sizeof(uint64_t)));
    // Each thread first touches its own slice, so on NUMA machines pages sit
    // next to the core that reads them, as they do for the weights.
    auto slice = [&](int t, size_t& lo, size_t& hi) {
        lo = words * static_cast<size_t>(t) / static_cast<size_t>(threads);
        hi = words * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
    };
    {
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t) {
            pool.emplace_back([&, t] {
                size_t lo = 0, hi = 0;
                slice(t, lo, hi);
                for (size_t i = lo; i < hi; ++i) buf[i] = i;
            });
        }
        for (auto& th : pool) th.join();
    }
    double best = 0.0;
    std::vector<uint64_t> sums(static_cast<size_t>(threads));
    for (int run = 0; run < kRuns; ++run) {
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t) {
            pool.emplace_back([&, t] {
                size_t lo = 0, hi = 0;
                slice(t, lo, hi);
                sums[static_cast<size_t>(t)] = sum_words(buf + lo, hi - lo);
            });
        }
        for (auto& th : pool) th.join();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, static_cast<double>(bytes) / s / 1e9);
    }
    // The sums feed a check the optimizer cannot drop, so the reads happen.
    uint64_t total = 0;
    for (uint64_t v : sums) total += v;
    // 0 + 1 + ... + (words - 1), halving the even factor first so the
    // product wraps exactly as the sums do.
    const uint64_t w = words;
    const uint64_t expect = w % 2 == 0 ? (w / 2) * (w - 1) : w * ((w - 1) / 2);
    if (total != expect) throw InternalError("bench --calibrate: the read check failed");
    return best;
}

namespace {

// ---- the CPU kernels' rates and the fixed costs of a step (planner.h's
// KernelCosts), each the best of a few timed repetitions, as the read
// bandwidth above: what the machine does when nothing else runs on it (on
// a shared machine the others' work only ever adds time).

double best_seconds(int reps, const std::function<void()>& fn) {
    double best = 0.0;
    for (int i = 0; i < reps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = i == 0 ? s : std::min(best, s);
    }
    return best;
}

// The weight types whose kernels are measured: the floats and the types
// the common mixes are made of.
constexpr quant::Type kCalibratedTypes[] = {quant::Type::F32,  quant::Type::F16,  quant::Type::Q4_0,
                                            quant::Type::Q5_0, quant::Type::Q8_0, quant::Type::Q4_K,
                                            quant::Type::Q5_K, quant::Type::Q6_K};
constexpr int64_t kCalibCols = planner::kWideCols;
// Decode steps a run of the batch-cost measurement times.
constexpr int64_t kBatchCostTokens = 16;

// A rows x kCalibCols matrix of `type` in the host's weight memory: a few
// rows quantized from fixed pseudo-random floats, repeated.
// (The stand-in device holds its copies in the same memory.)
struct CalibMatrix {
    HostWeightArena arena;
    cpu::WeightView w;
};

// The calibration's fixed pseudo-random values in [-1, 1], in steps of 1/1000.
float calib_value(uint64_t& state) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<int64_t>(state >> 40) % 2001 - 1000) / 1000.0f;
}

std::unique_ptr<CalibMatrix> calib_matrix(quant::Type type, int64_t rows, int64_t cols = kCalibCols) {
    constexpr int64_t kDistinct = 16;
    const uint64_t row = *quant::row_bytes(type, cols);
    std::vector<float> src(static_cast<size_t>(cols));
    std::vector<uint8_t> rows_q(static_cast<size_t>(row * kDistinct));
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (int64_t r = 0; r < kDistinct; ++r) {
        for (float& v : src) v = calib_value(state);
        quant::quantize_row(type, src.data(), rows_q.data() + r * row, cols);
    }
    auto m = std::make_unique<CalibMatrix>();
    uint8_t* data = m->arena.allocate(static_cast<size_t>(row * rows));
    for (int64_t r = 0; r < rows; ++r) std::memcpy(data + r * row, rows_q.data() + (r % kDistinct) * row, row);
    m->w = {type, data, rows, cols, row};
    return m;
}

// The best of `reps` products of n tokens over matrix m (after one warming
// run: pages touched, the cache filled where it holds the matrix):
// seconds, and the matrix's bytes and weights.
struct TimedProduct {
    double s, bytes, weights;
};
TimedProduct time_on(const CalibMatrix& m, int64_t n, int reps, cpu::ThreadPool& pool, cpu::SimdLevel level) {
    const int64_t cols = m.w.n_cols;
    std::vector<float> x(static_cast<size_t>(n * cols), 0.5f), y(static_cast<size_t>(n * m.w.n_rows));
    const auto once = [&] { cpu::matmul(m.w, x.data(), cols, n, y.data(), m.w.n_rows, pool, level); };
    once();
    return {best_seconds(reps, once), static_cast<double>(m.w.n_rows * m.w.row_stride_bytes),
            static_cast<double>(m.w.n_rows * cols)};
}

// A calibration matrix of about `bytes` (at least 64 rows).
std::unique_ptr<CalibMatrix> calib_matrix_of(quant::Type type, uint64_t bytes, int64_t cols = kCalibCols) {
    const uint64_t row = *quant::row_bytes(type, cols);
    return calib_matrix(type, std::max<int64_t>(64, static_cast<int64_t>(bytes / row)), cols);
}

// kGemmSmallBatch-token products over the bytes of m seen as matrices of
// kGemmByColsRows rows of `cols` one after the other, as a model's
// matrices of that width follow each other from memory (the blocks stay
// whole: cols is a multiple of the type's block): the best of `reps`
// passes after a warming one, the products in it and their FLOPs.
struct ByColsPass {
    double s = 0, products = 0, flops = 0;
    // GFLOP/s with each product's hand-over (measured apart, and charged
    // apart by the planner) taken out.
    double gflops(double call_s) const { return flops / std::max(s - products * call_s, s * 0.05) / 1e9; }
};
ByColsPass time_by_cols(const CalibMatrix& m, int64_t cols, int reps, cpu::ThreadPool& pool, cpu::SimdLevel level) {
    constexpr int64_t n = planner::kGemmSmallBatch;
    const quant::Type type = m.w.type;
    const uint64_t row = *quant::row_bytes(type, cols);
    const uint64_t total = static_cast<uint64_t>(m.w.n_rows) * m.w.row_stride_bytes;
    const int64_t rows = std::min<int64_t>(planner::kGemmByColsRows, static_cast<int64_t>(total / row));
    const int64_t count = std::max<int64_t>(1, static_cast<int64_t>(total / (row * static_cast<uint64_t>(rows))));
    const auto* base = static_cast<const uint8_t*>(m.w.data);
    std::vector<float> x(static_cast<size_t>(n * cols), 0.5f), y(static_cast<size_t>(n * rows));
    const auto pass = [&] {
        for (int64_t i = 0; i < count; ++i) {
            const cpu::WeightView w{type, base + static_cast<uint64_t>(i * rows) * row, rows, cols, row};
            cpu::matmul(w, x.data(), cols, n, y.data(), rows, pool, level);
        }
    };
    pass();
    const double weights = static_cast<double>(count * rows) * static_cast<double>(cols);
    return {best_seconds(reps, pass), static_cast<double>(count), 2.0 * weights * static_cast<double>(n)};
}

// GB/s of weights a one-token product reads, for a matrix of about `bytes`.
double matvec_gbps(quant::Type type, uint64_t bytes, int reps, cpu::ThreadPool& pool, cpu::SimdLevel level,
                   int64_t cols = kCalibCols) {
    const TimedProduct t = time_on(*calib_matrix_of(type, bytes, cols), 1, reps, pool, level);
    return t.bytes / t.s / 1e9;
}

// One-token GB/s from memory over m, its runs taking turns with runs over
// a second matrix as large, so that each reads from DRAM: back to back,
// one matrix of 3x the last-level cache partly stays there (Q4_K on Zen 4
// read 55 GB/s that way, against 30-35 for a model's decode step).
double matvec_gbps_from_memory(const CalibMatrix& m, int reps, cpu::ThreadPool& pool, cpu::SimdLevel level) {
    const int64_t rows = m.w.n_rows, cols = m.w.n_cols;
    const std::unique_ptr<CalibMatrix> other = calib_matrix(m.w.type, rows, cols);
    std::vector<float> x(static_cast<size_t>(cols), 0.5f), y(static_cast<size_t>(rows));
    double best = 0.0;
    for (int i = 0; i <= reps; ++i) {  // run 0 warms: pages touched
        const CalibMatrix* pair[2] = {&m, other.get()};
        for (const CalibMatrix* w : pair) {
            const double s = best_seconds(1, [&] { cpu::matmul(w->w, x.data(), cols, 1, y.data(), rows, pool, level); });
            if (i > 0) best = best == 0.0 ? s : std::min(best, s);
        }
    }
    return static_cast<double>(rows * m.w.row_stride_bytes) / best / 1e9;
}

// GFLOP/s of a product of n tokens over matrix m.
double product_gflops(const CalibMatrix& m, int64_t n, int reps, cpu::ThreadPool& pool, cpu::SimdLevel level) {
    const TimedProduct t = time_on(m, n, reps, pool, level);
    return 2.0 * t.weights * static_cast<double>(n) / t.s / 1e9;
}


// GFLOP/s of a product of n tokens (2 FLOPs per weight and token) from cache.
// The matrix holds 1024 x kCalibCols weights at any row width.
double gemm_gflops(quant::Type type, int64_t n, int reps, cpu::ThreadPool& pool, cpu::SimdLevel level,
                   int64_t cols = kCalibCols) {
    return product_gflops(*calib_matrix(type, 1024 * kCalibCols / cols, cols), n, reps, pool, level);
}

// The last-level cache, from sysfs (sysconf's can be a hypervisor's guess).
std::optional<uint64_t> last_level_cache_bytes() {
    std::optional<uint64_t> best;
    for (int i = 0; i < 8; ++i) {
        std::ifstream in(fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/size", i));
        std::string text;
        if (!(in >> text) || text.empty()) continue;
        uint64_t v = std::strtoull(text.c_str(), nullptr, 10);
        if (text.back() == 'K') v <<= 10;
        if (text.back() == 'M') v <<= 20;
        if (v > 0) best = std::max(best.value_or(0), v);
    }
    return best;
}

// Seconds per call of fn: the best of 41 groups of `calls` calls, each
// group well under a scheduler time slice, so that some run undisturbed.
double per_call(int calls, const std::function<void()>& fn) {
    return best_seconds(41, [&] {
               for (int i = 0; i < calls; ++i) fn();
           }) /
           calls;
}

static_assert(planner::kTiledAttentionMinTokens == cpu::detail::kTiledAttentionMinTokens,
              "the planner prices attention by the kernel that runs");

// Seconds per query head and attended position of the per-token attention
// kernel at head dimension hd: kGemmSmallBatch tokens at positions 32..63
// of an F16 cache (8 query heads, 2 KV heads), as a short prompt's batch or
// a few decode steps see it.
double attention_pos_seconds(int64_t hd, cpu::ThreadPool& pool, cpu::SimdLevel level) {
    constexpr int64_t kCells = 64, kFirst = 32, kTokens = planner::kGemmSmallBatch;
    const cpu::AttentionShape shape{8, 2, hd, hd, 0, 1.0f / std::sqrt(static_cast<float>(hd)), 0.0f};
    const uint64_t row = static_cast<uint64_t>(shape.n_head_kv * hd) * sizeof(uint16_t);
    std::vector<uint16_t> k(static_cast<size_t>(kCells * shape.n_head_kv * hd)), v(k.size());
    uint64_t state = 0x2545f4914f6cdd1dull;
    for (size_t i = 0; i < k.size(); ++i) {
        k[i] = quant::fp32_to_fp16(calib_value(state));
        v[i] = k[(i * 7 + 3) % k.size()];
    }
    std::vector<int32_t> cell_pos(kCells), q_pos(kTokens);
    for (int64_t c = 0; c < kCells; ++c) cell_pos[static_cast<size_t>(c)] = static_cast<int32_t>(c);
    for (int64_t t = 0; t < kTokens; ++t) q_pos[static_cast<size_t>(t)] = static_cast<int32_t>(kFirst + t);
    const cpu::KvCacheView view{quant::Type::F16, quant::Type::F16, reinterpret_cast<const uint8_t*>(k.data()),
                                reinterpret_cast<const uint8_t*>(v.data()), row, row, kCells, cell_pos.data()};
    std::vector<float> q(static_cast<size_t>(kTokens * shape.n_head * hd), 0.25f), out(q.size());
    const auto once = [&] { cpu::attention(q.data(), q_pos.data(), kTokens, shape, view, out.data(), pool, level); };
    once();
    double positions = 0;
    for (int64_t t = 0; t < kTokens; ++t) positions += static_cast<double>(kFirst + t + 1);
    return best_seconds(21, once) / (positions * static_cast<double>(shape.n_head));
}

planner::KernelCosts measure_kernels(int threads) {
    planner::KernelCosts k;
    cpu::ThreadPool pool(threads);
    const cpu::SimdLevel level = cpu::simd_level_from_env();
    k.cache_bytes = last_level_cache_bytes();
    std::map<quant::Type, std::map<int64_t, ByColsPass>> by_cols;  // rates once the hand-over is measured
    // From memory: 3x the cache (at least 64 MiB); cached: a quarter of it.
    const uint64_t cache = k.cache_bytes.value_or(32ull << 20);
    const uint64_t big = std::max<uint64_t>(64ull << 20, 3 * cache), small = std::max<uint64_t>(1ull << 20, cache / 4);
    for (const quant::Type type : kCalibratedTypes) {
        {
            // One matrix from memory for the one-token, few-token and
            // 32-token rates (made once: under the sanitizer, filling one
            // took most of a calibration).
            const std::unique_ptr<CalibMatrix> from_memory = calib_matrix_of(type, big);
            k.matvec_gbps[type] = matvec_gbps_from_memory(*from_memory, 5, pool, level);
            // A model's prompt batches read its weights from memory: at 32
            // tokens that cost ~8% against the same product from cache (Q4_K,
            // 4096 columns, Sapphire Rapids: 232-236 against 244-264 GFLOP/s).
            k.gemm_few_gflops[type] = product_gflops(*from_memory, planner::kGemmFewBatch, 3, pool, level);
            k.gemm_small_gflops[type] = product_gflops(*from_memory, planner::kGemmSmallBatch, 3, pool, level);
            for (const int64_t cols : planner::kGemmByCols) {
                by_cols[type][cols] = time_by_cols(*from_memory, cols, 3, pool, level);
            }
        }
        k.matvec_cached_gbps[type] = matvec_gbps(type, small, 21, pool, level);
        k.gemm_large_gflops[type] = gemm_gflops(type, planner::kGemmLargeBatch, 3, pool, level);
        // Rows of kNarrowCols, as a small model's, from cache; the batch
        // rate as a factor on the wide rows' from cache, applied to the
        // rate from memory (the planner takes narrow / wide as the factor).
        k.matvec_narrow_gbps[type] = matvec_gbps(type, small, 21, pool, level, planner::kNarrowCols);
        k.gemm_small_narrow_gflops[type] =
            gemm_gflops(type, planner::kGemmSmallBatch, 5, pool, level, planner::kNarrowCols) /
            gemm_gflops(type, planner::kGemmSmallBatch, 5, pool, level) * k.gemm_small_gflops[type];
    }
    // A product too small to take time: what remains is the hand-over (the
    // activations quantized, the threads met).
    {
        // 64 rows of 256: four work items, so the threads are met, and
        // ~9 KB of weights, so what is timed is the hand-over. (A 64 x 4096
        // matrix, as before, added ~5 us of reading its 147 KB to every
        // call.)
        const auto m = calib_matrix(quant::Type::Q4_K, 64);
        const uint64_t row256 = *quant::row_bytes(quant::Type::Q4_K, 256);
        const cpu::WeightView small{quant::Type::Q4_K, m->w.data, 64, 256, row256};
        std::vector<float> x(256, 0.5f), y(64);
        k.matmul_call_s = per_call(20, [&] { cpu::matmul(small, x.data(), 256, 1, y.data(), 64, pool, level); });
        // The same for a micro-batch of kGemmSmallBatch tokens of 16 rows:
        // its rows quantized, the panels set up.
        const cpu::WeightView narrow{quant::Type::Q4_K, m->w.data, 16, 256, row256};
        std::vector<float> xb(static_cast<size_t>(planner::kGemmSmallBatch * 256), 0.5f),
            yb(static_cast<size_t>(planner::kGemmSmallBatch * 16));
        k.batch_call_s = per_call(20, [&] {
            cpu::matmul(narrow, xb.data(), 256, planner::kGemmSmallBatch, yb.data(), 16, pool, level);
        });
    }
    std::vector<float> a(4096, 1.0f), b(4096, 0.5f);
    k.pool_op_s = per_call(20, [&] {
        pool.parallel_for(64, 4, [&](int64_t lo, int64_t hi) { cpu::add(a.data() + lo, b.data() + lo, hi - lo); });
    });
    {
        // A micro-batch's ops over rows, handed to the threads as the CPU
        // device does (a norm, the SwiGLU activation, a residual add over
        // kGemmSmallBatch rows of 4096): what they cost past the hand-over,
        // per element.
        constexpr int64_t kRows = planner::kGemmSmallBatch, kWidth = 4096;
        // Outputs apart from inputs, so repeated calls see the same values.
        std::vector<float> x(static_cast<size_t>(kRows * kWidth), 0.5f), g(x.size(), 0.25f), o(x.size()), w(kWidth, 1.0f);
        const auto rows = [&](const std::function<void(int64_t, int64_t)>& fn) { pool.parallel_for(kRows, 4, fn); };
        const double norm = per_call(20, [&] {
            rows([&](int64_t lo, int64_t hi) {
                cpu::rms_norm_rows(x.data() + lo * kWidth, w.data(), o.data() + lo * kWidth, kWidth, hi - lo, 1e-5f, level);
            });
        });
        const double glu = per_call(20, [&] {
            rows([&](int64_t lo, int64_t hi) {
                for (int64_t r = lo; r < hi; ++r) {
                    cpu::swiglu(g.data() + r * kWidth, x.data() + r * kWidth, o.data() + r * kWidth, kWidth, level);
                }
            });
        });
        const double add = per_call(20, [&] {
            // o += g: o grows by 0.25 a call, never near a float's limits.
            rows([&](int64_t lo, int64_t hi) { cpu::add(o.data() + lo * kWidth, g.data() + lo * kWidth, (hi - lo) * kWidth); });
        });
        k.pool_op_elem_s = std::max(0.0, (norm + glu + add - 3 * *k.pool_op_s) / static_cast<double>(3 * kRows * kWidth));
    }
    // A decode step's row op: a norm over a row on this thread, at 256 and
    // 4096 elements: a fixed part and a part per element (its sum is a
    // chain of dependent adds, in llama.cpp's order).
    const double norm256 =
        per_call(50, [&] { cpu::rms_norm_rows(a.data(), b.data(), a.data(), 256, 1, 1e-5f, level); });
    const double norm4096 =
        per_call(50, [&] { cpu::rms_norm_rows(a.data(), b.data(), a.data(), 4096, 1, 1e-5f, level); });
    k.inline_op_elem_s = std::max(0.0, (norm4096 - norm256) / (4096 - 256));
    k.inline_op_s = std::max(0.0, norm256 - 256 * *k.inline_op_elem_s);
    for (const int64_t hd : {32, 64, 128, 256}) k.attn_pos_s[hd] = attention_pos_seconds(hd, pool, level);
    // The stand-in's hand-over: one hidden row copied; and bulk copies.
    std::vector<float> src(4096, 1.0f), dst(4096);
    k.crossing_s = per_call(200, [&] { std::memcpy(dst.data(), src.data(), src.size() * sizeof(float)); });
    {
        const size_t bytes = 64ull << 20;
        std::vector<uint8_t> from(bytes, 1), to(bytes, 0);
        const double s = best_seconds(5, [&] { std::memcpy(to.data(), from.data(), bytes); });
        k.copy_gbps = static_cast<double>(bytes) / s / 1e9;
    }
    for (const auto& [type, passes] : by_cols) {
        for (const auto& [cols, pass] : passes) k.gemm_small_by_cols[type][cols] = pass.gflops(*k.batch_call_s);
    }
    return k;
}

// The engine's own cost of an evaluated batch (KernelCosts::batch_s: the
// embedding, the logits handed out, the session's bookkeeping): a decode
// step of a minimal model (the tiny shape with one layer and a 512-token
// vocabulary, on the stand-in's host side) less what the planner predicts
// for it from the kernels of `c` with that cost at zero; the lowest of
// `rounds` runs (each the fastest of its repetitions). The model is
// written once to the temp directory and removed after. nullopt when no
// run gave a prediction.
std::optional<double> measure_batch_seconds(const planner::Calibration& c, int threads, int rounds) {
    model::ModelShape shape = *model::find_preset("tiny");
    shape.name = "calibration";
    shape.n_layer = 1;
    shape.n_vocab = 512;
    namespace fs = std::filesystem;
    const fs::path path = fs::temp_directory_path() / fmt::format("tandem-calibration-{}.gguf", ::getpid());
    struct Remove {
        fs::path p;
        ~Remove() {
            std::error_code ec;
            fs::remove(p, ec);
        }
    } remove{path};
    write_synth_model(shape, quant::FileType::Q4_K_M, model::synthetic_llama_vocab(shape.n_vocab),
                      path.string(), 42, false, static_cast<unsigned>(threads), false);
    BenchConfig config;
    config.models = {path.string()};
    config.tests = {BenchTest{0, kBatchCostTokens, 0}};
    config.n_gpu_layers = {0};
    config.threads = {threads};
    config.n_ubatch = {512};
    config.cache_types = {model::kCacheF16};
    config.repetitions = 40;
    config.device = "cpu2";  // a device to predict against; nothing goes there at -ngl 0
    planner::Calibration zero = c;
    zero.cpu_kernels.batch_s = 0.0;
    std::optional<double> lowest;
    for (int round = 0; round < rounds; ++round) {
        const BenchResult r = run_bench(config, zero);
        if (r.rows.empty() || !r.rows.front().predicted_tps) continue;
        const std::optional<double> best = best_tps(r.rows.front());
        if (!best || !(*best > 0.0) || !(*r.rows.front().predicted_tps > 0.0)) continue;
        const double s = std::max(0.0, 1.0 / *best - 1.0 / *r.rows.front().predicted_tps);
        if (!lowest || s < *lowest) lowest = s;
    }
    return lowest;
}

}  // namespace

void calibrate(bool json, int rounds) {
    if (rounds < 1 || rounds > kMaxCalibrationRounds) {
        throw Error(fmt::format("--calibrate-rounds: expected 1 to {}, found {}", kMaxCalibrationRounds, rounds));
    }
    planner::Calibration machine;
    machine.cpu_model = cpu_model_name();
    machine.physical_cores = cpu::physical_core_count();
    machine.kernel_threads = machine.physical_cores;
    std::vector<planner::Calibration> measured;
    for (int round = 0; round < rounds; ++round) {
        if (rounds > 1) fmt::print(stderr, "calibration round {} of {}\n", round + 1, rounds);
        planner::Calibration m = machine;
        m.cpu_gbps = measure_cpu_read_gbps(m.physical_cores);
        m.cpu_kernels = measure_kernels(m.kernel_threads);
        measured.push_back(std::move(m));
    }
    planner::Calibration c = planner::combine_rounds(measured);
    // With the kernels known: the per-step cost the kernels do not explain.
    c.cpu_kernels.batch_s = measure_batch_seconds(c, c.kernel_threads, rounds);
    std::string why;
    const auto devices = cuda::list_devices(&why);
    std::string gpu_note;
    if (devices.empty()) {
        gpu_note = fmt::format("no GPU: not measured ({})", why);
    } else {
        // The first GPU is the one `run --device cuda0` uses.
        const auto& d = devices.front();
        const cuda::BandwidthMeasurement m = cuda::measure_bandwidth(d.index, kGpuBufferBytes);
        c.gpu_gbps = m.device_gbps;
        c.pcie_gbps = m.host_to_device_gbps;
        gpu_note = fmt::format("GPU {} ({}): measured over {}", d.index, d.name, format_bytes(m.bytes));
    }
    const auto path = planner::calibration_path();
    planner::save_calibration(c, path);
    if (json) {
        nlohmann::json j = planner::to_json(c);
        j["gpu_note"] = gpu_note;
        j["path"] = path.string();
        fmt::print("{}\n", j.dump(2));
        return;
    }
    fmt::print("CPU: {} ({} physical cores)\n", c.cpu_model, c.physical_cores);
    fmt::print("CPU read bandwidth: {:.1f} GB/s\n", *c.cpu_gbps);
    const planner::KernelCosts& k = c.cpu_kernels;
    fmt::print("CPU kernels ({} threads), per weight type: one-token product GB/s from memory / from cache, "
               "GFLOP/s at {} tokens from memory / {} / {} tokens\n",
               c.kernel_threads, planner::kGemmFewBatch, planner::kGemmSmallBatch, planner::kGemmLargeBatch);
    for (const quant::Type type : kCalibratedTypes) {
        fmt::print("  {:<5} {:7.1f} / {:7.1f} GB/s  {:7.1f} / {:7.1f} / {:7.1f} GFLOP/s  (rows of {}: {:.1f} GB/s, "
                   "{:.1f} GFLOP/s)\n",
                   quant::traits(type).name, k.matvec_gbps.at(type), k.matvec_cached_gbps.at(type),
                   k.gemm_few_gflops.at(type), k.gemm_small_gflops.at(type), k.gemm_large_gflops.at(type),
                   planner::kNarrowCols, k.matvec_narrow_gbps.at(type), k.gemm_small_narrow_gflops.at(type));
    }
    fmt::print("GFLOP/s at {} tokens from memory by row width (matrices of {} rows):", planner::kGemmSmallBatch,
               planner::kGemmByColsRows);
    for (const int64_t cols : planner::kGemmByCols) fmt::print(" {:>7}", cols);
    fmt::print("\n");
    for (const quant::Type type : kCalibratedTypes) {
        fmt::print("  {:<5}", quant::traits(type).name);
        for (const int64_t cols : planner::kGemmByCols) fmt::print(" {:7.1f}", k.gemm_small_by_cols.at(type).at(cols));
        fmt::print("\n");
    }
    fmt::print("fixed costs: product hand-over {:.2f} us ({:.2f} us for a batch), op over the threads {:.2f} us + {:.3f} "
               "ns an element, op on one row {:.2f} us + {:.2f} ns an element, hidden-row copy {:.2f} us; copies {:.1f} "
               "GB/s\n",
               *k.matmul_call_s * 1e6, *k.batch_call_s * 1e6, *k.pool_op_s * 1e6, *k.pool_op_elem_s * 1e9,
               *k.inline_op_s * 1e6, *k.inline_op_elem_s * 1e9, *k.crossing_s * 1e6, *k.copy_gbps);
    if (k.batch_s) {
        fmt::print("a batch's own cost (a decode step of a one-layer model less its predicted kernels): {:.2f} us\n",
                   *k.batch_s * 1e6);
    } else {
        fmt::print("a batch's own cost: not measured (the planner assumes {:.0f} us)\n", planner::kDefaultBatchS * 1e6);
    }
    std::string attn;
    for (const auto& [hd, sec] : k.attn_pos_s) attn += fmt::format(" {}: {:.2f} ns", hd, sec * 1e9);
    fmt::print("attention (under {} tokens), per head and position, by head dimension:{}\n",
               planner::kTiledAttentionMinTokens, attn);
    if (c.gpu_gbps) {
        fmt::print("GPU copy bandwidth: {:.1f} GB/s, host-to-device: {:.1f} GB/s ({})\n", *c.gpu_gbps, *c.pcie_gbps,
                   gpu_note);
    } else {
        fmt::print("GPU bandwidth, host-to-device bandwidth: {}\n", gpu_note);
    }
    fmt::print("stored in {}\n", path.string());
}

}  // namespace tandem::tools
