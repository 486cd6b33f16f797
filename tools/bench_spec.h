// `tandem bench --spec-ngram [N]` / `bench -md DRAFT`: speculative decoding
// measured against plain decoding on the same prompt, in one sitting.
//
// Each repetition generates -n tokens greedily twice from the same prompt,
// plainly and with the proposer, in alternating order (plain first on even
// repetitions), after one uncounted run of each. Only generation is timed;
// the prompt is evaluated before the clock starts. A row per mode gives
// tok/s (mean +- sample sd), and for speculation the acceptance rate, the
// tokens per target pass and the speed-up over the plain row; whether the
// two produced the same tokens is checked every repetition (greedy output
// must not change).
#pragma once

#include <string>
#include <vector>

#include "tools/bench_args.h"
#include "tools/spec_flags.h"

namespace tandem::tools {

struct SpecBenchRow {
    std::string model;
    std::string mode;  // "plain", "ngram 3", "draft FILE"
    int threads = 0;
    int64_t n_prompt = 0, n_gen = 0;
    std::vector<double> tps;  // one per counted repetition
    double acceptance = 0.0;       // accepted / proposed (speculative rows)
    double tokens_per_pass = 1.0;  // generated tokens per target pass
    int64_t proposed = 0, accepted = 0;
    double speedup = 1.0;          // mean t/s over the plain row's
    bool same_tokens = true;       // speculative rows: equal to plain in every run
};

// The prompt the speculative test uses when --spec-prompt is not given: a
// request to repeat a paragraph (the task prompt lookup is for), in the
// model's chat template when it has one.
std::string default_spec_prompt_text();

// Runs the test for every model of `c` at its first thread count and
// micro-batch, on the CPU unless -ngl gives layers (-ngl auto: the CPU).
// `prompt`: the text, tokenized with BOS by each model's tokenizer.
std::vector<SpecBenchRow> run_spec_bench(const BenchConfig& c, const SpecFlags& f, const std::string& prompt,
                                         bool apply_template, const std::function<void(const std::string&)>& note);

std::string format_spec_rows(const std::vector<SpecBenchRow>& rows, OutputFormat format);

}  // namespace tandem::tools
