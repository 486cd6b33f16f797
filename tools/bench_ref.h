// `tandem bench --ref-bench LLAMA_BENCH`: llama.cpp's llama-bench measured
// beside Tandem in one sitting. Right after Tandem's counted runs of a test,
// llama-bench runs the same test (the model, -p/-n or -pg, -d, -t, -r, -ngl,
// and -ub/-ctk/-ctv where the user gave them) with -o json, and its mean,
// sd and samples join Tandem's row (BenchRow::llama_*). Taking turns test by
// test lets a shared host's slow minutes fall on both alike.
//
// llama-bench is started with posix_spawn and an argument vector (no
// shell), so a model path is never interpreted.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tools/bench_args.h"
#include "tools/bench_report.h"

namespace tandem::tools {

// One object of llama-bench -o json's array: a test and its tok/s.
struct LlamaBenchResult {
    int64_t n_prompt = 0, n_gen = 0, n_depth = 0;
    double avg_ts = 0, stddev_ts = 0;
    std::vector<double> samples_ts;
};

// llama-bench -o json's stdout: a JSON array, one object per test (one a
// line). Lines before the one that opens the array are skipped (a build
// that prints a note to stdout). Throws tandem::Error, one line naming what
// was expected and what was found, for text that is not such an array or
// an object without n_prompt, n_gen, avg_ts, stddev_ts and samples_ts.
// n_depth is 0 where absent.
std::vector<LlamaBenchResult> parse_llama_bench_json(std::string_view text);

// What llama-bench is asked for row r's test (after the binary): -m, the
// test (-p N -n 0, -p 0 -n N, or -p 0 -n 0 -pg P,N), -d, -t (the row's
// threads), -r, -ngl (the row's on a CUDA device; 0 otherwise, since the
// CPU and the stand-in cpu2 are host memory), -ub, -ctk and -ctv where
// given, and -o json. c.ref_bench must be set.
std::vector<std::string> llama_bench_args(const BenchConfig& c, const std::string& model_path, const BenchRow& r);

// Throws tandem::Error (one line, --ref-bench) when path is not an
// existing, executable regular file.
void check_ref_bench_binary(const std::string& path);

// What a finished child process left.
struct ProcessResult {
    int exit_code = -1;  // valid when signal == 0
    int signal = 0;      // the signal that ended it, 0 for none
    std::string out, err;
};

// Runs argv[0] with argv (no shell, no PATH lookup), stdin from /dev/null,
// and collects stdout and stderr. Throws tandem::Error when it cannot be
// started.
ProcessResult run_process(const std::vector<std::string>& argv);

// Runs llama-bench (c.ref_bench) for row r's test and fills r.llama_*.
// Throws tandem::Error, one line, for a llama-bench that cannot start,
// exits non-zero (with its last line of stderr), prints what
// parse_llama_bench_json refuses, or gives no result for the test.
void run_ref_bench(const BenchConfig& c, const std::string& model_path, BenchRow& r);

}  // namespace tandem::tools
