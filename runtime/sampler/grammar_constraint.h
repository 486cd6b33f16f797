// A grammar bound to a vocabulary, for the sampler: which tokens may come
// next, and the grammar's state moved along as tokens are chosen. The
// Sampler (sampler.h) holds one when SamplerParams::grammar is set.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/common/error.h"
#include "runtime/grammar/matcher.h"
#include "runtime/grammar/token_table.h"

namespace tandem {

class Tokenizer;

// What a request constrains its output with: the compiled grammar and the
// model's vocabulary as the grammar sees it (grammar_tokens()).
struct SamplingGrammar {
    std::shared_ptr<const grammar::Grammar> grammar;
    std::shared_ptr<const grammar::TokenTable> tokens;
};

// The vocabulary for grammars: each token's piece, control tokens' with
// their text (token_to_piece with special text, as llama.cpp: so a control
// token may come wherever the grammar allows its text); ends of generation
// as End; unknown and unused tokens Never. Built once per model (~50 ms
// for 49k tokens).
std::shared_ptr<const grammar::TokenTable> grammar_tokens(const Tokenizer& tokenizer);

// No token the grammar accepts has a finite logit (a grammar that needs a
// character no token spells, or logit_bias banned every allowed token).
class GrammarDeadEnd : public Error {
public:
    using Error::Error;
};

class GrammarConstraint {
public:
    explicit GrammarConstraint(const SamplingGrammar& g);

    bool allows(int32_t token) const;
    // Sets the logit of every token the grammar refuses to -infinity.
    // Throws GrammarDeadEnd when no finite logit is left.
    void mask(std::span<float> logits);
    // Moves the grammar past `token` (an end token changes nothing).
    // Throws InternalError for a token allows() refuses.
    void accept(int32_t token);
    const grammar::Matcher& matcher() const { return matcher_; }

private:
    grammar::Matcher matcher_;
    std::shared_ptr<const grammar::TokenTable> tokens_;
    std::vector<uint8_t> allowed_;
};

}  // namespace tandem
