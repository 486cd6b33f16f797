#include "runtime/sampler/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "runtime/common/error.h"

namespace tandem {

void validate(const SamplerParams& p) {
    if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
        throw FieldError("temperature", fmt::format("{{temperature}}: expected a value >= 0, found {}", p.temperature));
    }
    if (p.top_k < 0) throw FieldError("top_k", fmt::format("{{top_k}}: expected a value >= 0, found {}", p.top_k));
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
        throw FieldError("top_p", fmt::format("{{top_p}}: expected (0, 1], found {}", p.top_p));
    }
    if (!(p.min_p >= 0.0f && p.min_p < 1.0f)) {
        throw FieldError("min_p", fmt::format("{{min_p}}: expected [0, 1), found {}", p.min_p));
    }
    if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty)) {
        throw FieldError("repeat_penalty",
                         fmt::format("{{repeat_penalty}}: expected a value > 0, found {}", p.repeat_penalty));
    }
    if (p.repeat_last_n < 0) {
        throw FieldError("repeat_last_n", fmt::format("{{repeat_last_n}}: expected a value >= 0, found {}", p.repeat_last_n));
    }
    if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
        throw FieldError("presence_penalty",
                         fmt::format("{{presence_penalty}}: expected [-2, 2], found {}", p.presence_penalty));
    }
    if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
        throw FieldError("frequency_penalty",
                         fmt::format("{{frequency_penalty}}: expected [-2, 2], found {}", p.frequency_penalty));
    }
    for (const auto& [id, bias] : p.logit_bias) {
        if (id < 0 || !(bias >= -100.0f && bias <= 100.0f)) {
            throw FieldError("logit_bias", fmt::format("{{logit_bias}}: expected token ids >= 0 with biases in "
                                                       "[-100, 100], found {} for {}",
                                                       bias, id));
        }
    }
}

int32_t argmax(std::span<const float> logits) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

Sampler::Sampler(const SamplerParams& params)
    : params_(params), rng_(params.seed), history_(params.repeat_last_n) {
    validate(params_);
    if (params_.grammar) grammar_.emplace(*params_.grammar);
}

void TokenHistory::accept_prompt(int32_t token) {
    if (last_n_ == 0) return;
    recent_.push_back(token);
    while (static_cast<int32_t>(recent_.size()) > last_n_) recent_.pop_front();
}

void TokenHistory::accept(int32_t token) {
    accept_prompt(token);
    ++generated_[token];
}

void apply_logit_bias(std::span<const std::pair<int32_t, float>> bias, std::span<float> logits) {
    const auto n = static_cast<int64_t>(logits.size());
    for (const auto& [id, b] : bias) {
        if (id < 0 || id >= n) continue;
        float& l = logits[static_cast<size_t>(id)];
        l = b <= kBanBias ? -std::numeric_limits<float>::infinity() : l + b;
    }
}

void apply_presence_frequency(float presence, float frequency, const std::unordered_map<int32_t, int32_t>& counts,
                              std::span<float> logits) {
    if (presence == 0.0f && frequency == 0.0f) return;
    const auto n = static_cast<int64_t>(logits.size());
    for (const auto& [id, count] : counts) {
        if (id < 0 || id >= n || count <= 0) continue;
        logits[static_cast<size_t>(id)] -= frequency * static_cast<float>(count) + presence;
    }
}

void apply_penalties(const SamplerParams& p, const TokenHistory& history, std::span<float> logits) {
    apply_logit_bias(p.logit_bias, logits);
    if (p.repeat_penalty != 1.0f) {
        const std::vector<int32_t> recent(history.recent().begin(), history.recent().end());
        apply_repeat_penalty(p.repeat_penalty, recent, logits);
    }
    apply_presence_frequency(p.presence_penalty, p.frequency_penalty, history.generated(), logits);
}

void apply_repeat_penalty(float penalty, std::span<const int32_t> recent, std::span<float> logits) {
    if (penalty == 1.0f) return;
    const auto n = static_cast<int32_t>(logits.size());
    std::vector<int32_t> seen(recent.begin(), recent.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int32_t id : seen) {
        if (id < 0 || id >= n) continue;
        float& l = logits[static_cast<size_t>(id)];
        l = l > 0.0f ? l / penalty : l * penalty;
    }
}

SamplingCandidates sampling_candidates(const SamplerParams& params, std::span<const float> logits) {
    const auto n = static_cast<int32_t>(logits.size());
    if (n == 0) throw InternalError("sample: empty logits");
    // Candidates sorted by logit, cut by top-k first (cheap partial sort).
    SamplingCandidates c;
    std::vector<int32_t>& ids = c.ids;
    ids.resize(static_cast<size_t>(n));
    std::iota(ids.begin(), ids.end(), 0);
    const int32_t k = params.top_k > 0 ? std::min(params.top_k, n) : n;
    auto by_logit = [&](int32_t a, int32_t b) {
        const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
        return la > lb || (la == lb && a < b);
    };
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), by_logit);
    ids.resize(static_cast<size_t>(k));

    const float max_logit = logits[static_cast<size_t>(ids[0])];
    std::vector<double>& probs = c.weights;
    probs.resize(ids.size());
    double sum = 0.0;
    for (size_t i = 0; i < ids.size(); ++i) {
        probs[i] = std::exp(static_cast<double>(logits[static_cast<size_t>(ids[i])] - max_logit) / params.temperature);
        sum += probs[i];
    }
    for (auto& p : probs) p /= sum;

    // top-p: the smallest prefix whose mass reaches p; min-p: drop tokens
    // below min_p times the top probability.
    size_t keep = probs.size();
    double mass = 0.0;
    for (size_t i = 0; i < probs.size(); ++i) {
        mass += probs[i];
        if (mass >= params.top_p) {
            keep = i + 1;
            break;
        }
    }
    const double floor = params.min_p * probs[0];
    size_t keep_min_p = 1;
    while (keep_min_p < keep && probs[keep_min_p] >= floor) ++keep_min_p;
    keep = std::max<size_t>(1, std::min(keep, keep_min_p));
    ids.resize(keep);
    probs.resize(keep);
    return c;
}

int32_t Sampler::sample(std::span<float> logits) {
    if (logits.empty()) throw InternalError("sample: empty logits");
    apply_penalties(params_, history_, logits);
    if (grammar_) return sample_constrained(logits);
    if (params_.temperature == 0.0f) return argmax(logits);
    const SamplingCandidates c = sampling_candidates(params_, logits);
    std::discrete_distribution<size_t> pick(c.weights.begin(), c.weights.end());
    return c.ids[pick(rng_)];
}

int32_t Sampler::sample_constrained(std::span<float> logits) {
    if (params_.temperature == 0.0f) {
        const int32_t best = argmax(logits);
        if (grammar_->allows(best)) return best;
        grammar_->mask(logits);
        return argmax(logits);
    }
    SamplingCandidates c = sampling_candidates(params_, logits);
    size_t kept = 0;
    for (size_t i = 0; i < c.ids.size(); ++i) {
        if (c.weights[i] > 0.0 && grammar_->allows(c.ids[i])) {
            c.ids[kept] = c.ids[i];
            c.weights[kept] = c.weights[i];
            ++kept;
        }
    }
    if (kept == 0) {
        grammar_->mask(logits);
        c = sampling_candidates(params_, logits);
        kept = c.ids.size();
    }
    std::discrete_distribution<size_t> pick(c.weights.begin(), c.weights.begin() + static_cast<ptrdiff_t>(kept));
    return c.ids[pick(rng_)];
}

}  // namespace tandem
