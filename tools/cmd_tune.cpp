// `tandem tune`: measures decode speed for the plan's split and the two
// below it, at thread counts around the physical-core count, and stores the
// fastest (planner/tune_cache.h) for `run -ngl auto` to prefer. Only splits
// at or below the plan are tried: the plan is the largest that fits, so
// anything above it risks running out of device memory.
#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "kernels_cpu/cpu_info.h"
#include "planner/planner.h"
#include "planner/tune_cache.h"
#include "runtime/common/memory_ledger.h"
#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/engine/session.h"
#include "tools/field_flags.h"
#include "tools/commands.h"
#include "tools/progress.h"
#include "tools/split.h"
#include "tools/stream_flags.h"

namespace tandem::tools {
namespace {

struct TuneOptions {
    StreamFlags stream;
    std::string model;
    std::string device;
    std::string vram;
    int64_t n_ctx = 0;
    int64_t n_ubatch = 512;
    CacheTypeFlags cache;  // --cache-type, -ctk, -ctv
    int n_prompt = 32;
    int n_gen = 32;
    int repeats = 2;
    bool dry_run = false;
    bool json = false;
};

struct Candidate {
    int64_t ngl = 0;
    int threads = 1;
    double tg_tps = 0.0;
};

// The plan's ngl and the two below it (never above: see the file comment),
// crossed with cores - 1 and cores threads. With no device only ngl 0.
std::vector<Candidate> candidates(int64_t plan_ngl, bool has_device, int cores) {
    std::vector<int64_t> ngls;
    if (has_device) {
        for (int64_t n = std::max<int64_t>(0, plan_ngl - 2); n <= plan_ngl; ++n) ngls.push_back(n);
    } else {
        ngls.push_back(0);
    }
    std::vector<int> threads{std::max(1, cores - 1), std::max(1, cores)};
    threads.erase(std::unique(threads.begin(), threads.end()), threads.end());
    std::vector<Candidate> out;
    for (int64_t n : ngls) {
        for (int t : threads) out.push_back({n, t, 0.0});
    }
    return out;
}

// Decode tokens per second: a prompt of n_prompt tokens, then n_gen greedy
// steps, best of `repeats` (the first run also warms the page cache). The
// prompt's ids are arbitrary: the speed does not depend on the text.
double measure(const gguf::File& file, const model::ModelSpec& spec, SessionOptions so, const TuneOptions& o) {
    Session session(file, spec, so);
    const int64_t room = session.n_ctx();
    const int n_prompt = static_cast<int>(std::min<int64_t>(o.n_prompt, std::max<int64_t>(1, room / 2)));
    const int n_gen = static_cast<int>(std::min<int64_t>(o.n_gen, room - n_prompt));
    std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
    for (int i = 0; i < n_prompt; ++i) prompt[static_cast<size_t>(i)] = static_cast<int32_t>((1 + 7 * i) % session.n_vocab());
    double best = 0.0;
    std::vector<float> logits;
    for (int r = 0; r < o.repeats; ++r) {
        session.reset();
        session.eval(prompt, false, logits);
        const auto t0 = std::chrono::steady_clock::now();
        for (int g = 0; g < n_gen; ++g) {
            const auto it = std::max_element(logits.begin(), logits.begin() + session.n_vocab());
            const int32_t next[1] = {static_cast<int32_t>(it - logits.begin())};
            session.eval(next, false, logits);
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (n_gen > 0 && s > 0) best = std::max(best, n_gen / s);
    }
    return best;
}

void tune(const TuneOptions& given) {
    // A GPU that cannot be used here costs one warning; then the CPU is tuned.
    TuneOptions o = given;
    usable_gpu_or_cpu(o.device, "{device} " + o.device, warn_on_stderr);
    if (o.device.empty()) o.vram.clear();
    if (o.repeats < 1 || o.n_gen < 1 || o.n_prompt < 1) throw Error("tune: --prompt, --gen and --repeats must be >= 1");
    const gguf::File file = gguf::File::open(o.model);
    const model::ModelSpec spec = model::load_model_spec(file);
    if (file.header_only()) throw Error(fmt::format("tune: {} is header-only; tuning needs the weights", o.model));
    if (!o.device.empty() && o.vram.empty()) throw Error(fmt::format("tune on {} needs --vram SIZE", o.device));
    if (given.device.empty() && !given.vram.empty()) throw Error("tune: --vram needs --device");
    SplitRequest req;
    req.device = o.device;
    if (!o.vram.empty()) req.vram = {parse_size_flag("--vram", o.vram)};
    req.n_ctx = o.n_ctx;
    req.n_ubatch = o.n_ubatch;
    req.cache_type = cache_type_of(o.cache);
    req.stream = stream_options(o.stream);
    const planner::PlanInputs in = split_plan_inputs(req);
    const planner::Plan plan = planner::plan(spec, in);
    const int cores = cpu::physical_core_count();
    std::vector<Candidate> cands = candidates(plan.ngl, !o.device.empty(), cores);

    planner::TuneKey key;
    key.model_key = planner::model_key(o.model, file.data_offset());
    key.device = o.device;
    key.vram = in.device_capacity.value_or(0);
    key.n_ctx = plan.n_ctx;
    key.cache_type = planner::cache_type_name(in.cache_type);

    if (o.dry_run) {
        if (o.json) {
            nlohmann::json arr = nlohmann::json::array();
            for (const Candidate& c : cands) arr.push_back({{"ngl", c.ngl}, {"threads", c.threads}});
            fmt::print("{}\n", nlohmann::json{{"dry_run", true},
                                              {"plan_ngl", plan.ngl},
                                              {"model_key", key.model_key},
                                              {"n_ctx", key.n_ctx},
                                              {"candidates", arr}}
                                   .dump(2));
            return;
        }
        fmt::print("plan: ngl {} of {}, context {}; would measure {} candidates ({} prompt + {} generated tokens, best "
                   "of {}):\n",
                   plan.ngl, spec.hp.n_layer + 1, plan.n_ctx, cands.size(), o.n_prompt, o.n_gen, o.repeats);
        for (const Candidate& c : cands) fmt::print("  ngl {:>3}  threads {:>3}\n", c.ngl, c.threads);
        return;
    }

    {
        ProgressBar bar("tune", cands.size());
        for (Candidate& c : cands) {
            req.ngl = c.ngl;
            SessionOptions so = resolve_split(req, file, spec, warn_on_stderr).so;
            so.n_threads = c.threads;
            c.tg_tps = measure(file, spec, so, o);
            bar.advance(1, fmt::format("ngl {} threads {}: {:.1f} tok/s", c.ngl, c.threads, c.tg_tps));
        }
        bar.finish();
    }
    const Candidate best = *std::max_element(cands.begin(), cands.end(),
                                             [](const Candidate& a, const Candidate& b) { return a.tg_tps < b.tg_tps; });
    planner::TuneEntry entry{key, best.ngl, best.threads, best.tg_tps};
    const auto path = planner::tune_cache_path();
    planner::store_tune_entry(path, entry);

    if (o.json) {
        nlohmann::json arr = nlohmann::json::array();
        for (const Candidate& c : cands) arr.push_back({{"ngl", c.ngl}, {"threads", c.threads}, {"tg_tps", c.tg_tps}});
        fmt::print("{}\n", nlohmann::json{{"plan_ngl", plan.ngl},
                                          {"best", planner::to_json(entry)},
                                          {"candidates", arr},
                                          {"cache", path.string()}}
                               .dump(2));
        return;
    }
    fmt::print("{:>5} {:>8} {:>10}\n", "ngl", "threads", "tg tok/s");
    for (const Candidate& c : cands) {
        fmt::print("{:>5} {:>8} {:>10.2f}{}\n", c.ngl, c.threads, c.tg_tps,
                   c.ngl == best.ngl && c.threads == best.threads ? "  <- best" : "");
    }
    fmt::print("plan ngl {}; best ngl {} with {} threads, {:.2f} tok/s; stored in {}\n", plan.ngl, best.ngl,
               best.threads, best.tg_tps, path.string());
}

}  // namespace

void add_tune_command(CLI::App& app) {
    auto opts = std::make_shared<TuneOptions>();
    CLI::App* cmd = app.add_subcommand("tune", "Measure decode speed around the plan's split and store the best");
    cmd->add_option("-m,--model", opts->model, "GGUF model file")->required();
    cmd->add_option("--device", opts->device, "accelerator: cuda0 or cpu2 (the stand-in; needs --vram)");
    cmd->add_option("--vram", opts->vram, "accelerator memory Tandem may use, e.g. 24GiB");
    cmd->add_option("-c,--ctx-size", opts->n_ctx, "context size (0: the model's, at most 4096)")->capture_default_str();
    cmd->add_option("--ubatch-size", opts->n_ubatch, "tokens per micro-batch (-ub)")->capture_default_str();
    add_cache_type_flags(*cmd, opts->cache);
    cmd->add_option("--prompt", opts->n_prompt, "prompt tokens before each measurement")->capture_default_str();
    cmd->add_option("--gen", opts->n_gen, "generated tokens measured")->capture_default_str();
    cmd->add_option("--repeats", opts->repeats, "runs per candidate; the best counts")->capture_default_str();
    add_stream_flags(*cmd, opts->stream);
    cmd->add_flag("--dry-run", opts->dry_run, "print what would be measured, measure nothing");
    cmd->add_flag("--json", opts->json, "print a JSON summary");
    cmd->callback([opts] { tune(*opts); });
}

}  // namespace tandem::tools
