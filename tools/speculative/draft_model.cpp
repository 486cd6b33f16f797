#include "tools/speculative/draft_model.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "runtime/common/error.h"

namespace tandem::spec {

namespace {

std::string quoted(std::string_view s) { return fmt::format("\"{}\"", s); }

}  // namespace

void check_same_vocabulary(const Tokenizer& target, const Tokenizer& draft, const std::string& what) {
    const int32_t nt = target.n_vocab(), nd = draft.n_vocab();
    const int32_t n = std::min(nt, nd);
    for (int32_t id = 0; id < n; ++id) {
        const std::string_view a = target.token_text(id), b = draft.token_text(id);
        if (a != b) {
            throw Error(fmt::format("{}: its vocabulary differs from the model's: token {} is {} in the model, {} in "
                                    "the draft (a draft must share the model's vocabulary)",
                                    what, id, quoted(a), quoted(b)));
        }
    }
    if (nt != nd) {
        const int32_t id = n;
        throw Error(fmt::format("{}: its vocabulary differs from the model's: {} tokens in the model, {} in the draft; "
                                "token {} is {} (a draft must share the model's vocabulary)",
                                what, nt, nd, id,
                                nt > nd ? fmt::format("{} in the model, absent from the draft", quoted(target.token_text(id)))
                                        : fmt::format("absent from the model, {} in the draft", quoted(draft.token_text(id)))));
    }
}

double top_probability(std::span<const float> logits) {
    const float m = *std::max_element(logits.begin(), logits.end());
    double sum = 0.0;
    for (float l : logits) sum += std::exp(static_cast<double>(l - m));
    return 1.0 / sum;
}

DraftModelProposer::DraftModelProposer(const std::string& path, const Tokenizer& target_tokenizer,
                                       int64_t target_vocab, const SessionOptions& so, const SamplerParams& sp,
                                       float p_min)
    : path_(path), sp_(sp), p_min_(p_min), rng_(sp.seed ^ 0x9e3779b97f4a7c15ull) {
    if (!(p_min >= 0.0f && p_min <= 1.0f)) {
        throw Error(fmt::format("--draft-p-min: expected a value in [0, 1], found {}", p_min));
    }
    const std::string what = fmt::format("--model-draft {}", path);
    file_ = std::make_unique<gguf::File>(gguf::File::open(path));
    spec_ = std::make_unique<model::ModelSpec>(model::load_model_spec(*file_));
    check_same_vocabulary(target_tokenizer, Tokenizer::from_gguf(*file_), what);
    session_ = std::make_unique<Session>(*file_, *spec_, so);
    if (session_->n_vocab() != target_vocab) {
        throw Error(fmt::format("{}: gives {} logits per token, the model {}", what, session_->n_vocab(), target_vocab));
    }
    sp_.repeat_penalty = 1.0f;
}

DraftModelProposer::~DraftModelProposer() = default;

std::string DraftModelProposer::name() const {
    return fmt::format("draft model {}, p-min {}", path_, p_min_);
}

void DraftModelProposer::prepare(std::span<const int32_t> prompt) { sync(prompt); }

void DraftModelProposer::sync(std::span<const int32_t> context) {
    size_t common = 0;
    while (common < held_.size() && common < context.size() && held_[common] == context[common]) ++common;
    // The last token is evaluated (again) at least: its logits draft.
    common = std::min(common, context.size() - 1);
    const auto keep = static_cast<size_t>(session_->held_prefix(0, static_cast<int32_t>(common)));
    if (keep < held_.size()) session_->remove_positions(0, static_cast<int32_t>(keep), -1);
    held_.resize(keep);
    const std::span<const int32_t> rest = context.subspan(keep);
    session_->eval(rest, false, logits_);
    ++passes_;
    held_.insert(held_.end(), rest.begin(), rest.end());
}

void DraftModelProposer::propose(std::span<const int32_t> context, int max, Draft& out) {
    out.tokens.clear();
    out.q.clear();
    if (max <= 0 || context.empty()) return;
    sync(context);
    const bool greedy = sp_.temperature == 0.0f;
    for (int j = 0; j < max; ++j) {
        if (top_probability(logits_) < p_min_) break;
        int32_t tok = 0;
        if (greedy) {
            tok = argmax(logits_);
        } else {
            TokenDist q = target_distribution(sp_, {}, logits_);
            tok = draw(q, rng_);
            out.q.push_back(std::move(q));
        }
        out.tokens.push_back(tok);
        if (j + 1 == max || session_->n_past() >= session_->n_ctx()) break;
        const int32_t one[1] = {tok};
        session_->eval(one, false, logits_);
        ++passes_;
        held_.push_back(tok);
    }
}

}  // namespace tandem::spec
