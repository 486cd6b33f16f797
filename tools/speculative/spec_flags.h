// `tandem run`'s speculative-decoding flags and what run calls: llama.cpp's
// -md/--model-draft, --draft-max, --draft-min, --draft-p-min, and
// --spec-ngram [N] (prompt lookup, no second model).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "runtime/engine/session.h"
#include "runtime/sampler/sampler.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/speculative/speculative.h"

namespace tandem::tools {

struct SpecFlags {
    std::optional<int> ngram;  // --spec-ngram [N]
    std::string model_draft;   // -md FILE
    int draft_max = 16;
    int draft_min = 0;
    float p_min = 0.75f;
    bool fixed_length = false;  // --draft-fixed: no adaptive length
    bool enabled() const { return ngram.has_value() || !model_draft.empty(); }
};

void add_spec_flags(CLI::App& cmd, SpecFlags& f);

// The proposer the flags ask for (nullptr when none), checked: a draft
// model is opened with the target session's context, micro-batch, threads
// and cache type, on the CPU.
std::unique_ptr<spec::Proposer> make_proposer(const SpecFlags& f, const Tokenizer& target_tokenizer,
                                              const Session& target, int64_t n_ubatch, model::CacheType cache_type,
                                              const SamplerParams& sp);

spec::Config spec_config(const SpecFlags& f);

// The stats line run prints after generation (stderr).
std::string spec_stats_line(const spec::Proposer& p, const spec::Stats& s);

}  // namespace tandem::tools
