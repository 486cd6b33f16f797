#include "runtime/sampler/grammar_constraint.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "runtime/tokenizer/tokenizer.h"

namespace tandem {

std::shared_ptr<const grammar::TokenTable> grammar_tokens(const Tokenizer& tokenizer) {
    using Kind = grammar::TokenTable::Kind;
    const int32_t n = tokenizer.n_vocab();
    std::vector<std::string> pieces(static_cast<size_t>(n));
    std::vector<Kind> kinds(static_cast<size_t>(n), Kind::Text);
    for (int32_t id = 0; id < n; ++id) {
        const TokenType t = tokenizer.token_type(id);
        if (tokenizer.is_end_of_generation(id)) {
            kinds[static_cast<size_t>(id)] = Kind::End;
        } else if (t == TokenType::Unknown || t == TokenType::Unused) {
            kinds[static_cast<size_t>(id)] = Kind::Never;
        } else {
            // A control token is its text, as llama.cpp's grammar sees it
            // (its pieces rendered with special text): a grammar's
            // "<tool_call>" may then be the one token Qwen writes for it
            // ([TOOL_CALLS] Mistral's, <|channel|> gpt-oss's), not only
            // the pieces '<', 'tool', ... no model writes.
            pieces[static_cast<size_t>(id)] = tokenizer.token_to_piece(id, true);
        }
    }
    return std::make_shared<const grammar::TokenTable>(std::move(pieces), std::move(kinds));
}

GrammarConstraint::GrammarConstraint(const SamplingGrammar& g) : matcher_(g.grammar), tokens_(g.tokens) {
    if (!g.grammar || !g.tokens) throw InternalError("GrammarConstraint: a grammar and its vocabulary are both needed");
}

bool GrammarConstraint::allows(int32_t token) const { return tokens_->allows(matcher_, token); }

void GrammarConstraint::mask(std::span<float> logits) {
    tokens_->allowed(matcher_, allowed_);
    bool any = false;
    for (size_t i = 0; i < logits.size(); ++i) {
        if (i >= allowed_.size() || allowed_[i] == 0) {
            logits[i] = -std::numeric_limits<float>::infinity();
        } else {
            any = any || std::isfinite(logits[i]);
        }
    }
    if (!any) throw GrammarDeadEnd("the grammar allows no token here (or every token it allows is banned)");
}

void GrammarConstraint::accept(int32_t token) {
    if (token < 0 || token >= tokens_->size()) throw InternalError(fmt::format("grammar: token {} is not in the vocabulary", token));
    switch (tokens_->kind(token)) {
        case grammar::TokenTable::Kind::End: return;
        case grammar::TokenTable::Kind::Never: break;
        case grammar::TokenTable::Kind::Text:
            if (matcher_.accept(tokens_->piece(token))) return;
            break;
    }
    throw InternalError(fmt::format("grammar: token {} was chosen but the grammar refuses it", token));
}

}  // namespace tandem
