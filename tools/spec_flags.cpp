#include "tools/spec_flags.h"

#include <charconv>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "tools/split.h"

namespace tandem::tools {

void add_spec_flags(CLI::App& cmd, SpecFlags& f) {
    const char* group = "speculative decoding";
    cmd.add_option_function<std::string>(
           "--spec-ngram",
           [&f](const std::string& v) {
               if (v.empty()) {
                   f.ngram = 3;
                   return;
               }
               int n = 0;
               const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
               if (ec != std::errc() || p != v.data() + v.size() || n < 1) {
                   throw Error(fmt::format("--spec-ngram: expected an n-gram length >= 1, found '{}'", v));
               }
               f.ngram = n;
           },
           "speculative decoding by prompt lookup: draft the tokens that followed the latest earlier occurrence of the "
           "last N tokens (N, then shorter down to 1; default N = 3)")
        ->expected(0, 1)
        ->type_name("[N]")
        ->group(group);
    cmd.add_option("--model-draft", f.model_draft,
                   "speculative decoding with a draft model FILE (-md): a smaller GGUF with the same vocabulary, "
                   "placed before the model (-ngld), drafting up to --draft-max tokens the model checks in one batch")
        ->type_name("FILE")
        ->group(group);
    cmd.add_option("--draft-max", f.draft_max,
                   "most draft tokens per step (also bounded by the micro-batch); the length adapts: halved after a "
                   "rejected draft, +2 after an accepted one, speculation paused for a while when drafts keep failing")
        ->capture_default_str()
        ->group(group);
    cmd.add_option("--draft-min", f.draft_min, "drafts shorter than this are not proposed")
        ->capture_default_str()
        ->group(group);
    cmd.add_option("--draft-p-min", f.p_min,
                   "the draft model stops drafting before a token whose probability (its top softmax probability at "
                   "temperature 1) is below this")
        ->capture_default_str()
        ->group(group);
    cmd.add_option("--n-gpu-layers-draft,--gpu-layers-draft", f.ngl_draft,
                   "the draft model's layers on the accelerator (-ngld; default auto: the planner places the draft "
                   "first, usually whole on the accelerator, and the model gets the rest)")
        ->type_name("N|auto")
        ->group(group);
    cmd.add_flag("--draft-fixed", f.fixed_length, "always propose up to --draft-max tokens (no adaptive length)")
        ->group(group);
}

spec::Config spec_config(const SpecFlags& f) {
    spec::Config c;
    c.draft_max = f.draft_max;
    c.draft_min = f.draft_min;
    c.adaptive = !f.fixed_length;
    c.validate();
    return c;
}

void check_spec_flags(const SpecFlags& f) {
    spec::check_one_proposer(f.ngram.value_or(0), !f.model_draft.empty());
    (void)spec_config(f);
    (void)draft_ngl(f.model_draft, f.ngl_draft);
    if (!f.model_draft.empty() && !(f.p_min >= 0.0f && f.p_min <= 1.0f)) {
        throw Error(fmt::format("--draft-p-min: expected a value in [0, 1], found {}", f.p_min));
    }
}

SessionOptions draft_session_options(const std::optional<SessionOptions>& placed, const Session& target,
                                     int64_t n_ubatch, model::CacheType cache_type, int64_t n_seq) {
    SessionOptions so = placed.value_or(SessionOptions{});
    so.n_ctx = target.n_ctx();
    so.n_ubatch = n_ubatch;
    so.n_threads = target.n_threads();
    so.cache_type = cache_type;
    so.n_seq_max = n_seq;
    so.kv_per_sequence = n_seq > 1;
    return so;
}

std::optional<int64_t> draft_ngl(const std::string& model_draft, const std::optional<std::string>& ngl_draft) {
    if (!ngl_draft) return std::nullopt;
    if (model_draft.empty()) throw Error("--n-gpu-layers-draft (-ngld) needs a draft model (-md FILE)");
    return parse_ngl(*ngl_draft, "-ngld");
}

std::unique_ptr<DraftHeader> read_draft_header(const std::string& model_draft) {
    if (model_draft.empty()) return nullptr;
    gguf::File file = gguf::File::open(model_draft);
    model::ModelSpec spec = model::load_model_spec(file);
    return std::unique_ptr<DraftHeader>(new DraftHeader{std::move(file), std::move(spec)});
}

void request_draft(const SpecFlags& f, const DraftHeader* header, SplitRequest& req) {
    if (header == nullptr) return;
    req.draft = &header->spec;
    req.draft_ngl = draft_ngl(f.model_draft, f.ngl_draft);
}

std::unique_ptr<spec::DraftModel> open_draft_model(const SpecFlags& f, const Tokenizer& target_tokenizer,
                                                   const Session& target, int64_t n_ubatch,
                                                   model::CacheType cache_type, int64_t n_slots,
                                                   const std::optional<SessionOptions>& placed) {
    check_spec_flags(f);
    if (f.model_draft.empty()) return nullptr;
    return std::make_unique<spec::DraftModel>(f.model_draft, target_tokenizer, target.n_vocab(),
                                              draft_session_options(placed, target, n_ubatch, cache_type, n_slots),
                                              f.p_min, true);
}

std::unique_ptr<spec::Proposer> make_proposer(const SpecFlags& f, const Tokenizer& target_tokenizer,
                                              const Session& target, int64_t n_ubatch, model::CacheType cache_type,
                                              const SamplerParams& sp, const std::optional<SessionOptions>& placed) {
    check_spec_flags(f);
    if (f.ngram) return std::make_unique<spec::NgramProposer>(*f.ngram, 1);
    if (f.model_draft.empty()) return nullptr;
    return std::make_unique<spec::DraftModelProposer>(f.model_draft, target_tokenizer, target.n_vocab(),
                                                      draft_session_options(placed, target, n_ubatch, cache_type),
                                                      sp, f.p_min);
}

std::string spec_stats_line(const spec::Proposer& p, const spec::Stats& s) {
    std::string line = fmt::format(
        "speculative ({}): proposed {}, accepted {} ({:.1f}%), {} tokens in {} target passes ({:.2f} per pass, {} "
        "with a draft)",
        p.name(), s.proposed, s.accepted, 100.0 * s.acceptance(), s.generated, s.target_passes,
        s.target_passes > 0 ? static_cast<double>(s.generated) / static_cast<double>(s.target_passes) : 0.0,
        s.spec_passes);
    if (s.draft_passes > 0) line += fmt::format(", {} draft passes", s.draft_passes);
    return line;
}

}  // namespace tandem::tools
