// Mixture-of-experts helpers shared by every device: the router's choice
// (softmax, top-k, renormalized weights) and the grouping of a batch's
// (token, slot) rows by expert, so each expert's weights are read once per
// batch. The CUDA device reads the router's few logits back and uses the
// same two functions, as llama.cpp reads its expert ids back to the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem::cpu {

// How the router chooses: gate values = softmax(logits) over the experts,
// sigmoid(logit) of each, or the logits themselves (softmax_of_chosen);
// the n_used largest of gate + selection_bias kept (largest first; ties to
// the lower id), weighted by their gate values without the bias (with
// softmax_of_chosen: by a softmax over the kept logits alone); the weights
// divided by their sum (clamped away from 0, as llama.cpp) when normalize,
// then multiplied by scale.
struct RouteParams {
    int64_t n_expert = 0, n_used = 0;
    bool normalize = true;
    bool sigmoid = false;
    bool softmax_of_chosen = false;
    const float* selection_bias = nullptr;  // n_expert floats; null: none
    float scale = 1.0f;
    // Group-limited choice (DeepSeek-V3): the experts are n_groups groups
    // of consecutive ids; only those of the n_groups_used groups whose two
    // largest keys (gate + bias) sum highest are chosen from. 0 or 1 group:
    // all experts.
    int64_t n_groups = 0, n_groups_used = 0;
};

// route (n_tokens rows of 2 * n_used floats) = for each token the chosen
// (expert id, weight) pairs. The float order is ggml's: exp(x - max)
// summed in double, probabilities scaled by 1 / sum, the kept ones summed
// in double; sigmoid as 1 / (1 + exp(-x)) in float; a group's score its two
// keys summed in double. Ties go to the lower id (experts and groups).
void moe_route(const float* logits, const RouteParams& p, float* route, int64_t n_tokens);

// The rows of a batch each expert serves: rows[offsets[e] .. offsets[e+1])
// are token * n_used + slot indices, in increasing order.
struct ExpertGroups {
    std::vector<int64_t> offsets;
    std::vector<int64_t> rows;
    int64_t count(int64_t e) const { return offsets[static_cast<size_t>(e) + 1] - offsets[static_cast<size_t>(e)]; }
    const int64_t* begin(int64_t e) const { return rows.data() + offsets[static_cast<size_t>(e)]; }
};

// Groups route's rows by expert; a route naming an expert outside
// [0, n_expert) is a checked failure (a route is this program's output).
void group_by_expert(const float* route, int64_t n_used, int64_t n_tokens, int64_t n_expert, ExpertGroups& groups);

// The weight of row token * n_used + slot in route.
inline float route_weight(const float* route, int64_t row) { return route[2 * row + 1]; }

}  // namespace tandem::cpu
