// `tandem bench` results: one row per (model, split, threads, micro-batch,
// cache type, test), and the four ways of printing them. Every format
// carries the same fields; markdown, for people, shows some of them only
// when they vary or when there is something to show (predictions in a
// sweep, the micro-batch and cache type when not the default).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/bench_args.h"

namespace tandem::tools {

struct BenchRow {
    std::string model;       // the file name, without directories
    std::string model_type;  // "Q4_K_M", from general.file_type
    uint64_t model_size = 0;    // bytes of the file's tensors
    uint64_t model_params = 0;  // elements of the file's tensors
    std::string device;         // "" for none, else "cpu2", "cuda0", ...
    std::string backend = "-";  // "cpu", "split", "gpu"; "-" when not measured
    int64_t ngl = 0;
    int threads = 0;
    int64_t n_ubatch = 0;
    std::string cache_type;  // "f16", "q8_0"
    std::string test;        // "pp512", "tg128", "pp512+tg128", "tg128 x4 @ p32"
    int64_t n_prompt = 0;    // of a --parallel test: each stream's, not timed
    int64_t n_gen = 0;
    int64_t n_depth = 0;
    int64_t n_parallel = 0;  // streams of a --parallel test; 0 for the others
    // False when the split does not fit the device: nothing was measured
    // and only the prediction is reported.
    bool fits = true;
    std::vector<double> samples;  // tok/s of each counted repetition (--parallel: of all streams together)
    std::optional<double> tps_mean, tps_sd;
    // --parallel: tok/s of each stream (tps_mean / n_parallel), and
    // tps_mean over that of the 1-stream test of the same setup, prompt and
    // length (nullopt when --parallel lists no 1).
    // The median of each round's ratio where the runs took turns (in_turn).
    std::optional<double> stream_tps, speedup;
    // --parallel: the counted runs of this row and the other stream counts
    // of its setup took turns (x1 x4 x1 x4 ...), samples[k] of each from
    // round k; their steal % and bandwidth readings are of all the rounds.
    bool in_turn = false;
    std::optional<double> gbps;           // weights read per second, see --help
    std::optional<double> pct_bandwidth;  // of the calibrated roofline; nullopt without a calibration
    std::optional<double> predicted_tps;  // the planner's, for this test at this split
    // bench --calibrate-each: the CPU's read bandwidth (GB/s) measured right
    // before the counted runs and right after; % bw is then against their
    // mean instead of the stored calibration.
    std::optional<double> cpu_gbps_before, cpu_gbps_after;
    // CPU time the hypervisor took ("steal", /proc/stat) during the counted
    // runs, in % of all the machine's CPU time then: a shared host slows and
    // scatters the runs it takes time from. nullopt where not reported.
    std::optional<double> steal_pct;
    // bench --ref-bench: llama-bench's tok/s for the same test, its runs
    // taken right after this row's (tools/bench_ref.h); unset without.
    std::optional<double> llama_tps_mean, llama_tps_sd;
    std::vector<double> llama_samples;
};

// The markdown table gets a "steal %" column when a row's steal_pct is at
// least this (the json and csv always carry the field).
inline constexpr double kShowStealPct = 1.0;

double mean_of(const std::vector<double>& v);
// Sample standard deviation (n - 1); 0 for fewer than two values.
double sample_sd_of(const std::vector<double>& v);
// The middle value (the mean of the two middle ones for an even count); 0
// for none.
double median_of(std::vector<double> v);

// Human sizes as llama-bench prints them: "3.56 GiB", "14.6 MiB".
std::string human_size(uint64_t bytes);
// "1.2 B", "34.1 M", "12.0 K".
std::string human_count(uint64_t n);

nlohmann::json to_json(const BenchRow& row);

// The fastest repetition's tok/s (nullopt without samples), and the
// prediction's error against it in percent (+: predicted faster).
std::optional<double> best_tps(const BenchRow& row);
std::optional<double> prediction_error_pct(const BenchRow& row);
// --ref-bench: Tandem's mean tok/s over llama-bench's (nullopt without both).
std::optional<double> tps_vs_llama(const BenchRow& row);

// show_prediction: add the best run's, the predicted tok/s and the error to markdown
// (csv and json always carry them).
std::string format_markdown(const std::vector<BenchRow>& rows, bool show_prediction);
std::string format_csv(const std::vector<BenchRow>& rows);
std::string format_json(const std::vector<BenchRow>& rows);   // one array
std::string format_jsonl(const std::vector<BenchRow>& rows);  // one object per line
std::string format_rows(const std::vector<BenchRow>& rows, OutputFormat format, bool show_prediction);

// The csv/json field names, in csv column order.
const std::vector<std::string>& bench_field_names();

}  // namespace tandem::tools
