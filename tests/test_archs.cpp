// The architectures of ../shared's synth-* files through the one recipe:
// on the stand-in device every split (each ngl, the expert flags, experts
// split from their router) gives the all-CPU logits bit for bit, prompt and
// decode steps, with several sequences in one batch; and files that break
// an architecture's rules get one line naming the key or tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "runtime/common/error.h"
#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/gguf/gguf_writer.h"
#include "runtime/model/device_layout.h"
#include "runtime/model/model_spec.h"
#include "runtime/placement/placement.h"
#include "tests/split_scenario.h"
#include "tests/test_paths.h"

namespace {

namespace fs = std::filesystem;
using tandem::testing::expect_same_bits;
using tandem::testing::model_test_name;
using tandem::testing::open_split_model;
using tandem::testing::run_split_scenario;
using tandem::testing::shared;
using tandem::testing::split_base_options;
using tandem::testing::SplitModel;
using tandem::testing::SplitOutcome;

const std::vector<std::string> kArchModels = {"synth-qwen2-Q8_0", "synth-qwen3-Q8_0",  "synth-qwen3moe-Q8_0",
                                              "synth-phi3-Q8_0",  "synth-gemma2-Q8_0", "synth-mixtral-Q8_0",
                                              "synth-glm4moe-Q8_0", "synth-gpt-oss-Q8_0", "synth-deepseek2-Q8_0"};

class ArchSplit : public ::testing::TestWithParam<std::string> {};

TEST_P(ArchSplit, EveryNglGivesTheCpuLogitsBitForBit) {
    const auto path = shared("models/" + GetParam() + ".gguf");
    TANDEM_REQUIRE_SHARED(path);
    const SplitModel m = open_split_model(path);
    const auto reference = run_split_scenario(m, split_base_options()).logits;
    for (int64_t ngl = 0; ngl <= m.spec.hp.n_layer + 1; ++ngl) {
        SCOPED_TRACE("ngl " + std::to_string(ngl));
        auto opt = split_base_options();
        opt.device = "cpu2";
        opt.n_gpu_layers = ngl;
        const SplitOutcome got = run_split_scenario(m, opt);
        expect_same_bits(got.logits, reference);
        const uint64_t device_weights = got.device_weights.empty() ? 0 : got.device_weights.front();
        tandem::PlacementRequest req;
        req.devices = {"cpu2"};
        req.n_gpu_layers = ngl;
        EXPECT_EQ(device_weights, tandem::place_tensors(m.spec, req).weight_bytes(tandem::kAccelDevice));
    }
}

INSTANTIATE_TEST_SUITE_P(Shared, ArchSplit, ::testing::ValuesIn(kArchModels), model_test_name);

class MoeSplit : public ::testing::TestWithParam<std::string> {};

// llama.cpp's expert flags, and experts parted from their router: the
// route crosses devices with the activations.
TEST_P(MoeSplit, ExpertPlacementsGiveTheCpuLogitsBitForBit) {
    const auto path = shared("models/" + GetParam() + ".gguf");
    TANDEM_REQUIRE_SHARED(path);
    const SplitModel m = open_split_model(path);
    ASSERT_GT(m.spec.hp.n_expert, 0);
    const auto reference = run_split_scenario(m, split_base_options()).logits;
    struct Case {
        const char* what;
        bool cpu_moe;
        int64_t n_cpu_moe;
        const char* ot;
        tandem::model::LayerTensor needs = tandem::model::LayerTensor::FfnGateExps;  // the model has it
    };
    using LT = tandem::model::LayerTensor;
    const Case cases[] = {
        {"--cpu-moe", true, 0, ""},
        {"--n-cpu-moe 1", false, 1, ""},
        {"--n-cpu-moe 2", false, 2, ""},
        {"-ot exps=cpu", false, 0, "exps=cpu"},
        {"the latent's product on the host with the cache, the rest on cpu2", false, 0, "attn_kv_a_mqa=cpu",
         LT::AttnKvAMqa},
        {"the per-head products on the host", false, 0, "attn_[kv]_b=cpu", LT::AttnKB},
        {"down experts on the host, router and gate/up on cpu2", false, 0, "ffn_down_exps=cpu"},
        {"router on the host, experts on cpu2", false, 0, "ffn_gate_inp=cpu"},
        {"the choice's bias on the host, the rest on cpu2", false, 0, "exp_probs_b=cpu", LT::FfnExpProbsB},
        {"the shared expert on the host, the rest on cpu2", false, 0, "shexp=cpu", LT::FfnGateShexp},
        // The expert biases and sinks go where their op runs, whatever -ot says.
        {"the gate experts on the host, their biases asked on cpu2", false, 0,
         "ffn_gate_exps\\.weight=cpu,exps\\.bias=cpu2", LT::FfnGateExpsBias},
        {"the router's bias on the host", false, 0, "ffn_gate_inp\\.bias=cpu", LT::FfnGateInpBias},
        {"the cache on the host with attn_k, the sinks asked on cpu2", false, 0, "attn_k=cpu,attn_sinks=cpu2",
         LT::AttnSinks},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        if (!m.spec.layers.back().get(c.needs)) continue;
        auto opt = split_base_options();
        opt.device = "cpu2";
        opt.n_gpu_layers = m.spec.hp.n_layer + 1;
        opt.cpu_moe = c.cpu_moe;
        opt.n_cpu_moe = c.n_cpu_moe;
        if (*c.ot) opt.overrides = tandem::parse_tensor_overrides(c.ot);
        const SplitOutcome got = run_split_scenario(m, opt);
        expect_same_bits(got.logits, reference);
        const uint64_t device_weights = got.device_weights.empty() ? 0 : got.device_weights.front();
        tandem::PlacementRequest req;
        req.devices = {"cpu2"};
        req.n_gpu_layers = opt.n_gpu_layers;
        req.cpu_moe = c.cpu_moe;
        req.n_cpu_moe = c.n_cpu_moe;
        req.overrides = opt.overrides;
        const auto placement = tandem::place_tensors(m.spec, req);
        EXPECT_EQ(device_weights, placement.weight_bytes(tandem::kAccelDevice));
        // The flags moved weights to the host (--n-cpu-moe N: when one of
        // the first N layers has experts; deepseek2's first is dense).
        tandem::PlacementRequest all_on_device;
        all_on_device.devices = {"cpu2"};
        all_on_device.n_gpu_layers = req.n_gpu_layers;
        const bool moves = c.cpu_moe || *c.ot || m.spec.hp.n_layer_dense_lead < c.n_cpu_moe;
        const uint64_t all = tandem::place_tensors(m.spec, all_on_device).weight_bytes(tandem::kAccelDevice);
        if (moves) {
            EXPECT_LT(device_weights, all);
        } else {
            EXPECT_EQ(device_weights, all);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Shared, MoeSplit,
                         ::testing::Values("synth-qwen3moe-Q8_0", "synth-mixtral-Q8_0", "synth-glm4moe-Q8_0",
                                           "synth-gpt-oss-Q8_0", "synth-deepseek2-Q8_0"),
                         model_test_name);

// gpt-oss's YaRN as llama.cpp's context sets it up: factor 32 from 4096
// positions, ext_factor 1, and an attention factor (1 + 0.1 ln 32) / (1 +
// 0.1 ln 32), which float rounding leaves within an ulp of 1; the router
// weighs the chosen by a softmax over them, unnormalized after.
TEST(ArchHparams, GptOssYarnAndRouterAsLlamaCpp) {
    const auto path = shared("models/synth-gpt-oss-Q8_0.gguf");
    TANDEM_REQUIRE_SHARED(path);
    const SplitModel m = open_split_model(path);
    const auto& hp = m.spec.hp;
    EXPECT_EQ(hp.rope_freq_scale, 1.0 / 32.0);
    EXPECT_EQ(hp.rope_ext_factor, 1.0);
    EXPECT_EQ(hp.rope_n_ctx_orig, 4096);
    EXPECT_NEAR(hp.rope_attn_factor, 1.0, 2e-7);
    EXPECT_EQ(hp.rope_beta_fast, 32.0);
    EXPECT_EQ(hp.rope_beta_slow, 1.0);
    EXPECT_TRUE(hp.softmax_of_chosen());
    EXPECT_FALSE(hp.expert_weights_norm);
    // Layers 0 and 2 slide over 8 positions, 1 and 3 see everything.
    ASSERT_EQ(m.spec.layers.size(), 4u);
    EXPECT_EQ(hp.sliding_window, 8);
    for (size_t il = 0; il < 4; ++il) EXPECT_EQ(m.spec.layers[il].sliding_window, il % 2 == 0) << il;
}

// DeepSeek's latent attention and YaRN as llama.cpp's deepseek2 graph: the
// cache row is the latent and the rotated part (128 + 32, one KV head),
// V the latent; the file's log multiplier 0.1 is the config's 1, the
// rotation's factor cancels YaRN's own 1 + 0.1 ln 40, and each Q.K is
// scaled by (1 + 0.1 ln 40)^2 / sqrt(96).
TEST(ArchHparams, DeepSeek2LatentAttentionAsLlamaCpp) {
    const auto path = shared("models/synth-deepseek2-Q8_0.gguf");
    TANDEM_REQUIRE_SHARED(path);
    const SplitModel m = open_split_model(path);
    const auto& hp = m.spec.hp;
    EXPECT_TRUE(hp.mla());
    EXPECT_EQ(hp.n_lora_q, 192);
    EXPECT_EQ(hp.n_lora_kv, 128);
    EXPECT_EQ(hp.k_dim(), 160);
    EXPECT_EQ(hp.kv_v_dim(), 0);
    EXPECT_EQ(hp.o_dim(), 4 * 64);
    EXPECT_EQ(hp.rope_yarn_log_mul, 1.0);
    const float mscale = 1.0f + 0.1f * std::log(40.0f);
    EXPECT_FLOAT_EQ(static_cast<float>(hp.rope_attn_factor), 1.0f / mscale);
    EXPECT_FLOAT_EQ(static_cast<float>(hp.attn_scale), mscale * mscale / std::sqrt(96.0f));
    EXPECT_EQ(hp.n_layer_dense_lead, 1);
    EXPECT_TRUE(hp.sigmoid_gating());
    EXPECT_EQ(hp.n_expert_groups, 4);
    // Its cache holds K alone: 160 fp16 a token and layer, where a
    // decompressed one would hold 4 heads x (96 + 64).
    EXPECT_EQ(tandem::model::kv_bytes_for_cells(m.spec, 256, 1, tandem::model::kCacheF16),
              tandem::model::kv_layout(160 * 2, 0, 256, 1).bytes);
}

// ---- files that break an architecture's rules --------------------------------

// A header-only copy of `src` with its keys and tensor list edited.
fs::path edited_copy(const fs::path& src, const std::string& name,
                     const std::function<void(std::vector<tandem::gguf::KeyValue>&,
                                              std::vector<tandem::gguf::TensorSpec>&)>& edit) {
    const auto file = tandem::gguf::File::open(src);
    std::vector<tandem::gguf::KeyValue> keys = file.metadata();
    std::vector<tandem::gguf::TensorSpec> tensors;
    for (const auto& t : file.tensors()) tensors.push_back({t.name, t.shape, t.type});
    edit(keys, tensors);
    const fs::path out = fs::temp_directory_path() / ("tandem_archs_" + name + ".gguf");
    tandem::gguf::Writer w(out);
    for (const auto& kv : keys) {
        if (kv.key != "general.alignment") w.set(kv.key, kv.value);
    }
    w.set(std::string(tandem::gguf::kHeaderOnlyKey), tandem::gguf::Value::boolean(true));
    for (auto& t : tensors) w.add_tensor(std::move(t));
    w.finish();
    return out;
}

std::string load_error(const fs::path& path) {
    try {
        const auto file = tandem::gguf::File::open(path);
        (void)tandem::model::load_model_spec(file);
    } catch (const tandem::Error& e) {
        return e.what();
    }
    return "(no error)";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(ArchErrors, EachBrokenRuleIsOneLineNamingItsKeyOrTensor) {
    const auto moe = shared("models/synth-qwen3moe-Q8_0.gguf");
    const auto mixtral = shared("models/synth-mixtral-Q8_0.gguf");
    const auto phi3 = shared("models/synth-phi3-Q8_0.gguf");
    const auto gemma2 = shared("models/synth-gemma2-Q8_0.gguf");
    const auto gpt_oss = shared("models/synth-gpt-oss-Q8_0.gguf");
    const auto deepseek2 = shared("models/synth-deepseek2-Q8_0.gguf");
    TANDEM_REQUIRE_SHARED(gemma2);
    TANDEM_REQUIRE_SHARED(gpt_oss);
    TANDEM_REQUIRE_SHARED(deepseek2);
    TANDEM_REQUIRE_SHARED(moe);
    TANDEM_REQUIRE_SHARED(mixtral);
    TANDEM_REQUIRE_SHARED(phi3);
    using Keys = std::vector<tandem::gguf::KeyValue>;
    using Tensors = std::vector<tandem::gguf::TensorSpec>;
    auto set_key = [](Keys& keys, const std::string& key, tandem::gguf::Value v) {
        for (auto& kv : keys) {
            if (kv.key == key) kv.value = std::move(v);
        }
    };
    auto drop_key = [](Keys& keys, const std::string& key) {
        std::erase_if(keys, [&](const auto& kv) { return kv.key == key; });
    };
    auto tensor = [](Tensors& ts, const std::string& name) -> tandem::gguf::TensorSpec& {
        for (auto& t : ts) {
            if (t.name == name) return t;
        }
        throw std::runtime_error("test: no tensor " + name);
    };
    struct Case {
        const char* what;
        fs::path path;
        std::vector<std::string> expect;
    };
    const Case cases[] = {
        {"unknown architecture",
         edited_copy(moe, "arch", [&](Keys& k, Tensors&) { set_key(k, "general.architecture", tandem::gguf::Value::str("qwen9")); }),
         {"architecture 'qwen9' is not supported", "qwen3moe", "phi3"}},
        {"a missing expert tensor",
         edited_copy(moe, "missing", [&](Keys&, Tensors& t) {
             std::erase_if(t, [](const auto& x) { return x.name == "blk.2.ffn_up_exps.weight"; });
         }),
         {"blk.2.ffn_up_exps.weight", "does not have"}},
        {"an expert tensor with too few experts",
         edited_copy(moe, "shape", [&](Keys&, Tensors& t) { tensor(t, "blk.1.ffn_down_exps.weight").shape = {256, 256, 7}; }),
         {"blk.1.ffn_down_exps.weight", "expected shape [256, 256, 8]", "found [256, 256, 7]"}},
        {"a MoE architecture without expert_count",
         edited_copy(moe, "count", [&](Keys& k, Tensors&) { drop_key(k, "qwen3moe.expert_count"); }),
         {"qwen3moe.expert_count"}},
        {"more experts used than there are",
         edited_copy(moe, "used", [&](Keys& k, Tensors&) { set_key(k, "qwen3moe.expert_used_count", tandem::gguf::Value::u32(9)); }),
         {"qwen3moe.expert_used_count", "[1, 8]", "found 9"}},
        {"llama experts without expert_count",
         edited_copy(mixtral, "llama", [&](Keys& k, Tensors&) { drop_key(k, "llama.expert_count"); }),
         {"ffn_gate_exps.weight", "llama.expert_count is 0 or missing"}},
        {"a NaN RoPE base of the sliding layers",
         edited_copy(gemma2, "swa_base", [&](Keys& k, Tensors&) {
             k.push_back({"gemma2.rope.freq_base_swa", tandem::gguf::Value::f32(std::nanf("")), 0});
         }),
         {"gemma2.rope.freq_base_swa", "expected a positive value", "nan"}},
        {"a sliding window of 0",
         edited_copy(gemma2, "window", [&](Keys& k, Tensors&) { set_key(k, "gemma2.attention.sliding_window", tandem::gguf::Value::u32(0)); }),
         {"gemma2.attention.sliding_window", "found 0"}},
        {"a fused QKV of the wrong width",
         edited_copy(phi3, "qkv", [&](Keys&, Tensors& t) { tensor(t, "blk.0.attn_qkv.weight").shape = {256, 256}; }),
         {"blk.0.attn_qkv.weight", "expected shape [256, 512]"}},
        {"an unknown RoPE scaling",
         edited_copy(gpt_oss, "rope_type", [&](Keys& k, Tensors&) { set_key(k, "gpt-oss.rope.scaling.type", tandem::gguf::Value::str("longrope")); }),
         {"gpt-oss.rope.scaling.type", "expected none, linear or yarn", "found longrope"}},
        {"YaRN without a factor",
         edited_copy(gpt_oss, "yarn_factor", [&](Keys& k, Tensors&) { drop_key(k, "gpt-oss.rope.scaling.factor"); }),
         {"gpt-oss.rope.scaling.factor", "missing"}},
        {"a NaN YaRN beta",
         edited_copy(gpt_oss, "yarn_beta", [&](Keys& k, Tensors&) {
             k.push_back({"gpt-oss.rope.scaling.yarn_beta_fast", tandem::gguf::Value::f32(std::nanf("")), 0});
         }),
         {"gpt-oss.rope.scaling.yarn_beta_fast", "expected values in (0, 1e6)", "nan"}},
        {"sinks of another length than the heads",
         edited_copy(gpt_oss, "sinks", [&](Keys&, Tensors& t) { tensor(t, "blk.3.attn_sinks.weight").shape = {4}; }),
         {"blk.3.attn_sinks.weight", "expected shape [8, 1]"}},
        {"a deepseek2 file of the old conversion (attn_kv_b, no key_length_mla)",
         edited_copy(deepseek2, "mla_old", [&](Keys& k, Tensors&) { drop_key(k, "deepseek2.attention.key_length_mla"); }),
         {"deepseek2.attention.key_length_mla", "attn_kv_b", "convert it again"}},
        {"a latent cache row that is not the latent and the rotated part",
         edited_copy(deepseek2, "mla_k", [&](Keys& k, Tensors&) { set_key(k, "deepseek2.attention.key_length", tandem::gguf::Value::u32(192)); }),
         {"deepseek2.attention.key_length", "[160, 160]", "found 192"}},
        {"a per-head matrix of another head count",
         edited_copy(deepseek2, "k_b", [&](Keys&, Tensors& t) { tensor(t, "blk.2.attn_k_b.weight").shape = {64, 128, 2}; }),
         {"blk.2.attn_k_b.weight", "expected shape [64, 128, 4]"}},
        {"an expert bias without a row per expert",
         edited_copy(gpt_oss, "exp_bias", [&](Keys&, Tensors& t) { tensor(t, "blk.1.ffn_down_exps.bias").shape = {256}; }),
         {"blk.1.ffn_down_exps.bias", "expected shape [256, 4]"}},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        const std::string err = load_error(c.path);
        EXPECT_EQ(err.find('\n'), std::string::npos) << err;
        for (const auto& part : c.expect) EXPECT_TRUE(contains(err, part)) << err << "\n  lacks: " << part;
        fs::remove(c.path);
    }
}

}  // namespace
