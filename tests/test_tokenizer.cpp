// The tokenizer against llama.cpp's published test vectors (vocab-only GGUF
// files with strings and the ids llama.cpp gives for them), the golden
// prompts of the tiny models, Gemma 3 when available, and `tandem
// tokenize`.
//
// The vectors were generated without BOS. Whether special tokens were
// parsed does not matter for them: none of the strings contains a special
// token's text, and both settings reproduce every .out line (checked below).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/gguf/gguf_writer.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using testing::run_tandem;
using testing::expect_one_line_error;
using testing::count_lines;
using testing::shell_quote;

// The committed copy under tests/data, else the shared one.
fs::path vocab_file(const std::string& name) {
    const fs::path local = testing::test_data("vocab/" + name);
    return fs::exists(local) ? local : testing::shared("vocab/" + name);
}

struct VectorCase {
    std::string text;
    std::vector<int32_t> ids;
};

std::vector<VectorCase> load_vectors(const fs::path& gguf_path) {
    const std::string inp = testing::slurp(gguf_path.string() + ".inp");
    const std::string out = testing::slurp(gguf_path.string() + ".out");
    std::vector<std::string> texts;
    const std::string sep = "\n__ggml_vocab_test__\n";
    for (size_t p = 0;;) {
        const size_t q = inp.find(sep, p);
        if (q == std::string::npos) break;
        texts.push_back(inp.substr(p, q - p));
        p = q + sep.size();
    }
    std::vector<VectorCase> cases;
    std::istringstream lines(out);
    std::string line;
    for (const auto& t : texts) {
        if (!std::getline(lines, line)) break;
        VectorCase c{t, {}};
        std::istringstream ids(line);
        int32_t id = 0;
        while (ids >> id) c.ids.push_back(id);
        cases.push_back(std::move(c));
    }
    EXPECT_EQ(cases.size(), texts.size()) << gguf_path << ": .inp and .out disagree on the number of strings";
    return cases;
}

Tokenizer load(const fs::path& p) { return Tokenizer::from_gguf(gguf::File::open(p)); }

class VocabVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabVectors, EncodeMatchesEveryVector) {
    const fs::path path = vocab_file(GetParam());
    TANDEM_REQUIRE_SHARED(path);
    const Tokenizer tok = load(path);
    const auto cases = load_vectors(path);
    ASSERT_EQ(cases.size(), 46u);
    for (const auto& c : cases) {
        EXPECT_EQ(tok.encode(c.text, false, false), c.ids) << "text: '" << c.text << "'";
        EXPECT_EQ(tok.encode(c.text, false, true), c.ids) << "text (parse_special): '" << c.text << "'";
    }
}

// decode() drops the space that encode() puts in front of SentencePiece
// text, so the round trip is exact, with or without BOS.
TEST_P(VocabVectors, DecodeInvertsEncode) {
    const fs::path path = vocab_file(GetParam());
    TANDEM_REQUIRE_SHARED(path);
    const Tokenizer tok = load(path);
    for (const auto& c : load_vectors(path)) {
        EXPECT_EQ(tok.decode(tok.encode(c.text, false), false), c.text);
        if (tok.bos() >= 0) {
            EXPECT_EQ(tok.decode(tok.encode(c.text, true), false), c.text);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, VocabVectors,
                         ::testing::Values("ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf", "ggml-vocab-gpt2-pre-llama-bpe.gguf", "ggml-vocab-gpt2-pre-qwen2.gguf",
                                           "ggml-vocab-gpt-2.gguf"),
                         [](const auto& info) {
                             std::string n = info.param.substr(11, info.param.size() - 16);  // llama-spm
                             for (auto& ch : n)
                                 if (ch == '-') ch = '_';
                             return n;
                         });

TEST(Tokenizer, VocabularyFacts) {
    const fs::path spm_path = vocab_file("ggml-vocab-llama-spm.gguf");
    const fs::path bpe_path = vocab_file("ggml-vocab-gpt-2.gguf");
    TANDEM_REQUIRE_SHARED(spm_path);
    TANDEM_REQUIRE_SHARED(bpe_path);
    const Tokenizer spm = load(spm_path);
    EXPECT_EQ(spm.model_name(), "llama");
    EXPECT_EQ(spm.n_vocab(), 32000);
    EXPECT_EQ(spm.bos(), 1);
    EXPECT_EQ(spm.eos(), 2);
    EXPECT_EQ(spm.unk(), 0);
    EXPECT_TRUE(spm.add_bos_by_default());
    EXPECT_TRUE(spm.add_space_prefix());
    EXPECT_TRUE(spm.is_end_of_generation(2));
    EXPECT_FALSE(spm.is_end_of_generation(1));
    EXPECT_EQ(spm.token_type(13), TokenType::Byte);
    EXPECT_EQ(spm.token_to_piece(13), "\n");          // <0x0A>
    EXPECT_EQ(spm.token_to_piece(15043), " Hello");   // ▁Hello
    EXPECT_EQ(spm.token_to_piece(1), "<s>");
    EXPECT_EQ(spm.token_to_piece(1, false), "");
    EXPECT_EQ(spm.find_token("\xE2\x96\x81Hello"), 15043);
    EXPECT_EQ(spm.find_token("no such token"), -1);
    EXPECT_THROW(spm.token_to_piece(32000), Error);
    EXPECT_THROW(spm.token_to_piece(-1), Error);

    const Tokenizer bpe = load(bpe_path);
    EXPECT_EQ(bpe.model_name(), "gpt2");
    EXPECT_EQ(bpe.pre_tokenizer_name(), "gpt-2");
    EXPECT_EQ(bpe.n_vocab(), 50257);
    EXPECT_EQ(bpe.eos(), 50256);
    EXPECT_FALSE(bpe.add_bos_by_default());  // GPT-2's metadata does not ask for BOS
    EXPECT_TRUE(bpe.is_end_of_generation(50256));
    EXPECT_EQ(bpe.token_to_piece(18435), " Hello");  // ĠHello
    EXPECT_EQ(bpe.token_to_piece(198), "\n");        // Ċ
}

TEST(Tokenizer, SpecialTokensNeedParseSpecial) {
    const fs::path path = vocab_file("ggml-vocab-llama-spm.gguf");
    TANDEM_REQUIRE_SHARED(path);
    const Tokenizer tok = load(path);
    // Parsed: the control tokens, and a space prefix after each of them.
    EXPECT_EQ(tok.encode("<s>Hi</s>", false, true), (std::vector<int32_t>{1, 6324, 2}));
    // Not parsed: plain text.
    const auto plain = tok.encode("<s>Hi</s>", false, false);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
    EXPECT_EQ(tok.decode(plain, false), "<s>Hi</s>");
}

// Phi-3 marks "</s>" user-defined (matched even without parse_special) and
// the reference strips whitespace after Phi-3's special tokens.
TEST(Tokenizer, UserDefinedTokensAndPhi3Stripping) {
    const fs::path path = vocab_file("ggml-vocab-phi-3.gguf");
    TANDEM_REQUIRE_SHARED(path);
    const Tokenizer tok = load(path);
    // The file marks "</s>" (2) user-defined; llama.cpp (2026) overrides any
    // token spelled as an end of generation to a control token, so it is
    // matched only with special parsing: these ids are its llama_tokenize's.
    EXPECT_EQ(tok.token_type(2), TokenType::Control);
    EXPECT_TRUE(tok.is_end_of_generation(2));
    EXPECT_EQ(tok.encode("<|user|>\nHi</s> x", false, true), (std::vector<int32_t>{32010, 6324, 2, 921}));
    EXPECT_EQ(tok.encode("Hi</s> x", false, false), (std::vector<int32_t>{6324, 829, 29879, 29958, 921}));
    EXPECT_TRUE(tok.is_end_of_generation(32007));  // <|end|>
    EXPECT_EQ(tok.eot(), 32007);
}

// The prompts of the golden runs: BOS added, special tokens not parsed.
std::vector<int32_t> golden_prompt_ids(const fs::path& tokens_file) {
    std::ifstream in(tokens_file);
    std::string line;
    std::vector<int32_t> ids;
    std::getline(in, line);  // "# prompt N tokens, ..."
    while (std::getline(in, line) && !line.empty() && line[0] != '#') ids.push_back(std::stoi(line));
    return ids;
}

TEST(Tokenizer, GoldenPromptsOfTheTinyModel) {
    const fs::path model = testing::shared("models/tiny-llama-F16.gguf");
    TANDEM_REQUIRE_SHARED(model);
    const Tokenizer tok = load(model);
    for (const std::string p : {"p1", "p2"}) {
        const fs::path text = testing::shared("golden/" + p + ".txt");
        const fs::path ids = testing::shared("golden/tiny-llama-F16." + p + ".tokens");
        TANDEM_REQUIRE_SHARED(ids);
        const auto expected = golden_prompt_ids(ids);
        ASSERT_FALSE(expected.empty());
        EXPECT_EQ(tok.encode(testing::slurp(text), tok.add_bos_by_default(), false), expected) << p;
    }
}

// The same prompts with the committed model, so this runs without ../shared.
TEST(Tokenizer, GoldenPromptsCommittedCopy) {
    const Tokenizer tok = load(testing::test_data("tiny-llama-Q4_K_M.gguf"));
    EXPECT_EQ(tok.encode("Once upon a time, there was a little robot who wanted to learn how to paint the sky.", true),
              (std::vector<int32_t>{1, 9038, 2501, 263, 931, 29892, 727, 471, 263, 2217, 19964, 1058, 5131, 304, 5110,
                                    920, 304, 10675, 278, 14744, 29889}));
    EXPECT_EQ(tok.encode("The quick brown fox jumps over the lazy dog. 1234567890 !@#$% \xC3\x9Cn\xC3\xAF"
                         "c\xC3\xB6" "d\xC3\xA9 \xE6\x9D\xB1\xE4\xBA\xAC",
                         true),
              (std::vector<int32_t>{1,     450,   4996,  17354, 1701,  29916, 432,   17204, 975,   278,
                                    17366, 11203, 29889, 29871, 29896, 29906, 29941, 29946, 29945, 29953,
                                    29955, 29947, 29929, 29900, 1738,  29992, 29937, 29938, 29995, 7189,
                                    29876, 30085, 29883, 9289,  29948, 29871, 30591, 30675}));
}

// Gemma 3 (SentencePiece, 262k tokens, no space prefix, thousands of
// control tokens): set TANDEM_GEMMA3_GGUF to a Gemma 3 GGUF to run it.
TEST(Tokenizer, Gemma3) {
    const char* env = std::getenv("TANDEM_GEMMA3_GGUF");
    if (!env || !*env) GTEST_SKIP() << "TANDEM_GEMMA3_GGUF not set";
    const Tokenizer tok = load(env);
    EXPECT_EQ(tok.model_name(), "llama");
    EXPECT_EQ(tok.n_vocab(), 262144);
    EXPECT_FALSE(tok.add_space_prefix());
    EXPECT_EQ(tok.bos(), 2);
    EXPECT_EQ(tok.encode("The capital of France is", true), (std::vector<int32_t>{2, 818, 5279, 529, 7001, 563}));
    const std::string chat = "<start_of_turn>user\nHello  world<end_of_turn>\n";
    EXPECT_EQ(tok.encode(chat, true, true), (std::vector<int32_t>{2, 105, 2364, 107, 9259, 138, 12392, 106, 107}));
    EXPECT_EQ(tok.eot(), 106);
    EXPECT_TRUE(tok.is_end_of_generation(106));
    EXPECT_TRUE(tok.is_end_of_generation(1));
    EXPECT_EQ(tok.decode(tok.encode(chat, true, false), false), chat);
}

TEST(Tokenizer, HundredKilobytesInWellUnderASecond) {
    const fs::path spm_path = vocab_file("ggml-vocab-llama-spm.gguf");
    const fs::path bpe_path = vocab_file("ggml-vocab-gpt-2.gguf");
    TANDEM_REQUIRE_SHARED(spm_path);
    TANDEM_REQUIRE_SHARED(bpe_path);
    std::string text;
    const std::string para =
        "The quick brown fox jumps over the lazy dog; 1234567 numbers, \xC3\x9Cn\xC3\xAF" "c\xC3\xB6" "d\xC3\xA9 "
        "\xE6\x9D\xB1\xE4\xBA\xAC and   spaces\n\n";
    while (text.size() < 100 * 1024) text += para;
    text += std::string(20000, 'a');  // one long word: merges must not be quadratic
    for (const auto& path : {spm_path, bpe_path}) {
        const Tokenizer tok = load(path);
        const auto t0 = std::chrono::steady_clock::now();
        const auto ids = tok.encode(text, false);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_LT(s, 1.0) << path;
        EXPECT_EQ(tok.decode(ids, false), text) << path;
    }
}

// Hand-made vocabularies for what the real ones do not exercise.
fs::path write_vocab(const fs::path& dir, const std::string& name, const std::vector<std::string>& tokens,
                     const std::vector<int32_t>& types, const std::vector<gguf::KeyValue>& extra = {}) {
    const fs::path path = dir / name;
    gguf::Writer w(path);
    w.set("general.architecture", gguf::Value::str("llama"));
    w.set("tokenizer.ggml.model", gguf::Value::str("llama"));
    w.set("tokenizer.ggml.tokens", gguf::Value::string_array(tokens));
    w.set("tokenizer.ggml.scores", gguf::Value::f32_array(std::vector<float>(tokens.size(), 0.0f)));
    w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
    for (const auto& kv : extra) w.set(kv.key, kv.value);
    w.finish();
    return path;
}

TEST(Tokenizer, LongerSpecialTokenWinsAnOverlap) {
    const auto dir = testing::scratch_dir();
    // "ab" and "bcd" overlap in "abcd": the reference takes longer tokens
    // first, so "bcd" wins even though "ab" starts earlier.
    const auto path = write_vocab(dir, "v.gguf", {"<unk>", "<s>", "</s>", "ab", "bcd", "\xE2\x96\x81", "a"},
                                  {2, 3, 3, 4, 4, 1, 1});
    const Tokenizer tok = load(path);
    EXPECT_EQ(tok.encode("abcd", false), (std::vector<int32_t>{5, 6, 4}));  // ▁ a bcd
}

TEST(Tokenizer, BadMetadataIsAnErrorNamingTheKey) {
    const auto dir = testing::scratch_dir();
    auto expect_error = [&](const fs::path& p, const std::string& needle) {
        try {
            load(p);
            ADD_FAILURE() << "no error for " << p;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    {
        const fs::path p = dir / "none.gguf";
        gguf::Writer w(p);
        w.set("general.architecture", gguf::Value::str("llama"));
        w.finish();
        expect_error(p, "tokenizer.ggml.model");
    }
    expect_error(write_vocab(dir, "model.gguf", {"a"}, {1}, {{"tokenizer.ggml.model", gguf::Value::str("t5"), 0}}),
                 "tokenizer.ggml.model");
    expect_error(write_vocab(dir, "types.gguf", {"a", "b"}, {1}), "tokenizer.ggml.token_type");
    expect_error(write_vocab(dir, "bos.gguf", {"a", "b"}, {1, 1},
                             {{"tokenizer.ggml.bos_token_id", gguf::Value::u32(7), 0}}),
                 "tokenizer.ggml.bos_token_id");
    expect_error(write_vocab(dir, "pre.gguf", {"a"}, {1},
                             {{"tokenizer.ggml.model", gguf::Value::str("gpt2"), 0},
                              {"tokenizer.ggml.pre", gguf::Value::str("no-such-pre"), 0},
                              {"tokenizer.ggml.merges", gguf::Value::string_array({}), 0}}),
                 "tokenizer.ggml.pre");
    expect_error(write_vocab(dir, "merges.gguf", {"a"}, {1}, {{"tokenizer.ggml.model", gguf::Value::str("gpt2"), 0}}),
                 "tokenizer.ggml.merges");
}

// ---- tandem tokenize ------------------------------------------------------


TEST(TokenizeCommand, PrintsTheVectorIds) {
    const auto dir = testing::scratch_dir();
    for (const std::string name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"}) {
        const fs::path path = vocab_file(name);
        TANDEM_REQUIRE_SHARED(path);
        for (const auto& c : load_vectors(path)) {
            const auto r =
                run_tandem("tokenize --no-bos -m " + shell_quote(path.string()) + " -p " + shell_quote(c.text), dir);
            ASSERT_EQ(r.exit_code, 0) << r.err;
            std::string expected;
            for (const int32_t id : c.ids) {
                if (!expected.empty()) expected += ' ';
                expected += std::to_string(id);
            }
            EXPECT_EQ(r.out, expected + "\n") << "text: '" << c.text << "'";
        }
    }
}

TEST(TokenizeCommand, FileJsonAndPieces) {
    const auto dir = testing::scratch_dir();
    const fs::path path = vocab_file("ggml-vocab-llama-spm.gguf");
    TANDEM_REQUIRE_SHARED(path);
    const fs::path text = dir / "text.txt";
    std::ofstream(text, std::ios::binary) << "Hello world\n";

    auto r = run_tandem("tokenize -m " + shell_quote(path.string()) + " -f " + shell_quote(text.string()), dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "1 15043 3186 13\n");  // BOS by default for Llama

    r = run_tandem("tokenize --json --pieces -m " + shell_quote(path.string()) + " -f " + shell_quote(text.string()),
                   dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j.at("ids"), nlohmann::json({1, 15043, 3186, 13}));
    EXPECT_EQ(j.at("n_tokens"), 4);
    EXPECT_EQ(j.at("pieces"), nlohmann::json({"<s>", " Hello", " world", "\n"}));

    r = run_tandem("tokenize --pieces --parse-special -m " + shell_quote(path.string()) + " -p '</s>x'", dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "1 2 921\n      1 '<s>'\n      2 '</s>'\n    921 ' x'\n");
}

TEST(TokenizeCommand, BadInputIsAOneLineError) {
    const auto dir = testing::scratch_dir();
    const fs::path path = vocab_file("ggml-vocab-gpt-2.gguf");
    TANDEM_REQUIRE_SHARED(path);
    const std::string m = " -m " + shell_quote(path.string());
    expect_one_line_error(run_tandem("tokenize -m " + shell_quote((dir / "missing.gguf").string()) + " -p x", dir));
    expect_one_line_error(run_tandem("tokenize" + m + " -p x -f " + shell_quote(path.string()), dir));
    expect_one_line_error(run_tandem("tokenize" + m, dir));
    expect_one_line_error(run_tandem("tokenize -p x", dir));
    expect_one_line_error(run_tandem("tokenize" + m + " -f " + shell_quote((dir / "missing.txt").string()), dir));
    const fs::path not_gguf = dir / "not.gguf";
    std::ofstream(not_gguf) << "this is not a GGUF file at all";
    expect_one_line_error(run_tandem("tokenize -m " + shell_quote(not_gguf.string()) + " -p x", dir));
}

}  // namespace
}  // namespace tandem
