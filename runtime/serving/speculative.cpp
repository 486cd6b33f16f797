#include "runtime/serving/speculative.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/engine/session.h"

namespace tandem::spec {

double TokenDist::prob_of(int32_t id) const {
    for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] == id) return prob(i);
    }
    return 0.0;
}

// Sampler::sample's own computation (runtime/sampler/sampler.h), so the
// speculative rule keeps exactly the distribution plain sampling draws from
// (TargetDistribution.DrawsWhatTheSamplerDraws checks the two agree).
TokenDist target_distribution(const SamplerParams& p, const TokenHistory& history, std::span<float> logits) {
    if (logits.empty()) throw InternalError("target_distribution: empty logits");
    if (p.temperature == 0.0f) throw InternalError("target_distribution: temperature 0 is greedy");
    apply_penalties(p, history, logits);
    SamplingCandidates c = sampling_candidates(p, logits);
    TokenDist d;
    d.ids = std::move(c.ids);
    d.weights = std::move(c.weights);
    d.total = std::accumulate(d.weights.begin(), d.weights.end(), 0.0);
    return d;
}

int32_t draw(const TokenDist& d, std::mt19937_64& rng) {
    std::discrete_distribution<size_t> pick(d.weights.begin(), d.weights.end());
    return d.ids[pick(rng)];
}

int32_t accept_or_resample(const TokenDist& p, const TokenDist* q, int32_t d, std::mt19937_64& rng, bool& accepted) {
    const double pd = p.prob_of(d);
    const double qd = q != nullptr ? q->prob_of(d) : 1.0;
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    // u * qd < pd is u < pd / qd without the division; pd = 0 never passes.
    if (qd > 0.0 && u * qd < pd) {
        accepted = true;
        return d;
    }
    accepted = false;
    // norm(max(0, p - q)) over p's support (q's mass outside it gives 0).
    std::vector<std::pair<int32_t, double>> qs;
    if (q != nullptr) {
        qs.reserve(q->ids.size());
        for (size_t i = 0; i < q->ids.size(); ++i) qs.emplace_back(q->ids[i], q->prob(i));
        std::sort(qs.begin(), qs.end());
    } else {
        qs.emplace_back(d, 1.0);
    }
    TokenDist r;
    r.ids = p.ids;
    r.weights.resize(p.ids.size());
    for (size_t i = 0; i < p.ids.size(); ++i) {
        const auto it = std::lower_bound(qs.begin(), qs.end(), std::pair<int32_t, double>(p.ids[i], -1.0));
        const double qi = it != qs.end() && it->first == p.ids[i] ? it->second : 0.0;
        r.weights[i] = std::max(0.0, p.prob(i) - qi);
        r.total += r.weights[i];
    }
    if (!(r.total > 0.0)) return draw(p, rng);  // p == q where p lives: p itself
    return draw(r, rng);
}

TargetChooser::TargetChooser(const SamplerParams& sp)
    : sp_(sp), greedy_(sp.temperature == 0.0f), sampler_(sp), rng_(sp.seed) {}

int32_t TargetChooser::choose(std::span<float> row) {
    if (greedy_ || sampler_.constrained()) return sampler_.sample(row);
    return draw(target_distribution(sp_, sampler_.history(), row), rng_);
}

int32_t TargetChooser::check(std::span<float> row, int32_t d, const TokenDist* q, bool& kept) {
    // With a grammar, the token plain decoding would choose, draft or not:
    // a draft is kept when it is that token. The output is then plain
    // decoding's, token for token, at any temperature (only the acceptance
    // rate is lower than the speculative rule's when sampling).
    if (greedy_ || sampler_.constrained()) {
        const int32_t tok = sampler_.sample(row);
        kept = tok == d;
        return tok;
    }
    const TokenDist p = target_distribution(sp_, sampler_.history(), row);
    return accept_or_resample(p, q, d, rng_, kept);
}

Verdict verify(TargetChooser& chooser, std::span<float> rows, int64_t n_vocab, const Draft& draft,
               const std::function<bool(int32_t)>& settle) {
    const size_t nd = draft.tokens.size();
    const auto width = static_cast<size_t>(n_vocab);
    if (rows.size() != (nd + 1) * width) {
        throw InternalError(fmt::format("verify: {} logits for {} draft tokens of {} ids", rows.size(), nd, n_vocab));
    }
    if (!draft.q.empty() && draft.q.size() < nd) {
        throw InternalError(fmt::format("verify: {} draft tokens but {} distributions", nd, draft.q.size()));
    }
    Verdict v;
    for (size_t i = 0; i <= nd; ++i) {
        const std::span<float> row = rows.subspan(i * width, width);
        bool ok = false;
        const int32_t tok = i < nd ? chooser.check(row, draft.tokens[i], draft.q.empty() ? nullptr : &draft.q[i], ok)
                                   : chooser.choose(row);
        if (!settle(tok)) {
            v.stopped = true;
            break;
        }
        if (!ok) break;
        ++v.kept;
    }
    return v;
}

std::vector<int32_t> ngram_lookup(std::span<const int32_t> context, int max_n, int min_n, int max) {
    const auto L = static_cast<int64_t>(context.size());
    if (max <= 0) return {};
    for (int64_t n = std::min<int64_t>(max_n, L - 1); n >= std::max(1, min_n); --n) {
        const int32_t* pattern = context.data() + (L - n);
        // The most recent earlier occurrence: starts at j < L - n.
        for (int64_t j = L - n - 1; j >= 0; --j) {
            if (!std::equal(pattern, pattern + n, context.data() + j)) continue;
            // What followed, copied forward as far as `max`: past the end
            // of the context the copy reads its own output (an LZ77-style
            // overlapping copy), so a loop of period T drafts whole
            // periods, not the T tokens left before the end.
            const int64_t start = j + n;  // <= L - 1
            std::vector<int32_t> out;
            out.reserve(static_cast<size_t>(max));
            for (int64_t i = 0; i < max; ++i) {
                const int64_t at = start + i;
                out.push_back(at < L ? context[static_cast<size_t>(at)] : out[static_cast<size_t>(at - L)]);
            }
            return out;
        }
    }
    return {};
}

NgramProposer::NgramProposer(int max_n, int min_n) : max_n_(max_n), min_n_(min_n) {
    if (max_n < 1) throw Error(fmt::format("--spec-ngram: expected an n-gram length >= 1, found {}", max_n));
}

void NgramProposer::propose(std::span<const int32_t> context, int max, Draft& out) {
    out.tokens = ngram_lookup(context, max_n_, min_n_, max);
    out.q.clear();
}

std::string NgramProposer::name() const { return fmt::format("n-gram lookup, n = {}..{}", max_n_, min_n_); }

DraftLength::DraftLength(int draft_max, int draft_min, bool adaptive, bool expensive_proposer)
    : max_(draft_max),
      min_(draft_min),
      adaptive_(adaptive),
      max_skip_(expensive_proposer ? kExpensiveMaxSkip : kMaxSkip),
      cur_(adaptive && expensive_proposer ? std::min(draft_max, std::max(kExpensiveStart, draft_min)) : draft_max),
      expensive_(expensive_proposer) {}

int DraftLength::allowed() {
    if (!adaptive_) return max_;
    if (stopped_) return 0;
    if (skip_ > 0) {
        --skip_;
        return 0;
    }
    return cur_;
}

void DraftLength::update(int proposed, int accepted) {
    if (!adaptive_) return;
    const int floor = std::max(1, std::min(min_, max_));
    kept_ += accepted;
    auto fail = [&] {
        ++fails_;
        skip_ = std::min(max_skip_, 1 << std::min(fails_ - 1, 10));
        if (expensive_ && kept_ == 0 && fails_ >= kExpensiveGiveUp) stopped_ = true;
    };
    if (proposed == 0) {
        // Nothing to say: free for a look-up, a wasted pass for a draft model.
        if (expensive_) fail();
        return;
    }
    if (accepted == proposed) {
        cur_ = std::min(max_, cur_ + 2);
        fails_ = 0;
    } else if (accepted == 0) {
        const bool at_floor = cur_ <= floor;
        cur_ = std::max(floor, cur_ / 2);
        // A draft model never kept yet fails at once (see kExpensiveGiveUp).
        if (at_floor || (expensive_ && kept_ == 0)) fail();
    } else {
        cur_ = std::max(floor, std::min(cur_, 2 * accepted + 1));
        fails_ = 0;
    }
}

void Config::validate() const {
    if (draft_max < 0) throw FieldError("draft_max", fmt::format("{{draft_max}}: expected a value >= 0, found {}", draft_max));
    if (draft_min < 0) throw FieldError("draft_min", fmt::format("{{draft_min}}: expected a value >= 0, found {}", draft_min));
    if (draft_min > draft_max) {
        throw FieldError("draft_min", fmt::format("{{draft_min}} {} is more than {{draft_max}} {}", draft_min, draft_max));
    }
}

void Config::check_fits(int64_t n_ubatch) const {
    if (draft_max + 1 > n_ubatch) {
        throw FieldError("draft_max", fmt::format("{{draft_max}} {} needs a micro-batch ({{n_ubatch}}) of at least {} "
                                                  "tokens, found {}",
                                                  draft_max, draft_max + 1, n_ubatch));
    }
}

void check_one_proposer(int spec_ngram, bool draft_model) {
    if (spec_ngram < 0) {
        throw FieldError("spec_ngram", fmt::format("{{spec_ngram}}: expected an n-gram length >= 0, found {}", spec_ngram));
    }
    if (spec_ngram > 0 && draft_model) throw FieldError("spec_ngram", "give {spec_ngram} or {model_draft}, not both");
}

Stats generate(Session& target, std::span<const int32_t> prompt, std::vector<float> logits,
               const SamplerParams& sp, Proposer& proposer, const Config& cfg, int64_t max_tokens,
               int64_t n_ubatch, const Emit& emit) {
    Stats st;
    if (max_tokens == 0) return st;
    cfg.validate();
    const int64_t n_vocab = target.n_vocab();
    const int64_t n_ctx = target.n_ctx();
    TargetChooser chooser(sp);
    for (int32_t t : prompt) chooser.accept_prompt(t);
    std::vector<int32_t> ctx(prompt.begin(), prompt.end());
    auto settle = [&](int32_t tok) -> bool {
        ++st.generated;  // every token handed over, the last (the one that stops) too
        if (!emit(tok)) return false;
        chooser.accept(tok);
        ctx.push_back(tok);
        return true;
    };

    if (!settle(chooser.choose(std::span<float>(logits.data() + (logits.size() - n_vocab), n_vocab)))) return st;
    DraftLength len(cfg.draft_max, cfg.draft_min, cfg.adaptive, proposer.expensive());
    Draft draft;
    std::vector<int32_t> batch;
    std::vector<BatchToken> verify_batch;
    for (;;) {
        const int64_t past = target.n_past();  // every token but ctx.back()
        if (past >= n_ctx) {
            st.context_full = true;
            break;
        }
        int64_t k = len.allowed();
        k = std::min<int64_t>(k, n_ctx - past - 1);
        k = std::min<int64_t>(k, n_ubatch - 1);
        if (max_tokens > 0) k = std::min<int64_t>(k, max_tokens - st.generated - 1);
        draft.tokens.clear();
        draft.q.clear();
        // Only a step that asked the proposer tells the draft length how it
        // went (a step skipped while backing off is no failure).
        const bool asked = k > 0 && k >= cfg.draft_min;
        if (asked) {
            proposer.propose(ctx, static_cast<int>(k), draft);
            if (static_cast<int64_t>(draft.tokens.size()) > k) draft.tokens.resize(static_cast<size_t>(k));
            if (static_cast<int>(draft.tokens.size()) < cfg.draft_min) draft.tokens.clear();
        }
        const auto nd = static_cast<int>(draft.tokens.size());
        batch.assign(1, ctx.back());
        batch.insert(batch.end(), draft.tokens.begin(), draft.tokens.end());
        // In the one-token order: each row's logits are those decoding the
        // tokens one by one gives, so greedy output is plain decoding's.
        verify_batch.resize(batch.size());
        for (size_t i = 0; i < batch.size(); ++i) {
            verify_batch[i] = BatchToken{batch[i], static_cast<int32_t>(past + static_cast<int64_t>(i)), 0,
                                         nd > 0 || i + 1 == batch.size()};
        }
        target.eval_batch_single_order(verify_batch, logits);
        ++st.target_passes;
        if (nd > 0) ++st.spec_passes;
        st.proposed += nd;
        const Verdict v = verify(chooser, logits, n_vocab, draft, settle);
        st.accepted += v.kept;
        if (v.stopped) break;
        // Keep [.., past] (ctx's last token before this step) and the accepted drafts.
        if (v.kept < nd) target.remove_positions(0, static_cast<int32_t>(past + 1 + v.kept), -1);
        if (asked) len.update(nd, v.kept);
    }
    st.draft_passes = proposer.passes();
    return st;
}

}  // namespace tandem::spec
