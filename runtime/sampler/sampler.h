// Choosing the next token from logits: logit bias and penalties (as
// llama.cpp's chain orders them: bias, repetition, presence and frequency),
// then top-k, top-p and min-p filtering, temperature, and a seeded draw;
// temperature 0 is greedy (argmax, ties to the lowest id).
//
// With a grammar (SamplerParams::grammar), only tokens it accepts are
// chosen, and end-of-generation tokens only where it can end. The choice
// is made first and checked (one token's text through the matcher); the
// whole vocabulary is walked only when that fails:
//  - greedy: the argmax if the grammar takes it, else the argmax of the
//    logits with every refused token at -infinity (the same token a full
//    mask gives, at a fraction of the cost);
//  - sampling: the candidates left by top-k, top-p and min-p that the
//    grammar takes, drawn in proportion to their weights; when none is
//    left, the filters run again over the masked logits.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/sampler/grammar_constraint.h"

namespace tandem {

struct SamplerParams {
    float temperature = 0.8f;
    int32_t top_k = 40;          // 0: off
    float top_p = 0.95f;         // 1: off
    float min_p = 0.05f;         // 0: off
    float repeat_penalty = 1.0f; // 1: off
    int32_t repeat_last_n = 64;  // how many recent tokens the penalty looks at
    uint64_t seed = 0;
    // OpenAI's penalties, over every token generated so far (the prompt
    // not counted, no window; llama.cpp counts the last repeat_last_n
    // tokens, prompt included): a token generated c times has its logit
    // lowered by frequency_penalty * c + presence_penalty * (c > 0).
    float presence_penalty = 0.0f;   // [-2, 2]; 0: off
    float frequency_penalty = 0.0f;  // [-2, 2]; 0: off
    // Added to the logits of these token ids ([-100, 100]); kBanBias bans
    // the token (its logit becomes -infinity). Ids past the vocabulary are
    // ignored here (the server refuses them).
    std::vector<std::pair<int32_t, float>> logit_bias;
    // The output must match this grammar (null: free text).
    std::shared_ptr<const SamplingGrammar> grammar;
};

// A bias this low (OpenAI's -100) bans the token rather than shifting it.
inline constexpr float kBanBias = -100.0f;

// Throws FieldError, naming the field ({temperature}, {top_p}...), for a
// parameter outside its range.
void validate(const SamplerParams& p);

// What the penalties look at: the last repeat_last_n tokens, prompt and
// generated, for the repetition penalty; how often each token has been
// generated, for the presence and frequency penalties.
class TokenHistory {
public:
    explicit TokenHistory(int32_t repeat_last_n) : last_n_(repeat_last_n) {}
    void accept_prompt(int32_t token);  // the window only
    void accept(int32_t token);         // a generated token: the window and the counts
    const std::deque<int32_t>& recent() const { return recent_; }
    const std::unordered_map<int32_t, int32_t>& generated() const { return generated_; }

private:
    int32_t last_n_;
    std::deque<int32_t> recent_;
    std::unordered_map<int32_t, int32_t> generated_;
};

class Sampler {
public:
    explicit Sampler(const SamplerParams& params);

    // Picks a token from n_vocab logits (modified in place by the bias and
    // the penalties, and by the grammar's mask when it had to be applied).
    // Throws GrammarDeadEnd when the grammar leaves no token.
    int32_t sample(std::span<float> logits);
    // Records a prompt token (the repetition penalty's window).
    void accept_prompt(int32_t token) { history_.accept_prompt(token); }
    // Records a generated token (every penalty, and the grammar's state).
    void accept(int32_t token) {
        history_.accept(token);
        if (grammar_) grammar_->accept(token);
    }
    const TokenHistory& history() const { return history_; }
    bool constrained() const { return grammar_.has_value(); }

private:
    int32_t sample_constrained(std::span<float> logits);

    SamplerParams params_;
    std::mt19937_64 rng_;
    TokenHistory history_;
    std::optional<GrammarConstraint> grammar_;
};

// The logit bias: each (id, bias) added, kBanBias or lower giving -infinity.
void apply_logit_bias(std::span<const std::pair<int32_t, float>> bias, std::span<float> logits);

// OpenAI's presence and frequency penalties for tokens generated `counts`
// times (id -> count).
void apply_presence_frequency(float presence, float frequency, const std::unordered_map<int32_t, int32_t>& counts,
                              std::span<float> logits);

// Everything done to the logits before the filters, in llama.cpp's order:
// the logit bias, the repetition penalty over history.recent(), then the
// presence and frequency penalties over history.generated().
void apply_penalties(const SamplerParams& p, const TokenHistory& history, std::span<float> logits);

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
