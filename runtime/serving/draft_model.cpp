#include "runtime/serving/draft_model.h"

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

void check_draft_vocabulary(const std::string& target_path, const std::string& draft_path) {
    const gguf::File target = gguf::File::open(target_path);
    const gguf::File draft = gguf::File::open(draft_path);
    check_same_vocabulary(Tokenizer::from_gguf(target), Tokenizer::from_gguf(draft),
                          fmt::format("--model-draft {}", draft_path));
}

std::mt19937_64 draft_generator(uint64_t seed) { return std::mt19937_64(seed ^ 0x9e3779b97f4a7c15ull); }

DraftModel::DraftModel(const std::string& path, const Tokenizer& target_tokenizer, int64_t target_vocab,
                       const SessionOptions& so, float p_min, bool single_order)
    : path_(path), p_min_(p_min), single_order_(single_order) {
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
    const int64_t n_seq = std::max<int64_t>(1, so.n_seq_max);
    seq_room_ = so.kv_per_sequence ? session_->n_ctx() / n_seq : session_->n_ctx();
    held_.resize(static_cast<size_t>(n_seq));
}

DraftModel::~DraftModel() = default;

void DraftModel::clear() {
    session_->remove_positions(-1, 0, -1);
    for (auto& h : held_) h.clear();
}

void DraftModel::keep(int32_t seq, size_t n) {
    if (seq < 0 || seq >= n_seq()) throw InternalError(fmt::format("DraftModel::keep: no sequence {}", seq));
    std::vector<int32_t>& held = held_[static_cast<size_t>(seq)];
    if (n >= held.size()) return;
    session_->remove_positions(seq, static_cast<int32_t>(n), -1);
    held.resize(n);
}

void DraftModel::eval(std::span<const BatchToken> batch) {
    try {
        if (single_order_) session_->eval_batch_single_order(batch, logits_);
        else session_->eval_batch(batch, logits_);
    } catch (...) {
        clear();  // what the sequences hold is unknown now
        throw;
    }
    ++passes_;
}

void DraftModel::propose(std::span<DraftRequest> reqs, int64_t catch_up) {
    // Bringing each sequence up to its context.
    struct Work {
        DraftRequest* r;
        size_t keep;  // context tokens the sequence keeps
        size_t rest;  // to evaluate
        size_t n = 0; // of those, evaluated now
    };
    std::vector<Work> work;
    std::vector<bool> seen(held_.size(), false);
    for (DraftRequest& r : reqs) {
        if (r.out == nullptr || r.seq < 0 || r.seq >= n_seq() || seen[static_cast<size_t>(r.seq)]) {
            throw InternalError(fmt::format("DraftModel::propose: bad request for sequence {} of {}", r.seq, n_seq()));
        }
        seen[static_cast<size_t>(r.seq)] = true;
        r.out->tokens.clear();
        r.out->q.clear();
        r.behind = false;
        // Nothing to draft from, or no room for it in the sequence.
        if (r.context.empty() || static_cast<int64_t>(r.context.size()) > seq_room_) continue;
        if (r.max > 0 && (r.sp == nullptr || (r.sp->temperature != 0.0f && r.rng == nullptr))) {
            throw InternalError("DraftModel::propose: a request that drafts needs its sampling and generator");
        }
        std::vector<int32_t>& held = held_[static_cast<size_t>(r.seq)];
        size_t common = 0;
        while (common < held.size() && common < r.context.size() && held[common] == r.context[common]) ++common;
        // The last token is evaluated (again) at least: its logits draft.
        common = std::min(common, r.context.size() - 1);
        const auto keep = static_cast<size_t>(session_->held_prefix(r.seq, static_cast<int32_t>(common)));
        if (keep < held.size()) {
            session_->remove_positions(r.seq, static_cast<int32_t>(keep), -1);
            held.resize(keep);
        }
        work.push_back({&r, keep, r.context.size() - keep});
    }
    // The budget goes to those with the least to evaluate first.
    std::vector<size_t> order(work.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return work[a].rest < work[b].rest; });
    int64_t budget = catch_up;
    for (size_t i : order) {
        Work& w = work[i];
        w.n = budget < 0 ? w.rest : std::min<size_t>(w.rest, static_cast<size_t>(budget));
        if (budget >= 0) budget -= static_cast<int64_t>(w.n);
    }
    struct Active {
        const DraftRequest* r;
        size_t row;  // of logits_
    };
    std::vector<Active> active, next;
    batch_.clear();
    size_t rows = 0;
    for (const Work& w : work) {
        DraftRequest& r = *w.r;
        r.behind = w.n < w.rest;
        const bool drafts = !r.behind && r.max > 0;
        std::vector<int32_t>& held = held_[static_cast<size_t>(r.seq)];
        for (size_t j = 0; j < w.n; ++j) {
            const size_t p = w.keep + j;
            batch_.push_back({r.context[p], static_cast<int32_t>(p), r.seq, drafts && j + 1 == w.n});
            held.push_back(r.context[p]);
        }
        if (drafts) active.push_back({&r, rows++});
    }
    if (!batch_.empty()) eval(batch_);
    // One batch per draft position. A sampling draft's distribution takes
    // the request's logit bias but no penalty.
    const TokenHistory no_history(0);
    const auto n_vocab = static_cast<size_t>(session_->n_vocab());
    while (!active.empty()) {
        batch_.clear();
        next.clear();
        for (const Active& a : active) {
            const DraftRequest& r = *a.r;
            const std::span<float> row(logits_.data() + a.row * n_vocab, n_vocab);
            if (p_min_ > 0.0f && top_probability(row) < p_min_) continue;
            int32_t tok = 0;
            if (r.sp->temperature == 0.0f) {
                tok = argmax(row);
            } else {
                TokenDist q = target_distribution(*r.sp, no_history, row);
                tok = draw(q, *r.rng);
                r.out->q.push_back(std::move(q));
            }
            r.out->tokens.push_back(tok);
            std::vector<int32_t>& held = held_[static_cast<size_t>(r.seq)];
            if (static_cast<int>(r.out->tokens.size()) >= r.max || static_cast<int64_t>(held.size()) >= seq_room_) {
                continue;
            }
            next.push_back({&r, batch_.size()});
            batch_.push_back({tok, static_cast<int32_t>(held.size()), r.seq, true});
            held.push_back(tok);
        }
        if (!batch_.empty()) eval(batch_);
        active.swap(next);
    }
}

DraftModelProposer::DraftModelProposer(const std::string& path, const Tokenizer& target_tokenizer,
                                       int64_t target_vocab, const SessionOptions& so, const SamplerParams& sp,
                                       float p_min)
    : model_(path, target_tokenizer, target_vocab, so, p_min), sp_(sp), rng_(draft_generator(sp.seed)) {
    sp_.repeat_penalty = 1.0f;
}

DraftModelProposer::~DraftModelProposer() = default;

std::string DraftModelProposer::name() const {
    return fmt::format("draft model {}, p-min {}", model_.path(), model_.p_min());
}

void DraftModelProposer::prepare(std::span<const int32_t> prompt) {
    Draft none;
    DraftRequest r{0, prompt, 0, &sp_, &rng_, &none};
    model_.propose(std::span<DraftRequest>(&r, 1));
}

void DraftModelProposer::propose(std::span<const int32_t> context, int max, Draft& out) {
    out.tokens.clear();
    out.q.clear();
    if (max <= 0 || context.empty()) return;
    DraftRequest r{0, context, max, &sp_, &rng_, &out};
    model_.propose(std::span<DraftRequest>(&r, 1));
}

}  // namespace tandem::spec
