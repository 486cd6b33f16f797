// The C API's embeddings (runtime/serving/tandem.h, tandem_embed): the
// vectors llama.cpp's llama-embedding gives for the same model, text and
// pooling (tests/data/embeddings/llamacpp.json, the references of
// test_embeddings.cpp, to the same bounds), and every bad input a -1 with
// a one-line error. c_api.cpp is compiled into this binary
// (tests/CMakeLists.txt): the calls are the C functions themselves, with
// no second copy of the engine in the process.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/serving/tandem.h"
#include "tests/test_paths.h"

namespace {

using tandem::testing::contains;

struct Closer {
    void operator()(tandem_model* m) const { tandem_close(m); }
};
using ModelPtr = std::unique_ptr<tandem_model, Closer>;

ModelPtr open_model(const std::filesystem::path& path, int32_t n_ctx = 512) {
    tandem_open_params p = tandem_open_params_default();
    const std::string s = path.string();
    p.model_path = s.c_str();
    p.n_ctx = n_ctx;
    p.n_threads = 2;
    ModelPtr m(tandem_open(&p));
    EXPECT_TRUE(m) << tandem_last_error();
    return m;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float d = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::abs(a[i] - b[i]));
    return d;
}

// The embedding of text through the C API (empty on failure, the error
// then reported).
std::vector<float> c_embed(tandem_model* m, const std::string& text, const char* pooling, int32_t normalize = 2) {
    tandem_embed_params p = tandem_embed_params_default();
    p.pooling = pooling;
    p.normalize = normalize;
    std::vector<float> v(static_cast<size_t>(tandem_n_embd(m)));
    const int32_t n = tandem_embed(m, text.c_str(), &p, v.data(), static_cast<int32_t>(v.size()));
    EXPECT_EQ(n, static_cast<int32_t>(v.size())) << tandem_last_error();
    if (n < 0) return {};
    EXPECT_STREQ(tandem_last_error(), "");
    return v;
}

struct Reference {
    std::string text;
    std::vector<float> embedding;
};

Reference reference(const std::string& model, const std::string& pooling) {
    std::ifstream in(tandem::testing::test_data("embeddings/llamacpp.json"));
    EXPECT_TRUE(in) << "tests/data/embeddings/llamacpp.json is missing";
    const nlohmann::json j = nlohmann::json::parse(in);
    for (const nlohmann::json& c : j["cases"]) {
        if (c["model"] == model && c["pooling"] == pooling) {
            return {j["text"].get<std::string>(), c["embedding"].get<std::vector<float>>()};
        }
    }
    ADD_FAILURE() << "no reference for " << model << " " << pooling;
    return {};
}

// Each pooling against llama.cpp's vector, and far from the others' (a
// wrong pooling fails); the text's tokens give the same vector.
void check_against_llamacpp(tandem_model* m, const std::string& model, float tolerance) {
    const std::vector<std::string> poolings = {"mean", "cls", "last"};
    for (const std::string& name : poolings) {
        const Reference ref = reference(model, name);
        const std::vector<float> ours = c_embed(m, ref.text, name.c_str());
        ASSERT_EQ(ours.size(), ref.embedding.size()) << model << " " << name;
        const float d = max_abs_diff(ours, ref.embedding);
        EXPECT_LT(d, tolerance) << model << " pooling " << name;
        std::printf("[ c api embedding ] %s %s: max |tandem_embed - llama.cpp| = %.3g\n", model.c_str(), name.c_str(),
                    static_cast<double>(d));
        for (const std::string& other : poolings) {
            if (other != name) {
                EXPECT_GT(max_abs_diff(ours, reference(model, other).embedding), 10 * tolerance);
            }
        }
        // The same tokens (the text has no special token: tokenize's are
        // the server's) given as ids.
        std::vector<int32_t> ids(256);
        const int32_t n = tandem_tokenize(m, ref.text.c_str(), 1, ids.data(), static_cast<int32_t>(ids.size()));
        ASSERT_GT(n, 0);
        ids.resize(static_cast<size_t>(n));
        tandem_embed_params p = tandem_embed_params_default();
        p.pooling = name.c_str();
        std::vector<float> by_ids(ours.size());
        ASSERT_EQ(tandem_embed_tokens(m, ids.data(), n, &p, by_ids.data(), static_cast<int32_t>(by_ids.size())),
                  static_cast<int32_t>(ours.size()))
            << tandem_last_error();
        EXPECT_EQ(by_ids, ours);
    }
}

// Q4_K_M: the bound of test_embeddings.cpp (llama.cpp differs from itself
// by 2.8e-3 between its kernels; twice that).
TEST(CApiEmbed, TinyLlamaEqualsLlamaCpp) {
    const ModelPtr m = open_model(tandem::testing::test_data("tiny-llama-Q4_K_M.gguf"));
    ASSERT_TRUE(m);
    EXPECT_EQ(tandem_n_embd(m.get()), 256);
    check_against_llamacpp(m.get(), "tiny-llama-Q4_K_M.gguf", 6e-3f);
}

TEST(CApiEmbed, SynthLlamaQ8_0EqualsLlamaCpp) {
    const auto path = tandem::testing::shared("models/synth-llama-Q8_0.gguf");
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is not here (../shared)";
    const ModelPtr m = open_model(path);
    ASSERT_TRUE(m);
    check_against_llamacpp(m.get(), "synth-llama-Q8_0.gguf", 1e-3f);
}

TEST(CApiEmbed, NormalizationAsLlamaCpp) {
    const ModelPtr m = open_model(tandem::testing::test_data("tiny-llama-Q4_K_M.gguf"));
    ASSERT_TRUE(m);
    const std::string text = "Pooling reads the rows after the output norm.";
    const std::vector<float> raw = c_embed(m.get(), text, "mean", -1);
    const std::vector<float> unit = c_embed(m.get(), text, "mean", 2);
    const std::vector<float> taxicab = c_embed(m.get(), text, "mean", 1);
    ASSERT_FALSE(raw.empty());
    double l2 = 0, l1 = 0;
    for (const float x : raw) {
        l2 += static_cast<double>(x) * x;
        l1 += std::abs(x);
    }
    l2 = std::sqrt(l2);
    EXPECT_GT(std::abs(l2 - 1.0), 0.1) << "the raw vector is not already of unit length";
    for (size_t i = 0; i < raw.size(); ++i) {
        EXPECT_NEAR(unit[i], raw[i] / l2, 1e-6) << i;
        EXPECT_NEAR(taxicab[i], raw[i] / l1, 1e-6) << i;
    }
}

// A failed call: -1, and an error naming what was expected and found.
void expect_failure(int32_t got, const std::string& words) {
    EXPECT_EQ(got, -1);
    EXPECT_TRUE(contains(tandem_last_error(), words)) << "'" << tandem_last_error() << "' lacks '" << words << "'";
}

TEST(CApiEmbed, BadInputIsAnErrorNeverACrash) {
    const ModelPtr m = open_model(tandem::testing::test_data("tiny-llama-Q4_K_M.gguf"), 64);
    ASSERT_TRUE(m);
    tandem_model* model = m.get();
    std::vector<float> out(256, 7.0f);
    const auto room = static_cast<int32_t>(out.size());
    tandem_embed_params p = tandem_embed_params_default();

    expect_failure(tandem_embed(nullptr, "x", &p, out.data(), room), "model: expected a pointer, found NULL");
    expect_failure(tandem_embed(model, nullptr, &p, out.data(), room), "text: expected a pointer, found NULL");
    expect_failure(tandem_embed(model, "", &p, out.data(), room), "text: expected text, found an empty string");
    expect_failure(tandem_embed(model, "x", &p, nullptr, room), "embedding: expected a pointer, found NULL");
    // Too little room: the size needed, and nothing written.
    expect_failure(tandem_embed(model, "x", &p, out.data(), 100), "needs 256 floats, found room for 100");
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == 7.0f; }));
    expect_failure(tandem_embed(model, "x", &p, nullptr, 0), "needs 256 floats, found room for 0");

    p.pooling = "max";
    expect_failure(tandem_embed(model, "x", &p, out.data(), room),
                   "params->pooling: expected \"mean\", \"cls\" or \"last\", found \"max\"");
    p.pooling = "none";  // one vector per input needs a pooling
    expect_failure(tandem_embed(model, "x", &p, out.data(), room), "found \"none\"");
    p.pooling = nullptr;
    expect_failure(tandem_embed(model, "x", &p, out.data(), room), "found NULL");
    p = tandem_embed_params_default();
    p.normalize = -2;
    expect_failure(tandem_embed(model, "x", &p, out.data(), room), "params->normalize: expected -1, 0 or a p-norm");
    p.normalize = 65;
    expect_failure(tandem_embed(model, "x", &p, out.data(), room), "found 65");
    p = tandem_embed_params_default();

    const int32_t ids[] = {1, 450, 32000};
    expect_failure(tandem_embed_tokens(model, ids, 3, &p, out.data(), room),
                   "tokens[2]: expected a token id in [0, 32000), found 32000");
    const int32_t negative[] = {-1};
    expect_failure(tandem_embed_tokens(model, negative, 1, &p, out.data(), room), "found -1");
    expect_failure(tandem_embed_tokens(model, ids, 0, &p, out.data(), room), "n_tokens: expected 1 or more, found 0");
    expect_failure(tandem_embed_tokens(model, nullptr, 2, &p, out.data(), room), "tokens: expected a pointer");
    // More tokens than a sequence holds (64 positions).
    const std::vector<int32_t> many(65, 450);
    expect_failure(tandem_embed_tokens(model, many.data(), 65, &p, out.data(), room), "65 tokens");

    // NULL params: the defaults; the model still serves after the errors.
    EXPECT_EQ(tandem_embed_tokens(model, ids, 2, nullptr, out.data(), room), 256) << tandem_last_error();
    EXPECT_STREQ(tandem_last_error(), "");
    double l2 = 0;
    for (const float x : out) l2 += static_cast<double>(x) * x;
    EXPECT_NEAR(l2, 1.0, 1e-5);
    EXPECT_EQ(tandem_n_embd(nullptr), -1);
}

}  // namespace
