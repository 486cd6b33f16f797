// `tandem synth` and the Llama shape tables behind it. The header-only
// sizes are checked against real Q4_K_M files of the same models, which is
// what makes synthetic files a valid stand-in for planning; the small full
// files are checked for content, reproducibility and error handling.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_shapes.h"
#include "runtime/model/model_spec.h"
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
    for (const auto& p : model::model_presets()) {
        SCOPED_TRACE(p.name);
        EXPECT_NO_THROW(model::validate_shape(p));
        EXPECT_EQ(model::find_preset(p.name), &p);
        if (p.arch == "llama" && p.n_expert == 0) {
            EXPECT_EQ(model::model_tensors(p).size(), static_cast<size_t>(p.n_layer) * 9 + (p.tied_embeddings ? 2 : 3));
        }
    }
    EXPECT_EQ(model::find_preset("llama5-9000b"), nullptr);
    // Published parameter counts of the real models.
    auto params = [](const char* name) { return static_cast<double>(model::param_count(*model::find_preset(name))); };
    EXPECT_NEAR(params("llama-1b"), 1.100e9, 0.01e9);
    EXPECT_NEAR(params("llama2-7b"), 6.738e9, 0.01e9);
    EXPECT_NEAR(params("llama3-8b"), 8.030e9, 0.01e9);
    EXPECT_NEAR(params("llama2-13b"), 13.016e9, 0.01e9);
    EXPECT_NEAR(params("llama3-70b"), 70.554e9, 0.01e9);
    EXPECT_NEAR(params("llama3-405b"), 405.85e9, 0.05e9);  // Meta: 405B (405,853,388,800 with the untied head)
    // Model cards: Phi-3-mini 3.8B, Mixtral 46.7B, Qwen2.5-72B 72.7B,
    // Qwen3-30B-A3B 30.5B, Qwen3-235B-A22B 235B.
    EXPECT_NEAR(params("phi3-mini"), 3.821e9, 0.01e9);
    EXPECT_NEAR(params("mixtral-8x7b"), 46.70e9, 0.05e9);
    EXPECT_NEAR(params("qwen2.5-72b"), 72.71e9, 0.05e9);
    EXPECT_NEAR(params("qwen3-30b-a3b"), 30.53e9, 0.05e9);
    EXPECT_NEAR(params("qwen3-235b-a22b"), 235.09e9, 0.2e9);
    // gpt-oss model card: 20.9B and 116.8B parameters.
    EXPECT_NEAR(params("gpt-oss-20b"), 20.91e9, 0.05e9);
    EXPECT_NEAR(params("gpt-oss-120b"), 116.83e9, 0.2e9);
    // GLM-4.5-Air: 106B (the model card's count, without its NextN block).
    EXPECT_NEAR(params("glm-4.5-air"), 106e9, 0.03 * 106e9);
    // DeepSeek-V3: 671B (the model card's count without its MTP block).
    EXPECT_NEAR(params("deepseek-v3"), 671e9, 0.03 * 671e9);
    // Made up to be 2-3B.
    EXPECT_GE(params("deepseek2-small"), 2e9);
    EXPECT_LE(params("deepseek2-small"), 3e9);
}

TEST(ModelShapes, TensorListFollowsLlamaCppNaming) {
    const auto& s = *model::find_preset("llama3-8b");
    const auto tensors = model::model_tensors(s);
    ASSERT_EQ(tensors.size(), 32u * 9 + 3);
    EXPECT_EQ(tensors.front().name, "token_embd.weight");
    EXPECT_EQ(tensors.front().shape, (std::vector<int64_t>{4096, 128256}));
    EXPECT_EQ(tensors[1].name, "blk.0.attn_norm.weight");
    EXPECT_EQ(tensors[1].shape, (std::vector<int64_t>{4096}));
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

// name -> shape of one preset's tensors.
std::map<std::string, std::vector<int64_t>> shapes_of(const char* preset) {
    std::map<std::string, std::vector<int64_t>> out;
    for (auto& t : model::model_tensors(*model::find_preset(preset))) out[t.name] = t.shape;
    return out;
}

using Dims = std::vector<int64_t>;

TEST(ModelShapes, EachArchitectureHasLlamaCppsTensors) {
    // Qwen2.5: Llama's layer plus Q/K/V biases; 80 x 12 + 3.
    auto q = shapes_of("qwen2.5-72b");
    EXPECT_EQ(q.size(), 80u * 12 + 3);
    EXPECT_EQ(q.at("blk.79.attn_q.bias"), Dims{8192});
    EXPECT_EQ(q.at("blk.0.attn_k.bias"), Dims{1024});
    EXPECT_EQ(q.at("blk.0.attn_v.weight"), (Dims{8192, 1024}));
    EXPECT_EQ(q.at("blk.0.ffn_down.weight"), (Dims{29568, 8192}));
    EXPECT_EQ(q.at("output.weight"), (Dims{8192, 152064}));

    // Qwen3 MoE: Q/K norms of head_dim, a router and 3-D experts; the head
    // size (128) is not n_embd / n_head (64).
    auto m = shapes_of("qwen3-30b-a3b");
    EXPECT_EQ(m.size(), 48u * 12 + 3);
    EXPECT_EQ(m.at("blk.0.attn_q.weight"), (Dims{2048, 4096}));
    EXPECT_EQ(m.at("blk.0.attn_k.weight"), (Dims{2048, 512}));
    EXPECT_EQ(m.at("blk.0.attn_output.weight"), (Dims{4096, 2048}));
    EXPECT_EQ(m.at("blk.0.attn_q_norm.weight"), Dims{128});
    EXPECT_EQ(m.at("blk.0.attn_k_norm.weight"), Dims{128});
    EXPECT_EQ(m.at("blk.47.ffn_gate_inp.weight"), (Dims{2048, 128}));
    EXPECT_EQ(m.at("blk.47.ffn_gate_exps.weight"), (Dims{2048, 768, 128}));
    EXPECT_EQ(m.at("blk.47.ffn_up_exps.weight"), (Dims{2048, 768, 128}));
    EXPECT_EQ(m.at("blk.47.ffn_down_exps.weight"), (Dims{768, 2048, 128}));
    EXPECT_EQ(m.count("blk.0.ffn_down.weight"), 0u);

    // Mixtral: the llama architecture, experts of n_ff rows, no dense FFN.
    auto x = shapes_of("mixtral-8x7b");
    EXPECT_EQ(x.size(), 32u * 10 + 3);
    EXPECT_EQ(x.at("blk.0.ffn_gate_inp.weight"), (Dims{4096, 8}));
    EXPECT_EQ(x.at("blk.31.ffn_down_exps.weight"), (Dims{14336, 4096, 8}));
    EXPECT_EQ(x.count("blk.0.ffn_gate.weight"), 0u);
    EXPECT_EQ(x.count("blk.0.attn_q_norm.weight"), 0u);

    // Phi-3: fused Q|K|V and gate|up.
    auto p = shapes_of("phi3-mini");
    EXPECT_EQ(p.size(), 32u * 6 + 3);
    EXPECT_EQ(p.at("blk.0.attn_qkv.weight"), (Dims{3072, 9216}));
    EXPECT_EQ(p.at("blk.0.ffn_up.weight"), (Dims{3072, 16384}));
    EXPECT_EQ(p.at("blk.0.ffn_down.weight"), (Dims{8192, 3072}));
    EXPECT_EQ(p.count("blk.0.attn_q.weight"), 0u);
}

TEST(ModelShapes, ValidateRejectsImpossibleShapes) {
    const auto rejects = [](const char* preset, auto change, const std::string& words) {
        model::ModelShape s = *model::find_preset(preset);
        change(s);
        try {
            model::validate_shape(s);
            ADD_FAILURE() << preset << ": accepted, expected an error with '" << words << "'";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
        }
    };
    rejects("tiny", [](auto& s) { s.n_head = 7; }, "does not divide");
    rejects("tiny", [](auto& s) { s.n_head_kv = 3; }, "does not divide");
    rejects("tiny", [](auto& s) { s.n_layer = 0; }, "must be positive");
    rejects("tiny", [](auto& s) { s.arch = "gpt5"; }, "not supported");
    rejects("tiny", [](auto& s) { s.n_expert = 8; }, "n_expert_used");
    rejects("phi3-mini", [](auto& s) { s.n_expert = 8, s.n_expert_used = 2; }, "no mixture-of-experts");
    rejects("moe-small", [](auto& s) { s.n_expert = 0; }, "mixture of experts");
    rejects("moe-small", [](auto& s) { s.n_expert_used = 33; }, "n_expert_used");
    rejects("moe-small", [](auto& s) { s.head_dim = 63; }, "even");
    rejects("tiny", [](auto& s) { s.arch = "gemma2"; }, "sliding window");
    // Multi-head latent attention and DeepSeek's routing.
    rejects("moe-small", [](auto& s) { s.kv_lora_rank = 512; }, "no multi-head latent attention");
    rejects("deepseek2-small", [](auto& s) { s.kv_lora_rank = 0; }, "kv_lora_rank must be positive");
    rejects("deepseek2-small", [](auto& s) { s.n_head_kv = 16; }, "n_head_kv");
    rejects("deepseek2-small", [](auto& s) { s.n_rot = 63; }, "even");
    rejects("deepseek2-small", [](auto& s) { s.n_rot = 0; }, "n_rot");
    rejects("deepseek2-small", [](auto& s) { s.qk_nope_head_dim = 0; }, "qk_nope_head_dim");
    rejects("deepseek2-small", [](auto& s) { s.q_lora_rank = 0; }, "q_lora_rank");
    rejects("deepseek2-small", [](auto& s) { s.v_head_dim = 0; }, "v_head_dim");
    rejects("deepseek2-small", [](auto& s) { s.kv_lora_rank = 4096; }, "kv_lora_rank");
    rejects("deepseek2-small", [](auto& s) { s.head_dim = 128; }, "head_dim");
    rejects("deepseek2-small", [](auto& s) { s.n_expert_groups = 7; }, "does not divide");
    rejects("deepseek2-small", [](auto& s) { s.n_expert_groups_used = 8; }, "n_expert_groups_used");
    rejects("deepseek2-small", [](auto& s) { s.n_expert_groups_used = 1, s.n_expert_used = 9; }, "within the used");
    rejects("deepseek2-small", [](auto& s) { s.n_dense_lead = 11; }, "n_dense_lead");
    rejects("deepseek2-small", [](auto& s) { s.expert_weights_scale = 0.0; }, "expert_weights_scale");
    rejects("glm-4.5-air", [](auto& s) { s.yarn_mscale_all_dim = 1.0; }, "yarn_mscale_all_dim");
    // head_dim frees n_head from dividing n_embd.
    model::ModelShape s = *model::find_preset("moe-small");
    s.n_head = 24;
    s.n_head_kv = 4;
    EXPECT_NO_THROW(model::validate_shape(s));
}

// The geometry of the deepseek2 file llama.cpp wrote (../shared/models).
model::ModelShape shared_deepseek2_shape() {
    model::ModelShape s = *model::find_preset("deepseek2-small");
    s.n_embd = 256;
    s.n_ff = 512;
    s.n_layer = 4;
    s.n_head = 4;
    s.n_vocab = 1024;
    s.n_dense_lead = 1;
    s.n_expert = 8;
    s.n_expert_used = 3;
    s.n_ff_exp = 64;
    s.n_expert_groups = 4;
    s.n_expert_groups_used = 2;
    s.q_lora_rank = 192;
    s.kv_lora_rank = 128;
    s.qk_nope_head_dim = 64;
    s.n_rot = 32;
    s.v_head_dim = 64;
    return s;
}

// MLA's keys (names, types, values) and tensors (names, shapes) are those
// of a file llama.cpp wrote: nothing more, nothing less.
TEST(ModelShapes, Deepseek2KeysAndTensorsAreLlamaCpps) {
    const auto path = testing::shared("models/synth-deepseek2-Q8_0.gguf");
    TANDEM_REQUIRE_SHARED(path);
    const gguf::File f = gguf::File::open(path);
    const model::ModelShape s = shared_deepseek2_shape();
    ASSERT_NO_THROW(model::validate_shape(s));

    std::map<std::string, gguf::Value> ours;
    for (auto& kv : model::model_hparams(s)) ours[kv.key] = kv.value;
    size_t n_file = 0;
    for (const auto& kv : f.metadata()) {
        if (!kv.key.starts_with("deepseek2.") && kv.key != "general.architecture") continue;
        ++n_file;
        const auto it = ours.find(kv.key);
        ASSERT_NE(it, ours.end()) << kv.key;
        EXPECT_TRUE(it->second == kv.value) << kv.key << ": " << gguf::to_display_string(it->second)
                                            << ", llama.cpp " << gguf::to_display_string(kv.value);
    }
    EXPECT_EQ(ours.size(), n_file);

    const auto tensors = model::model_tensors(s);
    EXPECT_EQ(tensors.size(), f.tensors().size());
    for (const auto& t : tensors) {
        const gguf::TensorInfo* ft = f.find_tensor(t.name);
        ASSERT_NE(ft, nullptr) << t.name;
        EXPECT_EQ(ft->shape, t.shape) << t.name;
    }
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

// ---- header-only files of every architecture, through the model loader -------------

struct PresetCase {
    const char* shape;
    const char* arch;
    int64_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    int64_t n_expert, n_expert_used, n_ff_exp;
    double rope_base, rms_eps;
    double real_bytes;  // file size of a public Q4_K_M GGUF of that model (0: none)
};

// Published Q4_K_M files (bartowski / TheBloke / Qwen / microsoft
// repositories, from memory; the metadata is a few MB of each):
// Qwen2.5-72B-Instruct 47.42 GB, Mixtral-8x7B-v0.1 28.4 GB (26.4 GiB), Qwen3-30B-A3B
// 18.6 GB, Qwen3-235B-A22B 142.7 GB, Phi-3-mini-4k-instruct 2.39 GB.
constexpr PresetCase kPresetCases[] = {
    {"qwen2.5-72b", "qwen2", 80, 8192, 64, 8, 128, 29568, 152064, 32768, 0, 0, 0, 1e6, 1e-6, 47.42e9},
    {"mixtral-8x7b", "llama", 32, 4096, 32, 8, 128, 14336, 32000, 32768, 8, 2, 14336, 1e6, 1e-5, 28.4e9},
    {"qwen3-30b-a3b", "qwen3moe", 48, 2048, 32, 4, 128, 6144, 151936, 40960, 128, 8, 768, 1e6, 1e-6, 18.6e9},
    {"qwen3-235b-a22b", "qwen3moe", 94, 4096, 64, 4, 128, 12288, 151936, 40960, 128, 8, 1536, 1e6, 1e-6, 142.7e9},
    {"phi3-mini", "phi3", 32, 3072, 32, 32, 96, 8192, 32064, 4096, 0, 0, 0, 1e4, 1e-5, 2.39e9},
    {"moe-small", "qwen3moe", 16, 2048, 16, 4, 128, 6144, 32000, 40960, 32, 4, 768, 1e6, 1e-6, 0},
};

class SynthPreset : public ::testing::TestWithParam<PresetCase> {};

TEST_P(SynthPreset, HeaderOnlyLoadsThroughTheModelSpec) {
    const PresetCase& want = GetParam();
    const auto dir = testing::scratch_dir();
    const auto path = synth(std::string("--shape ") + want.shape + " --type Q4_K_M --header-only", dir, "h.gguf");
    const gguf::File f = gguf::File::open(path);
    EXPECT_TRUE(f.header_only());
    EXPECT_LT(f.file_size(), 16u << 20);
    const model::ModelSpec spec = model::load_model_spec(f);  // throws on any missing or misshapen tensor
    EXPECT_EQ(spec.arch->name, want.arch);
    const model::HParams& hp = spec.hp;
    EXPECT_EQ(hp.n_layer, want.n_layer);
    EXPECT_EQ(hp.n_embd, want.n_embd);
    EXPECT_EQ(hp.n_head, want.n_head);
    EXPECT_EQ(hp.n_head_kv, want.n_head_kv);
    EXPECT_EQ(hp.head_dim_k, want.head_dim);
    EXPECT_EQ(hp.head_dim_v, want.head_dim);
    EXPECT_EQ(hp.n_rot, want.head_dim);
    EXPECT_EQ(hp.n_ff, want.n_ff);
    EXPECT_EQ(hp.n_vocab, want.n_vocab);
    EXPECT_EQ(hp.n_ctx_train, want.n_ctx);
    EXPECT_EQ(hp.n_expert, want.n_expert);
    EXPECT_EQ(hp.n_expert_used, want.n_expert_used);
    if (want.n_expert > 0) {
        EXPECT_EQ(hp.n_ff_exp, want.n_ff_exp);
    }
    EXPECT_DOUBLE_EQ(hp.rope_base, static_cast<double>(static_cast<float>(want.rope_base)));
    EXPECT_DOUBLE_EQ(hp.rms_eps, static_cast<double>(static_cast<float>(want.rms_eps)));
    EXPECT_FALSE(spec.tied_output());
    // Every tensor in the file is bound to a role: nothing extra was written.
    size_t bound = 0;
    for (const auto* t : spec.globals) bound += t != nullptr;
    for (const auto& layer : spec.layers) {
        for (const auto* t : layer.tensors) bound += t != nullptr;
        EXPECT_EQ(layer.has_experts(), want.n_expert > 0);
    }
    EXPECT_EQ(bound, f.tensors().size());
    EXPECT_EQ(f.find_tensor("output.weight")->type, quant::Type::Q6_K);
    if (want.real_bytes > 0) {
        const double total = static_cast<double>(f.total_tensor_bytes());
        EXPECT_NEAR(total, want.real_bytes, 0.03 * want.real_bytes) << total;
    }
}

INSTANTIATE_TEST_SUITE_P(Presets, SynthPreset, ::testing::ValuesIn(kPresetCases), [](const auto& info) {
    std::string n = info.param.shape;
    for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    return n;
});

// DeepSeek-V3 at full size: MLA's hyperparameters, the dense lead layers,
// the routing and DeepSeek's YaRN read back as the preset says, every
// tensor bound.
TEST(SynthCommand, HeaderOnlyDeepseekV3LoadsThroughTheModelSpec) {
    const auto dir = testing::scratch_dir();
    const gguf::File f = gguf::File::open(synth("--shape deepseek-v3 --type Q4_K_M --header-only", dir, "d.gguf"));
    EXPECT_LT(f.file_size(), 16u << 20);
    const model::ModelSpec spec = model::load_model_spec(f);
    EXPECT_EQ(spec.arch->name, "deepseek2");
    const model::HParams& hp = spec.hp;
    EXPECT_EQ(hp.n_layer, 61);
    EXPECT_EQ(hp.n_head, 128);
    EXPECT_EQ(hp.n_head_kv, 1);
    EXPECT_EQ(hp.n_lora_q, 1536);
    EXPECT_EQ(hp.n_lora_kv, 512);
    EXPECT_EQ(hp.head_dim_k, 512 + 64);
    EXPECT_EQ(hp.head_dim_v, 512);
    EXPECT_EQ(hp.head_dim_k_mla, 128 + 64);
    EXPECT_EQ(hp.head_dim_v_mla, 128);
    EXPECT_EQ(hp.n_rot, 64);
    EXPECT_EQ(hp.n_layer_dense_lead, 3);
    EXPECT_EQ(hp.n_expert, 256);
    EXPECT_EQ(hp.n_expert_used, 8);
    EXPECT_EQ(hp.n_ff_exp, 2048);
    EXPECT_EQ(hp.n_expert_shared, 1);
    EXPECT_EQ(hp.n_expert_groups, 8);
    EXPECT_EQ(hp.n_expert_groups_used, 4);
    EXPECT_TRUE(hp.sigmoid_gating());
    EXPECT_TRUE(hp.expert_weights_norm);
    EXPECT_DOUBLE_EQ(hp.expert_weights_scale, 2.5);
    EXPECT_NEAR(1.0 / hp.rope_freq_scale, 40.0, 1e-6);
    EXPECT_EQ(hp.rope_n_ctx_orig, 4096);
    EXPECT_NEAR(hp.rope_yarn_log_mul, 1.0, 1e-6);  // mscale_all_dim
    size_t bound = 0;
    for (const auto* t : spec.globals) bound += t != nullptr;
    for (const auto& layer : spec.layers) {
        for (const auto* t : layer.tensors) bound += t != nullptr;
    }
    EXPECT_EQ(bound, f.tensors().size());
    EXPECT_FALSE(spec.layers[2].has_experts());
    EXPECT_TRUE(spec.layers[3].has_experts());
    EXPECT_EQ(f.find_tensor("blk.3.exp_probs_b.bias")->shape, (std::vector<int64_t>{256}));
    EXPECT_EQ(f.find_tensor("blk.3.attn_k_b.weight")->shape, (std::vector<int64_t>{128, 512, 128}));
    EXPECT_EQ(f.find_tensor("blk.3.attn_v_b.weight")->shape, (std::vector<int64_t>{512, 128, 128}));
    EXPECT_EQ(f.find_tensor("blk.3.attn_kv_a_mqa.weight")->shape, (std::vector<int64_t>{7168, 576}));
    EXPECT_EQ(f.find_tensor("blk.2.exp_probs_b.bias"), nullptr);
}

// llama.cpp's keys per architecture: the Llama converter adds vocab_size
// and rope.dimension_count, Phi-3's the latter, the Qwen ones neither; the
// head size is written only where config.json has head_dim (Qwen3).
TEST(SynthCommand, WritesTheConvertersKeysPerArchitecture) {
    const auto dir = testing::scratch_dir();
    const gguf::File mixtral = gguf::File::open(synth("--shape mixtral-8x7b --header-only", dir, "x.gguf"));
    EXPECT_EQ(mixtral.get_uint("llama.expert_count"), 8u);
    EXPECT_EQ(mixtral.get_uint("llama.expert_used_count"), 2u);
    EXPECT_EQ(mixtral.get_uint("llama.vocab_size"), 32000u);
    EXPECT_EQ(mixtral.get_uint("llama.rope.dimension_count"), 128u);
    EXPECT_EQ(mixtral.find("llama.expert_feed_forward_length"), nullptr);
    EXPECT_EQ(mixtral.find("llama.attention.key_length"), nullptr);

    const gguf::File qwen3 = gguf::File::open(synth("--shape qwen3-30b-a3b --header-only", dir, "q.gguf"));
    EXPECT_EQ(qwen3.architecture(), "qwen3moe");
    EXPECT_EQ(qwen3.get_uint("qwen3moe.expert_feed_forward_length"), 768u);
    EXPECT_EQ(qwen3.get_uint("qwen3moe.attention.key_length"), 128u);
    EXPECT_EQ(qwen3.get_uint("qwen3moe.attention.value_length"), 128u);
    EXPECT_EQ(qwen3.find("qwen3moe.vocab_size"), nullptr);
    EXPECT_EQ(qwen3.find("qwen3moe.rope.dimension_count"), nullptr);

    const gguf::File qwen2 = gguf::File::open(synth("--shape qwen2.5-72b --header-only", dir, "q2.gguf"));
    EXPECT_EQ(qwen2.find("qwen2.attention.key_length"), nullptr);
    EXPECT_EQ(qwen2.find("qwen2.expert_count"), nullptr);
    EXPECT_EQ(qwen2.find_tensor("blk.3.attn_v.bias")->type, quant::Type::F32);

    const gguf::File phi3 = gguf::File::open(synth("--shape phi3-mini --header-only", dir, "p.gguf"));
    EXPECT_EQ(phi3.get_uint("phi3.rope.dimension_count"), 96u);
    EXPECT_EQ(phi3.get_uint("phi3.attention.sliding_window"), 2047u);
    EXPECT_EQ(phi3.find("phi3.vocab_size"), nullptr);

    // gpt-oss-20b in llama-quantize's MXFP4_MOE: YaRN keys, the pre-FFN
    // norm as post_attention_norm, MXFP4 experts, Q8_0 elsewhere, F32
    // biases and sinks; 12.10 GB as the published file.
    const gguf::File oss = gguf::File::open(synth("--shape gpt-oss-20b --type MXFP4_MOE --header-only", dir, "o.gguf"));
    EXPECT_EQ(oss.find_string("gpt-oss.rope.scaling.type"), "yarn");
    EXPECT_EQ(oss.find_float("gpt-oss.rope.scaling.factor"), 32.0);
    EXPECT_EQ(oss.get_uint("gpt-oss.rope.scaling.original_context_length"), 4096u);
    EXPECT_EQ(oss.get_uint("gpt-oss.attention.sliding_window"), 128u);
    EXPECT_NE(oss.find_tensor("blk.0.post_attention_norm.weight"), nullptr);
    EXPECT_EQ(oss.find_tensor("blk.0.ffn_norm.weight"), nullptr);
    EXPECT_EQ(oss.find_tensor("blk.5.ffn_down_exps.weight")->type, quant::Type::MXFP4);
    EXPECT_EQ(oss.find_tensor("blk.5.attn_q.weight")->type, quant::Type::Q8_0);
    EXPECT_EQ(oss.find_tensor("output.weight")->type, quant::Type::Q8_0);
    EXPECT_EQ(oss.find_tensor("blk.5.ffn_down_exps.bias")->type, quant::Type::F32);
    EXPECT_EQ(oss.find_tensor("blk.5.attn_sinks.weight")->type, quant::Type::F32);
    uint64_t bytes = 0;
    for (const auto& t : oss.tensors()) bytes += t.n_bytes;
    EXPECT_NEAR(static_cast<double>(bytes), 12.10e9, 0.05e9);

    // GLM-4.5-Air: a dense first layer, then routed and shared experts.
    const gguf::File glm = gguf::File::open(synth("--shape glm-4.5-air --header-only", dir, "g.gguf"));
    EXPECT_EQ(glm.get_uint("glm4moe.leading_dense_block_count"), 1u);
    EXPECT_EQ(glm.get_uint("glm4moe.expert_shared_count"), 1u);
    EXPECT_EQ(glm.get_uint("glm4moe.expert_gating_func"), 2u);
    EXPECT_EQ(glm.get_uint("glm4moe.rope.dimension_count"), 64u);
    EXPECT_NE(glm.find_tensor("blk.0.ffn_down.weight"), nullptr);
    EXPECT_EQ(glm.find_tensor("blk.0.ffn_down_exps.weight"), nullptr);
    EXPECT_NE(glm.find_tensor("blk.1.ffn_down_shexp.weight"), nullptr);
}

// moe-small at Q4_K_M: the per-tensor types of llama.cpp's mix for a
// 32-expert model (not 8, so attention gets no Mixtral bumps), and a file
// of 1-2 GB.
TEST(SynthCommand, MoeSmallQ4KMFollowsTheMix) {
    const auto dir = testing::scratch_dir();
    const gguf::File f = gguf::File::open(synth("--shape moe-small --type Q4_K_M --header-only", dir, "m.gguf"));
    auto type = [&](const std::string& name) {
        const gguf::TensorInfo* t = f.find_tensor(name);
        EXPECT_NE(t, nullptr) << name;
        return t ? std::string(quant::traits(t->type).name) : std::string("missing");
    };
    // use_more_bits over 16 layers: 0, 1, 14, 15 and every third from 4.
    const std::set<int64_t> more = {0, 1, 4, 7, 10, 13, 14, 15};
    for (int64_t il = 0; il < 16; ++il) {
        SCOPED_TRACE(il);
        const std::string b = "blk." + std::to_string(il) + ".";
        const char* more_bits = more.count(il) ? "Q6_K" : "Q4_K";
        EXPECT_EQ(type(b + "ffn_down_exps.weight"), more_bits);
        EXPECT_EQ(type(b + "attn_v.weight"), more_bits);
        EXPECT_EQ(type(b + "ffn_gate_exps.weight"), "Q4_K");
        EXPECT_EQ(type(b + "ffn_up_exps.weight"), "Q4_K");
        EXPECT_EQ(type(b + "attn_k.weight"), "Q4_K");
        EXPECT_EQ(type(b + "attn_output.weight"), "Q4_K");
        EXPECT_EQ(type(b + "ffn_gate_inp.weight"), "F32");
        EXPECT_EQ(type(b + "attn_q_norm.weight"), "F32");
    }
    EXPECT_EQ(type("token_embd.weight"), "Q4_K");
    EXPECT_EQ(type("output.weight"), "Q6_K");
    const uint64_t bytes = f.total_tensor_bytes();
    EXPECT_GT(bytes, 1'000'000'000u);
    EXPECT_LT(bytes, 2'000'000'000u);
}

// A shrunken moe-small with real data (8 experts of 256 rows: seconds, not
// minutes): 3-D expert tensors written, loaded and read back.
TEST(SynthCommand, MoeWithDataLoadsAndHoldsExpertWeights) {
    const auto dir = testing::scratch_dir();
    const auto path = synth("--shape moe-small --layers 2 --embd 256 --experts 8 --experts-used 2 --expert-ff 256 "
                            "--vocab-size 1000 --ctx 512 --seed 3",
                            dir, "m.gguf");
    const gguf::File f = gguf::File::open(path);
    ASSERT_FALSE(f.header_only());
    const model::ModelSpec spec = model::load_model_spec(f);
    EXPECT_EQ(spec.hp.n_expert, 8);
    EXPECT_EQ(spec.hp.n_expert_used, 2);
    EXPECT_EQ(spec.hp.n_ff_exp, 256);
    const gguf::TensorInfo* down = spec.layers[1].get(model::LayerTensor::FfnDownExps);
    ASSERT_NE(down, nullptr);
    EXPECT_EQ(down->shape, (std::vector<int64_t>{256, 256, 8}));
    const auto bytes = f.tensor_data(*down);
    ASSERT_EQ(bytes.size(), down->n_bytes);
    // The last expert's last row is random weights too, not zeros.
    const int64_t n = down->row_length();
    const uint64_t row_bytes = quant::row_bytes(down->type, n).value();
    std::vector<float> row(static_cast<size_t>(n));
    quant::dequantize_row(down->type, bytes.data() + (static_cast<uint64_t>(down->n_rows()) - 1) * row_bytes,
                          row.data(), n);
    double sum2 = 0;
    for (float v : row) sum2 += static_cast<double>(v) * v;
    EXPECT_NEAR(std::sqrt(sum2 / static_cast<double>(n)), kWeightStd, 0.2 * kWeightStd);
    const auto* k_norm = spec.layers[0].get(model::LayerTensor::AttnKNorm);
    ASSERT_NE(k_norm, nullptr);
    EXPECT_EQ(k_norm->shape, (std::vector<int64_t>{128}));
}

TEST(SynthCommand, HelpListsThePresets) {
    const auto dir = testing::scratch_dir();
    const auto r = run_tandem("synth --help", dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const auto& p : model::model_presets()) {
        EXPECT_NE(r.out.find(p.name), std::string::npos) << p.name;
        EXPECT_NE(r.out.find(p.arch), std::string::npos) << p.arch;
    }
    EXPECT_NE(r.out.find("128 experts (8 used)"), std::string::npos) << r.out;
}

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
