// The GGUF reader on real files: the tiny Llama model committed under
// tests/data (so these run anywhere), and every model and vocabulary in
// ../shared where it is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>

#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "tests/test_paths.h"

namespace tandem::gguf {
namespace {

using tandem::testing::scratch_dir;
using tandem::testing::shared;
using tandem::testing::test_data;

std::filesystem::path tiny_model() { return test_data("tiny-llama-Q4_K_M.gguf"); }

using tandem::testing::contains;
using tandem::testing::error_of;

// Every tensor's bytes lie inside the file, after the header, and no two
// tensors share a byte.
void expect_tensors_inside_file(const File& f) {
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (const TensorInfo& t : f.tensors()) {
        const uint64_t start = f.data_offset() + t.offset;
        EXPECT_EQ(t.offset % f.alignment(), 0u) << t.name;
        EXPECT_LE(start + t.n_bytes, f.file_size()) << t.name;
        EXPECT_EQ(f.tensor_data(t).size(), t.n_bytes) << t.name;
        ranges.emplace_back(start, start + t.n_bytes);
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
}

TEST(GgufReader, TinyModelHeader) {
    const File f = File::open(tiny_model());
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.tensors().size(), 38u);
    EXPECT_EQ(f.metadata().size(), 25u);
    EXPECT_EQ(f.architecture(), "llama");
    EXPECT_EQ(f.alignment(), 32u);
    EXPECT_EQ(f.data_offset(), 726208u);
    EXPECT_EQ(f.file_size(), 9343168u);
    EXPECT_FALSE(f.header_only());
    EXPECT_EQ(f.get_uint("llama.block_count"), 4u);
    EXPECT_EQ(f.get_uint("llama.context_length"), 2048u);
    EXPECT_EQ(f.get_uint("llama.embedding_length"), 256u);
    EXPECT_EQ(f.get_uint("general.file_type"), 15u);
    EXPECT_FLOAT_EQ(static_cast<float>(f.get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
    EXPECT_DOUBLE_EQ(f.get_float("llama.rope.freq_base"), 10000.0);
    EXPECT_EQ(f.get_string("general.name"), "tiny-llama");
    EXPECT_EQ(f.find_bool("tokenizer.ggml.add_bos_token"), true);
    // The first record starts right after the 24-byte header.
    ASSERT_NE(f.find_key_value("general.architecture"), nullptr);
    EXPECT_EQ(f.find_key_value("general.architecture")->offset, 24u);
    EXPECT_EQ(f.metadata().front().key, "general.architecture");
}

TEST(GgufReader, TokensArrayOf32000Strings) {
    const File f = File::open(tiny_model());
    const Value* tokens = f.find("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    ASSERT_EQ(tokens->type, ValueType::ARRAY);
    const Array* a = tokens->as_array();
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->elem_type, ValueType::STRING);
    ASSERT_EQ(a->items.size(), 32000u);
    EXPECT_EQ(*a->items[0].as_string(), "<unk>");
    EXPECT_EQ(*a->items[1].as_string(), "<s>");
    EXPECT_EQ(*a->items[2].as_string(), "</s>");
    EXPECT_EQ(*a->items[3].as_string(), "<0x00>");
    EXPECT_EQ(*a->items[31999].as_string(), "\xe7\xbb\x99");

    const Array* scores = f.find("tokenizer.ggml.scores")->as_array();
    ASSERT_NE(scores, nullptr);
    EXPECT_EQ(scores->elem_type, ValueType::F32);
    EXPECT_EQ(scores->items.size(), 32000u);
    const Array* types = f.find("tokenizer.ggml.token_type")->as_array();
    ASSERT_NE(types, nullptr);
    EXPECT_EQ(types->elem_type, ValueType::I32);
    EXPECT_EQ(types->items.size(), 32000u);

    EXPECT_EQ(to_display_string(*tokens, 3), "[string x 32000: \"<unk>\", \"<s>\", \"</s>\", ...]");
}

TEST(GgufReader, TokenEmbeddingTensor) {
    const File f = File::open(tiny_model());
    const TensorInfo* t = f.find_tensor("token_embd.weight");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->type, quant::Type::Q6_K);
    EXPECT_EQ(t->shape, (std::vector<int64_t>{256, 32000}));
    EXPECT_EQ(t->offset, 1024u);
    EXPECT_EQ(t->n_elements, 256u * 32000u);
    EXPECT_EQ(t->n_bytes, 6720000u);  // 32000 rows of one 210-byte Q6_K block
    EXPECT_EQ(t->row_length(), 256);
    EXPECT_EQ(t->n_rows(), 32000);
    EXPECT_EQ(f.tensor_data(*t).data(), f.tensor_data(f.tensors()[0]).data() + 1024);

    const TensorInfo* norm = f.find_tensor("output_norm.weight");
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(norm->type, quant::Type::F32);
    EXPECT_EQ(norm->shape, (std::vector<int64_t>{256}));
    EXPECT_EQ(norm->offset, 0u);
    EXPECT_EQ(norm->n_rows(), 1);
    EXPECT_EQ(f.find_tensor("output.weight"), nullptr);  // tied embeddings

    const TensorInfo* down = f.find_tensor("blk.3.ffn_down.weight");
    ASSERT_NE(down, nullptr);
    EXPECT_EQ(down->type, quant::Type::Q6_K);
    EXPECT_EQ(down->shape, (std::vector<int64_t>{768, 256}));
    EXPECT_EQ(down->offset, 8233472u);
}

TEST(GgufReader, EveryTensorLiesInsideTheFile) {
    const File f = File::open(tiny_model());
    expect_tensors_inside_file(f);
    EXPECT_LE(f.total_tensor_bytes(), f.file_size() - f.data_offset());
    // The last tensor ends the file (ggml pads it to the alignment).
    uint64_t end = 0;
    for (const auto& t : f.tensors()) end = std::max(end, f.data_offset() + t.offset + t.n_bytes);
    EXPECT_EQ((end + f.alignment() - 1) / f.alignment() * f.alignment(), f.file_size());
}

TEST(GgufReader, MmapAndReadIntoMemoryGiveIdenticalBytes) {
    const File mapped = File::open(tiny_model(), {LoadMode::Mmap, false});
    const File read = File::open(tiny_model(), {LoadMode::ReadIntoMemory, false});
    ASSERT_EQ(mapped.tensors().size(), read.tensors().size());
    EXPECT_EQ(mapped.metadata().size(), read.metadata().size());
    for (size_t i = 0; i < mapped.metadata().size(); ++i) {
        EXPECT_EQ(mapped.metadata()[i].key, read.metadata()[i].key);
        EXPECT_TRUE(mapped.metadata()[i].value == read.metadata()[i].value) << mapped.metadata()[i].key;
    }
    for (size_t i = 0; i < mapped.tensors().size(); ++i) {
        const auto a = mapped.tensor_data(mapped.tensors()[i]);
        const auto b = read.tensor_data(read.tensors()[i]);
        ASSERT_EQ(a.size(), b.size());
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0) << mapped.tensors()[i].name;
        EXPECT_NE(a.data(), b.data());
    }
    // Owned buffers are page-aligned like mappings, so views keep the
    // file's alignment in both modes.
    for (const auto& t : read.tensors()) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(read.tensor_data(t).data()) % read.alignment(), 0u) << t.name;
    }
}

TEST(GgufReader, MlockPinsOrExplainsTheLimit) {
    for (const LoadMode mode : {LoadMode::Mmap, LoadMode::ReadIntoMemory}) {
        try {
            const File f = File::open(tiny_model(), {mode, true});
            EXPECT_EQ(f.tensors().size(), 38u);
        } catch (const tandem::Error& e) {
            EXPECT_TRUE(contains(e.what(), "RLIMIT_MEMLOCK")) << e.what();
        }
    }
}

TEST(GgufReader, TypedLookupsCheckTypes) {
    const File f = File::open(tiny_model());
    EXPECT_EQ(f.find_string("no.such.key"), std::nullopt);
    EXPECT_EQ(f.find_uint("no.such.key"), std::nullopt);
    EXPECT_EQ(f.find_float("no.such.key"), std::nullopt);
    EXPECT_EQ(f.find_bool("no.such.key"), std::nullopt);
    EXPECT_EQ(f.find("no.such.key"), nullptr);
    // Integers convert to floats, not the other way round.
    EXPECT_DOUBLE_EQ(*f.find_float("llama.block_count"), 4.0);

    std::string msg = error_of([&] { f.find_uint("general.architecture"); });
    EXPECT_TRUE(contains(msg, "offset 0x18")) << msg;
    EXPECT_TRUE(contains(msg, "key 'general.architecture'")) << msg;
    EXPECT_TRUE(contains(msg, "expected a non-negative integer, found string \"llama\"")) << msg;

    msg = error_of([&] { f.find_string("llama.block_count"); });
    EXPECT_TRUE(contains(msg, "expected a string, found u32 4")) << msg;
    msg = error_of([&] { f.find_bool("llama.rope.freq_base"); });
    EXPECT_TRUE(contains(msg, "expected a bool, found f32 10000")) << msg;
    msg = error_of([&] { f.get_float("tokenizer.ggml.tokens"); });
    EXPECT_TRUE(contains(msg, "found array [string x 32000")) << msg;

    msg = error_of([&] { f.get_string("llama.missing"); });
    EXPECT_TRUE(contains(msg, "missing key 'llama.missing'")) << msg;
    EXPECT_TRUE(contains(msg, tiny_model().string())) << msg;
    msg = error_of([&] { f.get_uint("llama.missing"); });
    EXPECT_TRUE(contains(msg, "missing key")) << msg;
}

const uint8_t* f_data(const File& f) { return f.tensor_data(f.tensors()[0]).data(); }

TEST(GgufReader, FileIsMovable) {
    File a = File::open(tiny_model());
    const auto* first = f_data(a);
    File b = std::move(a);
    EXPECT_EQ(b.tensors().size(), 38u);
    EXPECT_EQ(f_data(b), first);  // the mapping moved with the File, not copied
    File c = File::open(tiny_model(), {LoadMode::ReadIntoMemory, false});
    c = std::move(b);
    EXPECT_EQ(f_data(c), first);
    EXPECT_EQ(c.architecture(), "llama");
}

TEST(GgufReader, OpeningNonFilesFailsCleanly) {
    const auto dir = scratch_dir();
    std::string msg = error_of([&] { File::open(dir / "absent.gguf"); });
    EXPECT_TRUE(contains(msg, "absent.gguf: cannot open: No such file or directory")) << msg;

    msg = error_of([&] { File::open(dir); });
    EXPECT_TRUE(contains(msg, "is a directory")) << msg;

    const auto empty = dir / "empty.gguf";
    std::ofstream(empty).close();
    for (const LoadMode mode : {LoadMode::Mmap, LoadMode::ReadIntoMemory}) {
        msg = error_of([&] { File::open(empty, {mode, false}); });
        EXPECT_TRUE(contains(msg, "empty.gguf: offset 0x0: file is empty")) << msg;
    }

    const auto text = dir / "notes.gguf";
    std::ofstream(text) << "hello, this is not a model\n";
    msg = error_of([&] { File::open(text); });
    EXPECT_TRUE(contains(msg, "notes.gguf: offset 0x0: header: magic: expected \"GGUF\", found \"hell\"")) << msg;

    msg = error_of([&] { File::open("/dev/null"); });
    EXPECT_TRUE(contains(msg, "not a regular file")) << msg;
}

TEST(GgufReader, ValueAccessorsConvertOnlyWhatFits) {
    EXPECT_EQ(Value::u32(7).as_uint(), 7u);
    EXPECT_EQ(Value::u32(7).as_int(), 7);
    EXPECT_EQ(Value::i32(-7).as_uint(), std::nullopt);
    EXPECT_EQ(Value::i32(-7).as_int(), -7);
    EXPECT_EQ(Value::u64(UINT64_MAX).as_int(), std::nullopt);
    EXPECT_EQ(Value::i64(5).as_uint(), 5u);
    EXPECT_EQ(Value::f32(1.5f).as_uint(), std::nullopt);
    EXPECT_EQ(Value::f32(1.5f).as_float(), 1.5);
    EXPECT_EQ(Value::u8(3).as_float(), 3.0);
    EXPECT_EQ(Value::boolean(true).as_bool(), true);
    EXPECT_EQ(Value::u8(1).as_bool(), std::nullopt);
    EXPECT_EQ(Value::str("x").as_uint(), std::nullopt);
    EXPECT_EQ(*Value::str("x").as_string(), "x");
    EXPECT_EQ(Value::u8(1).as_string(), nullptr);
    EXPECT_EQ(Value::u8(1).as_array(), nullptr);
    EXPECT_TRUE(Value::u8(1) == Value::u8(1));
    EXPECT_FALSE(Value::u8(1) == Value::u16(1));  // the width is part of the value
    EXPECT_EQ(value_type_name(ValueType::F64), "f64");
    EXPECT_EQ(value_type_size(ValueType::I16), 2u);
    EXPECT_EQ(value_type_size(ValueType::STRING), 0u);
    EXPECT_THROW(Value::array(ValueType::U8, {Value::u16(1)}), tandem::InternalError);
}

TEST(GgufReader, DisplayStrings) {
    EXPECT_EQ(to_display_string(Value::u32(4)), "4");
    EXPECT_EQ(to_display_string(Value::i8(-3)), "-3");
    EXPECT_EQ(to_display_string(Value::f32(1e-5f)), "1e-05");
    EXPECT_EQ(to_display_string(Value::f64(0.1)), "0.1");
    EXPECT_EQ(to_display_string(Value::boolean(false)), "false");
    EXPECT_EQ(to_display_string(Value::str("a\"b\n\x1b")), "\"a\\\"b\\n\\x1b\"");
    EXPECT_EQ(to_display_string(Value::i32_array({1, 2, 3}), 2), "[i32 x 3: 1, 2, ...]");
    EXPECT_EQ(to_display_string(Value::i32_array({}), 2), "[i32 x 0]");
    EXPECT_EQ(to_display_string(Value::i32_array({1}), 0), "[i32 x 1: ...]");
    const Value nested = Value::array(ValueType::ARRAY, {Value::f32_array({0.5f}), Value::string_array({"x", "y"})});
    EXPECT_EQ(to_display_string(nested), "[array x 2: [f32 x 1: 0.5], [string x 2: \"x\", \"y\"]]");
}

// Every model and vocabulary file in ../shared opens, and its tensors lie
// inside it. The vocabulary files hold no tensors and end without padding.
TEST(GgufReader, SharedAssetsAllOpen) {
    TANDEM_REQUIRE_SHARED(shared("models"));
    int opened = 0;
    for (const char* folder : {"models", "vocab"}) {
        for (const auto& entry : std::filesystem::directory_iterator(shared(folder))) {
            if (entry.path().extension() != ".gguf") continue;
            SCOPED_TRACE(entry.path().string());
            std::optional<File> opened_file;
            try {
                opened_file.emplace(File::open(entry.path()));
            } catch (const std::exception& e) {
                // A file of an open issue (i-quants, MXFP4): refused in the words for it.
                EXPECT_TRUE(tandem::testing::refused_as_unsupported(e)) << e.what();
                continue;
            }
            const File& f = *opened_file;
            EXPECT_FALSE(f.architecture().empty());
            EXPECT_TRUE(f.find("tokenizer.ggml.tokens") != nullptr);
            expect_tensors_inside_file(f);
            ++opened;
        }
    }
    EXPECT_GE(opened, 12);
    const File b = File::open(shared("models/tiny-llama-b-Q4_K_M.gguf"));
    EXPECT_EQ(b.tensors().size(), 57u);
    EXPECT_NE(b.find_tensor("output.weight"), nullptr);
}

}  // namespace
}  // namespace tandem::gguf
