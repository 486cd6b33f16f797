#include "runtime/sampler/sampler.h"

#include <algorithm>
#include <cmath>
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
}

int32_t argmax(std::span<const float> logits) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

Sampler::Sampler(const SamplerParams& params) : params_(params), rng_(params.seed) { validate(params_); }

void Sampler::accept(int32_t token) {
    if (params_.repeat_last_n == 0) return;
    recent_.push_back(token);
    while (static_cast<int32_t>(recent_.size()) > params_.repeat_last_n) recent_.pop_front();
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
    const std::vector<int32_t> recent(recent_.begin(), recent_.end());
    apply_repeat_penalty(params_.repeat_penalty, recent, logits);
    if (params_.temperature == 0.0f) return argmax(logits);
    const SamplingCandidates c = sampling_candidates(params_, logits);
    std::discrete_distribution<size_t> pick(c.weights.begin(), c.weights.end());
    return c.ids[pick(rng_)];
}

}  // namespace tandem
