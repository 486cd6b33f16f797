// Generating text from a session, the one loop every front-end runs
// (`tandem run`, bench's speculation rows, the C API): the session's
// sequence 0 holds the prompt and `logits` ends with the last prompt
// token's row. Plainly, a step samples a token, hands it to `emit` and
// evaluates it, one pass over the weights per token. With a proposer, the
// tokens go through spec::generate, which at temperature 0 settles the
// very tokens the plain loop does (speculative.h states the rule).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "runtime/sampler/sampler.h"
#include "runtime/serving/speculative.h"

namespace tandem {
class Session;
}

namespace tandem::serving {

struct GenerateOptions {
    SamplerParams sampling;
    int64_t max_tokens = -1;  // tokens to settle; < 0: until emit says stop or the context is full
    spec::Proposer* proposer = nullptr;  // null: plain decoding
    spec::Config spec;                   // with a proposer
    int64_t n_ubatch = 512;              // with a proposer: a step's tokens fit one micro-batch
    // Plain decoding: each decode step's logits row, as evaluated (run's
    // --dump-logits).
    std::function<void(std::span<const float> row)> on_step_logits;
};

// Settles up to max_tokens tokens, each handed to emit (false: stop there;
// that token counts in Stats::generated but is not evaluated). Stops with
// Stats::context_full when the context has no position left. Throws
// FieldError for a bad spec::Config.
spec::Stats generate(Session& session, std::span<const int32_t> prompt, std::vector<float> logits,
                     const GenerateOptions& options, const spec::Emit& emit);

}  // namespace tandem::serving
