// `tandem bench`: a llama-bench-like harness (ppN, tgN, pgP,N over lists of
// models, splits, threads, micro-batches and cache types; --sweep-ngl and
// --plot compare measured speed with the planner's prediction at every
// split), and `tandem bench --calibrate`, which measures this machine's
// memory bandwidths and stores them (planner/calibration.h) so the
// planner's predictions use them instead of assumed defaults. The harness
// lives in tools/bench_*.{h,cpp} (the calibration's measurements in
// bench_calibrate.cpp); this file wires the flags and prints.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
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

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "kernels_cpu/attention.h"
#include "kernels_cpu/attention_tiled.h"
#include "kernels_cpu/cpu_info.h"
#include "kernels_cpu/elementwise.h"
#include "kernels_cpu/matmul.h"
#include "kernels_cpu/thread_pool.h"
#include "kernels_cuda/cuda_api.h"
#include "planner/calibration.h"
#include "runtime/common/memory_ledger.h"
#include "runtime/engine/host_weight_arena.h"
#include "runtime/common/error.h"
#include "runtime/quant/fp16.h"
#include "tools/field_flags.h"
#include "tools/bench_args.h"
#include "tools/bench_calibrate.h"
#include "tools/bench_ref.h"
#include "tools/bench_report.h"
#include "tools/bench_runner.h"
#include "tools/bench_spec.h"
#include "tools/bench_svg.h"
#include "tools/commands.h"
#include "tools/llama_flags.h"
#include "tools/progress.h"
#include "tools/split.h"

namespace tandem::tools {
namespace {

struct BenchOptions {
    bool calibrate = false;
    bool calibrate_each = false;
    bool progress = false;
    int calibrate_rounds = kDefaultCalibrationRounds;
    bool json = false;
    BenchArgs args;
    SpecFlags spec;           // --spec-ngram, -md, --draft-*: the speculative test
    std::string spec_prompt;  // --spec-prompt; "" for the built-in repeat task
};

// The calibration for the % column and the predictions. A damaged or
// missing file never stops a benchmark: the column stays empty.
std::optional<planner::Calibration> load_calibration_quietly() {
    std::string warning;
    std::optional<planner::Calibration> cal;
    try {
        cal = planner::load_calibration(planner::calibration_path(), &warning);
    } catch (const Error& e) {
        warning = e.what();  // no cache directory can be derived
    }
    if (!warning.empty()) fmt::print(stderr, "tandem: warning: {}\n", warning);
    return cal;
}

std::string row_progress(const BenchRow& r) {
    const std::string speed = !r.fits          ? std::string("does not fit")
                              : r.tps_mean     ? fmt::format("{:.2f} t/s", *r.tps_mean)
                                               : std::string("-");
    const std::string llama = r.llama_tps_mean ? fmt::format(", llama.cpp {:.2f} t/s", *r.llama_tps_mean) : "";
    return fmt::format("{} ngl {} t {} {}: {}{}", r.model, r.ngl, r.threads, r.test, speed, llama);
}

// As run: -ngl N without --device means the first GPU, and a GPU that
// cannot be used here costs one warning line, then the CPU runs. A usable
// GPU without --vram offers what it has free.
void resolve_bench_device(BenchArgs& args) {
    std::string layers;
    for (const std::string& text : args.n_gpu_layers) {
        for (const auto& v : parse_ngl_list(text)) {
            if (v && *v > 0) layers = text;
        }
    }
    const bool implied = args.device.empty() && !layers.empty();
    if (implied) args.device = "cuda0";
    const bool asked = !args.device.empty();
    const auto gpus = serving::usable_devices_or_cpu(
        args.device, implied ? "{n_gpu_layers} " + layers : "{device} " + args.device, warn_on_stderr);
    if (asked && args.device.empty()) {
        args.vram.clear();
        args.tensor_split.clear();
        if (!args.n_gpu_layers.empty()) args.n_gpu_layers = {"0"};
    }
    // Every device a GPU: each one's free memory (a stand-in has none to
    // say). Not under --pipeline: each rank's GPUs are its own, and -ngl
    // auto has each rank read its own free memory, as run does.
    const bool all_gpus = !gpus.empty() && std::all_of(gpus.begin(), gpus.end(), [](const auto& g) { return g.has_value(); });
    if (all_gpus && args.vram.empty() && !args.pipeline) {
        for (const auto& g : gpus) args.vram += fmt::format("{}{}B", args.vram.empty() ? "" : ",", g->free_bytes);
    }
}

// bench --spec-ngram / -md: speculative against plain decoding (bench_spec.h).
void bench_speculative(const BenchOptions& o, const BenchConfig& config) {
    if (!o.args.parallel.empty()) throw Error("bench: --parallel and speculative decoding (--spec-ngram, -md) are separate tests; give one");
    if (config.ref_bench) throw Error("--ref-bench: llama-bench has no speculative test; drop --spec-ngram or -md");
    const bool custom = !o.spec_prompt.empty();
    const auto rows = run_spec_bench(config, o.spec, custom ? o.spec_prompt : default_spec_prompt_text(), !custom,
                                     [](const std::string& line) { fmt::print(stderr, "tandem: {}\n", line); });
    std::fflush(stderr);
    fmt::print("{}", format_spec_rows(rows, config.format));
    std::fflush(stdout);
}

void bench(const BenchOptions& o) {
    BenchArgs args = o.args;
    if (o.json) args.output = "json";  // --json, as --calibrate spells it
    resolve_bench_device(args);
    const BenchConfig config = make_bench_config(args);
    if (o.spec.enabled()) {
        bench_speculative(o, config);
        return;
    }
    // A missing llama-bench fails before minutes of Tandem's runs.
    if (config.ref_bench) check_ref_bench_binary(config.ref_bench->binary);
    const auto calibration = load_calibration_quietly();

    // A live bar on a terminal; in logs one line per test, since a test may
    // take minutes and quarter-way lines would say too little.
    const bool tty = isatty(STDERR_FILENO) != 0;
    std::unique_ptr<ProgressBar> bar;
    size_t total = 0, done = 0;
    BenchHooks hooks;
    hooks.on_note = [](const std::string& line) { fmt::print(stderr, "tandem: {}\n", line); };
    hooks.on_start = [&](size_t n) {
        total = n;
        if (tty) bar = std::make_unique<ProgressBar>("bench", n);
    };
    hooks.on_row = [&](const BenchRow& r) {
        ++done;
        if (bar) {
            bar->advance(1, row_progress(r));
        } else {
            fmt::print(stderr, "bench [{}/{}] {}\n", done, total, row_progress(r));
        }
    };
    if (config.ref_bench) {
        hooks.after_test = [&](const std::string& model_path, BenchRow& r) {
            const std::string what = fmt::format("llama-bench {} {}", r.model, r.test);
            if (bar) {
                bar->advance(0, what);
            } else {
                fmt::print(stderr, "bench [{}/{}] {}\n", done + 1, total, what);
            }
            run_ref_bench(config, model_path, r);
        };
    }
    // --progress: each phase of each test on its own line, as llama-bench
    // --progress prints them (a watcher can tell the timed phases apart).
    if (o.progress) {
        hooks.on_phase = [&](size_t index, const BenchRow& r, const std::string& phase) {
            fmt::print(stderr, "tandem bench: benchmark {}/{}: {} ({} {})\n", index + 1, total, phase, r.model, r.test);
            std::fflush(stderr);
        };
    }
    if (o.calibrate_each) {
        const int threads = cpu::physical_core_count();
        hooks.measure_cpu_gbps = [threads] { return measure_cpu_read_gbps(threads); };
    }
    const BenchResult result = run_bench(config, calibration, hooks);
    if (bar) bar->finish();

    std::fflush(stderr);
    // Against a device (the stand-in or a GPU) the planner's prediction is
    // shown beside each row, not only in a sweep: -ot and the other
    // placements are measured against it the same way.
    fmt::print("{}", format_rows(result.rows, config.format, config.sweep_step.has_value() || !config.device.empty()));
    std::fflush(stdout);
    if (!config.plot_path.empty()) {
        const BenchModelSummary& m = result.models.front();
        std::string title = fmt::format("{} on {}", m.model, config.device.empty() ? "the CPU" : config.device);
        for (size_t i = 0; i < config.vram.size(); ++i) {
            title += fmt::format("{}{}", i ? "," : ", --vram ", format_bytes(config.vram[i]));
        }
        if (config.sweep_step) {
            write_sweep_svg(config.plot_path, sweep_chart_from_rows(result.rows, title, m.fit_limit));
        } else {
            if (!result.rows.empty()) {
                const int threads = result.rows.front().threads;
                title += fmt::format(", {} thread{}", threads, threads == 1 ? "" : "s");
            }
            if (config.ref_bench) title += ", against llama.cpp";
            write_depth_svg(config.plot_path, depth_chart_from_rows(result.rows, title));
        }
        fmt::print(stderr, "tandem: wrote {}\n", config.plot_path);
    }
    // Last, so that bad input before any result is still a single line.
    if ((!calibration || !calibration->cpu_gbps) && !o.calibrate_each) {
        fmt::print(stderr, "tandem: no calibration: run `tandem bench --calibrate` for the % column\n");
    }
}

constexpr const char* kBenchFooter = R"(Lists: every list flag takes comma-separated items, and each item is N,
A-B (A to B inclusive) or A-B+S (A, A+S, ... up to B): -ngl 0-8, -ngl 0-32+4,
-p 128,512, -t 1-4. Flags may also repeat (-m a.gguf -m b.gguf). -p 0 or -n 0
drops that kind of test.

Tests, as llama-bench: ppN evaluates N prompt tokens as one batch (in -ub
micro-batches) from an empty cache, tok/s = N / time; tgN generates N tokens
one at a time from an empty cache, tok/s = N / time; pgP,N (-pg P,N) does
both, tok/s = (P + N) / time. Each test runs once uncounted, then -r times;
t/s is the mean +- the sample standard deviation. The context is the longest
test (P + N). Token ids are arbitrary: speed does not depend on the text.

GB/s: bytes of weights read per second. The layers and one embedding row are
counted once per micro-batch of the prompt and once per generated token, the
output head once per generated token and once per prompt (only the last
prompt position gets logits): for tgN this is the bytes of one token x t/s.
Of a mixture of experts' expert tensors only the share of the experts used
is counted (expert_used_count of expert_count). KV cache reads are not counted.
% bw: the share of the calibrated bandwidth (bench --calibrate) this achieves:
the time the weights would take at the calibrated speeds, host bytes at the
CPU's GB/s plus device bytes at the GPU's (the stand-in cpu2 uses the CPU's;
the devices take turns, so the times add), over the measured time. For a
CPU-only run this is GB/s / calibrated GB/s. "-" without a calibration.
--calibrate-each measures the CPU's read bandwidth (as --calibrate does, not
stored) right before and right after each test's counted runs, shows both
(bw now, GB/s) and takes % bw against their mean: for hosts whose bandwidth
moves between runs (shared virtual machines, laptops changing power state).

Batched decode (--parallel LIST, e.g. --parallel 1,2,4,8; -np too), as
llama-batched-bench: for each stream count S, S sequences each get a prompt of
-p tokens (default 32; evaluated in one batch, not timed), then -n decode steps
(default 128) each evaluate one token of every stream in one batch and take
each stream's next token by argmax. t/s = S x n / time of the steps (all
streams together); t/s/stream = t/s / S; speed-up = t/s over that of S = 1
(when the list has 1). GB/s counts the weights once per step, shared by the
S streams. The context holds S x (p + n) cells. -pg and -d do not combine
with it; every other flag (-m, -t, -ngl, --cache-type, -r, -o) does.

Speculative decoding (--spec-ngram [N], or -md DRAFT with --draft-max,
--draft-min, --draft-p-min, --draft-fixed as run takes them): for each model,
-n tokens (default 128) are generated greedily from one prompt twice, plainly
and speculatively, alternating which goes first, after one uncounted run of
each; only generation is timed. Rows: t/s of each, the share of proposed
tokens accepted, tokens per target pass, speed-up over plain, and whether
both gave the same tokens (they must). The prompt: --spec-prompt TEXT, else a
request to repeat a paragraph in the model's chat template. -t, -ub, -ngl,
--cache-type and -r apply (the first of each list).

backend: cpu (nothing on the device), split, or gpu (every layer and the head
on the device). -ngl auto (the default) asks the planner for the most layers
that fit --vram, as run does. --sweep-ngl [STEP] runs ngl 0, STEP, ... and
n_layer + 1 and prints the planner's predicted t/s beside each row; splits
that do not fit --vram are reported, not run. --plot FILE.svg draws the sweep.
Predictions use the calibrated speeds (else the planner's defaults); on cpu2
the device is predicted with the CPU's speeds, since that is what it is.

Without --sweep-ngl, --plot FILE.svg draws t/s against depth: give -d with two
or more depths (-d 0,4096,16384); decode (tgN) and prefill (ppN) panels, +-1 sd
bars over the repetitions.

--ref-bench LLAMA_BENCH: llama.cpp's llama-bench binary measures the same
tests in the same sitting: right after Tandem's runs of each test (each depth),
llama-bench runs that test with the same model, -p/-n/-pg, -d, -t, -r, -ngl
(0 unless --device is a CUDA GPU), and -ub, -ctk, -ctv where given, with -o
json. Markdown adds "llama.cpp t/s" and "tandem/llama" (Tandem's mean over
llama.cpp's); csv and json carry llama_tps_mean, llama_tps_sd, tps_vs_llama and
llama_samples; --plot draws llama.cpp's lines beside Tandem's.)";

}  // namespace

void add_bench_command(CLI::App& app) {
    auto opts = std::make_shared<BenchOptions>();
    BenchArgs& a = opts->args;
    CLI::App* cmd = app.add_subcommand(
        "bench", "Measure prompt and generation speed as llama-bench does, or calibrate the planner (--calibrate)");
    cmd->add_flag("--calibrate", opts->calibrate, "measure memory bandwidths and the CPU kernels' rates and fixed costs; store them for `plan` and `run`");
    cmd->add_flag("--calibrate-each", opts->calibrate_each,
                  "measure the CPU read bandwidth around every test; take % bw against it and predict for it (not stored)");
    cmd->add_flag("--progress", opts->progress,
                  "print each test's phases as they begin (warmup, depth fill, timed prompt and generation runs), "
                  "one line each on stderr, as llama-bench --progress");
    cmd->add_option("--calibrate-rounds", opts->calibrate_rounds,
                    "with --calibrate: measure this many times; keep the best of each measure (a busy host only "
                    "slows measurements down), and the middle round of those memory bandwidth bounds")
        ->type_name("N")
        ->capture_default_str();
    cmd->add_flag("--json", opts->json, "print as JSON (with --calibrate; otherwise the same as -o json)");
    cmd->add_option("-m,--model", a.models, "GGUF model file; repeat for several")->type_name("FILE");
    cmd->add_option("-p,--n-prompt", a.n_prompt, "prompt sizes of the ppN tests (default 512)")->type_name("LIST");
    cmd->add_option("-n,--n-gen", a.n_gen, "generated tokens of the tgN tests (default 128)")->type_name("LIST");
    cmd->add_option("-d,--n-depth", a.n_depth,
                    "tokens already in the KV cache when each test starts (its prefill is not timed, and done once "
                    "for the tests of one depth, as llama-bench does), a list (default 0)")
        ->type_name("LIST");
    cmd->add_option("--parallel", a.parallel,
                    "batched decode: for each stream count (1..64), every step evaluates one token of each stream "
                    "in one batch, after a -p prompt per stream (default 32, not timed); replaces the pp/tg tests. The "
                    "stream counts' runs take turns (x1 x4 x1 x4 ...) and the speed-up is the median of each "
                    "round's ratio to one stream")
        ->type_name("LIST");
    cmd->add_option("--prompt-gen", a.prompt_gen, "a pgP,N test, prompt then generation (-pg); may repeat")
        ->type_name("P,N");
    cmd->add_option("--n-gpu-layers", a.n_gpu_layers,
                    "layers on the accelerator (-ngl): a list or range, or auto (default): the most that fit --vram")
        ->type_name("LIST|auto");
    cmd->add_option("-t,--threads", a.threads, "thread counts (default: the physical cores)")->type_name("LIST");
    cmd->add_option("-b,--batch-size", a.n_batch, "logical batch size (accepted; the micro-batch decides)");
    cmd->add_option("--ubatch-size", a.n_ubatch, "tokens per micro-batch (-ub), a list (default 512)")->type_name("LIST");
    add_cache_type_flags(*cmd, a.cache_types, true);
    cmd->add_option("--mmap", a.mmap, "-mmp 0|1: map the model (1, the default) or read it into memory (0)")
        ->type_name("0|1");
    cmd->add_option("-r,--repetitions", a.repetitions, "counted runs per test")->capture_default_str();
    cmd->add_option("-o,--output", a.output, "md, csv, json or jsonl")->type_name("FORMAT")->capture_default_str();
    cmd->add_option("--device", a.device,
                    "accelerators: cuda, cudaN, or cpu2 (the stand-in CPU device); a comma list (cuda0,cuda1, "
                    "cpu2,cpu3) shares the layers between them")
        ->type_name("DEVICE[,...]");
    cmd->add_option("--vram", a.vram,
                    "accelerator memory Tandem may use, e.g. 24GiB; with several devices one size for each, or a list "
                    "such as 24GiB,12GiB")
        ->type_name("SIZE[,...]");
    cmd->add_option("--tensor-split", a.tensor_split,
                    "-ts A,B,...: how several devices share the layers, in proportions (default: by --vram, else equal)")
        ->type_name("LIST");
    cmd->add_option("--split-mode", a.split_mode, "-sm none|layer: split the layers between the devices (row is refused)")
        ->capture_default_str();
    cmd->add_option("--stream-min-batch", a.stream_min_batch,
                    "prompt micro-batches of at least N tokens multiply the CPU layers' weights on the accelerator "
                    "(the backend column then says +stream)")
        ->capture_default_str();
    cmd->add_flag("--no-stream", a.no_stream, "never stream weights to the accelerator");
    cmd->add_flag("--pipeline", a.pipeline,
                  "measure pipeline stages, one per MPI rank: mpirun -np N tandem bench ... --pipeline");
    cmd->add_flag("--no-host-copy", a.no_host_copy,
                  "multiply the CPU layers' weights straight from the mapped file instead of a copy in huge pages");
    add_placement_flags(*cmd, a.placement);
    cmd->add_option("--sweep-ngl", a.sweep_step, "run every ngl from 0 to n_layer + 1 (in steps of STEP, default 1)")
        ->expected(0, 1)
        ->type_name("[STEP]");
    cmd->add_option("--plot", a.plot,
                    "write a chart: with --sweep-ngl, measured and predicted t/s by ngl; else t/s against depth "
                    "(-d with two or more depths)")
        ->type_name("FILE.svg");
    cmd->add_option("--ref-bench", a.ref_bench,
                    "a llama-bench binary: run each test with it too, right after Tandem's, and report its t/s "
                    "beside Tandem's (and in --plot)")
        ->type_name("LLAMA_BENCH");
    add_spec_flags(*cmd, opts->spec);
    cmd->add_option("--spec-prompt", opts->spec_prompt,
                    "with --spec-ngram or -md: the prompt text (default: a request to repeat a paragraph, in the "
                    "model's chat template)")
        ->type_name("TEXT");
    add_llama_compat_flags(*cmd, LlamaTool::Bench);
    cmd->footer(std::string(kBenchFooter) + "\n\n" + llama_spellings_help(*cmd));
    cmd->callback([opts, cmd] {
        if (opts->calibrate) {
            calibrate(opts->json, opts->calibrate_rounds);
            return;
        }
        opts->args.sweep = cmd->count("--sweep-ngl") > 0;
        bench(*opts);
    });
}

}  // namespace tandem::tools
