// Quantization mixes: per-tensor type choice against files made by
// llama.cpp's quantizer (the i-quant ones with an importance matrix) and
// the rules pinned on real model shapes. The `tandem quantize` and `tandem
// synth` commands end to end: test_quantize_command.cpp.
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/quant/quant_mix.h"
#include "runtime/quant/quant_types.h"
#include "tests/quant_mix_checks.h"
#include "tests/test_paths.h"

namespace tandem::quant {
namespace {

using testing::shared;
using testing::test_data;
using namespace mix_checks;

// ---- Helpers -------------------------------------------------------------------

// A synthetic Llama tensor list (llama.cpp's GGUF names and shapes).
struct Shape {
    int64_t n_embd, n_ff, n_layer, n_head, n_head_kv, n_vocab;
    bool tied;
};
constexpr Shape kLlama3_8B{4096, 14336, 32, 32, 8, 128256, false};
constexpr Shape kLlama3_70B{8192, 28672, 80, 64, 8, 128256, false};
constexpr Shape kLlama2_13B{5120, 13824, 40, 40, 40, 32000, false};

MixModelInfo info_of(const Shape& s, bool imatrix = false) {
    return {s.n_layer, s.n_head, s.n_head_kv, 0, !s.tied, imatrix};
}

Type pick(FileType ft, const Shape& s, const std::string& name, bool imatrix = false) {
    const int64_t kv = s.n_embd / s.n_head * s.n_head_kv;
    std::vector<int64_t> shape;
    if (name == "token_embd.weight" || name == "output.weight") shape = {s.n_embd, s.n_vocab};
    else if (name.ends_with("attn_v.weight") || name.ends_with("attn_k.weight")) shape = {s.n_embd, kv};
    else if (name.ends_with("ffn_down.weight")) shape = {s.n_ff, s.n_embd};
    else if (name.ends_with("ffn_up.weight") || name.ends_with("ffn_gate.weight")) shape = {s.n_embd, s.n_ff};
    else if (name.ends_with("norm.weight")) shape = {s.n_embd};
    else shape = {s.n_embd, s.n_embd};
    return choose_tensor_type(ft, info_of(s, imatrix), name, shape);
}

std::string blk(int64_t i, const char* what) { return "blk." + std::to_string(i) + "." + what + ".weight"; }

// Layers of `s` whose tensor `what` gets type `t` under mix `ft`.
std::set<int64_t> layers_with(FileType ft, const Shape& s, const char* what, Type t, bool imatrix = false) {
    std::set<int64_t> out;
    for (int64_t i = 0; i < s.n_layer; ++i) {
        if (pick(ft, s, blk(i, what), imatrix) == t) out.insert(i);
    }
    return out;
}

std::set<int64_t> all_layers_but(const Shape& s, const std::set<int64_t>& except) {
    std::set<int64_t> out;
    for (int64_t i = 0; i < s.n_layer; ++i) {
        if (!except.count(i)) out.insert(i);
    }
    return out;
}

// Layers [first, last).
std::set<int64_t> layer_range(int64_t first, int64_t last) {
    std::set<int64_t> out;
    for (int64_t i = first; i < last; ++i) out.insert(i);
    return out;
}

// ---- The mixes table -------------------------------------------------------------

TEST(QuantMixTable, NamesRoundTripCaseInsensitively) {
    const std::set<std::string> expected = {"Q8_0",  "Q6_K",   "Q5_K_M",  "Q5_K_S", "Q4_K_M", "Q4_K_S", "Q3_K_L",
                                            "Q3_K_M", "Q3_K_S", "Q2_K",    "Q4_0",   "Q4_1",   "Q5_0",   "Q5_1",
                                            "F16",   "BF16",   "F32",     "IQ4_XS", "IQ4_NL", "IQ3_M",  "IQ3_S",
                                            "IQ3_XS", "IQ3_XXS", "IQ2_M",  "IQ2_S",  "IQ2_XS", "IQ2_XXS", "IQ1_M",
                                            "IQ1_S", "MXFP4_MOE"};
    std::set<std::string> names;
    for (const auto& m : all_mixes()) {
        names.insert(std::string(m.name));
        ASSERT_EQ(file_type_from_name(m.name), m.file_type) << m.name;
        ASSERT_EQ(find_mix(m.file_type), &m) << m.name;
    }
    EXPECT_EQ(names, expected);
    EXPECT_EQ(file_type_from_name("q4_k_m"), FileType::Q4_K_M);
    EXPECT_EQ(file_type_from_name("Q4_K"), std::nullopt);
    EXPECT_EQ(file_type_from_name("Q2_K_S"), std::nullopt);  // a mix Tandem does not offer
    EXPECT_EQ(find_mix(FileType::Q4_K_M)->base_type, Type::Q4_K);
    EXPECT_EQ(find_mix(FileType::Q2_K)->base_type, Type::Q2_K);
    EXPECT_EQ(find_mix(FileType::MOSTLY_BF16)->base_type, Type::BF16);
}

TEST(QuantMixTable, IQuantMixesHaveLlamaCppNumbersAndBaseTypes) {
    // llama.h's LLAMA_FTYPE_MOSTLY_IQ* and llama_ftype_get_default_type.
    const struct {
        const char* name;
        uint32_t number;
        Type base;
    } want[] = {
        {"IQ2_XXS", 19, Type::IQ2_XXS}, {"IQ2_XS", 20, Type::IQ2_XS}, {"IQ3_XS", 22, Type::IQ3_S},
        {"IQ3_XXS", 23, Type::IQ3_XXS}, {"IQ1_S", 24, Type::IQ1_S},   {"IQ4_NL", 25, Type::IQ4_NL},
        {"IQ3_S", 26, Type::IQ3_S},     {"IQ3_M", 27, Type::IQ3_S},   {"IQ2_S", 28, Type::IQ2_XS},
        {"IQ2_M", 29, Type::IQ2_S},     {"IQ4_XS", 30, Type::IQ4_XS}, {"IQ1_M", 31, Type::IQ1_M},
    };
    for (const auto& w : want) {
        const auto ft = file_type_from_name(w.name);
        ASSERT_TRUE(ft.has_value()) << w.name;
        EXPECT_EQ(static_cast<uint32_t>(*ft), w.number) << w.name;
        EXPECT_EQ(type_name(find_mix(*ft)->base_type), type_name(w.base)) << w.name;
        EXPECT_NE(find_mix(*ft)->description.find("bpw"), std::string_view::npos) << w.name;
    }
    EXPECT_EQ(file_type_from_name("iq2_xs"), FileType::IQ2_XS);
}

// ---- Against files made by llama.cpp ----------------------------------------------

// Runs anywhere: the committed Q4_K_M tiny model has the F16 model's shapes.
TEST(QuantMixReference, CommittedTinyQ4KMMatches) {
    const auto file = gguf::File::open(test_data("tiny-llama-Q4_K_M.gguf"));
    expect_same_types(chosen_types(FileType::Q4_K_M, file), types_of(file));
}

struct SharedCase {
    const char* file;
    FileType ft;
};

class QuantMixShared : public ::testing::TestWithParam<SharedCase> {};

TEST_P(QuantMixShared, SameTypesAsLlamaCpp) {
    const auto f16_path = shared("models/tiny-llama-F16.gguf");
    const auto q_path = shared(std::string("models/") + GetParam().file);
    TANDEM_REQUIRE_SHARED(f16_path);
    TANDEM_REQUIRE_SHARED(q_path);
    const auto f16 = gguf::File::open(f16_path);
    const auto quantized = gguf::File::open(q_path);
    expect_same_types(chosen_types(GetParam().ft, f16), types_of(quantized));
    EXPECT_EQ(quantized.find_uint("general.file_type"), static_cast<uint64_t>(GetParam().ft));
}

INSTANTIATE_TEST_SUITE_P(QuantMixTiny, QuantMixShared,
                         ::testing::Values(SharedCase{"tiny-llama-Q8_0.gguf", FileType::Q8_0},
                                           SharedCase{"tiny-llama-Q4_0.gguf", FileType::Q4_0},
                                           SharedCase{"tiny-llama-Q4_K_M.gguf", FileType::Q4_K_M},
                                           SharedCase{"tiny-llama-Q5_K_M.gguf", FileType::Q5_K_M},
                                           SharedCase{"tiny-llama-Q6_K.gguf", FileType::Q6_K},
                                           SharedCase{"tiny-llama-Q3_K_M.gguf", FileType::Q3_K_M},
                                           SharedCase{"tiny-llama-Q2_K.gguf", FileType::Q2_K}),
                         [](const auto& info) {
                             std::string n = info.param.file;
                             n = n.substr(11, n.size() - 16);  // "tiny-llama-Q4_K_M.gguf" -> "Q4_K_M"
                             return n;
                         });

// The second tiny model has an untied output.weight, 6 layers and GQA 4:
// token_embd keeps the base type, output gets Q6_K, layers 2 and 5 get more bits.
TEST(QuantMixReference, UntiedTinyModelBMatches) {
    const auto path = shared("models/tiny-llama-b-Q4_K_M.gguf");
    TANDEM_REQUIRE_SHARED(path);
    const auto file = gguf::File::open(path);
    expect_same_types(chosen_types(FileType::Q4_K_M, file), types_of(file));
}

// ../shared/models/synth-llama-TYPE.gguf: `llama-quantize --imatrix
// synth-llama.imatrix synth-llama-F16.gguf OUT TYPE`. The importance matrix
// has no entry for token_embd and output; llama.cpp's has_imatrix is still
// true for them (it is one flag for the run: only the data those two are
// quantized from lacks importance weights), so every tensor is checked
// with imatrix = true. 4 layers, GQA 2: the first-eighth and GQA >= 4 rows
// never fire, the imatrix and head/embedding rows do.
class QuantMixIQuantFiles : public ::testing::TestWithParam<const char*> {};

TEST_P(QuantMixIQuantFiles, SameTypesAsLlamaQuantizeWithImatrix) {
    const auto path = shared(std::string("models/synth-llama-") + GetParam() + ".gguf");
    TANDEM_REQUIRE_SHARED(path);
    const auto file = gguf::File::open(path);
    const auto number = file.find_uint("general.file_type");
    ASSERT_TRUE(number.has_value()) << path;
    const auto ft = static_cast<FileType>(*number);
    const MixInfo* mix = find_mix(ft);
    ASSERT_NE(mix, nullptr) << "general.file_type " << *number;
    EXPECT_EQ(mix->name, GetParam());
    expect_same_types(chosen_types(ft, file, /*imatrix=*/true), types_of(file));
}

INSTANTIATE_TEST_SUITE_P(QuantMixSynthLlama, QuantMixIQuantFiles,
                         ::testing::Values("IQ4_NL", "IQ4_XS", "IQ3_XXS", "IQ3_S", "IQ2_XXS", "IQ2_XS", "IQ2_M",
                                           "IQ1_S", "IQ1_M"),
                         [](const auto& info) { return std::string(info.param); });

// Without an importance matrix the IQ3_XXS file would differ: attn_v IQ3_S
// and ffn_down Q3_K (Q4_K in the first eighth, none of 4 layers).
TEST(QuantMixReference, IQ3_XXSWithoutImatrixDiffers) {
    const auto path = shared("models/synth-llama-IQ3_XXS.gguf");
    TANDEM_REQUIRE_SHARED(path);
    const auto file = gguf::File::open(path);
    const auto plain = chosen_types(FileType::IQ3_XXS, file, /*imatrix=*/false);
    EXPECT_EQ(type_name(plain.at("blk.1.attn_v.weight")), "IQ3_S");
    EXPECT_EQ(type_name(plain.at("blk.1.ffn_down.weight")), "Q3_K");
    EXPECT_EQ(type_name(file.find_tensor("blk.1.attn_v.weight")->type), "IQ3_XXS");
    EXPECT_EQ(type_name(file.find_tensor("blk.1.ffn_down.weight")->type), "IQ3_XXS");
}

// ---- The rules on real model shapes ------------------------------------------------

// use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2; for 32
// layers: 0-3, 28-31 and every third layer from 6.
const std::set<int64_t> kMoreBits32 = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};

TEST(QuantMixRules, Llama3_8B_Q4_K_M) {
    const auto& s = kLlama3_8B;
    // Q4_K_M: attn_v and ffn_down get Q6_K where use_more_bits, Q4_K elsewhere.
    EXPECT_EQ(layers_with(FileType::Q4_K_M, s, "attn_v", Type::Q6_K), kMoreBits32);
    EXPECT_EQ(layers_with(FileType::Q4_K_M, s, "attn_v", Type::Q4_K), all_layers_but(s, kMoreBits32));
    EXPECT_EQ(layers_with(FileType::Q4_K_M, s, "ffn_down", Type::Q6_K), kMoreBits32);
    EXPECT_EQ(layers_with(FileType::Q4_K_M, s, "ffn_down", Type::Q4_K), all_layers_but(s, kMoreBits32));
    for (const char* t : {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"}) {
        EXPECT_EQ(layers_with(FileType::Q4_K_M, s, t, Type::Q4_K).size(), 32u) << t;
    }
    // The head gets Q6_K; an untied token_embd keeps the base type.
    EXPECT_EQ(pick(FileType::Q4_K_M, s, "output.weight"), Type::Q6_K);
    EXPECT_EQ(pick(FileType::Q4_K_M, s, "token_embd.weight"), Type::Q4_K);
    EXPECT_EQ(pick(FileType::Q4_K_M, s, "output_norm.weight"), Type::F32);
    EXPECT_EQ(pick(FileType::Q4_K_M, s, "blk.0.attn_norm.weight"), Type::F32);
}

TEST(QuantMixRules, Llama3_8B_Q5_K_M_FollowsUseMoreBits) {
    const auto& s = kLlama3_8B;
    EXPECT_EQ(layers_with(FileType::Q5_K_M, s, "attn_v", Type::Q6_K), kMoreBits32);
    EXPECT_EQ(layers_with(FileType::Q5_K_M, s, "ffn_down", Type::Q6_K), kMoreBits32);
    EXPECT_EQ(layers_with(FileType::Q5_K_M, s, "attn_v", Type::Q5_K), all_layers_but(s, kMoreBits32));
    EXPECT_EQ(pick(FileType::Q5_K_M, s, "blk.7.attn_output.weight"), Type::Q5_K);
}

TEST(QuantMixRules, Llama3_8B_Q3_K_M) {
    const auto& s = kLlama3_8B;
    // attn_v: Q5_K for the first two attn_v tensors, Q4_K after.
    EXPECT_EQ(layers_with(FileType::Q3_K_M, s, "attn_v", Type::Q5_K), (std::set<int64_t>{0, 1}));
    EXPECT_EQ(layers_with(FileType::Q3_K_M, s, "attn_v", Type::Q4_K), all_layers_but(s, {0, 1}));
    // ffn_down: Q5_K below n_layer/16 (= 2), Q4_K after (non-Falcon).
    EXPECT_EQ(layers_with(FileType::Q3_K_M, s, "ffn_down", Type::Q5_K), (std::set<int64_t>{0, 1}));
    EXPECT_EQ(layers_with(FileType::Q3_K_M, s, "ffn_down", Type::Q4_K), all_layers_but(s, {0, 1}));
    // attn_output: Q4_K everywhere; q, k, gate, up keep Q3_K.
    EXPECT_EQ(layers_with(FileType::Q3_K_M, s, "attn_output", Type::Q4_K).size(), 32u);
    EXPECT_EQ(layers_with(FileType::Q3_K_M, s, "attn_q", Type::Q3_K).size(), 32u);
    EXPECT_EQ(layers_with(FileType::Q3_K_M, s, "ffn_up", Type::Q3_K).size(), 32u);
    EXPECT_EQ(pick(FileType::Q3_K_M, s, "output.weight"), Type::Q6_K);
}

TEST(QuantMixRules, Llama3_8B_Q3_K_S_And_Q3_K_L) {
    const auto& s = kLlama3_8B;
    // Q3_K_S has no per-tensor bumps (dense, not 70B): Q3_K everywhere but the head.
    for (const char* t : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}) {
        EXPECT_EQ(layers_with(FileType::Q3_K_S, s, t, Type::Q3_K).size(), 32u) << t;
    }
    EXPECT_EQ(pick(FileType::Q3_K_S, s, "output.weight"), Type::Q6_K);
    // Q3_K_L: attn_v, attn_output and ffn_down all Q5_K.
    for (const char* t : {"attn_v", "attn_output", "ffn_down"}) {
        EXPECT_EQ(layers_with(FileType::Q3_K_L, s, t, Type::Q5_K).size(), 32u) << t;
    }
    EXPECT_EQ(layers_with(FileType::Q3_K_L, s, "attn_q", Type::Q3_K).size(), 32u);
}

TEST(QuantMixRules, Llama3_8B_Q4_K_S_And_Q5_K_S) {
    const auto& s = kLlama3_8B;
    // Q4_K_S: attn_v Q5_K for the first 4 attn_v tensors; ffn_down Q5_K below n_layer/8 (= 4).
    EXPECT_EQ(layers_with(FileType::Q4_K_S, s, "attn_v", Type::Q5_K), (std::set<int64_t>{0, 1, 2, 3}));
    EXPECT_EQ(layers_with(FileType::Q4_K_S, s, "ffn_down", Type::Q5_K), (std::set<int64_t>{0, 1, 2, 3}));
    EXPECT_EQ(layers_with(FileType::Q4_K_S, s, "ffn_down", Type::Q4_K).size(), 28u);
    EXPECT_EQ(layers_with(FileType::Q4_K_S, s, "attn_output", Type::Q4_K).size(), 32u);
    // Q5_K_S: Q5_K everywhere but the head.
    for (const char* t : {"attn_q", "attn_v", "attn_output", "ffn_down"}) {
        EXPECT_EQ(layers_with(FileType::Q5_K_S, s, t, Type::Q5_K).size(), 32u) << t;
    }
    EXPECT_EQ(pick(FileType::Q5_K_S, s, "output.weight"), Type::Q6_K);
    EXPECT_EQ(pick(FileType::Q5_K_S, s, "token_embd.weight"), Type::Q5_K);
}

TEST(QuantMixRules, Q2_K_AttnVDependsOnGqa) {
    // Q2_K: attn_v Q4_K when n_gqa >= 4 (llama3-8b: 32/8), else Q3_K
    // (llama2-13b: no GQA). ffn_down and attn_output Q3_K; the rest Q2_K.
    EXPECT_EQ(layers_with(FileType::Q2_K, kLlama3_8B, "attn_v", Type::Q4_K).size(), 32u);
    EXPECT_EQ(layers_with(FileType::Q2_K, kLlama2_13B, "attn_v", Type::Q3_K).size(), 40u);
    for (const auto& s : {kLlama3_8B, kLlama2_13B}) {
        EXPECT_EQ(layers_with(FileType::Q2_K, s, "ffn_down", Type::Q3_K).size(), static_cast<size_t>(s.n_layer));
        EXPECT_EQ(layers_with(FileType::Q2_K, s, "attn_output", Type::Q3_K).size(), static_cast<size_t>(s.n_layer));
        EXPECT_EQ(layers_with(FileType::Q2_K, s, "attn_q", Type::Q2_K).size(), static_cast<size_t>(s.n_layer));
        EXPECT_EQ(layers_with(FileType::Q2_K, s, "ffn_up", Type::Q2_K).size(), static_cast<size_t>(s.n_layer));
        EXPECT_EQ(pick(FileType::Q2_K, s, "output.weight"), Type::Q6_K);
    }
}

TEST(QuantMixRules, Llama3_70B_AttnVGetsQ5K) {
    const auto& s = kLlama3_70B;
    // use_more_bits for 80 layers: i < 10, i >= 70, (i - 10) % 3 == 2.
    std::set<int64_t> more;
    for (int64_t i = 0; i < 80; ++i) {
        if (i < 10 || i >= 70 || (i - 10) % 3 == 2) more.insert(i);
    }
    // Q4_K_M: Q6_K where use_more_bits; the Q4_K others are raised to Q5_K
    // by the 70B rule (attn_v is 1/8 of attn_q there, bits are cheap).
    EXPECT_EQ(layers_with(FileType::Q4_K_M, s, "attn_v", Type::Q6_K), more);
    EXPECT_EQ(layers_with(FileType::Q4_K_M, s, "attn_v", Type::Q5_K), all_layers_but(s, more));
    // ffn_down is not touched by the 70B rule.
    EXPECT_EQ(layers_with(FileType::Q4_K_M, s, "ffn_down", Type::Q6_K), more);
    EXPECT_EQ(layers_with(FileType::Q4_K_M, s, "ffn_down", Type::Q4_K), all_layers_but(s, more));
    // Q3_K_S (Q3_K) and Q2_K (Q4_K via GQA 8) attn_v: raised to Q5_K.
    EXPECT_EQ(layers_with(FileType::Q3_K_S, s, "attn_v", Type::Q5_K).size(), 80u);
    EXPECT_EQ(layers_with(FileType::Q2_K, s, "attn_v", Type::Q5_K).size(), 80u);
    // Q3_K_M: first two Q5_K already, the rest Q4_K -> Q5_K.
    EXPECT_EQ(layers_with(FileType::Q3_K_M, s, "attn_v", Type::Q5_K).size(), 80u);
    // ffn_down Q3_K_M: n_layer/16 = 5 layers of Q5_K.
    EXPECT_EQ(layers_with(FileType::Q3_K_M, s, "ffn_down", Type::Q5_K), (std::set<int64_t>{0, 1, 2, 3, 4}));
    // Q5_K and Q6_K results are left alone.
    EXPECT_EQ(layers_with(FileType::Q5_K_S, s, "attn_v", Type::Q5_K).size(), 80u);
    EXPECT_EQ(layers_with(FileType::Q6_K, s, "attn_v", Type::Q6_K).size(), 80u);
    // An 80-layer model without GQA (llama-65B) is not "70B".
    const Shape llama65{8192, 22016, 80, 64, 64, 32000, false};
    EXPECT_EQ(pick(FileType::Q3_K_S, llama65, blk(40, "attn_v")), Type::Q3_K);
}

TEST(QuantMixRules, HeadAndLegacyMixes) {
    const auto& s = kLlama3_8B;
    // Q8_0 keeps the head at Q8_0; other quantized mixes give it Q6_K.
    EXPECT_EQ(pick(FileType::Q8_0, s, "output.weight"), Type::Q8_0);
    EXPECT_EQ(pick(FileType::Q4_0, s, "output.weight"), Type::Q6_K);
    EXPECT_EQ(pick(FileType::Q5_1, s, "output.weight"), Type::Q6_K);
    // Legacy mixes have no per-layer rules.
    EXPECT_EQ(layers_with(FileType::Q4_0, s, "ffn_down", Type::Q4_0).size(), 32u);
    EXPECT_EQ(layers_with(FileType::Q5_0, s, "attn_v", Type::Q5_0).size(), 32u);
    EXPECT_EQ(pick(FileType::Q4_1, s, "token_embd.weight"), Type::Q4_1);
    // Tied embeddings: token_embd is the head and gets its type.
    Shape tied = s;
    tied.tied = true;
    EXPECT_EQ(pick(FileType::Q4_K_M, tied, "token_embd.weight"), Type::Q6_K);
    EXPECT_EQ(pick(FileType::Q8_0, tied, "token_embd.weight"), Type::Q8_0);
}

TEST(QuantMixRules, FloatMixes) {
    const auto& s = kLlama3_8B;
    EXPECT_EQ(pick(FileType::MOSTLY_F16, s, "output.weight"), Type::F16);
    EXPECT_EQ(pick(FileType::MOSTLY_F16, s, blk(3, "attn_v")), Type::F16);
    EXPECT_EQ(pick(FileType::MOSTLY_F16, s, blk(3, "attn_norm")), Type::F32);
    EXPECT_EQ(pick(FileType::MOSTLY_BF16, s, blk(3, "ffn_down")), Type::BF16);
    EXPECT_EQ(pick(FileType::ALL_F32, s, "token_embd.weight"), Type::F32);
}

TEST(QuantMixRules, NeverQuantized) {
    const MixModelInfo m{32, 32, 8, 0, true};
    const std::vector<int64_t> vec = {4096};
    const std::vector<int64_t> col = {4096, 1};
    const std::vector<int64_t> mat = {4096, 4096};
    // 1-D tensors (also [n, 1]: ggml counts it as 1-D), norms, biases.
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "blk.0.attn_norm.weight", vec), Type::F32);
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "blk.0.attn_q.weight", col), Type::F32);
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "blk.0.attn_q.bias", vec), Type::F32);
    // 2-D tensors that stay float: norms stored 2-D, the MoE router, names
    // that are not weights.
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "blk.0.attn_q_norm.weight", mat), Type::F32);
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "blk.0.ffn_gate_inp.weight", mat), Type::F32);
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "position_embd.weight", mat), Type::F32);
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "rope_freqs", mat), Type::F32);
    // Other 2-D weights take the base type.
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "blk.0.some_new_proj.weight", mat), Type::Q4_K);
}

TEST(QuantMixRules, KQuantFallbackOnShortRows) {
    // Rows of 320: a multiple of 32, not of 256. K-quants fall back to
    // legacy 32-blocks: Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0.
    const MixModelInfo m{32, 32, 8, 0, true};
    const std::vector<int64_t> row320 = {320, 1024};
    EXPECT_EQ(choose_tensor_type(FileType::Q2_K, m, "blk.5.attn_q.weight", row320), Type::Q4_0);
    EXPECT_EQ(choose_tensor_type(FileType::Q3_K_S, m, "blk.5.attn_q.weight", row320), Type::Q4_0);
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "blk.5.attn_q.weight", row320), Type::Q5_0);
    EXPECT_EQ(choose_tensor_type(FileType::Q5_K_S, m, "blk.5.attn_q.weight", row320), Type::Q5_1);
    EXPECT_EQ(choose_tensor_type(FileType::Q6_K, m, "blk.5.attn_q.weight", row320), Type::Q8_0);
    // After the mix rules: Q4_K_M's Q6_K attn_v (layer 0) -> Q8_0.
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "blk.0.attn_v.weight", row320), Type::Q8_0);
    // The head: a base type that does not fit the row gives Q8_0; Q4_0 fits,
    // its Q6_K head does not, so the fallback makes it Q8_0 too.
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "output.weight", row320), Type::Q8_0);
    EXPECT_EQ(choose_tensor_type(FileType::Q4_0, m, "output.weight", row320), Type::Q8_0);
    // Rows that fit no block at all stay F16.
    const std::vector<int64_t> row100 = {100, 64};
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "blk.5.attn_q.weight", row100), Type::F16);
    EXPECT_EQ(choose_tensor_type(FileType::Q4_0, m, "blk.5.attn_q.weight", row100), Type::F16);
}

TEST(QuantMixRules, EightExpertModels) {
    // Mixtral-8x7B: 32 layers, GQA 4, 8 experts. attn_v and attn_k -> Q8_0,
    // attn_output -> Q5_K for the low-bit mixes; expert ffn_down follows the
    // per-layer rules by the layer in its name.
    const MixModelInfo m{32, 32, 8, 8, true};
    const std::vector<int64_t> v = {4096, 1024};
    const std::vector<int64_t> sq = {4096, 4096};
    const std::vector<int64_t> exps = {14336, 4096, 8};
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "blk.10.attn_v.weight", v), Type::Q8_0);
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "blk.10.attn_k.weight", v), Type::Q8_0);
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "blk.10.attn_output.weight", sq), Type::Q5_K);
    EXPECT_EQ(choose_tensor_type(FileType::Q3_K_L, m, "blk.10.attn_output.weight", sq), Type::Q3_K);
    EXPECT_EQ(choose_tensor_type(FileType::Q5_K_M, m, "blk.10.attn_output.weight", sq), Type::Q5_K);
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "blk.9.ffn_down_exps.weight", exps), Type::Q6_K);
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "blk.10.ffn_down_exps.weight", exps), Type::Q4_K);
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "blk.10.ffn_gate_exps.weight", exps), Type::Q4_K);
}

TEST(QuantMixRules, FusedQkvCountsAsAttnV) {
    // Current llama.cpp files attn_qkv under the attn_v rules (it carries V).
    const MixModelInfo m{32, 32, 32, 0, true};
    const std::vector<int64_t> qkv = {3072, 9216};
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "blk.0.attn_qkv.weight", qkv), Type::Q6_K);
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "blk.4.attn_qkv.weight", qkv), Type::Q4_K);
    EXPECT_EQ(choose_tensor_type(FileType::Q3_K_M, m, "blk.4.attn_qkv.weight", qkv), Type::Q4_K);
}

TEST(QuantMixRules, ManyExpertModelsFollowTheFfnDownRulePerLayer) {
    // Qwen3-30B-A3B: 48 layers, GQA 8, 128 experts. The experts' ffn_down
    // follows ffn_down's use_more_bits by the layer in its name; attention
    // gets no 8-expert bumps; the router stays F32 even 2-D.
    const MixModelInfo m{48, 32, 4, 128, true};
    const std::vector<int64_t> down = {768, 2048, 128};
    const std::vector<int64_t> up = {2048, 768, 128};
    const std::vector<int64_t> kv = {2048, 512};
    const std::vector<int64_t> router = {2048, 128};
    std::set<int64_t> more, q6k_down, q6k_v;
    for (int64_t i = 0; i < 48; ++i) {
        if (i < 6 || i >= 42 || (i - 6) % 3 == 2) more.insert(i);
        const std::string b = "blk." + std::to_string(i) + ".";
        if (choose_tensor_type(FileType::Q4_K_M, m, b + "ffn_down_exps.weight", down) == Type::Q6_K) q6k_down.insert(i);
        if (choose_tensor_type(FileType::Q4_K_M, m, b + "attn_v.weight", kv) == Type::Q6_K) q6k_v.insert(i);
        EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, b + "ffn_gate_exps.weight", up), Type::Q4_K);
        EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, b + "ffn_up_exps.weight", up), Type::Q4_K);
        EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, b + "attn_k.weight", kv), Type::Q4_K);
        EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, b + "ffn_gate_inp.weight", router), Type::F32);
    }
    EXPECT_EQ(q6k_down, more);
    EXPECT_EQ(q6k_v, more);
    EXPECT_EQ(more.size(), 24u);
    // Other mixes: Q3_K_M's first n_layer/16 = 3 layers Q5_K, the rest Q4_K;
    // Q2_K's Q3_K; Q4_K_S's first eighth Q5_K.
    EXPECT_EQ(choose_tensor_type(FileType::Q3_K_M, m, "blk.2.ffn_down_exps.weight", down), Type::Q5_K);
    EXPECT_EQ(choose_tensor_type(FileType::Q3_K_M, m, "blk.3.ffn_down_exps.weight", down), Type::Q4_K);
    EXPECT_EQ(choose_tensor_type(FileType::Q2_K, m, "blk.20.ffn_down_exps.weight", down), Type::Q3_K);
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_S, m, "blk.5.ffn_down_exps.weight", down), Type::Q5_K);
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_S, m, "blk.6.ffn_down_exps.weight", down), Type::Q4_K);
    EXPECT_EQ(choose_tensor_type(FileType::Q8_0, m, "blk.6.ffn_down_exps.weight", down), Type::Q8_0);
    EXPECT_EQ(choose_tensor_type(FileType::MOSTLY_F16, m, "blk.6.ffn_gate_inp.weight", router), Type::F32);
}

TEST(QuantMixRules, EightExpertBumpsAreForExactlyEight) {
    // llama.cpp tests n_expert == 8: Mixtral gets Q8_0 attn_v/attn_k and
    // Q5_K attn_output; the same shapes with 16 experts keep the dense rules.
    const std::vector<int64_t> v = {4096, 1024};
    const std::vector<int64_t> sq = {4096, 4096};
    for (const int64_t n_expert : {8, 16}) {
        SCOPED_TRACE(n_expert);
        const MixModelInfo m{32, 32, 8, n_expert, true};
        const bool eight = n_expert == 8;
        EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "blk.4.attn_v.weight", v), eight ? Type::Q8_0 : Type::Q4_K);
        EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "blk.0.attn_v.weight", v), eight ? Type::Q8_0 : Type::Q6_K);
        EXPECT_EQ(choose_tensor_type(FileType::Q2_K, m, "blk.4.attn_v.weight", v), eight ? Type::Q8_0 : Type::Q4_K);
        EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, m, "blk.4.attn_k.weight", v), eight ? Type::Q8_0 : Type::Q4_K);
        EXPECT_EQ(choose_tensor_type(FileType::Q3_K_S, m, "blk.4.attn_output.weight", sq), eight ? Type::Q5_K : Type::Q3_K);
        // Float mixes are never bumped.
        EXPECT_EQ(choose_tensor_type(FileType::MOSTLY_F16, m, "blk.4.attn_v.weight", v), Type::F16);
    }
}

TEST(QuantMixRules, ExpertTensorsNeedALayerInRange) {
    // llama.cpp reads a mixture of experts' FFN layer from the name and
    // refuses one without "blk.N." or past block_count.
    const MixModelInfo moe{48, 32, 4, 128, true};
    const std::vector<int64_t> down = {768, 2048, 128};
    EXPECT_THROW(choose_tensor_type(FileType::Q4_K_M, moe, "ffn_down_exps.weight", down), Error);
    EXPECT_THROW(choose_tensor_type(FileType::Q4_K_M, moe, "blk.48.ffn_down_exps.weight", down), Error);
    EXPECT_EQ(choose_tensor_type(FileType::Q4_K_M, moe, "blk.47.ffn_down_exps.weight", down), Type::Q6_K);
    // Not an FFN tensor, or not a MoE model: no layer needed.
    const std::vector<int64_t> q = {2048, 4096};
    const std::vector<int64_t> dense_down = {768, 2048};
    EXPECT_NO_THROW(choose_tensor_type(FileType::Q4_K_M, moe, "blk.99.attn_q.weight", q));
    const MixModelInfo dense{48, 32, 4, 0, true};
    EXPECT_NO_THROW(choose_tensor_type(FileType::Q4_K_M, dense, "ffn_down.weight", dense_down));
}

// ---- The i-quant rules on real model shapes -------------------------------------------

TEST(QuantMixIQuantRules, Llama3_70B_IQ2_XS_And_IQ2_XXS) {
    const auto& s = kLlama3_70B;
    for (const auto& [ft, base] : {std::pair{FileType::IQ2_XS, Type::IQ2_XS}, std::pair{FileType::IQ2_XXS, Type::IQ2_XXS}}) {
        SCOPED_TRACE(type_name(base));
        // attn_v: Q4_K for GQA 8, and the very-low-bit branch has no 70B raise.
        EXPECT_EQ(layers_with(ft, s, "attn_v", Type::Q4_K, true).size(), 80u);
        // ffn_down: Q2_K in the first eighth (10 layers), the base type after.
        EXPECT_EQ(layers_with(ft, s, "ffn_down", Type::Q2_K, true), layer_range(0, 10));
        EXPECT_EQ(layers_with(ft, s, "ffn_down", base, true), layer_range(10, 80));
        for (const char* t : {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"}) {
            EXPECT_EQ(layers_with(ft, s, t, base, true).size(), 80u) << t;
        }
        EXPECT_EQ(pick(ft, s, "output.weight", true), Type::Q5_K);
        EXPECT_EQ(pick(ft, s, "token_embd.weight", true), Type::Q2_K);
    }
}

TEST(QuantMixIQuantRules, IQ2_S_IQ2_M_IQ1_S_IQ1_M) {
    const auto& s = kLlama2_13B;  // no GQA, 40 layers
    // IQ2_S (IQ2_XS blocks) and IQ2_M (IQ2_S blocks): IQ3_S attn_v,
    // attn_output, first-eighth ffn_down and token_embd.
    for (const auto& [ft, base] : {std::pair{FileType::IQ2_S, Type::IQ2_XS}, std::pair{FileType::IQ2_M, Type::IQ2_S}}) {
        SCOPED_TRACE(type_name(base));
        EXPECT_EQ(layers_with(ft, s, "attn_v", Type::IQ3_S, true).size(), 40u);
        EXPECT_EQ(layers_with(ft, s, "attn_output", Type::IQ3_S, true).size(), 40u);
        EXPECT_EQ(layers_with(ft, s, "ffn_down", Type::IQ3_S, true), layer_range(0, 5));
        EXPECT_EQ(layers_with(ft, s, "ffn_down", base, true), layer_range(5, 40));
        EXPECT_EQ(layers_with(ft, s, "attn_q", base, true).size(), 40u);
        EXPECT_EQ(pick(ft, s, "token_embd.weight", true), Type::IQ3_S);
        EXPECT_EQ(pick(ft, s, "output.weight", true), Type::Q5_K);
    }
    // IQ1_S/IQ1_M: IQ2_XXS attn_output, Q2_K attn_v (no GQA).
    for (const auto& [ft, base] : {std::pair{FileType::IQ1_S, Type::IQ1_S}, std::pair{FileType::IQ1_M, Type::IQ1_M}}) {
        SCOPED_TRACE(type_name(base));
        EXPECT_EQ(layers_with(ft, s, "attn_output", Type::IQ2_XXS, true).size(), 40u);
        EXPECT_EQ(layers_with(ft, s, "attn_v", Type::Q2_K, true).size(), 40u);
        EXPECT_EQ(layers_with(ft, s, "ffn_up", base, true).size(), 40u);
        EXPECT_EQ(pick(ft, s, "token_embd.weight", true), Type::Q2_K);
        EXPECT_EQ(pick(ft, s, "output.weight", true), Type::Q5_K);
    }
    // A tied embedding is the head: Q5_K.
    Shape tied = kLlama3_8B;
    tied.tied = true;
    EXPECT_EQ(pick(FileType::IQ2_XS, tied, "token_embd.weight", true), Type::Q5_K);
}

TEST(QuantMixIQuantRules, IQ3_XXS_DependsOnImatrix) {
    const auto& s = kLlama2_13B;  // no GQA: attn_v is not raised to Q4_K
    // With an imatrix attn_v and ffn_down keep IQ3_XXS.
    EXPECT_EQ(layers_with(FileType::IQ3_XXS, s, "attn_v", Type::IQ3_XXS, true).size(), 40u);
    EXPECT_EQ(layers_with(FileType::IQ3_XXS, s, "ffn_down", Type::IQ3_XXS, true).size(), 40u);
    // Without: attn_v IQ3_S, ffn_down Q4_K in the first eighth and Q3_K after.
    EXPECT_EQ(layers_with(FileType::IQ3_XXS, s, "attn_v", Type::IQ3_S, false).size(), 40u);
    EXPECT_EQ(layers_with(FileType::IQ3_XXS, s, "ffn_down", Type::Q4_K, false), layer_range(0, 5));
    EXPECT_EQ(layers_with(FileType::IQ3_XXS, s, "ffn_down", Type::Q3_K, false), layer_range(5, 40));
    for (const bool im : {false, true}) {
        SCOPED_TRACE(im);
        EXPECT_EQ(layers_with(FileType::IQ3_XXS, s, "attn_q", Type::IQ2_S, im).size(), 40u);
        EXPECT_EQ(layers_with(FileType::IQ3_XXS, s, "attn_k", Type::IQ2_S, im).size(), 40u);
        EXPECT_EQ(layers_with(FileType::IQ3_XXS, s, "attn_output", Type::IQ3_S, im).size(), 40u);
        EXPECT_EQ(layers_with(FileType::IQ3_XXS, s, "ffn_up", Type::IQ3_XXS, im).size(), 40u);
        EXPECT_EQ(pick(FileType::IQ3_XXS, s, "token_embd.weight", im), Type::IQ3_S);
        EXPECT_EQ(pick(FileType::IQ3_XXS, s, "output.weight", im), Type::Q5_K);
        // 70B: Q4_K by GQA 8, then the 70B raise to Q5_K.
        EXPECT_EQ(layers_with(FileType::IQ3_XXS, kLlama3_70B, "attn_v", Type::Q5_K, im).size(), 80u);
    }
}

TEST(QuantMixIQuantRules, IQ3_XS_IQ3_S_IQ3_M) {
    const auto& s = kLlama3_8B;  // GQA 4, 32 layers
    // IQ3_XS: IQ3_S blocks; IQ3_XXS attn_q/attn_k and the middle ffn_gate/ffn_up.
    EXPECT_EQ(layers_with(FileType::IQ3_XS, s, "attn_q", Type::IQ3_XXS).size(), 32u);
    EXPECT_EQ(layers_with(FileType::IQ3_XS, s, "attn_k", Type::IQ3_XXS).size(), 32u);
    for (const char* t : {"ffn_gate", "ffn_up"}) {
        EXPECT_EQ(layers_with(FileType::IQ3_XS, s, t, Type::IQ3_XXS), layer_range(4, 28)) << t;
        EXPECT_EQ(layers_with(FileType::IQ3_XS, s, t, Type::IQ3_S), all_layers_but(s, layer_range(4, 28))) << t;
    }
    EXPECT_EQ(layers_with(FileType::IQ3_XS, s, "attn_v", Type::Q4_K).size(), 32u);
    EXPECT_EQ(layers_with(FileType::IQ3_XS, s, "ffn_down", Type::IQ3_S).size(), 32u);
    EXPECT_EQ(pick(FileType::IQ3_XS, s, "output.weight"), Type::Q6_K);
    // IQ3_S: Q4_K attn_v only with GQA >= 4.
    EXPECT_EQ(layers_with(FileType::IQ3_S, s, "attn_v", Type::Q4_K).size(), 32u);
    EXPECT_EQ(layers_with(FileType::IQ3_S, kLlama2_13B, "attn_v", Type::IQ3_S).size(), 40u);
    EXPECT_EQ(layers_with(FileType::IQ3_S, s, "attn_output", Type::IQ3_S).size(), 32u);
    // IQ3_M: Q4_K attn_v and attn_output, ffn_down Q4_K in the first eighth.
    EXPECT_EQ(layers_with(FileType::IQ3_M, kLlama2_13B, "attn_v", Type::Q4_K).size(), 40u);
    EXPECT_EQ(layers_with(FileType::IQ3_M, s, "attn_output", Type::Q4_K).size(), 32u);
    EXPECT_EQ(layers_with(FileType::IQ3_M, s, "ffn_down", Type::Q4_K), layer_range(0, 4));
    EXPECT_EQ(layers_with(FileType::IQ3_M, s, "ffn_up", Type::IQ3_S).size(), 32u);
}

TEST(QuantMixIQuantRules, IQ4_NL_IQ4_XS) {
    const auto& s = kLlama3_8B;
    for (const auto& [ft, base] : {std::pair{FileType::IQ4_NL, Type::IQ4_NL}, std::pair{FileType::IQ4_XS, Type::IQ4_XS}}) {
        SCOPED_TRACE(type_name(base));
        EXPECT_EQ(layers_with(ft, s, "attn_v", Type::Q5_K).size(), 32u);  // GQA 4
        EXPECT_EQ(layers_with(ft, kLlama2_13B, "attn_v", base).size(), 40u);
        // ffn_down: Q5_K in the first eighth without an imatrix only.
        EXPECT_EQ(layers_with(ft, s, "ffn_down", Type::Q5_K, false), layer_range(0, 4));
        EXPECT_EQ(layers_with(ft, s, "ffn_down", base, true).size(), 32u);
        EXPECT_EQ(pick(ft, s, "output.weight"), Type::Q6_K);
        EXPECT_EQ(pick(ft, s, "token_embd.weight"), base);
    }
}

TEST(QuantMixIQuantRules, LegacyMixesWithImatrixGuardTheFirstFfnDown) {
    const auto& s = kLlama3_8B;
    EXPECT_EQ(layers_with(FileType::Q4_0, s, "ffn_down", Type::Q4_1, true), layer_range(0, 4));
    EXPECT_EQ(layers_with(FileType::Q5_0, s, "ffn_down", Type::Q5_1, true), layer_range(0, 4));
    EXPECT_EQ(layers_with(FileType::Q4_0, s, "ffn_down", Type::Q4_0, false).size(), 32u);
    // The K-quant mixes have no imatrix rows.
    for (const auto ft : {FileType::Q2_K, FileType::Q3_K_M, FileType::Q4_K_M, FileType::Q5_K_M}) {
        for (const char* t : {"attn_v", "ffn_down", "attn_output"}) {
            for (int64_t i = 0; i < s.n_layer; ++i) {
                EXPECT_EQ(pick(ft, s, blk(i, t), true), pick(ft, s, blk(i, t), false)) << t << " " << i;
            }
        }
    }
}

TEST(QuantMixIQuantRules, ExpertModels) {
    const std::vector<int64_t> v = {4096, 1024};
    const std::vector<int64_t> sq = {4096, 4096};
    const std::vector<int64_t> down = {14336, 4096, 8};
    // Mixtral (8 experts, GQA 4): the very-low-bit branch gives attn_v and
    // attn_k Q4_K (not Q8_0) and attn_output Q5_K.
    MixModelInfo mixtral{32, 32, 8, 8, true};
    mixtral.imatrix = true;
    EXPECT_EQ(choose_tensor_type(FileType::IQ2_XXS, mixtral, "blk.3.attn_v.weight", v), Type::Q4_K);
    EXPECT_EQ(choose_tensor_type(FileType::IQ2_XXS, mixtral, "blk.3.attn_k.weight", v), Type::Q4_K);
    EXPECT_EQ(choose_tensor_type(FileType::IQ2_XXS, mixtral, "blk.3.attn_output.weight", sq), Type::Q5_K);
    EXPECT_EQ(choose_tensor_type(FileType::IQ1_S, mixtral, "blk.3.attn_output.weight", sq), Type::Q5_K);
    EXPECT_EQ(choose_tensor_type(FileType::IQ2_XXS, mixtral, "blk.3.ffn_down_exps.weight", down), Type::Q2_K);
    EXPECT_EQ(choose_tensor_type(FileType::IQ2_XXS, mixtral, "blk.4.ffn_down_exps.weight", down), Type::IQ2_XXS);
    // The other i-quant mixes take the 8-expert Q8_0 attn_v/attn_k and Q5_K attn_output.
    EXPECT_EQ(choose_tensor_type(FileType::IQ3_XXS, mixtral, "blk.3.attn_v.weight", v), Type::Q8_0);
    EXPECT_EQ(choose_tensor_type(FileType::IQ3_XS, mixtral, "blk.3.attn_k.weight", v), Type::Q8_0);
    EXPECT_EQ(choose_tensor_type(FileType::IQ4_XS, mixtral, "blk.3.attn_output.weight", sq), Type::Q5_K);
    // IQ3_M: ffn_down Q4_K in the first eighth and, with 8 experts, the use_more_bits layers.
    EXPECT_EQ(choose_tensor_type(FileType::IQ3_M, mixtral, "blk.6.ffn_down_exps.weight", down), Type::Q4_K);
    EXPECT_EQ(choose_tensor_type(FileType::IQ3_M, mixtral, "blk.7.ffn_down_exps.weight", down), Type::IQ3_S);
    // Without GQA, 4 or more experts still give the very-low-bit attn_v Q4_K.
    const MixModelInfo moe16{24, 16, 16, 16, true, true};
    EXPECT_EQ(choose_tensor_type(FileType::IQ2_XS, moe16, "blk.3.attn_v.weight", sq), Type::Q4_K);
    EXPECT_EQ(choose_tensor_type(FileType::IQ2_M, moe16, "blk.3.attn_k.weight", sq), Type::IQ2_S);
}

TEST(QuantMixIQuantRules, FallbackOnShortRows) {
    // Rows of 320: the 256-weight i-quants fall back to IQ4_NL (32-weight blocks).
    const MixModelInfo m{32, 32, 8, 0, true, true};
    const std::vector<int64_t> row320 = {320, 1024};
    EXPECT_EQ(choose_tensor_type(FileType::IQ2_XS, m, "blk.5.attn_q.weight", row320), Type::IQ4_NL);
    EXPECT_EQ(choose_tensor_type(FileType::IQ1_M, m, "blk.5.ffn_up.weight", row320), Type::IQ4_NL);
    EXPECT_EQ(choose_tensor_type(FileType::IQ3_XXS, m, "blk.5.attn_q.weight", row320), Type::IQ4_NL);  // IQ2_S
    EXPECT_EQ(choose_tensor_type(FileType::IQ4_XS, m, "blk.5.attn_q.weight", row320), Type::IQ4_NL);
    EXPECT_EQ(choose_tensor_type(FileType::IQ4_NL, m, "blk.5.attn_q.weight", row320), Type::IQ4_NL);
    // K-quant results of an i-quant mix still take the K-quant fallbacks.
    EXPECT_EQ(choose_tensor_type(FileType::IQ2_XS, m, "blk.5.attn_v.weight", row320), Type::Q5_0);  // Q4_K
    // The head: Q8_0 when the base type does not fit, or when its Q6_K does not.
    EXPECT_EQ(choose_tensor_type(FileType::IQ2_XS, m, "output.weight", row320), Type::Q8_0);
    EXPECT_EQ(choose_tensor_type(FileType::IQ4_NL, m, "output.weight", row320), Type::Q8_0);
    // Not even a multiple of 32: F16.
    const std::vector<int64_t> row100 = {100, 64};
    EXPECT_EQ(choose_tensor_type(FileType::IQ2_XS, m, "blk.5.attn_q.weight", row100), Type::F16);
    EXPECT_EQ(choose_tensor_type(FileType::IQ4_NL, m, "blk.5.attn_q.weight", row100), Type::F16);
}

}  // namespace
}  // namespace tandem::quant
