// `tandem plan`: what split fits, why, and how fast it should run, over a
// grid of VRAM sizes and contexts. Reads only the GGUF header, so it works
// on header-only files from `tandem synth` and on machines without a GPU
// (--vram plans for a GPU that is not there).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "kernels_cuda/cuda_api.h"
#include "planner/calibration.h"
#include "planner/planner.h"
#include "runtime/engine/memory_ledger.h"
#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "tools/commands.h"
#include "tools/split.h"
#include "tools/stream_flags.h"
#include "tools/host_memory.h"

namespace tandem::tools {
namespace {

struct PlanOptions {
    StreamFlags stream;
    std::string model;
    std::vector<std::string> vram;
    std::vector<int64_t> n_ctx;
    int64_t n_ubatch = 512;
    int64_t n_batch = 0;
    CacheTypeFlags cache;  // --cache-type, -ctk, -ctv
    std::optional<int64_t> ngl;
    std::optional<std::string> margin;
    std::optional<std::string> host_ram;
    std::optional<double> cpu_gbps, gpu_gbps, pcie_gbps, cpu_gflops, gpu_gflops;
    bool json = false;
};

// Where the capacity came from, for the header line of the table.
struct Capacity {
    std::optional<uint64_t> bytes;
    std::string label;  // "8.0 GiB", "GPU 0 free", "none"
};

std::vector<Capacity> capacities(const PlanOptions& o, std::string& note) {
    std::vector<Capacity> out;
    for (const std::string& v : o.vram) {
        const uint64_t b = parse_size(v);
        out.push_back({b, format_bytes(b)});
    }
    if (!out.empty()) return out;
    std::string why;
    const auto devices = cuda::list_devices(&why);
    if (devices.empty()) {
        note = fmt::format("no GPU ({}): planning CPU-only; give --vram SIZE to plan for one", why);
        out.push_back({std::nullopt, "none"});
    } else {
        const auto& d = devices.front();
        note = fmt::format("GPU {} ({}): {} free of {}", d.index, d.name, format_bytes(d.free_bytes),
                           format_bytes(d.total_bytes));
        out.push_back({static_cast<uint64_t>(d.free_bytes), format_bytes(d.free_bytes)});
    }
    return out;
}

// "measured" for speeds taken from `bench --calibrate`, "given" for flags,
// "default" for the built-in assumptions.
std::string source_of(const planner::Assumption& a, const std::vector<std::string>& measured) {
    if (a.is_default) return "default";
    return std::find(measured.begin(), measured.end(), a.name) != measured.end() ? "measured" : "given";
}

std::string speeds_line(const planner::Plan& p, const std::vector<std::string>& measured) {
    // Table-driven so a new assumption needs one row, not a new format.
    struct Row {
        const char* name;
        const char* label;
        const char* unit;
    };
    constexpr Row rows[] = {{"cpu_gbps", "CPU", "GB/s"},
                            {"gpu_gbps", "GPU", "GB/s"},
                            {"pcie_gbps", "PCIe", "GB/s"},
                            {"cpu_gflops", "CPU", "GFLOP/s"},
                            {"gpu_gflops", "GPU", "GFLOP/s"}};
    std::string line = "assumed speeds:";
    for (const Row& r : rows) {
        for (const planner::Assumption& a : p.assumptions) {
            if (a.name != r.name) continue;
            const std::string src = source_of(a, measured);
            line += fmt::format(" {} {:g} {}{},", r.label, a.value, r.unit, src == "given" ? "" : " (" + src + ")");
        }
    }
    line.pop_back();
    return line + " (set with --cpu-gbps, --gpu-gbps, --pcie-gbps, --cpu-gflops, --gpu-gflops)";
}

void plan_command(const PlanOptions& o) {
    const gguf::File file = gguf::File::open(o.model);
    const model::ModelSpec spec = model::load_model_spec(file);
    std::string note;
    const std::vector<Capacity> caps = capacities(o, note);
    const std::vector<int64_t> contexts = o.n_ctx.empty() ? std::vector<int64_t>{0} : o.n_ctx;

    SplitRequest req;
    req.n_ubatch = o.n_ubatch;
    req.cache_type = planner::parse_cache_type(cache_type_text(o.cache));
    req.stream = o.stream;
    planner::PlanInputs in = split_plan_inputs(req);
    in.ngl = o.ngl;
    if (o.margin) in.margin = parse_size(*o.margin);
    // Without --host-ram the plan checks against this machine's RAM.
    in.host_ram = o.host_ram ? std::optional<uint64_t>(parse_size(*o.host_ram)) : detect_host_ram();
    in.cpu_gbps = o.cpu_gbps;
    in.gpu_gbps = o.gpu_gbps;
    in.pcie_gbps = o.pcie_gbps;
    in.cpu_gflops = o.cpu_gflops;
    in.gpu_gflops = o.gpu_gflops;
    // Measured speeds fill what the flags left unset.
    const std::vector<std::string> measured = apply_stored_calibration(in);

    struct Cell {
        const Capacity* cap;
        planner::Plan plan;
    };
    std::vector<Cell> cells;
    for (const Capacity& c : caps) {
        for (int64_t ctx : contexts) {
            in.device_capacity = c.bytes;
            in.n_ctx = ctx;
            cells.push_back({&c, planner::plan(spec, in)});
        }
    }

    // The planner knows only default or not; the source says which
    // non-default speeds came from a measurement.
    auto plan_json = [&](const planner::Plan& p) {
        nlohmann::json j = planner::to_json(p);
        for (const planner::Assumption& a : p.assumptions) {
            if (j.contains("assumptions") && j["assumptions"].contains(a.name)) {
                j["assumptions"][a.name]["source"] = source_of(a, measured);
            }
        }
        return j;
    };
    if (o.json) {
        if (cells.size() == 1) {
            fmt::print("{}\n", plan_json(cells.front().plan).dump(2));
        } else {
            nlohmann::json arr = nlohmann::json::array();
            for (const Cell& c : cells) arr.push_back(plan_json(c.plan));
            fmt::print("{}\n", arr.dump(2));
        }
        return;
    }

    uint64_t weights = model::token_embd_bytes(spec) + model::output_weight_bytes(spec);
    for (int64_t il = 0; il < spec.hp.n_layer; ++il) weights += model::layer_weight_bytes(spec, il);
    fmt::print("model: {} ({}, {} layers, {} of weights), micro-batch {}, KV cache {}\n", o.model, spec.hp.arch,
               spec.hp.n_layer, format_bytes(weights), cells.front().plan.n_ubatch,
               planner::cache_type_name(in.cache_type));
    if (!note.empty()) fmt::print("{}\n", note);
    fmt::print("{}\n\n", speeds_line(cells.front().plan, measured));
    fmt::print("{:>10} {:>7} {:>7} {:>5} {:>11} {:>11} {:>9} {:>9}  {}\n", "VRAM", "ctx", "ngl", "head", "VRAM used",
               "RAM used", "tg tok/s", "pp tok/s", "fits");
    for (const Cell& c : cells) {
        const planner::Plan& p = c.plan;
        fmt::print("{:>10} {:>7} {:>7} {:>5} {:>11} {:>11} {:>9.1f} {:>9.1f}  {}\n", c.cap->label, p.n_ctx,
                   fmt::format("{}/{}", p.ngl, p.n_layer + 1), p.output_on_gpu ? "gpu" : "cpu",
                   format_bytes(p.vram.total()), format_bytes(p.ram.total()), p.predicted.tg_tps, p.predicted.pp_tps,
                   !p.fits ? "no" : (p.ram_fits ? "yes" : "RAM short"));
    }
    fmt::print("\nwhy:\n");
    for (const Cell& c : cells) {
        fmt::print("  {}, ctx {}: {}\n", c.cap->label, c.plan.n_ctx, c.plan.reasons.front());
    }
}

}  // namespace

void add_plan_command(CLI::App& app) {
    auto opts = std::make_shared<PlanOptions>();
    CLI::App* cmd = app.add_subcommand("plan", "Choose the GPU/CPU split that fits, explain it, predict its speed");
    cmd->add_option("-m,--model", opts->model, "GGUF model file (only the header is read)")->required();
    cmd->add_option("--vram", opts->vram, "accelerator memory to plan for, e.g. 8GiB,12GiB,24GiB (default: the "
                                          "detected GPU's free memory)")
        ->delimiter(',');
    cmd->add_option("-c,--ctx-size", opts->n_ctx, "context sizes, e.g. 4096,8192 (0: the model's, at most 4096)")
        ->delimiter(',');
    cmd->add_option("--ubatch-size", opts->n_ubatch, "tokens per micro-batch (-ub)")->capture_default_str();
    cmd->add_option("-b,--batch-size", opts->n_batch, "logical batch size (accepted; the micro-batch decides)");
    add_cache_type_flags(*cmd, opts->cache);
    cmd->add_option("--n-gpu-layers,--ngl", opts->ngl, "evaluate this split instead of choosing one (-ngl)");
    add_stream_flags(*cmd, opts->stream);
    cmd->add_option("--margin", opts->margin, "VRAM kept free (default: 3% of it, at least 64 MiB, at most 1/8)");
    cmd->add_option("--host-ram", opts->host_ram, "host RAM to check the CPU share against, e.g. 32GiB (default: this machine's, from /proc/meminfo)");
    cmd->add_option("--cpu-gbps", opts->cpu_gbps, "CPU memory bandwidth in GB/s");
    cmd->add_option("--gpu-gbps", opts->gpu_gbps, "GPU memory bandwidth in GB/s");
    cmd->add_option("--pcie-gbps", opts->pcie_gbps, "host-to-device bandwidth in GB/s");
    cmd->add_option("--cpu-gflops", opts->cpu_gflops, "CPU matrix-multiply rate in GFLOP/s (prefill)");
    cmd->add_option("--gpu-gflops", opts->gpu_gflops, "GPU matrix-multiply rate in GFLOP/s (prefill)");
    cmd->add_flag("--json", opts->json, "print JSON: one object, or an array for a grid");
    cmd->callback([opts] { plan_command(*opts); });
}

}  // namespace tandem::tools
