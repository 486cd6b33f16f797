#include "tools/bench_runner.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <filesystem>
#include <limits>
#include <memory>
#include <span>

#include <fmt/format.h>

#include "kernels_cpu/cpu_info.h"
#include "planner/planner.h"
#include "runtime/serving/scheduler.h"
#include "runtime/common/memory_ledger.h"
#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/quant/quant_mix.h"
#include "runtime/engine/device_registry.h"
#include "runtime/engine/session.h"
#include "runtime/sampler/sampler.h"
#include "tools/field_flags.h"
#include "tools/pipeline.h"
#include "tools/split.h"

namespace tandem::tools {
namespace {

// A model opened once for all its setups. The spec points into the file,
// so the file lives on the heap where moving the struct cannot dangle it.
struct OpenModel {
    std::unique_ptr<gguf::File> file;
    model::ModelSpec spec;
    std::string path, name, type;
    uint64_t size = 0, params = 0;
};

// One Session's worth of options: every test runs on it.
struct Setup {
    model::CacheType cache_type = model::kCacheF16;
    int64_t n_ubatch = 512;
    int threads = 0;
    int64_t ngl = 0;
    planner::Plan plan;         // with ngl forced: the prediction and whether it fits
    planner::PlanInputs inputs;  // what the plan was made from, for each test's prediction
    // --pipeline with -ngl auto: rank 0's plan of its own layers
    // (serving::resolve_split, as run makes it), whose session options carry
    // the flags each later rank plans its own layers from. ngl is rank 0's
    // count; no prediction (the planner predicts one process, not stages).
    std::optional<Split> stage_split;
};

// As `tandem inspect` names it: the mix of general.file_type.
std::string file_type_name(const gguf::File& f) {
    const auto ft = f.find_uint("general.file_type");
    return ft ? quant::file_type_name(*ft) : "?";
}

OpenModel open_model(const std::string& path, bool mmap) {
    if (!std::filesystem::exists(path)) throw Error(fmt::format("bench: model file {} does not exist", path));
    OpenModel m;
    gguf::OpenOptions open;
    open.mode = mmap ? gguf::LoadMode::Mmap : gguf::LoadMode::ReadIntoMemory;  // -mmp
    m.file = std::make_unique<gguf::File>(gguf::File::open(path, open));
    if (m.file->header_only()) {
        throw Error(fmt::format("bench: {} is header-only (tandem synth --header-only); benchmarks need the weights",
                                path));
    }
    m.spec = model::load_model_spec(*m.file);
    m.path = path;
    m.name = std::filesystem::path(path).filename().string();
    m.type = file_type_name(*m.file);
    m.size = m.file->total_tensor_bytes();
    for (const gguf::TensorInfo& t : m.file->tensors()) m.params += t.n_elements;
    return m;
}

// The planner's inputs, built as `run -ngl auto` builds them: the capacity
// of --vram, no margin on the stand-in (its ledger is exact), the session's
// context, micro-batch and cache type, and the calibrated speeds. Without
// --vram the devices are taken as unlimited, so every split "fits" and any
// real shortage shows up as an allocation failure instead. Several devices
// share the layers as -ts says, else by their room (as run).
//
// Unlimited, yet several of them add up without overflow.
constexpr uint64_t kUnlimited = uint64_t{1} << 60;

SplitRequest split_request(const BenchConfig& c, const Setup& s) {
    SplitRequest req;
    req.device = c.device;
    req.vram = c.vram;
    if (!c.device.empty() && c.vram.empty()) req.vram = {kUnlimited};
    req.tensor_split = c.tensor_split;
    req.n_ctx = c.n_ctx();
    req.n_ubatch = s.n_ubatch;
    req.n_seq = c.n_seq_max();
    req.cache_type = s.cache_type;
    req.stream.weight_stream = c.weight_stream;
    req.stream.min_batch = c.stream_min_batch;
    req.placement = placement_options(c.placement);  // -ot, --cpu-moe, --n-cpu-moe, -nkvo: sized and predicted with them
    req.stream.copy_host_weights = c.copy_host_weights;
    return req;
}

planner::PlanInputs plan_inputs(const BenchConfig& c, const Setup& s,
                                const std::optional<planner::Calibration>& calibration) {
    planner::PlanInputs in = split_plan_inputs(split_request(c, s));
    if (!c.device.empty() && c.vram.empty()) in.margin = 0;
    if (calibration) planner::apply_calibration(*calibration, in);
    // The stand-in is host memory worked by the same cores: predicting it
    // with GPU speeds would compare the measurement with a card that is not
    // there. Only the predictions change; the fit does not depend on speed.
    // The same goes for its kernels and fixed costs: the host's, and its
    // hand-overs are copies between host buffers.
    if (all_stand_ins(c.device)) {
        in.gpu_gbps = in.cpu_gbps.value_or(planner::kDefaultCpuGBps);
        in.gpu_gflops = in.cpu_gflops.value_or(planner::kDefaultCpuGflops);
        in.device_costs = calibration ? planner::standin_costs(*calibration) : in.host_costs;
    }
    return in;
}

// --pipeline with -ngl auto: rank 0 plans its own layers, and each later
// rank its own on its own devices, as run does (serving::resolve_split with
// the link). The request is the fit check's, with --vram as given: GPUs
// without it offer what they have free, each on its own rank's host.
Split stage_split(const BenchConfig& c, const Setup& s, const OpenModel& m, const std::shared_ptr<StageLink>& link,
                  const BenchHooks& hooks) {
    SplitRequest req = split_request(c, s);
    req.vram = c.vram;
    req.pipeline = link;
    return resolve_split(req, *m.file, m.spec, [&](const std::string& w) {
        if (hooks.on_note) hooks.on_note("warning: " + in_flags(w));
    });
}

std::vector<Setup> setups_for(const BenchConfig& c, const OpenModel& m,
                              const std::optional<planner::Calibration>& calibration,
                              const std::shared_ptr<StageLink>& link, const BenchHooks& hooks) {
    std::vector<Setup> out;
    for (model::CacheType ct : c.cache_types) {
        for (int64_t ub : c.n_ubatch) {
            const Setup base{ct, ub, 0, 0, {}, {}, std::nullopt};
            // The splits depend on the cache type and micro-batch (they size
            // the device's share), not on the thread count.
            std::vector<int64_t> ngls;
            std::vector<std::optional<Split>> stages;  // beside ngls: a pipeline's auto
            if (c.sweep_step) {
                ngls = sweep_ngl_values(m.spec.hp.n_layer, *c.sweep_step);
                stages.resize(ngls.size());
            } else {
                for (const auto& ngl : c.n_gpu_layers) {
                    if (ngl) {
                        ngls.push_back(*ngl);
                        stages.emplace_back();
                        continue;
                    }
                    if (link) {
                        // Said when the session opens, with each rank's own.
                        Split split = stage_split(c, base, m, link, hooks);
                        ngls.push_back(split.so.n_gpu_layers);
                        stages.emplace_back(std::move(split));
                        continue;
                    }
                    // -ngl auto: the largest split that fits, as run chooses.
                    const planner::Plan p = planner::plan(m.spec, plan_inputs(c, base, calibration));
                    const int64_t chosen = c.device.empty() ? 0 : p.ngl;
                    if (hooks.on_note && !c.device.empty()) {
                        hooks.on_note(fmt::format("{}: -ngl auto chose {} of {} ({})", m.name, chosen,
                                                  m.spec.hp.n_layer + 1, p.reasons.front()));
                    }
                    ngls.push_back(chosen);
                    stages.emplace_back();
                }
            }
            for (int threads : c.threads) {
                for (size_t i = 0; i < ngls.size(); ++i) {
                    Setup s = base;
                    s.threads = threads;
                    s.ngl = ngls[i];
                    s.stage_split = stages[i];
                    planner::PlanInputs in = plan_inputs(c, s, calibration);
                    in.ngl = ngls[i];
                    s.plan = planner::plan(m.spec, in);
                    // Each rank's own plan fits it, or its open says why not.
                    if (s.stage_split) s.plan.fits = true;
                    s.inputs = std::move(in);
                    out.push_back(std::move(s));
                }
            }
        }
    }
    return out;
}

// The planner's time for the test itself (its prompt in the session's
// micro-batches, its generated tokens at their positions, after its depth),
// as tokens per second.
double predicted_tps(const model::ModelSpec& spec, const Setup& s, const BenchTest& t) {
    const double seconds =
        planner::predict_seconds(spec, s.inputs, s.plan, planner::Workload{t.n_prompt, t.n_gen, t.n_depth});
    return seconds > 0 ? static_cast<double>(t.n_prompt + t.n_gen) / seconds : 0.0;
}

BenchRow row_skeleton(const OpenModel& m, const BenchConfig& c, const Setup& s, const BenchTest& t) {
    BenchRow r;
    r.model = m.name;
    r.model_type = m.type;
    r.model_size = m.size;
    r.model_params = m.params;
    r.device = c.device;
    r.ngl = s.ngl;
    r.threads = s.threads > 0 ? s.threads : cpu::physical_core_count();
    r.n_ubatch = s.n_ubatch;
    r.cache_type = planner::cache_type_name(s.cache_type);
    r.test = t.name();
    r.n_prompt = t.n_prompt;
    r.n_gen = t.n_gen;
    r.n_depth = t.n_depth;
    r.n_parallel = t.n_parallel;
    r.fits = s.plan.fits;
    // The planner predicts one sequence's decode; batched decode it does not model.
    if (t.n_parallel == 0 && !s.stage_split) r.predicted_tps = predicted_tps(m.spec, s, t);
    return r;
}

// "cpu" or "gpu" when one side holds every layer tensor and the head;
// "split" otherwise (-ngl short of all layers, or -ot moving some tensors).
std::string backend_of(const Session& s) {
    const Placement& p = s.placement();
    if (p.devices.size() < 2) return "cpu";
    bool host = p.head == kHostDevice, device = p.head != kHostDevice;
    for (const auto& [tensor, where] : p.tensor) (where == kHostDevice ? host : device) = true;
    for (const int where : p.kv) (where == kHostDevice ? host : device) = true;
    if (!device) return "cpu";
    return host ? "split" : "gpu";
}

// Weight bytes each side reads in one run of a test. The layers (and one
// embedding row) are read once per micro-batch of the prompt and once per
// generated token; the output head once per generated token and once for
// the whole prompt, since only its last position's logits are computed.
struct WeightReads {
    double host = 0, device = 0;
};

//
// A --parallel test times only its decode steps: each reads the layers and
// the head once for all its streams (once per micro-batch, should -ub be
// smaller than the stream count).
WeightReads weight_reads(const Session& s, const model::ModelSpec& spec, const BenchTest& t, int64_t n_ubatch) {
    const double head = static_cast<double>(model::output_weight_bytes(spec));
    // Per tensor, where it was placed: -ot can move a leading layer's FFN
    // to the host or a later layer's onto the device.
    const Placement& placed = s.placement();
    double device_layers = 0;
    for (int64_t il = 0; il < spec.hp.n_layer; ++il) {
        device_layers += static_cast<double>(model::layer_decode_bytes_if(
            spec, il, [&](const gguf::TensorInfo& t) { return placed.of(&t) != kHostDevice; }));
    }
    const double host_layers = static_cast<double>(s.weight_bytes_per_token()) - head - device_layers;
    double layer_passes = static_cast<double>((t.n_prompt + n_ubatch - 1) / n_ubatch + t.n_gen);
    double head_passes = static_cast<double>((t.n_prompt > 0 ? 1 : 0) + t.n_gen);
    if (t.n_parallel > 0) {
        layer_passes = head_passes = static_cast<double>(t.n_gen * ((t.n_parallel + n_ubatch - 1) / n_ubatch));
    }
    WeightReads r{host_layers * layer_passes, device_layers * layer_passes};
    (s.output_on_device() ? r.device : r.host) += head * head_passes;
    return r;
}

// Fills the measured fields of rows (one per test) from a live session.
//
// The tests of a --parallel list (1, 4, ... streams on one session) take
// their counted runs in turn, x1 x4 x1 x4 ..., so that a shared host's slow
// minutes fall on every stream count alike and the speed-up compares runs
// taken side by side (fill_speedups). The other tests run one after another,
// each with all its repetitions.
void measure_setup(Session& session, const OpenModel& m, const BenchConfig& c,
                   const std::optional<planner::Calibration>& calibration, std::vector<BenchRow>& rows,
                   const std::vector<BenchTest>& tests, const BenchHooks& hooks, const Setup& setup, size_t first_row) {
    const int64_t n_ubatch = std::min(rows.front().n_ubatch, session.n_ctx());  // the session caps it so
    std::vector<int32_t> ids(static_cast<size_t>(c.n_ctx()));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((1 + 7 * i) % session.n_vocab());
    std::vector<float> logits;
    const auto cpu_times = [&] { return hooks.read_cpu_times ? hooks.read_cpu_times() : read_cpu_times(); };
    // Tokens a run of test i counts, and one counted run's rate.
    const auto counted = [&](size_t i) {
        const BenchTest& t = tests[i];
        return t.n_parallel > 0 ? t.n_parallel * t.n_gen : t.n_prompt + t.n_gen;
    };
    int64_t filled = -1;  // the depth the cache holds between runs (time_test)
    // bench --progress: which test (index over the whole run) and which of
    // its runs ("run 2/5"; empty for the warm-up); run_test tells the
    // phases of that run, named as llama-bench --progress names them.
    size_t now_test = 0;
    std::string now_run;
    const auto tell = [&](const char* what, const char* suffix = "") {
        if (!hooks.on_phase) return;
        const std::string run = now_run.empty() ? fmt::format("warmup {} run", what) : fmt::format("{} {}", what, now_run);
        hooks.on_phase(first_row + now_test, rows[now_test], run + suffix);
    };
    const auto told = [&](TestPhase p) {
        switch (p) {
            case TestPhase::Fill: tell("depth"); break;
            case TestPhase::FillKept: tell("depth", " (cached)"); break;
            case TestPhase::Prompt: tell("prompt"); break;
            case TestPhase::Generation: tell("generation"); break;
        }
    };
    const auto run_test = [&](const BenchTest& t) {
        if (t.n_parallel > 0) {
            filled = -1;
            tell("parallel");
            return run_parallel_decode(session, t.n_parallel, t.n_depth + t.n_prompt, t.n_gen).seconds;
        }
        return time_test(session, t, ids, logits, filled, told);
    };
    const auto run_once = [&](size_t i) {
        now_test = i;
        now_run = fmt::format("run {}/{}", rows[i].samples.size() + 1, c.repetitions);
        return run_test(tests[i]);
    };
    // A warm-up runs the test without its depth, as llama-bench's does: the
    // same kernels and weights, without filling a cache nobody times (at
    // depth 8192 that fill cost as much as a counted run). Where the cache
    // already holds the test's depth (the test before had the same), it
    // runs there: cheaper than filling it again.
    const auto warm_up = [&](size_t i) {
        now_test = i;
        now_run.clear();
        BenchTest t = tests[i];
        if (t.n_parallel > 0 || filled != t.n_depth) t.n_depth = 0;
        run_test(t);
    };
    const auto sample = [&](size_t i) { rows[i].samples.push_back(static_cast<double>(counted(i)) / std::max(run_once(i), 1e-9)); };
    // Runs body (the counted runs of rows [first, last)) between the
    // bandwidth and CPU-time readings, and gives each of those rows both.
    const auto around = [&](size_t first, size_t last, const auto& body) {
        std::optional<double> gbps_before, gbps_after, steal;
        if (hooks.measure_cpu_gbps) gbps_before = hooks.measure_cpu_gbps();
        const std::optional<CpuTimes> times_before = cpu_times();
        body();
        if (const std::optional<CpuTimes> times_after = cpu_times(); times_before && times_after) {
            steal = steal_percent(*times_before, *times_after);
        }
        if (hooks.measure_cpu_gbps) gbps_after = hooks.measure_cpu_gbps();
        for (size_t i = first; i < last; ++i) {
            rows[i].cpu_gbps_before = gbps_before;
            rows[i].cpu_gbps_after = gbps_after;
            rows[i].steal_pct = steal;
        }
    };
    const bool in_turn = tests.size() > 1 && std::all_of(tests.begin(), tests.end(), [](const BenchTest& t) { return t.n_parallel > 0; });
    // Rows that took turns share their rounds, so one count before them all.
    std::vector<int64_t> streamed_before(tests.size(), session.streamed_batches());
    if (in_turn) {
        for (size_t i = 0; i < tests.size(); ++i) warm_up(i);
        around(0, tests.size(), [&] {
            for (int rep = 0; rep < c.repetitions; ++rep) {
                for (size_t i = 0; i < tests.size(); ++i) sample(i);
            }
        });
        for (BenchRow& r : rows) r.in_turn = true;
    }
    for (size_t i = 0; i < tests.size(); ++i) {
        const BenchTest& t = tests[i];
        BenchRow& r = rows[i];
        r.backend = backend_of(session);
        r.threads = session.n_threads();
        if (!in_turn) {
            streamed_before[i] = session.streamed_batches();
            warm_up(i);
            around(i, i + 1, [&] {
                for (int rep = 0; rep < c.repetitions; ++rep) sample(i);
            });
        }
        // --calibrate-each: predict for the host as it was around this test
        // (its bandwidth moves by a third within minutes on a shared VM).
        if (calibration && r.cpu_gbps_before && r.cpu_gbps_after && t.n_parallel == 0 && !setup.stage_split) {
            Setup now = setup;
            now.inputs = plan_inputs(c, now, planner::at_bandwidth(*calibration, (*r.cpu_gbps_before + *r.cpu_gbps_after) / 2.0));
            now.inputs.ngl = setup.inputs.ngl;
            r.predicted_tps = predicted_tps(m.spec, now, t);
        }
        // Which path ran: the prompt's micro-batches streamed the CPU
        // layers' weights to the accelerator, or not.
        if (session.streamed_batches() > streamed_before[i]) r.backend += "+stream";
        r.tps_mean = mean_of(r.samples);
        r.tps_sd = sample_sd_of(r.samples);
        if (t.n_parallel > 0) r.stream_tps = *r.tps_mean / static_cast<double>(t.n_parallel);
        // The mean run's time, so GB/s and % agree with the t/s column.
        const double seconds = static_cast<double>(counted(i)) / *r.tps_mean;
        const WeightReads bytes = weight_reads(session, m.spec, t, n_ubatch);
        r.gbps = (bytes.host + bytes.device) / seconds / 1e9;
        // The CPU's bandwidth for the % column: measured around this test
        // when asked (a host whose bandwidth moves), else the stored one.
        std::optional<double> cpu_gbps = calibration ? calibration->cpu_gbps : std::nullopt;
        if (r.cpu_gbps_before && r.cpu_gbps_after) cpu_gbps = (*r.cpu_gbps_before + *r.cpu_gbps_after) / 2.0;
        // The stand-in device is host memory, so host bandwidth is its roofline.
        std::optional<double> dev_gbps;
        if (all_stand_ins(c.device)) {
            dev_gbps = cpu_gbps;
        } else if (calibration) {
            dev_gbps = calibration->gpu_gbps;
        }
        if (cpu_gbps && *cpu_gbps > 0.0 && (bytes.device == 0 || dev_gbps)) {
            r.pct_bandwidth = percent_of_roofline(bytes.host, bytes.device, *cpu_gbps, dev_gbps.value_or(1.0), seconds);
        }
        if (hooks.after_test) hooks.after_test(m.path, r);
        if (hooks.on_row) hooks.on_row(r);
    }
}

// --parallel: each row's t/s over that of the 1-stream row of the same
// setup, prompt and length, wherever the list put the 1. Rows whose runs
// took turns (BenchRow::in_turn) compare round by round: the median of
// each round's ratio, so a slow minute of the host, which slows both runs
// of its round, cancels out.
void fill_speedups(std::vector<BenchRow>& rows) {
    for (BenchRow& r : rows) {
        if (r.n_parallel == 0 || !r.tps_mean) continue;
        for (const BenchRow& one : rows) {
            if (one.n_parallel == 1 && one.n_prompt == r.n_prompt && one.n_depth == r.n_depth && one.n_gen == r.n_gen &&
                one.tps_mean &&
                *one.tps_mean > 0) {
                r.speedup = *r.tps_mean / *one.tps_mean;
                if (r.in_turn && one.in_turn && r.samples.size() == one.samples.size() && !r.samples.empty()) {
                    std::vector<double> ratios;
                    for (size_t k = 0; k < r.samples.size(); ++k) ratios.push_back(r.samples[k] / one.samples[k]);
                    r.speedup = median_of(ratios);
                }
                break;
            }
        }
    }
}

}  // namespace

// Seconds of the prompt and decode steps (bench_runner.h).
double time_test(Session& session, const BenchTest& t, const std::vector<int32_t>& ids, std::vector<float>& logits,
                 int64_t& filled, const std::function<void(TestPhase)>& phase) {
    const auto enter = [&](TestPhase p) {
        if (phase) phase(p);
    };
    if (t.n_depth > 0 && filled == t.n_depth &&
        session.held_prefix(0, static_cast<int32_t>(t.n_depth)) == static_cast<int32_t>(t.n_depth)) {
        enter(TestPhase::FillKept);
        session.remove_positions(0, static_cast<int32_t>(t.n_depth), -1);
    } else {
        session.reset();
        filled = -1;
        if (t.n_depth > 0) {
            enter(TestPhase::Fill);
            session.eval(std::span<const int32_t>(ids.data(), static_cast<size_t>(t.n_depth)), false, logits);
        }
        filled = t.n_depth;
    }
    const auto at = [&](int64_t i) { return ids.data() + t.n_depth + i; };
    const auto t0 = std::chrono::steady_clock::now();
    if (t.n_prompt > 0) {
        enter(TestPhase::Prompt);
        session.eval(std::span<const int32_t>(at(0), static_cast<size_t>(t.n_prompt)), false, logits);
    }
    if (t.n_gen > 0) enter(TestPhase::Generation);
    for (int64_t g = 0; g < t.n_gen; ++g) session.eval(std::span<const int32_t>(at(t.n_prompt + g), 1), false, logits);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

ParallelDecode run_parallel_decode(Session& session, int64_t n_parallel, int64_t n_prompt, int64_t n_gen) {
    serve::check_slot_count(n_parallel);
    const int64_t n_vocab = session.n_vocab();
    const auto V = static_cast<size_t>(n_vocab);
    const auto P = static_cast<size_t>(n_parallel);
    session.reset();
    std::vector<float> logits;
    std::vector<BatchToken> batch;
    std::vector<int32_t> next(P);
    ParallelDecode out;
    out.prompts.assign(P, std::vector<int32_t>());
    // Each stream its own prompt (the ids are arbitrary but valid and
    // differ per stream and position), all in one batch.
    if (n_prompt > 0) {
        for (size_t s = 0; s < P; ++s) {
            for (int64_t i = 0; i < n_prompt; ++i) {
                const int64_t k = static_cast<int64_t>(s) * n_prompt + i;
                const auto id = static_cast<int32_t>((1 + 7 * k) % n_vocab);
                out.prompts[s].push_back(id);
                batch.push_back({id, static_cast<int32_t>(i), static_cast<int32_t>(s), i == n_prompt - 1});
            }
        }
        session.eval_batch(batch, logits);
        for (size_t s = 0; s < P; ++s) next[s] = argmax(std::span<const float>(logits.data() + s * V, V));
    } else {
        for (size_t s = 0; s < P; ++s) next[s] = static_cast<int32_t>((1 + 13 * s) % V);
    }
    out.tokens.assign(P, std::vector<int32_t>());
    for (auto& t : out.tokens) t.reserve(static_cast<size_t>(n_gen));
    // The order tandem serve decodes in: each stream's logits those of the
    // stream alone. Under --pipeline the streams go in one group per stage,
    // a step apart (as the server's slots), so each stage works on one
    // group while the others work on the rest.
    const size_t G = std::min(P, static_cast<size_t>(session.pipeline_stages()));
    std::vector<int64_t> done(G, 0);  // steps each group has taken
    const auto send = [&](size_t g) {
        batch.clear();
        for (size_t s = g; s < P; s += G) {
            batch.push_back({next[s], static_cast<int32_t>(n_prompt + done[g]), static_cast<int32_t>(s), true});
            out.tokens[s].push_back(next[s]);
        }
        session.submit(batch, true);
    };
    const auto t0 = std::chrono::steady_clock::now();
    std::deque<size_t> flying;  // the groups in flight, oldest first
    for (size_t g = 0; g < G && n_gen > 0; ++g) {
        send(g);
        flying.push_back(g);
    }
    while (!flying.empty()) {
        const size_t g = flying.front();
        flying.pop_front();
        session.collect(logits);
        for (size_t s = g, row = 0; s < P; s += G, ++row) next[s] = argmax(std::span<const float>(logits.data() + row * V, V));
        if (++done[g] < n_gen) {
            send(g);
            flying.push_back(g);
        }
    }
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
}

std::vector<int64_t> sweep_ngl_values(int64_t n_layer, int64_t step) {
    std::vector<int64_t> out;
    const int64_t last = n_layer + 1;
    for (int64_t n = 0; n < last; n += std::max<int64_t>(1, step)) out.push_back(n);
    out.push_back(last);
    return out;
}

double percent_of_roofline(double host_bytes, double device_bytes, double cpu_gbps, double dev_gbps,
                           double measured_seconds) {
    const double ideal = host_bytes / (cpu_gbps * 1e9) + device_bytes / (dev_gbps * 1e9);
    return measured_seconds > 0 ? 100.0 * ideal / measured_seconds : 0.0;
}

BenchResult run_bench(const BenchConfig& c, const std::optional<planner::Calibration>& calibration,
                      const BenchHooks& hooks) {
    // Open every model first: a missing file fails before minutes of work.
    std::vector<OpenModel> models;
    for (const std::string& path : c.models) models.push_back(open_model(path, c.mmap));
    std::shared_ptr<StageLink> link;
    if (c.pipeline) {
        link = pipeline_link();
        if (!link) throw Error("--pipeline: start tandem under mpirun -np N (N >= 2)");
    }
    std::vector<std::vector<Setup>> setups;
    size_t total = 0;
    for (const OpenModel& m : models) {
        setups.push_back(setups_for(c, m, calibration, link, hooks));
        total += setups.back().size() * c.tests.size();
    }
    if (hooks.on_start) hooks.on_start(total);

    BenchResult result;
    for (size_t mi = 0; mi < models.size(); ++mi) {
        const OpenModel& m = models[mi];
        BenchModelSummary summary{m.name, m.spec.hp.n_layer, std::nullopt};
        if (!c.vram.empty() && !setups[mi].empty()) {
            planner::PlanInputs in = plan_inputs(c, setups[mi].front(), calibration);
            summary.fit_limit = planner::plan(m.spec, in).ngl;
        }
        result.models.push_back(summary);
        for (const Setup& s : setups[mi]) {
            std::vector<BenchRow> rows;
            for (const BenchTest& t : c.tests) rows.push_back(row_skeleton(m, c, s, t));
            if (s.plan.fits) {
                // A pipeline's auto: what rank 0 planned for its layers, and
                // the flags the later ranks plan theirs from.
                SessionOptions so = s.stage_split ? s.stage_split->so : SessionOptions{};
                so.n_ctx = c.n_ctx();
                so.n_seq_max = c.n_seq_max();
                // As tandem serve runs its slots: each stream its own part
                // of the cache, so its attention reads its own cells only.
                so.kv_per_sequence = c.n_seq_max() > 1;
                so.n_ubatch = s.n_ubatch;
                so.n_threads = s.threads;
                so.cache_type = s.cache_type;
                if (!s.stage_split) {
                    so.device = c.device;
                    so.device_capacity = c.vram;
                    so.n_gpu_layers = s.ngl;
                    // Several devices: the shares the plan sized (-ts, else by room).
                    so.tensor_split = s.plan.tensor_split;
                    serving::apply_placement(placement_options(c.placement), so);
                }
                so.weight_stream = c.weight_stream;
                so.stream_min_batch = c.stream_min_batch;
                so.copy_host_weights = c.copy_host_weights;
                so.next_stages = link;
                std::unique_ptr<Session> session;
                try {
                    session = std::make_unique<Session>(*m.file, m.spec, so);
                } catch (const OutOfDeviceMemory& e) {
                    // The plan thought it fits (a real GPU's allocator can
                    // disagree): report it as not fitting, keep going.
                    if (hooks.on_note) hooks.on_note(fmt::format("{}: ngl {} does not fit: {}", m.name, s.ngl, e.what()));
                    for (BenchRow& r : rows) r.fits = false;
                }
                // Several devices: which holds what (the report's rows name the list).
                if (session && hooks.on_note && s.plan.devices.size() > 1 && !s.stage_split) {
                    hooks.on_note(fmt::format("{}: ngl {} over {}: {}", m.name, s.ngl, c.device,
                                              session->placement_summary()));
                }
                // A pipeline's auto: each rank's choice and what it holds.
                if (session && hooks.on_note && s.stage_split) {
                    const int64_t end = stage_layers(m.spec.hp.n_layer, 0, link->n_stages()).second;
                    hooks.on_note(fmt::format("{}: pipeline rank 0: {}; holds {}", m.name, in_flags(s.stage_split->why),
                                              stage_holds(*session, {0, end}, false)));
                    for (const std::string& note : link->placement_notes()) {
                        hooks.on_note(fmt::format("{}: {}", m.name, in_flags(note)));
                    }
                }
                if (session) measure_setup(*session, m, c, calibration, rows, c.tests, hooks, s, result.rows.size());
                fill_speedups(rows);
            }
            for (BenchRow& r : rows) {
                if (!r.fits && hooks.on_row) hooks.on_row(r);
                result.rows.push_back(std::move(r));
            }
        }
    }
    return result;
}

}  // namespace tandem::tools
