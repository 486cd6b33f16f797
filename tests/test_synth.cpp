// `tandem synth` and the Llama shape tables behind it. The header-only
// sizes are checked against real Q4_K_M files of the same models, which is
// what makes synthetic files a valid stand-in for planning; the small full
// files are checked for content, reproducibility and error handling.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_shapes.h"
#include "runtime/model/synth_vocab.h"
#include "runtime/quant/quant_types.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace tandem {
namespace {

using testing::run_tandem;
using testing::expect_one_line_error;
using testing::count_lines;
using testing::shell_quote;

// What cmd_synth.cpp draws from: N(0, 0.02) matrices, N(1, 0.02) norms.
constexpr double kWeightStd = 0.02;
constexpr double kNormMean = 1.0;

// A small explicit shape: quick to write with data, one layer past the
// Q4_K_M "more bits" layers.
const std::string kSmallDims = "--embd 256 --ff 512 --layers 2 --heads 4 --kv-heads 2 --vocab-size 1000 --ctx 512";


std::filesystem::path synth(const std::string& args, const std::filesystem::path& dir, const std::string& file) {
    const auto out = dir / file;
    const auto r = run_tandem("synth " + args + " -o " + shell_quote(out.string()), dir);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_FALSE(r.signaled);
    return out;
}

// ---- shape tables ------------------------------------------------------------

TEST(ModelShapes, PresetsAreValidAndHaveTheExpectedParameterCounts) {
    for (const auto& p : model::llama_presets()) {
        SCOPED_TRACE(p.name);
        EXPECT_NO_THROW(model::validate_llama_shape(p));
        EXPECT_EQ(model::find_llama_preset(p.name), &p);
        EXPECT_EQ(model::llama_tensors(p).size(), static_cast<size_t>(p.n_layer) * 9 + (p.tied_embeddings ? 2 : 3));
    }
    EXPECT_EQ(model::find_llama_preset("llama5-9000b"), nullptr);
    // Published parameter counts of the real models.
    auto params = [](const char* name) {
        return static_cast<double>(model::llama_param_count(*model::find_llama_preset(name)));
    };
    EXPECT_NEAR(params("llama-1b"), 1.100e9, 0.01e9);
    EXPECT_NEAR(params("llama2-7b"), 6.738e9, 0.01e9);
    EXPECT_NEAR(params("llama3-8b"), 8.030e9, 0.01e9);
    EXPECT_NEAR(params("llama2-13b"), 13.016e9, 0.01e9);
    EXPECT_NEAR(params("llama3-70b"), 70.554e9, 0.01e9);
}

TEST(ModelShapes, TensorListFollowsLlamaCppNaming) {
    const auto& s = *model::find_llama_preset("llama3-8b");
    const auto tensors = model::llama_tensors(s);
    ASSERT_EQ(tensors.size(), 32u * 9 + 3);
    EXPECT_EQ(tensors.front().name, "token_embd.weight");
    EXPECT_EQ(tensors.front().shape, (std::vector<int64_t>{4096, 128256}));
    EXPECT_EQ(tensors[1].name, "blk.0.attn_norm.weight");
    EXPECT_EQ(tensors[3].name, "blk.0.attn_k.weight");
    EXPECT_EQ(tensors[3].shape, (std::vector<int64_t>{4096, 1024}));  // 8 KV heads x 128
    EXPECT_EQ(tensors[9].name, "blk.0.ffn_down.weight");
    EXPECT_EQ(tensors[9].shape, (std::vector<int64_t>{14336, 4096}));
    EXPECT_EQ(tensors[tensors.size() - 2].name, "output_norm.weight");
    EXPECT_EQ(tensors.back().name, "output.weight");
    EXPECT_EQ(model::layer_of_tensor("blk.17.ffn_up.weight"), 17);
    EXPECT_EQ(model::layer_of_tensor("token_embd.weight"), -1);
    EXPECT_EQ(model::layer_of_tensor("blk.x.ffn_up.weight"), -1);
}

TEST(ModelShapes, ValidateRejectsImpossibleShapes) {
    model::LlamaShape s = *model::find_llama_preset("tiny");
    s.n_head = 7;
    EXPECT_THROW(model::validate_llama_shape(s), Error);
    s = *model::find_llama_preset("tiny");
    s.n_head_kv = 3;
    EXPECT_THROW(model::validate_llama_shape(s), Error);
    s = *model::find_llama_preset("tiny");
    s.n_layer = 0;
    EXPECT_THROW(model::validate_llama_shape(s), Error);
}

TEST(SynthVocab, SyntheticVocabularyIsSentencePieceShaped) {
    const auto keys = model::synthetic_llama_vocab(5000);
    const gguf::Array* tokens = nullptr;
    const gguf::Array* types = nullptr;
    for (const auto& kv : keys) {
        if (kv.key == "tokenizer.ggml.tokens") tokens = kv.value.as_array();
        if (kv.key == "tokenizer.ggml.token_type") types = kv.value.as_array();
    }
    ASSERT_NE(tokens, nullptr);
    ASSERT_NE(types, nullptr);
    ASSERT_EQ(tokens->items.size(), 5000u);
    EXPECT_EQ(*tokens->items[0].as_string(), "<unk>");
    EXPECT_EQ(*tokens->items[1].as_string(), "<s>");
    EXPECT_EQ(*tokens->items[2].as_string(), "</s>");
    EXPECT_EQ(*tokens->items[3].as_string(), "<0x00>");
    EXPECT_EQ(*tokens->items[258].as_string(), "<0xFF>");
    EXPECT_EQ(types->items[3].as_int(), 6);
    EXPECT_EQ(types->items[300].as_int(), 1);
    std::set<std::string> unique;
    for (const auto& t : tokens->items) unique.insert(*t.as_string());
    EXPECT_EQ(unique.size(), 5000u);
    EXPECT_THROW(model::synthetic_llama_vocab(100), Error);
}

// ---- header-only files at real sizes -------------------------------------------

struct RealSize {
    const char* shape;
    uint64_t n_layer;
    double real_bytes;  // tensor bytes of the public Q4_K_M GGUF of that model
};

void check_header_only(const RealSize& want) {
    const auto dir = testing::scratch_dir();
    const auto path = synth(std::string("--shape ") + want.shape + " --type Q4_K_M --header-only", dir, "h.gguf");
    const gguf::File f = gguf::File::open(path);
    EXPECT_TRUE(f.header_only());
    EXPECT_EQ(f.get_uint("llama.block_count"), want.n_layer);
    EXPECT_EQ(f.get_uint("general.file_type"), 15u);
    EXPECT_NE(f.find_tensor("blk." + std::to_string(want.n_layer - 1) + ".ffn_down.weight"), nullptr);
    EXPECT_NE(f.find_tensor("output.weight"), nullptr);
    EXPECT_EQ(f.tensors().size(), want.n_layer * 9 + 3);
    // The header is all there is: tens of GB declared, a few MB on disk.
    EXPECT_LT(f.file_size(), 16u << 20);
    const double total = static_cast<double>(f.total_tensor_bytes());
    EXPECT_NEAR(total, want.real_bytes, 0.03 * want.real_bytes) << want.shape << ": " << total;
    EXPECT_EQ(f.find_tensor("output.weight")->type, quant::Type::Q6_K);
    try {
        (void)f.tensor_data(f.tensors().front());
        ADD_FAILURE() << "tensor_data on a header-only file did not throw";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("header"), std::string::npos) << msg;
        EXPECT_NE(msg.find("run"), std::string::npos) << msg;
    }
}

// Sizes of llama.cpp's Q4_K_M files: Meta-Llama-3-70B 42.52 GB,
// Llama-2-7B 4.08 GB (TheBloke), Meta-Llama-3-8B 4.92 GB; the header is
// a few MB of that.
TEST(SynthCommand, HeaderOnlyLlama3_70BMatchesARealQ4KMFile) { check_header_only({"llama3-70b", 80, 42.5e9}); }
TEST(SynthCommand, HeaderOnlyLlama2_7BMatchesARealQ4KMFile) { check_header_only({"llama2-7b", 32, 4.08e9}); }
TEST(SynthCommand, HeaderOnlyLlama3_8BMatchesARealQ4KMFile) { check_header_only({"llama3-8b", 32, 4.92e9}); }

// ---- full files -------------------------------------------------------------------

TEST(SynthCommand, TinyShapeMatchesTheSharedModelAndHoldsTheIntendedWeights) {
    const auto dir = testing::scratch_dir();
    const auto path = synth("--shape tiny --type Q4_K_M --seed 7", dir, "tiny.gguf");
    const gguf::File f = gguf::File::open(path);
    ASSERT_FALSE(f.header_only());
    EXPECT_EQ(f.architecture(), "llama");
    EXPECT_EQ(f.get_uint("llama.embedding_length"), 256u);
    EXPECT_EQ(f.get_uint("llama.rope.dimension_count"), 32u);
    EXPECT_EQ(f.get_uint("tokenizer.ggml.bos_token_id"), 1u);

    // Same tensors, shapes and per-tensor types as the reference tool's
    // Q4_K_M of the shared tiny model.
    const gguf::File ref = gguf::File::open(testing::test_data("tiny-llama-Q4_K_M.gguf"));
    ASSERT_EQ(f.tensors().size(), ref.tensors().size());
    for (const auto& rt : ref.tensors()) {
        const gguf::TensorInfo* t = f.find_tensor(rt.name);
        ASSERT_NE(t, nullptr) << rt.name;
        EXPECT_EQ(t->shape, rt.shape) << rt.name;
        EXPECT_EQ(t->type, rt.type) << rt.name;
    }

    for (const auto& t : f.tensors()) {
        SCOPED_TRACE(t.name);
        const auto bytes = f.tensor_data(t);
        ASSERT_EQ(bytes.size(), t.n_bytes);
        const int64_t n = t.row_length();
        const uint64_t row_bytes = quant::row_bytes(t.type, n).value();
        std::vector<float> row(static_cast<size_t>(n));
        double sum = 0, sum2 = 0;
        bool finite = true;
        for (int64_t r = 0; r < t.n_rows(); ++r) {
            quant::dequantize_row(t.type, bytes.data() + static_cast<uint64_t>(r) * row_bytes, row.data(), n);
            for (float v : row) {
                finite = finite && std::isfinite(v);
                sum += v;
                sum2 += static_cast<double>(v) * v;
            }
        }
        ASSERT_TRUE(finite);
        const double count = static_cast<double>(t.n_elements);
        const double mean = sum / count;
        const double std = std::sqrt(std::max(0.0, sum2 / count - mean * mean));
        if (t.shape.size() == 1) {
            EXPECT_NEAR(mean, kNormMean, 0.01);
            EXPECT_GT(std, 0.0);  // noise, not a constant
            EXPECT_LT(std, 0.05);
        } else {
            EXPECT_NEAR(mean, 0.0, 0.002);
            EXPECT_NEAR(std, kWeightStd, 0.15 * kWeightStd);  // quantization error is a few percent
        }
    }
}

TEST(SynthCommand, SameSeedSameBytesWhateverTheThreadCount) {
    const auto dir = testing::scratch_dir();
    const auto a = synth(kSmallDims + " --seed 5 --threads 1", dir, "a.gguf");
    const auto b = synth(kSmallDims + " --seed 5 --threads 3", dir, "b.gguf");
    const auto c = synth(kSmallDims + " --seed 6", dir, "c.gguf");
    const std::string bytes_a = testing::slurp(a);
    ASSERT_GT(bytes_a.size(), 1000000u);
    EXPECT_TRUE(bytes_a == testing::slurp(b));
    const std::string bytes_c = testing::slurp(c);
    ASSERT_EQ(bytes_a.size(), bytes_c.size());  // only the weights (and the recorded seed) differ
    EXPECT_FALSE(bytes_a == bytes_c);
    const gguf::File fa = gguf::File::open(a);
    const gguf::File fc = gguf::File::open(c);
    const auto* ta = fa.find_tensor("blk.1.ffn_up.weight");
    const auto* tc = fc.find_tensor("blk.1.ffn_up.weight");
    ASSERT_TRUE(ta && tc);
    const auto da = fa.tensor_data(*ta);
    const auto dc = fc.tensor_data(*tc);
    EXPECT_FALSE(std::equal(da.begin(), da.end(), dc.begin(), dc.end()));
}

TEST(SynthCommand, ExplicitDimensionsWithoutAShape) {
    const auto dir = testing::scratch_dir();
    const auto path = synth(kSmallDims + " --type Q8_0 --untied", dir, "custom.gguf");
    const gguf::File f = gguf::File::open(path);
    EXPECT_EQ(f.get_uint("llama.embedding_length"), 256u);
    EXPECT_EQ(f.get_uint("llama.feed_forward_length"), 512u);
    EXPECT_EQ(f.get_uint("llama.block_count"), 2u);
    EXPECT_EQ(f.get_uint("llama.attention.head_count"), 4u);
    EXPECT_EQ(f.get_uint("llama.attention.head_count_kv"), 2u);
    EXPECT_EQ(f.get_uint("llama.vocab_size"), 1000u);
    EXPECT_EQ(f.get_uint("llama.context_length"), 512u);
    EXPECT_EQ(f.get_uint("general.file_type"), 7u);
    ASSERT_NE(f.find_tensor("output.weight"), nullptr);
    EXPECT_EQ(f.find_tensor("blk.0.attn_k.weight")->shape, (std::vector<int64_t>{256, 128}));
    EXPECT_EQ(f.find_tensor("blk.0.ffn_up.weight")->type, quant::Type::Q8_0);
    const gguf::Value* tokens = f.find("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    EXPECT_EQ(tokens->as_array()->items.size(), 1000u);

    // A preset with one override.
    const auto wide = synth("--shape tiny --layers 2 --header-only", dir, "wide.gguf");
    const gguf::File w = gguf::File::open(wide);
    EXPECT_EQ(w.get_uint("llama.block_count"), 2u);
    EXPECT_EQ(w.get_uint("llama.embedding_length"), 256u);
    EXPECT_EQ(w.find_tensor("output.weight"), nullptr);  // tiny is tied
}

TEST(SynthCommand, CopiesTheTokenizerOfAVocabFile) {
    const auto vocab = testing::shared("vocab/ggml-vocab-llama-spm.gguf");
    TANDEM_REQUIRE_SHARED(vocab);
    const auto dir = testing::scratch_dir();
    const auto path = synth("--shape tiny --header-only --vocab " + shell_quote(vocab.string()), dir, "v.gguf");
    const gguf::File f = gguf::File::open(path);
    const gguf::File v = gguf::File::open(vocab);
    for (const auto& kv : v.metadata()) {
        if (kv.key.rfind("tokenizer.", 0) != 0) continue;
        const gguf::Value* copied = f.find(kv.key);
        ASSERT_NE(copied, nullptr) << kv.key;
        EXPECT_EQ(gguf::to_display_string(*copied, 64), gguf::to_display_string(kv.value, 64)) << kv.key;
    }
    EXPECT_EQ(f.get_uint("llama.vocab_size"), 32000u);

    expect_one_line_error(run_tandem("synth --shape tiny --header-only --vocab-size 1000 --vocab " +
                                         shell_quote(vocab.string()) + " -o " + shell_quote((dir / "x.gguf").string()),
                                     dir),
                          "conflicts");
}

TEST(SynthCommand, BadArgumentsAreOneLineErrors) {
    const auto dir = testing::scratch_dir();
    const std::string out = " -o " + shell_quote((dir / "bad.gguf").string());
    expect_one_line_error(run_tandem("synth --shape llama5-9000b" + out, dir), "unknown shape");
    expect_one_line_error(run_tandem("synth --shape tiny --heads 7" + out, dir), "does not divide");
    expect_one_line_error(run_tandem("synth --shape tiny --kv-heads 3" + out, dir), "does not divide");
    expect_one_line_error(run_tandem("synth --shape tiny --type Q9_X" + out, dir), "unknown --type");
    expect_one_line_error(run_tandem("synth --embd 256 --ff 512" + out, dir), "required");
    expect_one_line_error(run_tandem("synth --shape tiny --vocab-size 10" + out, dir), "at least");
    expect_one_line_error(run_tandem("synth --shape tiny --embd 100 --heads 4" + out, dir), "even");  // head_dim 25
    EXPECT_FALSE(std::filesystem::exists(dir / "bad.gguf"));
}

}  // namespace
}  // namespace tandem
