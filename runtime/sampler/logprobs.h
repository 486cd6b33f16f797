// Log-probabilities of tokens under the model, as OpenAI's `logprobs` and
// llama-server's default report them: the log-softmax of the raw logits
// (before logit bias, penalties, temperature and the filters).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tandem {

struct TokenLogprob {
    int32_t id = 0;
    float logprob = 0.0f;
};

// The chosen token's log-probability and the most likely tokens'.
struct TokenLogprobs {
    TokenLogprob chosen;
    std::vector<TokenLogprob> top;  // by descending logprob, lower id first among equals
};

// From one row of raw logits: the log-softmax of `chosen` and of the n_top
// most likely tokens (n_top capped by the row's size). Throws InternalError
// for an empty row or a chosen id outside it.
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t chosen, int32_t n_top);

}  // namespace tandem
