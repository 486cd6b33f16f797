// `tandem bench` options: the raw text CLI11 collects (BenchArgs) and the
// validated configuration the runner uses (BenchConfig). Parsing lives here,
// apart from the CLI wiring in cmd_bench.cpp, so tests can check every
// list and range form without running a benchmark.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/model/model_spec.h"
#include "tools/split.h"
#include "tools/stream_flags.h"

namespace tandem::tools {

enum class OutputFormat { Markdown, Csv, Json, JsonLines };

// What the command line gave, as text. Flags that may repeat (-m, -p, -n,
// -pg, ...) collect one string per occurrence; each may itself be a list.
struct BenchArgs {
    std::vector<std::string> models;
    std::vector<std::string> n_prompt;    // default "512"
    std::vector<std::string> n_gen;       // default "128"
    std::vector<std::string> prompt_gen;  // "P,N" per occurrence
    std::vector<std::string> n_depth;     // default "0"
    // --parallel: stream counts of the batched-decode tests; non-empty
    // switches bench to them (see BenchTest::n_parallel).
    std::vector<std::string> parallel;
    std::vector<std::string> n_gpu_layers;  // default "auto"
    std::vector<std::string> threads;       // default: physical cores
    std::vector<std::string> n_ubatch;      // default "512"
    CacheTypeFlags cache_types;             // --cache-type, -ctk, -ctv: comma lists
    int64_t n_batch = 0;  // accepted for llama-bench compatibility; micro-batches are what matter
    int repetitions = 5;
    std::string output = "md";
    std::string device;
    std::string vram;
    std::string tensor_split;          // -ts A,B,...: "" none
    std::string split_mode = "layer";  // -sm none|layer
    bool no_stream = false;
    int64_t stream_min_batch = 32;
    bool no_host_copy = false;
    bool pipeline = false;  // --pipeline: rank 0 of pipeline stages under mpirun
    PlacementFlags placement;  // -ot, --cpu-moe, --n-cpu-moe, -nkvo
    std::string mmap = "1";    // -mmp 0|1, as llama-bench
    bool sweep = false;
    std::string sweep_step;  // "" with sweep: step 1
    std::string plot;
    std::string ref_bench;  // --ref-bench: a llama-bench binary; "" for none
};

// A benchmark test in llama-bench's terms: ppN (n_gen 0), tgN (n_prompt 0)
// or pgP,N (both), after n_depth tokens already in the KV cache (-d; that
// prefill is not timed).
//
// n_parallel > 0 (bench --parallel) makes it a batched-decode test, as
// llama-batched-bench: n_parallel sequences each get n_prompt prompt
// tokens (evaluated first, not timed), then n_gen decode steps each
// evaluate one token of every sequence in one batch; tok/s counts all
// n_parallel * n_gen tokens; n_depth (-d) adds that many untimed tokens to
// each stream's prompt (several streams at depth).
struct BenchTest {
    int64_t n_prompt = 0;
    int64_t n_gen = 0;
    int64_t n_depth = 0;
    int64_t n_parallel = 0;
    // "pp512", "tg128", "pp512+tg128", "tg128 @ d4096"; --parallel:
    // "tg128 x4 @ p32" (4 streams after a 32-token prompt each), "tg32 x4
    // @ p32 d4096" (after 4096 + 32 tokens each).
    std::string name() const;
    // Cache cells the test fills: every stream's prompt and tokens.
    int64_t n_cells() const;
};

// --ref-bench: llama-bench runs each test right after Tandem's runs of it
// (tools/bench_ref.h). Flags llama-bench gets only where the user gave them
// (llama-bench's defaults are Tandem's); -t, -r, -ngl always.
struct RefBenchConfig {
    std::string binary;
    std::string cache_k, cache_v;  // -ctk/-ctv for llama-bench; "" when not given
    bool pass_ubatch = false;      // -ub was given: pass each row's
};

struct BenchConfig {
    std::vector<std::string> models;
    std::vector<BenchTest> tests;  // pp tests, then tg, then pg, as given; each at every depth
    // nullopt: auto (the planner's choice). Ignored when sweep_step is set.
    std::vector<std::optional<int64_t>> n_gpu_layers;
    std::vector<int> threads;  // 0: physical cores
    std::vector<int64_t> n_ubatch;
    std::vector<model::CacheType> cache_types;
    int repetitions = 5;
    OutputFormat format = OutputFormat::Markdown;
    std::string device;              // "" for none; a comma list: several sharing the layers (-sm layer)
    std::vector<uint64_t> vram;      // --vram: one size (each device's) or one per device; empty: unlimited
    std::vector<double> tensor_split;  // -ts: the devices' shares; empty: by their room
    bool weight_stream = true;       // --no-stream clears it
    int64_t stream_min_batch = 32;   // --stream-min-batch
    bool copy_host_weights = true;   // --no-host-copy clears it
    bool mmap = true;                // -mmp 0: read the model into memory
    bool pipeline = false;           // --pipeline (tools/pipeline.h): sessions over the MPI stages
    PlacementFlags placement;        // applied on top of each -ngl
    std::optional<int64_t> sweep_step;  // --sweep-ngl: ngl 0, step, 2*step, ... n_layer + 1
    // "" for none; ends in .svg. With sweep_step the ngl sweep chart, else
    // tok/s against depth (two or more -d values).
    std::string plot_path;
    std::optional<RefBenchConfig> ref_bench;  // --ref-bench

    // Context each session gets: room for the longest test (a --parallel
    // test needs n_parallel * (n_prompt + n_gen) cells).
    int64_t n_ctx() const;
    // Sequences each session must tell apart: the largest --parallel count.
    int64_t n_seq_max() const;
};

// "8", "0-8" (inclusive), "0-32+4" (0, 4, ..., 32), and comma lists of
// these, e.g. "0,4-6,16-32+8". Throws tandem::Error naming `flag` and the
// text for an empty item, a non-number, a negative value, an end below the
// start or a step below 1.
std::vector<int64_t> parse_int_list(std::string_view text, std::string_view flag);

// -ngl: "auto" or an int list as above; "auto" may be an item of the list.
std::vector<std::optional<int64_t>> parse_ngl_list(std::string_view text);

// --parallel: a list as above of stream counts, each 1..64 (the sequences
// a session can tell apart).
std::vector<int64_t> parse_parallel_list(std::string_view text);

// -pg: exactly two numbers, "P,N".
std::pair<int64_t, int64_t> parse_prompt_gen(std::string_view text);

OutputFormat parse_output_format(std::string_view text);
std::string_view output_format_name(OutputFormat f);

// Validates everything and fills the defaults. Throws tandem::Error with
// one line for bad input (no model, -r 0, a bad list, --plot with neither
// --sweep-ngl nor two depths or with another extension than .svg,
// --ref-bench with --parallel, ...). Does not open the model files nor
// look at the --ref-bench binary: the runner and check_ref_bench_binary do.
BenchConfig make_bench_config(const BenchArgs& args);

}  // namespace tandem::tools
