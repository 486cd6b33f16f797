// `tandem quantize` and `tandem synth` end to end: the types they write
// follow the mix rules (quant_mix.h, pinned in test_quant_mix.cpp), the
// weights survive quantization, and bad input is refused on one line
// with nothing written.
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/quant/quant_mix.h"
#include "runtime/quant/quant_types.h"
#include "tests/quant_mix_checks.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace tandem::quant {
namespace {

namespace fs = std::filesystem;
using testing::run_tandem;
using testing::expect_one_line_error;
using testing::scratch_dir;
using testing::shared;
using testing::shell_quote;
using testing::test_data;
using namespace mix_checks;

// ---- `tandem synth` of the i-quant mixes -------------------------------------------------

TEST(QuantMixSynth, IQuantHeaderOnlyHasTheMixTypes) {
    const auto dir = scratch_dir();
    const auto out = dir / "l70-iq2xs.gguf";
    const auto r = run_tandem("synth --shape llama3-70b --type IQ2_XS --header-only -o " + shell_quote(out.string()), dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto file = gguf::File::open(out);
    EXPECT_TRUE(file.header_only());
    EXPECT_EQ(file.find_uint("general.file_type"), 20u);
    // synth's i-quant headers are the types of an imatrix run.
    expect_same_types(chosen_types(FileType::IQ2_XS, file, /*imatrix=*/true), types_of(file));
    EXPECT_EQ(type_name(file.find_tensor("blk.0.ffn_down.weight")->type), "Q2_K");
    EXPECT_EQ(type_name(file.find_tensor("blk.40.ffn_down.weight")->type), "IQ2_XS");
    EXPECT_EQ(type_name(file.find_tensor("blk.40.attn_v.weight")->type), "Q4_K");
    EXPECT_EQ(type_name(file.find_tensor("output.weight")->type), "Q5_K");
}

// synth has no importance matrix; the types llama-quantize refuses without
// one are refused too.
TEST(QuantMixSynth, VeryLowBitWeightsAreRefusedAndNothingIsWritten) {
    const auto dir = scratch_dir();
    const auto out = dir / "tiny-iq2xs.gguf";
    const auto r = run_tandem("synth --layers 2 --embd 256 --ff 512 --heads 4 --kv-heads 2 --vocab-size 1000 "
                              "--ctx 512 --type IQ2_XS -o " + shell_quote(out.string()),
                              dir);
    expect_one_line_error(r, "importance matrix");
    EXPECT_FALSE(fs::exists(out));
    EXPECT_TRUE(tandem::testing::temp_files_of(out).empty());
}

// ---- `tandem quantize` end to end --------------------------------------------------

std::vector<float> dequantized(const gguf::File& f, const std::string& name) {
    const auto* t = f.find_tensor(name);
    EXPECT_NE(t, nullptr) << name;
    if (t == nullptr) return {};
    std::vector<float> out(t->n_elements);
    const auto data = f.tensor_data(*t);
    const uint64_t row_bytes = *quant::row_bytes(t->type, t->row_length());
    for (int64_t r = 0; r < t->n_rows(); ++r) {
        dequantize_row(t->type, data.data() + static_cast<uint64_t>(r) * row_bytes,
                       out.data() + r * t->row_length(), t->row_length());
    }
    return out;
}

// Relative RMS error of `got` against `want`.
double rel_rms(const std::vector<float>& got, const std::vector<float>& want) {
    double err = 0, ref = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        err += (got[i] - want[i]) * double(got[i] - want[i]);
        ref += want[i] * double(want[i]);
    }
    return std::sqrt(err / std::max(ref, 1e-30));
}

TEST(QuantizeCommand, TinyF16ToQ4_K_M) {
    const auto f16_path = shared("models/tiny-llama-F16.gguf");
    const auto ref_path = shared("models/tiny-llama-Q4_K_M.gguf");
    TANDEM_REQUIRE_SHARED(f16_path);
    TANDEM_REQUIRE_SHARED(ref_path);
    const auto dir = scratch_dir();
    const auto out = dir / "out-Q4_K_M.gguf";
    const auto r = run_tandem("quantize " + shell_quote(f16_path.string()) + " " + shell_quote(out.string()) +
                                  " Q4_K_M --threads 3",
                              dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("bits per weight"), std::string::npos) << r.out;
    EXPECT_TRUE(tandem::testing::temp_files_of(out).empty());

    const auto got = gguf::File::open(out);
    const auto ref = gguf::File::open(ref_path);
    const auto src = gguf::File::open(f16_path);
    expect_same_types(types_of(got), types_of(ref));
    EXPECT_EQ(got.find_uint("general.file_type"), 15u);
    EXPECT_EQ(got.find_uint("general.quantization_version"), 2u);
    // Every other key is carried over.
    for (const auto& kv : src.metadata()) {
        if (kv.key == "general.file_type" || kv.key == "general.alignment") continue;
        EXPECT_NE(got.find(kv.key), nullptr) << kv.key;
    }
    // token_embd (tied head, Q6_K) is close to the F16 weights; Q6_K on
    // random weights has a relative RMS error near 1%.
    const auto want = dequantized(src, "token_embd.weight");
    EXPECT_LT(rel_rms(dequantized(got, "token_embd.weight"), want), 0.03);
    // A Q4_K tensor: larger error but still bounded (~5-8% on random weights).
    EXPECT_LT(rel_rms(dequantized(got, "blk.0.attn_q.weight"), dequantized(src, "blk.0.attn_q.weight")), 0.15);
    // Norms are copied bit for bit.
    EXPECT_EQ(dequantized(got, "blk.1.ffn_norm.weight"), dequantized(src, "blk.1.ffn_norm.weight"));
    // The same reference quantizers as llama.cpp give (nearly) the same
    // bytes: a row-order or block-layout mistake would change most of them,
    // while float rounding differences (FMA contraction in llama.cpp's
    // build) flip a few Q6_K scales.
    for (const auto& t : ref.tensors()) {
        const auto a = got.tensor_data(*got.find_tensor(t.name));
        const auto b = ref.tensor_data(t);
        ASSERT_EQ(a.size(), b.size()) << t.name;
        size_t differ = 0;
        for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i] ? 1 : 0;
        EXPECT_LT(static_cast<double>(differ), 0.01 * static_cast<double>(a.size())) << t.name;
    }
}

// Synthesizes an F16 MoE (a shrunken preset), quantizes it to Q4_K_M with
// `tandem quantize` and checks the expert tensors' types against the mix
// rules, and against synth's own Q4_K_M of the same shape.
void quantize_moe(const std::string& shape_args, const std::map<std::string, std::string>& want) {
    const auto dir = scratch_dir();
    const auto f16 = dir / "moe-f16.gguf";
    const auto q = dir / "moe-q4km.gguf";
    const auto direct = dir / "moe-direct.gguf";
    auto r = run_tandem("synth " + shape_args + " --type F16 -o " + shell_quote(f16.string()), dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = run_tandem("quantize " + shell_quote(f16.string()) + " " + shell_quote(q.string()) + " Q4_K_M", dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = run_tandem("synth " + shape_args + " --type Q4_K_M --header-only -o " + shell_quote(direct.string()), dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto got = gguf::File::open(q);
    for (const auto& [name, type] : want) {
        const auto* t = got.find_tensor(name);
        ASSERT_NE(t, nullptr) << name;
        EXPECT_EQ(type_name(t->type), type) << name;
    }
    expect_same_types(types_of(got), types_of(gguf::File::open(direct)));
    // The experts were converted, not copied: close to the F16 weights.
    const auto src = gguf::File::open(f16);
    EXPECT_LT(rel_rms(dequantized(got, "blk.1.ffn_up_exps.weight"), dequantized(src, "blk.1.ffn_up_exps.weight")),
              0.15);
}

TEST(QuantizeCommand, QwenMoeExpertsFollowTheMix) {
    // 4 layers: use_more_bits(i, 4) holds for layers 2 and 3.
    quantize_moe("--shape moe-small --layers 4 --embd 256 --experts 4 --experts-used 2 --expert-ff 256 "
                 "--vocab-size 1000 --ctx 512",
                 {{"blk.0.ffn_down_exps.weight", "Q4_K"},
                  {"blk.1.ffn_down_exps.weight", "Q4_K"},
                  {"blk.2.ffn_down_exps.weight", "Q6_K"},
                  {"blk.3.ffn_down_exps.weight", "Q6_K"},
                  {"blk.3.ffn_gate_exps.weight", "Q4_K"},
                  {"blk.3.ffn_up_exps.weight", "Q4_K"},
                  {"blk.0.ffn_gate_inp.weight", "F32"},
                  {"blk.0.attn_k_norm.weight", "F32"},
                  {"blk.2.attn_v.weight", "Q6_K"},
                  {"blk.0.attn_k.weight", "Q4_K"}});
}

TEST(QuantizeCommand, MixtralShapeGetsTheEightExpertBumps) {
    quantize_moe("--shape mixtral-8x7b --layers 2 --embd 256 --ff 512 --heads 4 --kv-heads 2 --vocab-size 1000 "
                 "--ctx 512",
                 {{"blk.0.attn_v.weight", "Q8_0"},
                  {"blk.1.attn_k.weight", "Q8_0"},
                  {"blk.1.attn_output.weight", "Q5_K"},
                  {"blk.0.attn_q.weight", "Q4_K"},
                  {"blk.0.ffn_gate_inp.weight", "F32"},
                  {"blk.0.ffn_down_exps.weight", "Q4_K"},
                  {"blk.1.ffn_down_exps.weight", "Q6_K"}});
}

TEST(QuantizeCommand, DryRunJsonWritesNothing) {
    const auto in = test_data("tiny-llama-Q4_K_M.gguf");
    const auto dir = scratch_dir();
    const auto out = dir / "never.gguf";
    const auto r = run_tandem("quantize " + shell_quote(in.string()) + " " + shell_quote(out.string()) +
                                  " Q4_K_M --dry-run --json",
                              dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_FALSE(fs::exists(out));
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j.at("type"), "Q4_K_M");
    EXPECT_EQ(j.at("file_type"), 15);
    EXPECT_EQ(j.at("n_converted"), 0);  // same mix: every tensor already has its type
    EXPECT_EQ(j.at("bytes_before"), j.at("bytes_after"));
    const auto file = gguf::File::open(in);
    EXPECT_EQ(j.at("tensors").size(), file.tensors().size());
}

TEST(QuantizeCommand, AllowRequantizeConvertsQuantizedInput) {
    const auto in = test_data("tiny-llama-Q4_K_M.gguf");
    const auto dir = scratch_dir();
    const auto out = dir / "q8.gguf";
    const auto r = run_tandem("quantize " + shell_quote(in.string()) + " " + shell_quote(out.string()) +
                                  " q8_0 --allow-requantize",
                              dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto got = gguf::File::open(out);
    for (const auto& t : got.tensors()) {
        EXPECT_EQ(type_name(t.type), t.shape.size() == 1 ? "F32" : "Q8_0") << t.name;
    }
    // Q4_K -> float -> Q8_0 keeps the Q4_K values to within Q8_0's step.
    const auto src = gguf::File::open(in);
    EXPECT_LT(rel_rms(dequantized(got, "blk.2.ffn_up.weight"), dequantized(src, "blk.2.ffn_up.weight")), 0.02);
}


TEST(QuantizeCommand, UnknownTypeListsValidMixes) {
    const auto dir = scratch_dir();
    const auto r = run_tandem("quantize " + shell_quote(test_data("tiny-llama-Q4_K_M.gguf").string()) + " " +
                                  shell_quote((dir / "o.gguf").string()) + " Q4_K_X",
                              dir);
    expect_one_line_error(r, "unknown quantization type 'Q4_K_X'");
    EXPECT_NE(r.err.find("Q4_K_M"), std::string::npos);
    EXPECT_NE(r.err.find("Q2_K"), std::string::npos);
}

TEST(QuantizeCommand, VeryLowBitMixWithoutImatrixIsRefusedCleanly) {
    const auto in = test_data("tiny-llama-Q4_K_M.gguf");
    const auto dir = scratch_dir();
    const auto out = dir / "o.gguf";
    auto r = run_tandem("quantize " + shell_quote(in.string()) + " " + shell_quote(out.string()) +
                            " IQ2_XXS --allow-requantize",
                        dir);
    expect_one_line_error(r, "IQ2_XXS needs an importance matrix");
    EXPECT_FALSE(fs::exists(out));
    EXPECT_TRUE(tandem::testing::temp_files_of(out).empty());
    // --dry-run shows the types all the same.
    r = run_tandem("quantize " + shell_quote(in.string()) + " " + shell_quote(out.string()) +
                       " IQ2_XXS --allow-requantize --dry-run --json",
                   dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out).at("file_type"), 19);
    EXPECT_FALSE(fs::exists(out));
}

TEST(QuantizeCommand, MissingInput) {
    const auto dir = scratch_dir();
    const auto r = run_tandem("quantize " + shell_quote((dir / "absent.gguf").string()) + " " +
                                  shell_quote((dir / "o.gguf").string()) + " Q4_K_M",
                              dir);
    expect_one_line_error(r, "no such file");
}

TEST(QuantizeCommand, RefusesToRequantize) {
    const auto dir = scratch_dir();
    const auto out = dir / "o.gguf";
    const auto r = run_tandem("quantize " + shell_quote(test_data("tiny-llama-Q4_K_M.gguf").string()) + " " +
                                  shell_quote(out.string()) + " Q8_0",
                              dir);
    expect_one_line_error(r, "--allow-requantize");
    EXPECT_FALSE(fs::exists(out));
    EXPECT_TRUE(tandem::testing::temp_files_of(out).empty());
}

TEST(QuantizeCommand, RefusesToOverwriteInput) {
    const auto dir = scratch_dir();
    const auto copy = dir / "model.gguf";
    fs::copy_file(test_data("tiny-llama-Q4_K_M.gguf"), copy);
    const auto size = fs::file_size(copy);
    const auto r = run_tandem("quantize " + shell_quote(copy.string()) + " " +
                                  shell_quote((dir / "." / "model.gguf").string()) + " Q4_K_M",
                              dir);
    expect_one_line_error(r, "is the input file");
    EXPECT_EQ(fs::file_size(copy), size);
}

}  // namespace
}  // namespace tandem::quant
