// The planner: a pure function from a model's metadata, a device capacity
// and the run options to a split (how many leading layers go to the
// accelerator, where the output head goes), the bytes each device will hold
// by category, predicted decode and prefill speed, and the reasons for the
// choice. Bytes come from runtime/model/model_spec.h, the same functions
// the Session reserves with, and follow the same placement rules as
// runtime/engine/session.cpp, so a plan equals the runtime's ledgers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/model/model_spec.h"

namespace tandem::planner {

// Assumed hardware speeds when nothing was measured. Each plan says which
// of these it used, so a reader knows what is a default.
inline constexpr double kDefaultCpuGBps = 30.0;      // dual-channel DDR5 desktop
inline constexpr double kDefaultGpuGBps = 3000.0;    // between an RTX 4090 (1 TB/s) and an H200 (4.8 TB/s)
inline constexpr double kDefaultPcieGBps = 25.0;     // PCIe 4.0 x16, achieved
inline constexpr double kDefaultCpuGflops = 150.0;   // quantized GEMM on ~8 AVX2 cores
inline constexpr double kDefaultGpuGflops = 50000.0; // quantized GEMM, well below the tensor-core peak
// Latency of one hidden-state hand-over between devices (launch + copy
// setup), which dominates the few KiB actually moved per token.
inline constexpr double kHandOverLatencyS = 10e-6;
// Default margin: 3% of the capacity but at least 64 MiB (allocator
// fragmentation, CUDA/cuBLAS workspaces the ledger does not see yet), and
// never more than 1/8 of the capacity so small what-if capacities and the
// stand-in device stay usable.
inline constexpr double kDefaultMarginFraction = 0.03;
inline constexpr uint64_t kDefaultMarginFloor = 64ull << 20;

struct PlanInputs {
    std::optional<uint64_t> device_capacity;  // bytes the accelerator may use; nullopt: no accelerator
    std::optional<uint64_t> host_ram;         // bytes of host RAM; nullopt: not checked
    int64_t n_ctx = 0;                        // 0: the model's training context, capped at 4096 (as Session)
    int64_t n_ubatch = 512;
    model::CacheType cache_type = model::CacheType::F16;
    std::optional<uint64_t> margin;  // nullopt: default_margin(capacity)
    std::optional<int64_t> ngl;      // evaluate this split instead of choosing one
    // Weight streaming for long prompts, as SessionOptions: wanted when an
    // accelerator exists and micro-batches reach stream_min_batch.
    bool weight_stream = true;
    int64_t stream_min_batch = 32;
    std::optional<double> cpu_gbps, gpu_gbps, pcie_gbps, cpu_gflops, gpu_gflops;
};

// Bytes one device holds, by the ledger's categories.
struct DeviceBytes {
    uint64_t weights = 0;
    uint64_t kv = 0;
    uint64_t compute = 0;
    uint64_t staging = 0;
    uint64_t overhead = 0;
    uint64_t total() const { return weights + kv + compute + staging + overhead; }
};

struct Prediction {
    double tg_tps = 0.0;  // decode tokens per second at the average context (n_ctx / 2)
    double pp_tps = 0.0;  // prompt tokens per second
};

// One assumed speed and whether it was the built-in default.
struct Assumption {
    std::string name;  // "cpu_gbps", ...
    double value = 0.0;
    bool is_default = true;
};

struct Plan {
    int64_t ngl = 0;  // as SessionOptions::n_gpu_layers: n_layer + 1 puts the head there too
    int64_t n_layer = 0;
    bool output_on_gpu = false;
    bool has_device = false;
    bool fits = true;      // the device total plus the margin is within the capacity
    bool ram_fits = true;  // the host total is within host_ram (true when not given)
    bool forced = false;   // ngl came from the inputs
    bool weight_stream = false;   // prompts of stream_min_batch+ tokens stream the CPU layers' weights
    uint64_t stream_bytes = 0;    // what that reserves on the accelerator (part of vram.compute)
    int64_t stream_min_batch = 0;
    std::optional<uint64_t> capacity;
    uint64_t margin = 0;
    int64_t n_ctx = 0;
    int64_t n_ubatch = 0;
    model::CacheType cache_type = model::CacheType::F16;
    DeviceBytes vram, ram;
    Prediction predicted;
    std::vector<Assumption> assumptions;
    std::vector<std::string> reasons;
};

// The margin used when PlanInputs::margin is not given.
uint64_t default_margin(uint64_t capacity);

// Bytes per device for a given split, exactly as the Session reserves them
// (ngl is clamped to [0, n_layer + 1]; has_device says whether an
// accelerator exists at all, which decides whether it reserves scratch;
// weight_stream: the accelerator also holds the stream's slots whenever a
// layer is left on the host). Throws tandem::Error when the cache type does
// not fit the head size.
DeviceBytes device_bytes(const model::ModelSpec& spec, int64_t ngl, int64_t n_ctx, int64_t n_ubatch,
                         model::CacheType cache_type, bool weight_stream = false);
DeviceBytes host_bytes(const model::ModelSpec& spec, int64_t ngl, bool has_device, int64_t n_ctx, int64_t n_ubatch,
                       model::CacheType cache_type);

// Chooses (or, with inputs.ngl, evaluates) a split. No I/O, no globals.
// Throws tandem::Error for inputs no runtime could honour (negative sizes,
// layers asked of a missing accelerator, a cache type the heads do not fit).
Plan plan(const model::ModelSpec& spec, const PlanInputs& inputs);

// The JSON form `tandem plan --json` prints: ngl, n_layer, output_on_gpu,
// fits, vram/ram {weights, kv, compute, staging, overhead, total}, predicted
// {tg_tps, pp_tps}, reasons, assumptions and the inputs that shaped it.
nlohmann::json to_json(const Plan& p);

std::string cache_type_name(model::CacheType t);  // "f16", "q8_0"
// Throws tandem::Error naming the text when it is neither.
model::CacheType parse_cache_type(const std::string& text);

}  // namespace tandem::planner
