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

// route (n_tokens rows of 2 * n_used floats) = for each token, the n_used
// experts with the largest softmax(logits) (largest first; ties to the
// lower id), as (expert id, weight) pairs; the weights divided by their
// sum when normalize. The float order is ggml's: exp(x - max) summed in
// double, probabilities scaled by 1 / sum, the kept ones summed in double.
void moe_route(const float* logits, int64_t n_expert, int64_t n_used, bool normalize, float* route,
               int64_t n_tokens);

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
