// `tandem plan`: what placement fits, why, and how fast it should run, over
// a grid of VRAM sizes and contexts. Reads only the GGUF header, so it
// works on header-only files from `tandem synth` and on machines without a
// GPU (--vram plans for a GPU that is not there). The text says what the
// JSON says: the placement and its runner-up, each device's bytes (KV
// cache and streaming reservation apart), the host RAM, and every reason.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "kernels_cuda/cuda_api.h"
#include "planner/calibration.h"
#include "planner/draft_plan.h"
#include "planner/planner.h"
#include "runtime/common/memory_ledger.h"
#include "runtime/common/error.h"
#include "runtime/engine/device_registry.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "tools/field_flags.h"
#include "tools/commands.h"
#include "tools/spec_flags.h"
#include "tools/split.h"
#include "tools/stream_flags.h"
#include "tools/host_memory.h"
#include "tools/plan_hosts.h"

namespace tandem::tools {
namespace {

struct PlanOptions {
    StreamFlags stream;
    PlacementFlags placement;
    std::string model;
    std::string device;  // "" or one name: --vram is a grid; several: one size per device
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
    std::string model_draft;  // -md: a speculative draft planned first, beside the model
    std::string hosts;        // --hosts FILE: pipeline stages over hosts
    std::optional<std::string> ngl_draft;
};

// Where the capacity came from, for the header line of the table.
struct Capacity {
    std::optional<uint64_t> bytes;
    std::string label;  // "8.0 GiB", "GPU 0 free", "none"
    std::vector<uint64_t> each;  // several devices: one capacity each
};

std::vector<Capacity> capacities(const PlanOptions& o, std::string& note) {
    std::vector<Capacity> out;
    const std::vector<std::string> names = parse_accelerators(o.device);
    if (names.size() > 1) {
        if (o.vram.empty()) {
            throw Error(fmt::format("plan: --device {} needs --vram, one size per device or one for each", o.device));
        }
        std::vector<uint64_t> sizes;
        for (const std::string& v : o.vram) sizes.push_back(parse_size_flag("--vram", v));
        Capacity c;
        c.each = serving::capacities_of(sizes, names.size());
        for (const uint64_t b : c.each) c.label += (c.label.empty() ? "" : "+") + format_bytes(b);
        out.push_back(c);
        return out;
    }
    for (const std::string& v : o.vram) {
        const uint64_t b = parse_size_flag("--vram", v);
        out.push_back({b, format_bytes(b), {}});
    }
    if (!out.empty()) return out;
    std::string why;
    const auto devices = cuda::list_devices(&why);
    if (devices.empty()) {
        note = fmt::format("no GPU ({}): planning CPU-only; give --vram SIZE to plan for one", why);
        out.push_back({std::nullopt, "none", {}});
    } else {
        const auto& d = devices.front();
        note = fmt::format("GPU {} ({}): {} free of {}", d.index, d.name, format_bytes(d.free_bytes),
                           format_bytes(d.total_bytes));
        out.push_back({static_cast<uint64_t>(d.free_bytes), format_bytes(d.free_bytes), {}});
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

std::string host_ram_line(const std::optional<uint64_t>& ram, bool given) {
    if (!ram) return "host RAM: unknown (not checked; give --host-ram SIZE)";
    return fmt::format("host RAM: {} ({})", format_bytes(*ram),
                       given ? "--host-ram" : "this machine's, from /proc/meminfo; --host-ram SIZE to change");
}

// "yes", or "no:" and what is short.
std::string fits_text(const planner::Plan& p) {
    if (p.fits) return "yes";
    if (!p.vram_fits && !p.ram_fits) return "no: VRAM+RAM";
    return p.vram_fits ? "no: RAM" : "no: VRAM";
}

// The winner's decode rate against the runner-up's: "+52% over (a)"; for a
// tie broken by prefill "tie (a), pp +30%"; for a slower decoder whose
// prefill outweighs "tg -14%, pp +7000% (b)".
std::string runner_up_text(const planner::Plan& p) {
    if (!p.runner_up) return "-";
    const planner::Option& r = *p.runner_up;
    const std::string who = planner::candidate_letter(r.candidate);
    const double tg = p.predicted.tg_tps, rtg = r.predicted.tg_tps;
    if (planner::rates_tie(tg, rtg)) {
        return fmt::format("tie {}, pp {:+.1f}%", who, 100.0 * (p.predicted.pp_tps / r.predicted.pp_tps - 1.0));
    }
    if (tg < rtg) {
        return fmt::format("tg {:+.0f}%, pp {:+.0f}% {}", 100.0 * (tg / rtg - 1.0),
                           100.0 * (p.predicted.pp_tps / r.predicted.pp_tps - 1.0), who);
    }
    return fmt::format("{:+.1f}% over {}", 100.0 * (tg / rtg - 1.0), who);
}

template <class Cell>
void print_table(const std::vector<Cell>& cells) {
    constexpr const char* kRow = "{:>10} {:>6}  {:<22} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9}  {:<18} {}\n";
    fmt::print(kRow, "VRAM", "ctx", "placement", "VRAM used", "KV all", "KV on GPU", "stream", "RAM used", "tg tok/s",
               "pp tok/s", "vs runner-up", "fits");
    for (const Cell& c : cells) {
        const planner::Plan& p = c.plan;
        const std::string placement = p.weighed.empty() ? fmt::format("ngl {}/{}", p.ngl, p.n_layer + 1)
                                                        : planner::option_label(p.weighed.front(), p.n_layer);
        fmt::print(kRow, c.cap->label, p.n_ctx, placement, format_bytes(p.vram.total()),
                   format_bytes(p.vram.kv + p.ram.kv), format_bytes(p.vram.kv),
                   p.weight_stream ? format_bytes(p.stream_bytes) : "off", format_bytes(p.ram.total()),
                   fmt::format("{:.1f}", p.predicted.tg_tps), fmt::format("{:.1f}", p.predicted.pp_tps),
                   runner_up_text(p), fits_text(p));
    }
}

std::string bytes_text(const planner::DeviceBytes& b) {
    return fmt::format("weights {} + KV {} + compute {}", format_bytes(b.weights), format_bytes(b.kv),
                       format_bytes(b.compute));
}

// Every reason of a cell, the bytes by category, and how to place it by hand.
void print_reasons(const Capacity& cap, const planner::Plan& p) {
    fmt::print("  {}, ctx {}:\n", cap.label, p.n_ctx);
    for (const std::string& r : p.reasons) fmt::print("    - {}\n", r);
    if (p.has_device) {
        fmt::print("    - VRAM {} (stream {}) + margin {}; RAM {}\n", bytes_text(p.vram), format_bytes(p.stream_bytes),
                   format_bytes(p.margin), bytes_text(p.ram));
        for (const planner::Plan::DevicePart& d : p.devices) {
            fmt::print("    - {}: {} + margin {} of {}{}\n", d.name, bytes_text(d.vram), format_bytes(d.margin),
                       format_bytes(d.capacity), d.fits ? "" : ", does not fit");
        }
        fmt::print("    - by hand: {}\n", planner::placement_flags(p));
    } else {
        fmt::print("    - RAM {}\n", bytes_text(p.ram));
    }
}

void plan_command(const PlanOptions& o) {
    const gguf::File file = gguf::File::open(o.model);
    const model::ModelSpec spec = model::load_model_spec(file);
    std::string note;
    const std::vector<Capacity> caps = capacities(o, note);
    const std::vector<int64_t> contexts = o.n_ctx.empty() ? std::vector<int64_t>{0} : o.n_ctx;

    SplitRequest req;
    req.n_ubatch = o.n_ubatch;
    req.cache_type = cache_type_of(o.cache);
    req.stream = stream_options(o.stream);
    req.placement = placement_options(o.placement);
    planner::PlanInputs in = split_plan_inputs(req);
    in.candidates.assign(std::begin(planner::kAllCandidates), std::end(planner::kAllCandidates));
    in.ngl = o.ngl;
    if (o.margin) in.margin = parse_size_flag("--margin", *o.margin);
    // Without --host-ram the plan checks against this machine's RAM.
    in.host_ram = o.host_ram ? std::optional<uint64_t>(parse_size_flag("--host-ram", *o.host_ram)) : detect_host_ram();
    in.cpu_gbps = o.cpu_gbps;
    in.gpu_gbps = o.gpu_gbps;
    in.pcie_gbps = o.pcie_gbps;
    in.cpu_gflops = o.cpu_gflops;
    in.gpu_gflops = o.gpu_gflops;
    // Measured speeds fill what the flags left unset.
    const std::vector<std::string> measured = apply_stored_calibration(in, warn_on_stderr);
    if (!o.hosts.empty()) {
        // Each host's RAM and VRAM come from the file.
        in.n_ctx = contexts.front();
        print_hosts_plan(o.hosts, o.model, spec, in, o.json);
        return;
    }

    struct Cell {
        const Capacity* cap;
        planner::Plan plan;
        std::optional<planner::Plan> draft;
    };
    const std::optional<int64_t> ngld = draft_ngl(o.model_draft, o.ngl_draft);
    const std::unique_ptr<DraftHeader> draft = read_draft_header(o.model_draft);
    const model::ModelSpec* draft_spec = draft ? &draft->spec : nullptr;
    std::vector<Cell> cells;
    for (const Capacity& c : caps) {
        for (int64_t ctx : contexts) {
            in.device_capacity = c.bytes;
            in.device_capacities = c.each;
            if (!c.each.empty()) in.device_name = o.device;
            in.n_ctx = ctx;
            if (draft_spec) {
                planner::PairPlan pp = planner::plan_with_draft(spec, *draft_spec, in, ngld);
                cells.push_back({&c, std::move(pp.target), std::move(pp.draft)});
            } else {
                cells.push_back({&c, planner::plan(spec, in), std::nullopt});
            }
        }
    }

    // The planner knows only default or not; the source says which
    // non-default speeds came from a measurement.
    auto one_json = [&](const planner::Plan& p) {
        nlohmann::json j = planner::to_json(p);
        for (const planner::Assumption& a : p.assumptions) {
            if (j.contains("assumptions") && j["assumptions"].contains(a.name)) {
                j["assumptions"][a.name]["source"] = source_of(a, measured);
            }
        }
        return j;
    };
    // With -md the draft's own plan rides along as "draft".
    auto plan_json = [&](const Cell& c) {
        nlohmann::json j = one_json(c.plan);
        if (c.draft) j["draft"] = one_json(*c.draft);
        return j;
    };
    if (o.json) {
        if (cells.size() == 1) {
            fmt::print("{}\n", plan_json(cells.front()).dump(2));
        } else {
            nlohmann::json arr = nlohmann::json::array();
            for (const Cell& c : cells) arr.push_back(plan_json(c));
            fmt::print("{}\n", arr.dump(2));
        }
        return;
    }

    auto weight_bytes = [](const model::ModelSpec& s) {
        uint64_t w = model::token_embd_bytes(s) + model::output_weight_bytes(s);
        for (int64_t il = 0; il < s.hp.n_layer; ++il) w += model::layer_weight_bytes(s, il);
        return w;
    };
    fmt::print("model: {} ({}, {} layers, {} of weights), micro-batch {}, KV cache {}\n", o.model, spec.hp.arch,
               spec.hp.n_layer, format_bytes(weight_bytes(spec)), cells.front().plan.n_ubatch,
               planner::cache_type_name(in.cache_type));
    if (draft_spec) {
        fmt::print("draft: {} ({}, {} layers, {} of weights), planned first; the table is the model's plan beside "
                   "it, and each cell's first reason says where the draft goes\n",
                   o.model_draft, draft_spec->hp.arch, draft_spec->hp.n_layer, format_bytes(weight_bytes(*draft_spec)));
    }
    if (!note.empty()) fmt::print("{}\n", note);
    fmt::print("{}\n", host_ram_line(in.host_ram, o.host_ram.has_value()));
    fmt::print("{}\n\n", speeds_line(cells.front().plan, measured));
    print_table(cells);
    fmt::print("\nwhy (placements: (a) leading whole layers, (b) attention and KV cache of every layer then FFNs, "
               "(c) everything but the experts then experts):\n");
    for (const Cell& c : cells) print_reasons(*c.cap, c.plan);
}

}  // namespace

void add_plan_command(CLI::App& app) {
    auto opts = std::make_shared<PlanOptions>();
    CLI::App* cmd = app.add_subcommand("plan", "Choose the GPU/CPU split that fits, explain it, predict its speed");
    cmd->add_option("-m,--model", opts->model, "GGUF model file (only the header is read)")->required();
    cmd->add_option("--vram", opts->vram, "accelerator memory to plan for, with a unit, e.g. 8G,12GiB,24GB (default: "
                                          "the detected GPU's free memory); with several --device, one size per device")
        ->delimiter(',');
    cmd->add_option("--device", opts->device,
                    "the accelerators: one (the default, cuda0), or several sharing the layers, e.g. cuda0,cuda1 "
                    "with --vram 24GiB,24GiB");
    cmd->add_option("-c,--ctx-size", opts->n_ctx, "context sizes, e.g. 4096,8192 (0: the model's, at most 4096)")
        ->delimiter(',');
    cmd->add_option("--ubatch-size", opts->n_ubatch, "tokens per micro-batch (-ub)")->capture_default_str();
    cmd->add_option("-b,--batch-size", opts->n_batch, "logical batch size (accepted; the micro-batch decides)");
    add_cache_type_flags(*cmd, opts->cache);
    cmd->add_option("--n-gpu-layers,--ngl", opts->ngl,
                    "evaluate this split instead of choosing one (-ngl); without it the plan weighs whole layers, "
                    "FFNs and experts");
    add_stream_flags(*cmd, opts->stream);
    add_placement_flags(*cmd, opts->placement);
    cmd->add_option("--margin", opts->margin, "VRAM kept free (default: 3% of it, at least 64 MiB, at most 1/8)");
    cmd->add_option("--host-ram", opts->host_ram,
                    "host RAM to check the CPU share against, e.g. 32GiB (default: this machine's, from /proc/meminfo)");
    cmd->add_option("--cpu-gbps", opts->cpu_gbps, "CPU memory bandwidth in GB/s");
    cmd->add_option("--gpu-gbps", opts->gpu_gbps, "GPU memory bandwidth in GB/s");
    cmd->add_option("--pcie-gbps", opts->pcie_gbps, "host-to-device bandwidth in GB/s");
    cmd->add_option("--cpu-gflops", opts->cpu_gflops, "CPU matrix-multiply rate in GFLOP/s (prefill)");
    cmd->add_option("--gpu-gflops", opts->gpu_gflops, "GPU matrix-multiply rate in GFLOP/s (prefill)");
    cmd->add_flag("--json", opts->json, "print JSON: one object, or an array for a grid");
    cmd->add_option("--hosts", opts->hosts,
                    "plan pipeline stages over hosts (mpirun ... --pipeline) from FILE: a line 'NAME ram=SIZE "
                    "[vram=SIZE[,SIZE...]]' per host, in rank order, and 'link BANDWIDTH [latency=TIME]'");
    cmd->add_option("--model-draft", opts->model_draft,
                    "plan a speculative draft model FILE (-md) first, beside the model: the model's plan gets what "
                    "the draft leaves of the device and the host RAM")
        ->type_name("FILE");
    cmd->add_option("--n-gpu-layers-draft,--gpu-layers-draft", opts->ngl_draft,
                    "the draft's layers on the accelerator (-ngld; default auto)")
        ->type_name("N|auto");
    cmd->callback([opts] { plan_command(*opts); });
}

}  // namespace tandem::tools
