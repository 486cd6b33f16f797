#include "runtime/sampler/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "runtime/common/error.h"

namespace tandem {

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t chosen, int32_t n_top) {
    const auto n = static_cast<int64_t>(logits.size());
    if (n == 0) throw InternalError("token_logprobs: empty logits");
    if (chosen < 0 || chosen >= n) throw InternalError(fmt::format("token_logprobs: token {} outside {} logits", chosen, n));
    // log p_i = l_i - (max + log sum exp(l - max)), summed in double.
    const float max = *std::max_element(logits.begin(), logits.end());
    double sum = 0.0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
    const double log_z = static_cast<double>(max) + std::log(sum);
    const auto logprob = [&](int32_t id) {
        return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(id)]) - log_z);
    };
    TokenLogprobs r;
    r.chosen = {chosen, logprob(chosen)};
    const auto k = static_cast<size_t>(std::clamp<int64_t>(n_top, 0, n));
    if (k == 0) return r;
    std::vector<int32_t> ids(static_cast<size_t>(n));
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(k), ids.end(), [&](int32_t a, int32_t b) {
        const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
        return la > lb || (la == lb && a < b);
    });
    r.top.reserve(k);
    for (size_t i = 0; i < k; ++i) r.top.push_back({ids[i], logprob(ids[i])});
    return r;
}

}  // namespace tandem
