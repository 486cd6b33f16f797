// `tandem inspect`: the JSON output must agree with the GGUF reader tensor
// by tensor (scripts and the planner tests rely on it), the human output
// must show the table, and a bad file must end in a one-line error, not a
// crash.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/gguf/gguf_file.h"
#include "runtime/quant/quant_types.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace tandem {
namespace {

using nlohmann::json;
using testing::run_tandem;
using testing::expect_one_line_error;
using testing::count_lines;
using testing::shell_quote;

const std::filesystem::path kTinyModel = testing::test_data("tiny-llama-Q4_K_M.gguf");


TEST(InspectCommand, JsonMatchesTheReader) {
    const auto dir = testing::scratch_dir();
    const auto r = run_tandem("inspect --json " + shell_quote(kTinyModel.string()), dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json j = json::parse(r.out);

    const gguf::File f = gguf::File::open(kTinyModel);
    EXPECT_EQ(j.at("architecture"), "llama");
    EXPECT_EQ(j.at("version"), f.version());
    EXPECT_EQ(j.at("file_size").get<uint64_t>(), std::filesystem::file_size(kTinyModel));
    EXPECT_EQ(j.at("header_only"), false);
    EXPECT_EQ(j.at("metadata").at("general.architecture"), "llama");
    EXPECT_EQ(j.at("metadata").at("llama.block_count"), 4);
    EXPECT_EQ(j.at("metadata").at("llama.embedding_length"), 256);
    EXPECT_EQ(j.at("metadata").at("general.file_type"), 15);
    EXPECT_EQ(j.at("file_type"), "Q4_K_M");

    // A 32000-entry vocabulary is summarized, not dumped.
    const json& tokens = j.at("metadata").at("tokenizer.ggml.tokens");
    EXPECT_EQ(tokens.at("type"), "array");
    EXPECT_EQ(tokens.at("elem_type"), "string");
    EXPECT_EQ(tokens.at("count"), 32000);
    EXPECT_EQ(tokens.at("head").at(1), "<s>");
    EXPECT_EQ(j.at("tokenizer").at("vocab_size"), 32000);
    EXPECT_EQ(j.at("tokenizer").at("bos_id"), 1);
    EXPECT_EQ(j.at("tokenizer").at("bos"), "<s>");
    EXPECT_EQ(j.at("tokenizer").at("eos"), "</s>");

    const json& tensors = j.at("tensors");
    ASSERT_EQ(tensors.size(), 38u);
    ASSERT_EQ(tensors.size(), f.tensors().size());
    uint64_t sum = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
        const json& t = tensors[i];
        const gguf::TensorInfo& info = f.tensors()[i];
        SCOPED_TRACE(info.name);
        EXPECT_EQ(t.at("name"), info.name);
        EXPECT_EQ(t.at("type"), std::string(quant::traits(info.type).name));
        EXPECT_EQ(t.at("shape").get<std::vector<int64_t>>(), info.shape);
        EXPECT_EQ(t.at("bytes").get<uint64_t>(), info.n_bytes);
        EXPECT_EQ(t.at("data_offset_rel").get<uint64_t>(), info.offset);
        EXPECT_EQ(t.at("offset").get<uint64_t>(), f.data_offset() + info.offset);
        // Bytes follow from shape and type.
        const uint64_t rows = info.n_elements / static_cast<uint64_t>(info.shape[0]);
        EXPECT_EQ(info.n_bytes, quant::row_bytes(info.type, info.shape[0]).value() * rows);
        sum += info.n_bytes;
    }
    EXPECT_EQ(j.at("total_tensor_bytes").get<uint64_t>(), sum);
    EXPECT_EQ(j.at("total_tensor_bytes").get<uint64_t>(), f.total_tensor_bytes());

    // The mix as the file holds it (llama.cpp's Q4_K_M on 4 layers).
    auto type_of = [&](const std::string& name) {
        for (const auto& t : tensors) {
            if (t.at("name") == name) return t.at("type").get<std::string>();
        }
        return std::string("absent");
    };
    EXPECT_EQ(type_of("token_embd.weight"), "Q6_K");
    EXPECT_EQ(type_of("output_norm.weight"), "F32");
    EXPECT_EQ(type_of("blk.0.attn_norm.weight"), "F32");
    EXPECT_EQ(type_of("blk.0.attn_q.weight"), "Q4_K");
    EXPECT_EQ(type_of("blk.2.ffn_down.weight"), "Q6_K");
    EXPECT_EQ(type_of("output.weight"), "absent");  // tied embeddings

    // Offsets: aligned, in the data section, non-overlapping, inside the file.
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    for (const auto& t : tensors) spans.emplace_back(t.at("offset").get<uint64_t>(), t.at("bytes").get<uint64_t>());
    std::sort(spans.begin(), spans.end());
    for (size_t i = 0; i < spans.size(); ++i) {
        EXPECT_EQ(spans[i].first % f.alignment(), 0u);
        EXPECT_GE(spans[i].first, f.data_offset());
        if (i + 1 < spans.size()) {
            EXPECT_LE(spans[i].first + spans[i].second, spans[i + 1].first);
        }
    }
    EXPECT_LE(spans.back().first + spans.back().second, f.file_size());

    // Per-layer and per-type totals add up.
    const auto per_layer = j.at("bytes_per_layer").get<std::vector<uint64_t>>();
    ASSERT_EQ(per_layer.size(), 4u);
    uint64_t layer_sum = j.at("non_layer_bytes").get<uint64_t>();
    for (uint64_t b : per_layer) layer_sum += b;
    EXPECT_EQ(layer_sum, sum);
    EXPECT_EQ(per_layer[0], per_layer[1]);
    EXPECT_GT(per_layer[2], per_layer[1]);  // layers 2-3 get Q6_K attn_v / ffn_down
    uint64_t type_sum = 0;
    for (const auto& [name, bytes] : j.at("bytes_per_type").items()) type_sum += bytes.get<uint64_t>();
    EXPECT_EQ(type_sum, sum);
    uint64_t n_params = 0;
    for (const auto& t : f.tensors()) n_params += t.n_elements;
    EXPECT_EQ(j.at("n_params").get<uint64_t>(), n_params);
}

TEST(InspectCommand, JsonNoTensorsLeavesOutTheList) {
    const auto dir = testing::scratch_dir();
    const auto r = run_tandem("inspect --json --no-tensors " + shell_quote(kTinyModel.string()), dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json j = json::parse(r.out);
    EXPECT_FALSE(j.contains("tensors"));
    EXPECT_EQ(j.at("n_tensors"), 38);
    EXPECT_GT(j.at("total_tensor_bytes").get<uint64_t>(), 0u);
}

TEST(InspectCommand, HumanOutputShowsEverySection) {
    const auto dir = testing::scratch_dir();
    const auto r = run_tandem("inspect " + shell_quote(kTinyModel.string()), dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const char* needle : {"GGUF v3", "architecture: llama", "llama.context_length = 2048",
                               "llama.attention.head_count_kv = 4", "tokenizer:", "32000 tokens", "bos 1 '<s>'",
                               "tensors (38):", "token_embd.weight", "blk.3.ffn_down.weight", "[256, 32000]", "Q6_K",
                               "bytes per layer:", "blk.3", "non-layer", "bytes per type:", "bits/weight"}) {
        EXPECT_NE(r.out.find(needle), std::string::npos) << "missing '" << needle << "' in:\n" << r.out;
    }

    const auto brief = run_tandem("inspect --no-tensors " + shell_quote(kTinyModel.string()), dir);
    ASSERT_EQ(brief.exit_code, 0) << brief.err;
    EXPECT_EQ(brief.out.find("blk.0.attn_q.weight"), std::string::npos);
    EXPECT_NE(brief.out.find("bytes per type:"), std::string::npos);
}

TEST(InspectCommand, GarbageFileIsAOneLineError) {
    const auto dir = testing::scratch_dir();
    const auto bad = dir / "garbage.gguf";
    {
        std::ofstream out(bad, std::ios::binary);
        for (int i = 0; i < 4096; ++i) out.put(static_cast<char>((i * 131 + 7) & 0xff));
    }
    expect_one_line_error(run_tandem("inspect " + shell_quote(bad.string()), dir));
    expect_one_line_error(run_tandem("inspect --json " + shell_quote(bad.string()), dir));
}

TEST(InspectCommand, TruncatedAndMissingFilesAreOneLineErrors) {
    const auto dir = testing::scratch_dir();
    const auto truncated = dir / "truncated.gguf";
    {
        const std::string bytes = testing::slurp(kTinyModel);
        std::ofstream out(truncated, std::ios::binary);
        out.write(bytes.data(), 5000);  // inside the vocabulary
    }
    expect_one_line_error(run_tandem("inspect " + shell_quote(truncated.string()), dir));
    {
        const std::string bytes = testing::slurp(kTinyModel);
        std::ofstream out(truncated, std::ios::binary | std::ios::trunc);
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 1000));  // inside the data
    }
    expect_one_line_error(run_tandem("inspect " + shell_quote(truncated.string()), dir));
    expect_one_line_error(run_tandem("inspect " + shell_quote((dir / "absent.gguf").string()), dir));
}

}  // namespace
}  // namespace tandem
