// `tandem bench --calibrate`: measures this machine's memory bandwidths and
// stores them (planner/calibration.h) so the planner's predictions use them
// instead of assumed defaults. Decode speed is bound by how fast the weights
// can be read, so read bandwidth is the number that matters.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "kernels_cpu/cpu_info.h"
#include "kernels_cuda/cuda_api.h"
#include "planner/calibration.h"
#include "runtime/backend/memory_ledger.h"
#include "runtime/common/error.h"
#include "tools/commands.h"

namespace tandem::tools {
namespace {

struct BenchOptions {
    bool calibrate = false;
    bool json = false;
};

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
double measure_cpu_read_gbps(int threads) {
    const uint64_t bytes = buffer_bytes();
    const size_t words = bytes / sizeof(uint64_t);
    const std::unique_ptr<uint64_t[]> buf(new uint64_t[words]);
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
                sums[static_cast<size_t>(t)] = sum_words(buf.get() + lo, hi - lo);
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

void calibrate(const BenchOptions& o) {
    planner::Calibration c;
    c.cpu_model = cpu_model_name();
    c.physical_cores = cpu::physical_core_count();
    c.cpu_gbps = measure_cpu_read_gbps(c.physical_cores);
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
    if (o.json) {
        nlohmann::json j = planner::to_json(c);
        j["gpu_note"] = gpu_note;
        j["path"] = path.string();
        fmt::print("{}\n", j.dump(2));
        return;
    }
    fmt::print("CPU: {} ({} physical cores)\n", c.cpu_model, c.physical_cores);
    fmt::print("CPU read bandwidth: {:.1f} GB/s\n", *c.cpu_gbps);
    if (c.gpu_gbps) {
        fmt::print("GPU copy bandwidth: {:.1f} GB/s, host-to-device: {:.1f} GB/s ({})\n", *c.gpu_gbps, *c.pcie_gbps,
                   gpu_note);
    } else {
        fmt::print("GPU bandwidth, host-to-device bandwidth: {}\n", gpu_note);
    }
    fmt::print("stored in {}\n", path.string());
}

}  // namespace

void add_bench_command(CLI::App& app) {
    auto opts = std::make_shared<BenchOptions>();
    CLI::App* cmd = app.add_subcommand("bench", "Measure this machine (--calibrate) for the planner's predictions");
    cmd->add_flag("--calibrate", opts->calibrate, "measure memory bandwidths and store them for `plan` and `run`");
    cmd->add_flag("--json", opts->json, "print the measurements as JSON");
    cmd->callback([opts] {
        if (!opts->calibrate) throw Error("bench: only --calibrate is implemented so far");
        calibrate(*opts);
    });
}

}  // namespace tandem::tools
