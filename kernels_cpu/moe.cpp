#include "kernels_cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>

#include "runtime/common/error.h"

namespace tandem::cpu {
namespace {

// v = softmax(v) as ggml's soft_max row: exp(x - max) summed in double,
// each scaled by 1 / sum.
void softmax(std::span<float> v) {
    const float mx = *std::max_element(v.begin(), v.end());
    double sum = 0.0;
    for (float& x : v) {
        x = std::exp(x - mx);
        sum += x;
    }
    const auto inv = static_cast<float>(1.0 / sum);
    for (float& x : v) x *= inv;
}

// Keys of the experts outside the n_used groups with the best scores (the
// sum of each group's two largest keys) become -inf.
void keep_best_groups(std::vector<float>& key, int64_t n_groups, int64_t n_used) {
    const int64_t per = static_cast<int64_t>(key.size()) / n_groups;
    std::vector<float> score(static_cast<size_t>(n_groups));
    for (int64_t g = 0; g < n_groups; ++g) {
        float best = -INFINITY, second = -INFINITY;
        for (int64_t e = g * per; e < (g + 1) * per; ++e) {
            const float v = key[static_cast<size_t>(e)];
            if (v > best) {
                second = best;
                best = v;
            } else if (v > second) {
                second = v;
            }
        }
        score[static_cast<size_t>(g)] = static_cast<float>(static_cast<double>(best) + static_cast<double>(second));
    }
    std::vector<int32_t> order(static_cast<size_t>(n_groups));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)];
    });
    for (int64_t j = n_used; j < n_groups; ++j) {
        const auto first = key.begin() + order[static_cast<size_t>(j)] * per;
        std::fill(first, first + per, -INFINITY);
    }
}

}  // namespace

void moe_route(const float* logits, const RouteParams& rp, float* route, int64_t n_tokens) {
    const int64_t n_expert = rp.n_expert, n_used = rp.n_used;
    TANDEM_CHECK(n_used >= 1 && n_used <= n_expert, "moe_route: expert_used_count outside [1, expert_count]");
    std::vector<float> p(static_cast<size_t>(n_expert));
    const bool grouped = rp.n_groups > 1;
    TANDEM_CHECK(!grouped || (n_expert % rp.n_groups == 0 && n_expert / rp.n_groups >= 2 && rp.n_groups_used >= 1 &&
                              rp.n_groups_used < rp.n_groups && n_used <= rp.n_groups_used * (n_expert / rp.n_groups)),
                 "moe_route: expert groups that do not divide the experts or leave too few");
    std::vector<float> choose(rp.selection_bias || grouped ? static_cast<size_t>(n_expert) : 0);
    std::vector<int32_t> order(static_cast<size_t>(n_expert));
    std::vector<float> chosen(static_cast<size_t>(n_used));  // softmax_of_chosen's kept logits, largest first
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float* x = logits + t * n_expert;
        if (rp.sigmoid && !rp.softmax_of_chosen) {
            for (int64_t e = 0; e < n_expert; ++e) p[static_cast<size_t>(e)] = 1.0f / (1.0f + std::exp(-x[e]));
        } else {
            std::copy(x, x + n_expert, p.begin());
            if (!rp.softmax_of_chosen) softmax(p);
        }
        // The choice ranks gate values plus the bias, when there is one.
        if (rp.selection_bias) {
            for (int64_t e = 0; e < n_expert; ++e) {
                choose[static_cast<size_t>(e)] = p[static_cast<size_t>(e)] + rp.selection_bias[e];
            }
        } else if (grouped) {
            choose = p;
        }
        if (grouped) keep_best_groups(choose, rp.n_groups, rp.n_groups_used);
        const std::vector<float>& key = rp.selection_bias || grouped ? choose : p;
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
            return key[static_cast<size_t>(a)] > key[static_cast<size_t>(b)];
        });
        // gpt-oss: the kept logits become a softmax over themselves (ggml's
        // soft_max of the n_used values, in the same float order as above).
        if (rp.softmax_of_chosen) {
            const auto gate = [&](size_t j) -> float& { return p[static_cast<size_t>(order[j])]; };
            for (size_t j = 0; j < chosen.size(); ++j) chosen[j] = gate(j);
            softmax(chosen);
            for (size_t j = 0; j < chosen.size(); ++j) gate(j) = chosen[j];
        }
        double kept = 0.0;
        for (int64_t j = 0; j < n_used; ++j) kept += p[static_cast<size_t>(order[static_cast<size_t>(j)])];
        // llama.cpp clamps the sum away from 0 before dividing.
        const float div = std::max(static_cast<float>(kept), 6.103515625e-5f);
        float* r = route + t * 2 * n_used;
        for (int64_t j = 0; j < n_used; ++j) {
            const int32_t e = order[static_cast<size_t>(j)];
            float w = rp.normalize ? p[static_cast<size_t>(e)] / div : p[static_cast<size_t>(e)];
            if (rp.scale != 1.0f) w *= rp.scale;
            r[2 * j] = static_cast<float>(e);
            r[2 * j + 1] = w;
        }
    }
}

void group_by_expert(const float* route, int64_t n_used, int64_t n_tokens, int64_t n_expert, ExpertGroups& groups) {
    const int64_t n_rows = n_tokens * n_used;
    groups.offsets.assign(static_cast<size_t>(n_expert) + 1, 0);
    groups.rows.resize(static_cast<size_t>(n_rows));
    for (int64_t r = 0; r < n_rows; ++r) {
        const float id = route[2 * r];
        TANDEM_CHECK(id >= 0.0f && id < static_cast<float>(n_expert), "group_by_expert: expert id out of range");
        ++groups.offsets[static_cast<size_t>(id) + 1];
    }
    std::partial_sum(groups.offsets.begin(), groups.offsets.end(), groups.offsets.begin());
    std::vector<int64_t> next(groups.offsets.begin(), groups.offsets.end() - 1);
    for (int64_t r = 0; r < n_rows; ++r) {
        const auto e = static_cast<size_t>(route[2 * r]);
        groups.rows[static_cast<size_t>(next[e]++)] = r;
    }
}

}  // namespace tandem::cpu
