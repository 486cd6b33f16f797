// Choosing the next token from logits: repetition penalty, then top-k,
// top-p and min-p filtering, temperature, and a seeded draw; temperature 0
// is greedy (argmax, ties to the lowest id).
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <vector>

namespace tandem {

struct SamplerParams {
    float temperature = 0.8f;
    int32_t top_k = 40;          // 0: off
    float top_p = 0.95f;         // 1: off
    float min_p = 0.05f;         // 0: off
    float repeat_penalty = 1.0f; // 1: off
    int32_t repeat_last_n = 64;  // how many recent tokens the penalty looks at
    uint64_t seed = 0;
};

// Throws FieldError, naming the field ({temperature}, {top_p}...), for a
// parameter outside its range.
void validate(const SamplerParams& p);

class Sampler {
public:
    explicit Sampler(const SamplerParams& params);

    // Picks a token from n_vocab logits (modified in place by the penalty).
    int32_t sample(std::span<float> logits);
    // Records a token (prompt or generated) for the repetition penalty.
    void accept(int32_t token);

private:
    SamplerParams params_;
    std::mt19937_64 rng_;
    std::deque<int32_t> recent_;
};

// The repetition penalty on logits, as llama.cpp applies it: each token of
// `recent` (once, however often it occurs) has a positive logit divided by
// the penalty and a negative one multiplied by it.
void apply_repeat_penalty(float penalty, std::span<const int32_t> recent, std::span<float> logits);

// What Sampler::sample draws from at temperature > 0: the candidates left
// by top-k, temperature, top-p and min-p, by descending logit (lower id
// first among equals), with their probabilities before the top-p and min-p
// cuts (a draw picks in proportion to them). The speculative sampler's
// target distribution is this, so both draw from one computation.
struct SamplingCandidates {
    std::vector<int32_t> ids;
    std::vector<double> weights;
};
SamplingCandidates sampling_candidates(const SamplerParams& p, std::span<const float> logits);

// Index of the largest logit (lowest index among equals).
int32_t argmax(std::span<const float> logits);

}  // namespace tandem
