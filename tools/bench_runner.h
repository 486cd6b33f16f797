// The measuring half of `tandem bench`: for every model and every setup
// (cache type, micro-batch, threads, split) it builds one Session, runs each
// test once to warm up and then `repetitions` times from a cache filled to the
// test's depth (filled once for the tests of one depth), and
// turns the timings into rows (bench_report.h). The planner's prediction for
// the same split is attached to every row, and splits the planner says do
// not fit the capacity are reported, not run.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "planner/calibration.h"
#include "runtime/engine/session.h"
#include "tools/bench_args.h"
#include "tools/bench_report.h"
#include "tools/cpu_steal.h"

namespace tandem::tools {

// Progress and notes go through these, so the runner prints nothing itself
// (results belong on stdout, everything else on stderr; tests stay quiet).
struct BenchHooks {
    std::function<void(size_t total_rows)> on_start;
    std::function<void(const BenchRow&)> on_row;
    std::function<void(const std::string&)> on_note;  // one line: an auto choice, a split that did not fit
    // Set (bench --calibrate-each): measures the CPU's read bandwidth in
    // GB/s; called right before and right after each test's counted runs,
    // and % bw uses the mean of the two (BenchRow::cpu_gbps_before/after).
    std::function<double()> measure_cpu_gbps;
    // Reads the CPU time counters around each test's counted runs for
    // BenchRow::steal_pct; unset: /proc/stat (tools/cpu_steal.h).
    std::function<std::optional<CpuTimes>()> read_cpu_times;
    // Called right after each measured test's counted runs, before on_row,
    // with the model's path as given (-m): bench --ref-bench runs
    // llama-bench's turn of the same test here and fills the row's llama_*
    // fields, so a shared host's slow minutes fall on both alike.
    std::function<void(const std::string& model_path, BenchRow&)> after_test;
    // bench --progress: called as a test's runs move from one phase to the
    // next, with the test's index over the whole run (0-based, as on_start
    // counted) and the phase as llama-bench --progress names it: "warmup
    // prompt run" (and the other warm-up phases), "depth run 1/5" (the
    // untimed fill), "depth run 2/5 (cached)"
    // (the fill kept from the run before), "prompt run 2/5", "generation
    // run 2/5" (timed), "parallel run 2/5" (--parallel's timed steps).
    std::function<void(size_t index, const BenchRow&, const std::string& phase)> on_phase;
};

// What the sweep chart needs to know about a model besides its rows.
struct BenchModelSummary {
    std::string model;  // file name, as in the rows
    int64_t n_layer = 0;
    // The planner's largest ngl within --vram (the first setup's context,
    // micro-batch and cache type); nullopt without --vram.
    std::optional<int64_t> fit_limit;
};

struct BenchResult {
    std::vector<BenchRow> rows;
    std::vector<BenchModelSummary> models;
};

// Runs the benchmark. `calibration` (bench --calibrate's measurements)
// feeds the predictions and the % bandwidth column; without it the column
// is empty and the predictions use the planner's assumed speeds. Throws
// tandem::Error for a model that cannot be opened or run.
BenchResult run_bench(const BenchConfig& config, const std::optional<planner::Calibration>& calibration,
                      const BenchHooks& hooks = {});

// One run of a --parallel test (BenchTest::n_parallel) on a session whose
// n_seq_max is at least n_parallel and whose context holds n_parallel *
// (n_prompt + n_gen) cells: the cache is reset, sequence s (0..n_parallel-1)
// gets n_prompt prompt tokens (its own ids; all sequences in one batch, not
// timed), then n_gen decode steps each evaluate one token of every sequence
// in one Session::eval_batch and take each sequence's next token by argmax
// (greedy, as serve's default). Throws tandem::Error as eval_batch does.
struct ParallelDecode {
    double seconds = 0;  // the decode steps, argmax included
    std::vector<std::vector<int32_t>> prompts;  // per sequence: its n_prompt prompt ids
    // Per sequence: the n_gen tokens the decode steps evaluated (the first is
    // the argmax of the prompt's last logits, or a fixed id without prompt).
    std::vector<std::vector<int32_t>> tokens;
};
ParallelDecode run_parallel_decode(Session& session, int64_t n_parallel, int64_t n_prompt, int64_t n_gen);

// One run of a test (no --parallel) from a cache holding t.n_depth tokens
// of `ids` (at least n_depth + n_prompt + n_gen of them): its seconds,
// the prompt and the decode steps, not the fill. `filled` is the depth the
// cache was left filled to by the run before (-1: unknown, or not this
// session's fill): at that depth the run only drops what the last run
// added, as llama-bench keeps its filled state (at depth 32768 a fill took
// minutes), when every layer still holds the depth's positions (a
// sliding-window ring may have turned over); otherwise it resets and fills.
// `logits` gets the last token's. `phase` (optional) hears each part begin.
enum class TestPhase { Fill, FillKept, Prompt, Generation };
double time_test(Session& session, const BenchTest& t, const std::vector<int32_t>& ids, std::vector<float>& logits,
                 int64_t& filled, const std::function<void(TestPhase)>& phase = {});

// ngl values of a sweep: 0, step, 2 * step, ... and always n_layer + 1 (the
// whole model with its head), so both ends are measured.
std::vector<int64_t> sweep_ngl_values(int64_t n_layer, int64_t step);

// The percentage of the calibrated bandwidth a run achieved: the time the
// weights would take to read at the calibrated speeds (host bytes at
// cpu_gbps plus device bytes at dev_gbps; the two devices take turns, so
// the times add) over the time measured. For one device this is
// measured GB/s / calibrated GB/s.
double percent_of_roofline(double host_bytes, double device_bytes, double cpu_gbps, double dev_gbps,
                           double measured_seconds);

}  // namespace tandem::tools
