// Grammar-constrained sampling: the token walk (TokenTable::allowed) and
// the Sampler's choice under a grammar (runtime/sampler/grammar_constraint.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/gguf/gguf_file.h"
#include "runtime/grammar/json_schema.h"
#include "runtime/sampler/sampler.h"
#include "runtime/tokenizer/tokenizer.h"

namespace tandem {
namespace {

using grammar::TokenTable;
using Kind = TokenTable::Kind;

// A small vocabulary with what real ones have: words, punctuation merged
// with spaces, pieces that end or start inside a UTF-8 character, an end
// token, a control token and an empty piece.
std::shared_ptr<const TokenTable> small_vocab() {
    std::vector<std::string> pieces = {
        "{", "}", "\"", "\":", "\",", ": ", ",", " ", "\n", "\n  ", "name", "age", "a", "b", "Ann", "1", "12", "0",
        "-", "true", "false", "null", "[", "]", "é", "\xC3", "\xA9", "\xE2\x82", "\xAC", "€x", "x\xE2", "\"}", " \"",
        "{\"", "\"name\"", "<eos>", "<ctl>", ""};
    std::vector<Kind> kinds(pieces.size(), Kind::Text);
    kinds[pieces.size() - 3] = Kind::End;
    kinds[pieces.size() - 2] = Kind::Never;
    return std::make_shared<const TokenTable>(pieces, kinds);
}

std::shared_ptr<const grammar::Grammar> person_schema() {
    return grammar::compile_json_schema(nlohmann::ordered_json::parse(
        R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
            "age": {"type": "integer"}, "tags": {"type": "array", "items": {"enum": ["a", "é€"]}}},
            "required": ["name", "age"]})"));
}

// The walk's answer against asking the matcher token by token, along
// random paths through the grammar (the walk must neither miss nor add a
// token).
void check_walk_against_each_token(const std::shared_ptr<const grammar::Grammar>& g, const TokenTable& t,
                                   uint64_t seed, int steps) {
    grammar::Matcher m(g);
    std::mt19937_64 rng(seed);
    std::vector<uint8_t> walked;
    for (int step = 0; step < steps; ++step) {
        t.allowed(m, walked);
        std::vector<int32_t> ok;
        for (int32_t id = 0; id < t.size(); ++id) {
            ASSERT_EQ(walked[static_cast<size_t>(id)] != 0, t.allows(m, id))
                << "token " << id << " (" << t.piece(id) << ") at step " << step << ", seed " << seed;
            if (walked[static_cast<size_t>(id)] && t.kind(id) == Kind::Text) ok.push_back(id);
        }
        if (ok.empty()) return;
        const int32_t pick = ok[std::uniform_int_distribution<size_t>(0, ok.size() - 1)(rng)];
        ASSERT_TRUE(m.accept(t.piece(pick)));
    }
}

TEST(GrammarTokens, WalkEqualsEachTokenAsked) {
    const auto t = small_vocab();
    const auto g = person_schema();
    for (uint64_t seed = 1; seed <= 40; ++seed) check_walk_against_each_token(g, *t, seed, 60);
}

TEST(GrammarTokens, EndAndNeverTokens) {
    const auto t = small_vocab();
    const int32_t eos = t->size() - 3, ctl = t->size() - 2, empty = t->size() - 1;
    grammar::Matcher m(grammar::compile_grammar(R"(root ::= "a" "b"?)"));
    EXPECT_FALSE(t->allows(m, eos));
    ASSERT_TRUE(m.accept("a"));
    EXPECT_TRUE(t->allows(m, eos));  // the grammar can end here
    EXPECT_FALSE(t->allows(m, ctl));
    EXPECT_FALSE(t->allows(m, empty));
}

SamplerParams params(float temperature, std::shared_ptr<const grammar::Grammar> g,
                     std::shared_ptr<const TokenTable> t, uint64_t seed = 7) {
    SamplerParams p;
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    if (g) p.grammar = std::make_shared<const SamplingGrammar>(SamplingGrammar{std::move(g), std::move(t)});
    return p;
}

TEST(GrammarSampler, GreedyTakesTheBestAllowedToken) {
    const auto t = small_vocab();
    // "Ann" first, whatever the logits prefer: the grammar wants `{`.
    Sampler s(params(0.0f, grammar::compile_grammar(R"(root ::= "{" "Ann"? "}")"), t));
    std::vector<float> logits(static_cast<size_t>(t->size()), 0.0f);
    logits[14] = 9.0f;  // "Ann": refused at the start
    logits[0] = 1.0f;   // "{"
    logits[1] = 0.5f;   // "}": refused too
    EXPECT_EQ(s.sample(logits), 0);
    s.accept(0);
    logits.assign(logits.size(), 0.0f);
    logits[1] = 2.0f;
    logits[14] = 3.0f;
    EXPECT_EQ(s.sample(logits), 14);  // allowed now, and the best
    s.accept(14);
}

TEST(GrammarSampler, EndOfGenerationOnlyWhereTheGrammarEnds) {
    const auto t = small_vocab();
    const int32_t eos = t->size() - 3;
    Sampler s(params(0.0f, grammar::compile_grammar(R"(root ::= "a" "b")"), t));
    std::vector<int32_t> out;
    for (int i = 0; i < 3; ++i) {
        std::vector<float> logits(static_cast<size_t>(t->size()), 0.0f);
        logits[static_cast<size_t>(eos)] = 10.0f;  // the model wants to stop
        logits[12] = 1.0f;                         // "a"
        logits[13] = 0.5f;                         // "b"
        const int32_t tok = s.sample(logits);
        out.push_back(tok);
        s.accept(tok);
    }
    EXPECT_EQ(out, (std::vector<int32_t>{12, 13, eos}));
}

TEST(GrammarSampler, Utf8AcrossTokens) {
    const auto t = small_vocab();
    // "é€" as the model prefers it: C3 | A9 | E2 82 | AC, each piece alone
    // not a character; "€x" and "x\xE2" are always the top logits and
    // always refused.
    Sampler s(params(0.0f, grammar::compile_grammar(R"(root ::= "é€")"), t));
    const std::vector<int32_t> want = {25, 26, 27, 28};
    for (const int32_t w : want) {
        std::vector<float> logits(static_cast<size_t>(t->size()), 0.0f);
        for (const int32_t p : want) logits[static_cast<size_t>(p)] = 1.0f;
        logits[static_cast<size_t>(w)] = 2.0f;
        logits[29] = 4.0f;
        logits[30] = 5.0f;
        const int32_t tok = s.sample(logits);
        ASSERT_EQ(tok, w);
        s.accept(tok);
    }
    std::vector<float> logits(static_cast<size_t>(t->size()), 0.0f);
    logits[static_cast<size_t>(t->size() - 3)] = 1.0f;  // the end, now allowed
    EXPECT_EQ(s.sample(logits), t->size() - 3);
}

TEST(GrammarSampler, SampledDrawsOnlyAllowedTokens) {
    const auto t = small_vocab();
    const auto g = grammar::compile_grammar(R"(root ::= ("a" | "b" | "Ann")+)");
    std::mt19937_64 rng(3);
    std::normal_distribution<float> noise(0.0f, 2.0f);
    for (uint64_t seed = 0; seed < 50; ++seed) {
        Sampler s(params(1.0f, g, t, seed));
        grammar::Matcher check(g);
        for (int i = 0; i < 8; ++i) {
            std::vector<float> logits(static_cast<size_t>(t->size()));
            for (float& l : logits) l = noise(rng);
            const int32_t tok = s.sample(logits);
            if (tok == t->size() - 3) {  // the end: only once something was said
                ASSERT_TRUE(check.can_end());
                break;
            }
            ASSERT_TRUE(tok == 12 || tok == 13 || tok == 14) << tok;
            ASSERT_TRUE(check.accept(t->piece(tok)));
            s.accept(tok);
        }
    }
}

TEST(GrammarSampler, UnconstrainedChoicesDrawAsWithoutGrammar) {
    // A grammar that allows every text token changes nothing where the
    // candidates are all text: the same draws as the plain Sampler.
    const auto t = small_vocab();
    const auto g = grammar::compile_grammar(R"(root ::= [^\x00]*)");
    Sampler with(params(0.9f, g, t, 11)), without(params(0.9f, nullptr, nullptr, 11));
    std::mt19937_64 rng(5);
    std::normal_distribution<float> noise(0.0f, 1.0f);
    for (int i = 0; i < 200; ++i) {
        std::vector<float> logits(static_cast<size_t>(t->size()));
        for (float& l : logits) l = noise(rng);
        // Keep the end, control and empty tokens out of the candidates.
        for (int32_t k = t->size() - 3; k < t->size(); ++k) logits[static_cast<size_t>(k)] = -1e9f;
        // Text tokens whose bytes alone are not UTF-8 are out too.
        for (int32_t k : {25, 26, 27, 28, 30}) logits[static_cast<size_t>(k)] = -1e9f;
        std::vector<float> copy = logits;
        const int32_t a = with.sample(logits), b = without.sample(copy);
        ASSERT_EQ(a, b) << "draw " << i;
        with.accept(a);
        without.accept(b);
    }
}

TEST(GrammarSampler, DeadEndIsAnError) {
    const auto t = small_vocab();
    // U+1F600 is in no token.
    Sampler s(params(0.0f, grammar::compile_grammar(R"(root ::= "\U0001F600")"), t));
    std::vector<float> logits(static_cast<size_t>(t->size()), 0.0f);
    EXPECT_THROW(s.sample(logits), GrammarDeadEnd);
}

TEST(GrammarTokens, RealVocabularyWalkEqualsEachTokenAsked) {
    const char* path = std::getenv("TANDEM_SMOLLM2_GGUF");
    if (!path || !std::filesystem::exists(path)) GTEST_SKIP() << "set TANDEM_SMOLLM2_GGUF to SmolLM2-135M-Instruct's GGUF file";
    const Tokenizer tok = Tokenizer::from_gguf(gguf::File::open(path));
    const auto t = grammar_tokens(tok);
    EXPECT_EQ(t->size(), tok.n_vocab());
    EXPECT_EQ(t->kind(tok.eos()), Kind::End);
    const auto g = person_schema();
    for (uint64_t seed = 1; seed <= 3; ++seed) check_walk_against_each_token(g, *t, seed, 12);
}

}  // namespace
}  // namespace tandem
