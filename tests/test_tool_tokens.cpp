// Qwen's <tool_call> and </tool_call> as single tokens. In Qwen 2.5/3
// vocabularies they are added tokens, typed CONTROL or USER_DEFINED
// depending on the converter. A required call's grammar spells the text
// "<tool_call>"; as in llama.cpp (whose grammar sees every token's piece
// rendered with its special text), the single token must be one way to
// write it, and the text the server detokenizes from it must be the marker
// the reply parser looks for. The vocabulary here is the GPT-2 one with
// Qwen 2's pre-tokenizer (../shared/vocab/ggml-vocab-gpt2-pre-qwen2.gguf)
// with the two tokens added at its end, of either type; end to end, a
// synthetic qwen2 model (tandem synth) over it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/chat/chat_template.h"
#include "runtime/chat/reply_parser.h"
#include "runtime/chat/tool_grammar.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/gguf/gguf_writer.h"
#include "runtime/grammar/grammar.h"
#include "runtime/sampler/grammar_constraint.h"
#include "runtime/serving/scheduler.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/run_command.h"
#include "tests/serve_helpers.h"
#include "tests/test_paths.h"

namespace tandem {
namespace {

const char* const kOpen = "<tool_call>";
const char* const kClose = "</tool_call>";

// The qwen2 vocabulary with <tool_call> and </tool_call> appended, typed
// `type`, written to `out` (a vocabulary-only GGUF, as its source).
void write_vocab_with_tool_tokens(const std::filesystem::path& src, const std::filesystem::path& out, TokenType type) {
    const gguf::File file = gguf::File::open(src);
    gguf::Writer w(out, file.alignment());
    for (const auto& kv : file.metadata()) {
        gguf::Value v = kv.value;
        auto* arr = std::get_if<gguf::Array>(&v.data);
        if (kv.key == "tokenizer.ggml.tokens") {
            arr->items.push_back(gguf::Value::str(kOpen));
            arr->items.push_back(gguf::Value::str(kClose));
        } else if (kv.key == "tokenizer.ggml.token_type") {
            for (int i = 0; i < 2; ++i) arr->items.push_back(gguf::Value::i32(static_cast<int32_t>(type)));
        } else if (kv.key == "tokenizer.ggml.scores") {
            for (int i = 0; i < 2; ++i) arr->items.push_back(gguf::Value::f32(0.0f));
        }
        w.set(kv.key, std::move(v));
    }
    w.finish();
}

std::filesystem::path qwen2_vocab() { return testing::shared("vocab/ggml-vocab-gpt2-pre-qwen2.gguf"); }

struct Vocab {
    Tokenizer tok;
    int32_t open = -1, close = -1;
};

Vocab vocab_of(const std::filesystem::path& path) {
    Vocab v{Tokenizer::from_gguf(gguf::File::open(path))};
    v.open = v.tok.find_token(kOpen);
    v.close = v.tok.find_token(kClose);
    return v;
}

chat::ChatTemplate qwen_template() {
    return chat::ChatTemplate::parse(testing::slurp(testing::test_data("chat_templates/qwen2_5.jinja")));
}

// A required call to get_time, whose arguments are "{}": the grammar's
// whole text is fixed, the model chooses only how to spell it.
std::shared_ptr<const grammar::Grammar> required_call_grammar() {
    const auto tools = nlohmann::ordered_json::parse(
        R"([{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}])");
    return grammar::compile_grammar(chat::tool_call_grammar(
        qwen_template(), tools, "", false, [](const auto&, const std::string& rule) { return rule + " ::= \"{}\"\n"; }));
}

const char* const kCallText = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";

class ToolTokens : public ::testing::TestWithParam<TokenType> {
protected:
    void SetUp() override {
        if (!std::filesystem::exists(qwen2_vocab())) GTEST_SKIP() << qwen2_vocab() << " is not here (../shared)";
        dir_ = testing::scratch_dir();
        vocab_path_ = dir_ / "qwen2-tool-vocab.gguf";
        write_vocab_with_tool_tokens(qwen2_vocab(), vocab_path_, GetParam());
    }
    std::filesystem::path dir_, vocab_path_;
};

std::string type_name(const ::testing::TestParamInfo<TokenType>& info) {
    return info.param == TokenType::Control ? "Control" : "UserDefined";
}

// The tokenizer: one token each, typed as written; its text rendered.
TEST_P(ToolTokens, AreSingleTokensWhoseTextRenders) {
    const Vocab v = vocab_of(vocab_path_);
    ASSERT_GE(v.open, 0);
    ASSERT_EQ(v.close, v.open + 1);
    EXPECT_EQ(v.tok.token_type(v.open), GetParam());
    // As the scheduler detokenizes what a model generates.
    EXPECT_EQ(v.tok.token_to_piece(v.open), kOpen);
    EXPECT_EQ(v.tok.token_to_piece(v.close), kClose);
    // The chat template's text of a past call becomes the tokens.
    EXPECT_EQ(v.tok.encode(kOpen, false, true), std::vector<int32_t>{v.open});
}

// The grammar's vocabulary: where the grammar wants the text "<tool_call>",
// the single token may come, and "</tool_call>" where the call closes.
TEST_P(ToolTokens, TheGrammarTakesTheSingleTokenForTheText) {
    const Vocab v = vocab_of(vocab_path_);
    const auto table = grammar_tokens(v.tok);
    EXPECT_EQ(table->kind(v.open), grammar::TokenTable::Kind::Text);
    EXPECT_EQ(table->piece(v.open), kOpen);
    GrammarConstraint c(SamplingGrammar{required_call_grammar(), table});
    std::vector<float> logits(static_cast<size_t>(v.tok.n_vocab()), 0.0f);
    c.mask(logits);
    EXPECT_TRUE(std::isfinite(logits[static_cast<size_t>(v.open)])) << "the single <tool_call> token at the start";
    EXPECT_FALSE(std::isfinite(logits[static_cast<size_t>(v.close)])) << "</tool_call> before the call";
    c.accept(v.open);
    for (const int32_t t : v.tok.encode("\n{\"name\": \"get_time\", \"arguments\": {}}\n", false)) c.accept(t);
    std::fill(logits.begin(), logits.end(), 0.0f);
    c.mask(logits);
    EXPECT_TRUE(std::isfinite(logits[static_cast<size_t>(v.close)])) << "the single </tool_call> token at the end";
    c.accept(v.close);
    EXPECT_TRUE(c.matcher().can_end());
}

// End to end: a synthetic qwen2 model over the vocabulary, held to a
// required call, writes the markers as single tokens (their logits raised,
// as a Qwen model's own would be); the text it streams parses as the call.
TEST_P(ToolTokens, ARequiredCallWithTheSingleTokensParses) {
    const auto synth = testing::run_tandem(
        "synth --shape qwen2.5-72b --embd 64 --ff 128 --layers 2 --heads 2 --kv-heads 1 --ctx 256 --type Q8_0 "
        "--vocab " + testing::shell_quote(vocab_path_.string()) + " -o " +
            testing::shell_quote((dir_ / "model.gguf").string()),
        dir_);
    ASSERT_EQ(synth.exit_code, 0) << synth.err;
    const testing::ServeModel m(dir_ / "model.gguf");
    const int32_t open = m.tok.find_token(kOpen), close = m.tok.find_token(kClose);
    auto s = m.session(1, 256);
    serve::Scheduler sched(*s, m.tok, serve::SchedulerOptions{1, 0, 64});
    sched.start();
    serve::GenerationRequest g;
    g.prompt = m.tok.encode("What time is it?", false);
    g.sampling.temperature = 0;
    g.sampling.logit_bias = {{open, 50.0f}, {close, 50.0f}};
    g.sampling.grammar = std::make_shared<const SamplingGrammar>(SamplingGrammar{required_call_grammar(), grammar_tokens(m.tok)});
    g.max_tokens = 64;
    const auto r = testing::collect(sched.submit(std::move(g)));
    ASSERT_EQ(r.last.finish_reason, "stop") << r.last.error << " after " << r.text;
    EXPECT_EQ(r.text, kCallText);
    ASSERT_FALSE(r.last.tokens.empty());
    EXPECT_EQ(r.last.tokens.front(), open);
    EXPECT_EQ(r.last.tokens.back(), close);
    chat::ReplyParser parser(false, chat::tool_format(qwen_template()));
    parser.push(r.text, true);
    ASSERT_EQ(parser.tool_calls().size(), 1u) << r.text;
    EXPECT_EQ(parser.tool_calls()[0].name, "get_time");
    EXPECT_EQ(nlohmann::json::parse(parser.tool_calls()[0].arguments), nlohmann::json::object());
    EXPECT_EQ(parser.content(), "");
}

INSTANTIATE_TEST_SUITE_P(Qwen, ToolTokens, ::testing::Values(TokenType::Control, TokenType::UserDefined), type_name);

}  // namespace
}  // namespace tandem
