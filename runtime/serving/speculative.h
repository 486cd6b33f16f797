// Speculative decoding for `tandem run` (generate() below) and for the
// slots of `tandem serve` (TargetChooser, verify() and the proposers, used by
// runtime/serving/scheduler.cpp): a proposer guesses the next few
// tokens, the target model checks them all in one batch (one pass over its
// weights, which is what a CPU decode step costs), and the longest prefix
// the target agrees with is kept, plus the target's own next token.
//
// At temperature 0 the target's choice at each position is made by the
// project's Sampler (argmax after the repetition penalty), so the text is
// the same, token for token, as plain decoding (given that a batch's logits
// equal one-by-one logits, true of the CPU engine). At temperature > 0 the
// standard speculative-sampling rule keeps the output distributed exactly
// as the Sampler's: draft token d (drawn by the proposer from q) is kept
// with probability min(1, p(d) / q(d)); when refused, the token is drawn
// from norm(max(0, p - q)). A deterministic proposer (n-gram lookup) has a
// one-hot q: d is kept with probability p(d), else the token is drawn from
// p with d removed. p is target_distribution() below: the distribution the
// Sampler draws from, computed the same way.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "runtime/sampler/sampler.h"

namespace tandem {
class Session;
}

namespace tandem::spec {

// A distribution over token ids as the Sampler builds it: the candidates
// left after top-k, top-p and min-p, in the Sampler's order (logit
// descending, lower id first among equals), with the weights the Sampler
// hands std::discrete_distribution (softmax at the temperature over the
// top-k candidates, not renormalised after the cut). prob(i) normalises.
struct TokenDist {
    std::vector<int32_t> ids;
    std::vector<double> weights;
    double total = 0.0;  // sum of weights
    double prob(size_t i) const { return weights[i] / total; }
    // Probability of token id (0 outside the support). Linear in the size.
    double prob_of(int32_t id) const;
};

// Sampler::sample's computation up to the draw, for temperature > 0: the
// bias and penalties over `history` (apply_penalties, on `logits` in
// place, as the Sampler does), then top-k, softmax at the temperature,
// top-p, min-p.
// Drawing std::discrete_distribution over `weights` with the Sampler's
// generator gives the token Sampler::sample gives (tested bit for bit).
// Throws InternalError for temperature 0 (greedy has no distribution).
TokenDist target_distribution(const SamplerParams& p, const TokenHistory& history, std::span<float> logits);

// One draw from d with rng, the way the Sampler draws.
int32_t draw(const TokenDist& d, std::mt19937_64& rng);

// The speculative-sampling rule for one draft token `d` drawn from q
// (q == nullptr: a deterministic proposer, q one-hot at d). Returns d when
// it is kept, else a token from norm(max(0, p - q)) (p itself when that is
// all zero); `accepted` says which.
int32_t accept_or_resample(const TokenDist& p, const TokenDist* q, int32_t d, std::mt19937_64& rng, bool& accepted);

// What a proposer returns: the draft tokens and, for a sampling draft
// model, the distribution each was drawn from (empty: deterministic).
struct Draft {
    std::vector<int32_t> tokens;
    std::vector<TokenDist> q;
};

// How the target settles each token, for run's generate() and serve's
// slots alike. Greedy: the Sampler itself (the very code plain decoding
// runs). Sampling: target_distribution() drawn with a generator seeded as
// the Sampler's (a plain choice is then the Sampler's own draw), and a
// draft token goes through accept_or_resample(). With a grammar
// (SamplerParams::grammar), every choice is the Sampler's own, and a draft
// is kept when it equals it: the very tokens plain decoding gives, at any
// temperature.
class TargetChooser {
public:
    explicit TargetChooser(const SamplerParams& sp);
    bool greedy() const { return greedy_; }
    // Records a prompt token / a settled one, for the penalties.
    void accept_prompt(int32_t token) { sampler_.accept_prompt(token); }
    void accept(int32_t token) { sampler_.accept(token); }
    // The next token from a row of the target's logits (the bias and
    // penalties are applied to the row in place).
    int32_t choose(std::span<float> row);
    // The token settled where draft token d stands (d drawn from q; q ==
    // nullptr: a deterministic proposer): d when kept (`kept` set), else
    // the target's own (greedy: its choice; sampling: the rule's resample).
    int32_t check(std::span<float> row, int32_t d, const TokenDist* q, bool& kept);

private:
    SamplerParams sp_;
    bool greedy_;
    Sampler sampler_;  // greedy's choice, and the history for both
    std::mt19937_64 rng_;
};

struct Verdict {
    int kept = 0;          // draft tokens kept (and taken by settle)
    bool stopped = false;  // settle said stop
};

// Settles a verification: `rows` holds draft.tokens.size() + 1 rows of
// n_vocab logits, row i those after the step's first token and drafts
// 0..i-1 (in the one-token order). Row i < size checks draft token i, the
// last row chooses freely. Each settled token goes to `settle` (false:
// generation stops there, and that token is not counted as kept); ends at
// the first refused draft, after the token that replaces it.
Verdict verify(TargetChooser& chooser, std::span<float> rows, int64_t n_vocab, const Draft& draft,
               const std::function<bool(int32_t)>& settle);

class Proposer {
public:
    virtual ~Proposer() = default;
    // Called once with the prompt after the target evaluated it (a draft
    // model evaluates it too).
    virtual void prepare(std::span<const int32_t> /*prompt*/) {}
    // Up to `max` tokens guessed to follow `context` (every token so far:
    // prompt and generated; the last one is not evaluated by the target
    // yet). May return fewer, or none.
    virtual void propose(std::span<const int32_t> context, int max, Draft& out) = 0;
    // Whether proposing costs forward passes (a draft model): an empty
    // proposal then counts as a failure for the adaptive length.
    virtual bool expensive() const = 0;
    virtual std::string name() const = 0;
    // Forward passes the proposer ran (draft model), for the stats.
    virtual int64_t passes() const { return 0; }
};

// Prompt lookup: the most recent earlier occurrence in the context of its
// last n tokens (n = max_n, then shorter down to min_n), and the `max`
// tokens that followed it (where the context ends first, the copy goes on
// from its own start: the text is taken to repeat with the period found).
class NgramProposer final : public Proposer {
public:
    explicit NgramProposer(int max_n, int min_n = 1);
    void propose(std::span<const int32_t> context, int max, Draft& out) override;
    bool expensive() const override { return false; }
    std::string name() const override;

private:
    int max_n_, min_n_;
};

// The pure look-up NgramProposer uses (exposed for tests).
std::vector<int32_t> ngram_lookup(std::span<const int32_t> context, int max_n, int min_n, int max);

// Draft length control: grows by 2 (to draft_max) after a fully accepted
// draft, halves after a fully rejected one, shrinks to 2 * accepted + 1
// after a partly accepted one; and once it is down to 1 and drafts still
// fail (or an expensive proposer has nothing to say), skips speculation for
// 1, 2, 4 ... 32 steps so that a proposer that keeps failing costs next to
// nothing. Any accepted token resets the back-off.
//
// A proposer that costs forward passes (a draft model) starts at
// kExpensiveStart tokens rather than draft_max and backs off up to
// kExpensiveMaxSkip steps: where its drafts are refused, the first drafts
// and every retry are what speculation loses against plain decoding.
class DraftLength {
public:
    static constexpr int kExpensiveStart = 4;
    static constexpr int kMaxSkip = 32;
    static constexpr int kExpensiveMaxSkip = 128;
    // A draft model none of whose tokens the target has kept after this
    // many failed steps in a row stops drafting for the generation: each
    // later attempt would first run every token since the last through the
    // draft (a batch that costs ~10% of the steps it covers), so backing
    // off alone still lost 9-10% (llama-1b Q8_0 with a random Q2_K draft,
    // 128 tokens); stopped after 4 fails, the draft covers ~11 tokens.
    static constexpr int kExpensiveGiveUp = 4;
    DraftLength(int draft_max, int draft_min, bool adaptive, bool expensive_proposer = false);
    // The most tokens to propose at this step (0: skip it; always 0 once
    // a draft model has given up, see kExpensiveGiveUp).
    int allowed();
    // After a step that asked the proposer (not after a skipped one: a
    // skip is no failure).
    void update(int proposed, int accepted);
    int current() const { return cur_; }

private:
    int max_, min_;
    bool adaptive_;
    int max_skip_;
    int cur_;
    int skip_ = 0;
    int fails_ = 0;
    bool expensive_;
    int64_t kept_ = 0;     // draft tokens the target kept, all steps
    bool stopped_ = false;  // kExpensiveGiveUp reached without any kept
};

struct Config {
    int draft_max = 16;
    int draft_min = 0;
    bool adaptive = true;
    // Throws FieldError for {draft_max} or {draft_min} below 0, or
    // {draft_min} above {draft_max}.
    void validate() const;
    // Throws FieldError when a step's token and draft_max drafts do not
    // fit one micro-batch of n_ubatch tokens ({n_ubatch}): a sliding-window
    // cache drops refused drafts exactly only within one.
    void check_fits(int64_t n_ubatch) const;
};

// Throws FieldError for a prompt-lookup n-gram length ({spec_ngram})
// below 0, or for both it and a draft model ({model_draft}): one proposer.
void check_one_proposer(int spec_ngram, bool draft_model);

struct Stats {
    int64_t proposed = 0;       // draft tokens sent to the target
    int64_t accepted = 0;       // of those, kept
    int64_t target_passes = 0;  // target evaluations during generation (batched or not)
    int64_t spec_passes = 0;    // of those, with a draft
    int64_t generated = 0;      // tokens handed to Emit (the one that stopped generation too)
    int64_t draft_passes = 0;   // the proposer's forward passes (draft model)
    bool context_full = false;  // stopped because the context is full
    double acceptance() const { return proposed > 0 ? static_cast<double>(accepted) / proposed : 0.0; }
};

// What the caller does with each token the decoder settles on: false stops
// generation (end of generation, -n reached); the token is then not part
// of the output unless the caller made it so.
using Emit = std::function<bool(int32_t token)>;

// Generates from `target`, whose sequence 0 holds exactly `prompt` and
// whose `logits` (n_vocab floats) are the last prompt token's, as the plain
// loop of `tandem run` does, token for token at temperature 0. `max_tokens`
// (< 0: no bound) lets the decoder not propose past the end. `n_ubatch`
// bounds a batch (draft_max + 1 tokens at most fit one micro-batch, which a
// sliding-window cache needs to drop rejected tokens exactly).
Stats generate(Session& target, std::span<const int32_t> prompt, std::vector<float> logits,
               const SamplerParams& sp, Proposer& proposer, const Config& cfg, int64_t max_tokens,
               int64_t n_ubatch, const Emit& emit);

}  // namespace tandem::spec
