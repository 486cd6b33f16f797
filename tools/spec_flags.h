// `tandem run`'s speculative-decoding flags and what run calls: llama.cpp's
// -md/--model-draft, --draft-max, --draft-min, --draft-p-min, and
// --spec-ngram [N] (prompt lookup, no second model).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/sampler/sampler.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/split.h"
#include "runtime/serving/draft_model.h"
#include "runtime/serving/speculative.h"

namespace tandem::tools {

struct SpecFlags {
    std::optional<int> ngram;  // --spec-ngram [N]
    std::string model_draft;   // -md FILE
    int draft_max = 16;
    int draft_min = 0;
    float p_min = 0.75f;
    bool fixed_length = false;  // --draft-fixed: no adaptive length
    std::optional<std::string> ngl_draft;  // -ngld N|auto: the draft's layers on the accelerator
    bool enabled() const { return ngram.has_value() || !model_draft.empty(); }
};

void add_spec_flags(CLI::App& cmd, SpecFlags& f);

// The checks every command makes of the flags before anything loads:
// --spec-ngram or -md, not both; --draft-max, --draft-min and --draft-p-min
// in range. Throws tandem::Error.
void check_spec_flags(const SpecFlags& f);

// The session a draft model runs in beside `target`: where `placed` says
// (Split::draft, from the planner; the CPU when nullopt), with the target's
// context, threads and cache type, micro-batches of n_ubatch; n_seq > 1:
// that many sequences, each in its own part of the cache (as serve's slots
// are in the target's).
SessionOptions draft_session_options(const std::optional<SessionOptions>& placed, const Session& target,
                                     int64_t n_ubatch, model::CacheType cache_type, int64_t n_seq = 1);

// The draft's header and model spec, for the planner (nullptr without -md,
// an empty path; the spec points into the file).
struct DraftHeader {
    gguf::File file;
    model::ModelSpec spec;
};
std::unique_ptr<DraftHeader> read_draft_header(const std::string& model_draft);
inline std::unique_ptr<DraftHeader> read_draft_header(const SpecFlags& f) { return read_draft_header(f.model_draft); }

// -ngld's layer count (nullopt: auto, or not given); throws tandem::Error
// for -ngld without a draft model or a value that is not a count or auto.
std::optional<int64_t> draft_ngl(const std::string& model_draft, const std::optional<std::string>& ngl_draft);

// Asks the split for the draft's placement beside the model (the header's
// spec and -ngld); nothing when header is null.
void request_draft(const SpecFlags& f, const DraftHeader* header, SplitRequest& req);

// serve's draft model (nullptr without -md): opened with a sequence per
// slot, evaluating in the one-token order so that a slot's drafts depend
// on its own tokens only.
std::unique_ptr<spec::DraftModel> open_draft_model(const SpecFlags& f, const Tokenizer& target_tokenizer,
                                                   const Session& target, int64_t n_ubatch,
                                                   model::CacheType cache_type, int64_t n_slots,
                                                   const std::optional<SessionOptions>& placed);

// The proposer the flags ask for (nullptr when none), checked: a draft
// model is opened with the target session's context, micro-batch, threads
// and cache type, where `placed` says (draft_session_options).
std::unique_ptr<spec::Proposer> make_proposer(const SpecFlags& f, const Tokenizer& target_tokenizer,
                                              const Session& target, int64_t n_ubatch, model::CacheType cache_type,
                                              const SamplerParams& sp, const std::optional<SessionOptions>& placed);

spec::Config spec_config(const SpecFlags& f);

// The stats line run prints after generation (stderr).
std::string spec_stats_line(const spec::Proposer& p, const spec::Stats& s);

}  // namespace tandem::tools
