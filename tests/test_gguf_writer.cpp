// The GGUF writer: what it writes reads back identically, it never leaves a
// partial file under the real name, and it refuses declarations the reader
// would reject.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <random>

#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/gguf/gguf_writer.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace tandem::gguf {
namespace {

using tandem::testing::scratch_dir;
using tandem::testing::slurp;
using tandem::testing::test_data;

using tandem::testing::contains;
using tandem::testing::error_of;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = static_cast<uint8_t>(rng());
    return v;
}

std::vector<uint8_t> file_bytes(const std::filesystem::path& p) {
    const std::string s = slurp(p);
    return {s.begin(), s.end()};
}

// One key per value type, arrays of every element type, arrays of strings,
// nested arrays and empty ones: everything the format can hold.
std::vector<std::pair<std::string, Value>> every_kind_of_value() {
    std::vector<std::pair<std::string, Value>> kv = {
        {"general.architecture", Value::str("llama")},
        {"t.u8", Value::u8(250)},
        {"t.i8", Value::i8(-120)},
        {"t.u16", Value::u16(65000)},
        {"t.i16", Value::i16(-32000)},
        {"t.u32", Value::u32(4000000000u)},
        {"t.i32", Value::i32(-2000000000)},
        {"t.u64", Value::u64(std::numeric_limits<uint64_t>::max())},
        {"t.i64", Value::i64(std::numeric_limits<int64_t>::min())},
        {"t.f32", Value::f32(1e-5f)},
        {"t.f64", Value::f64(-0.1)},
        {"t.f32.inf", Value::f32(std::numeric_limits<float>::infinity())},
        {"t.bool.true", Value::boolean(true)},
        {"t.bool.false", Value::boolean(false)},
        {"t.string", Value::str("héllo ✓")},
        {"t.string.empty", Value::str("")},
        {"t.string.nul", Value::str(std::string("a\0b", 3))},
        {"t.strings", Value::string_array({"<unk>", "", "▁the", std::string(300, 'x')})},
        {"t.f32s", Value::f32_array({0.f, -1.5f, 3.25f})},
        {"t.i32s", Value::i32_array({1, -2, 3})},
        {"t.empty", Value::array(ValueType::U64, {})},
        {"t.nested",
         Value::array(ValueType::ARRAY,
                      {Value::array(ValueType::U32, {Value::u32(1), Value::u32(2)}), Value::array(ValueType::U32, {}),
                       Value::array(ValueType::U32, {Value::u32(3)})})},
        {"t.nested.strings",
         Value::array(ValueType::ARRAY, {Value::string_array({"a", "b"}), Value::string_array({"c"})})},
        {"t.nested.mixed",
         Value::array(ValueType::ARRAY, {Value::f32_array({1.f}), Value::array(ValueType::BOOL, {Value::boolean(true)})})},
        {"t.deep", Value::array(ValueType::ARRAY,
                                {Value::array(ValueType::ARRAY,
                                              {Value::array(ValueType::ARRAY, {Value::i32_array({7})})})})},
    };
    return kv;
}

Value scalar_of(ValueType type) {
    switch (type) {
        case ValueType::U8: return Value::u8(1);
        case ValueType::I8: return Value::i8(-1);
        case ValueType::U16: return Value::u16(2);
        case ValueType::I16: return Value::i16(-2);
        case ValueType::U32: return Value::u32(3);
        case ValueType::I32: return Value::i32(-3);
        case ValueType::F32: return Value::f32(0.25f);
        case ValueType::BOOL: return Value::boolean(true);
        case ValueType::U64: return Value::u64(4);
        case ValueType::I64: return Value::i64(-4);
        case ValueType::F64: return Value::f64(0.125);
        default: return Value::str("s");
    }
}

TEST(GgufWriter, EveryValueTypeRoundTrips) {
    const auto dir = scratch_dir();
    const auto path = dir / "values.gguf";
    auto values = every_kind_of_value();
    // Arrays of each scalar type, built explicitly (not relying on order).
    for (uint32_t t = 0; t < kValueTypeCount; ++t) {
        const auto type = static_cast<ValueType>(t);
        if (type == ValueType::ARRAY) continue;
        values.emplace_back(fmt::format("t.array_of.{}", value_type_name(type)),
                            Value::array(type, {scalar_of(type), scalar_of(type)}));
    }
    {
        Writer w(path);
        for (const auto& [k, v] : values) w.set(k, v);
        w.finish();
    }
    const File f = File::open(path);
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.tensors().size(), 0u);
    ASSERT_EQ(f.metadata().size(), values.size() + 1);  // + general.alignment, written last
    for (size_t i = 0; i < values.size(); ++i) {
        EXPECT_EQ(f.metadata()[i].key, values[i].first);
        EXPECT_TRUE(f.metadata()[i].value == values[i].second)
            << values[i].first << ": wrote " << to_display_string(values[i].second) << ", read "
            << to_display_string(f.metadata()[i].value);
    }
    EXPECT_EQ(f.metadata().back().key, "general.alignment");
    EXPECT_TRUE(f.metadata().back().value == Value::u32(32));
    EXPECT_EQ(f.find("t.string.nul")->as_string()->size(), 3u);
    EXPECT_EQ(f.find_uint("t.u64"), std::numeric_limits<uint64_t>::max());
}

TEST(GgufWriter, TensorsRoundTrip) {
    const auto dir = scratch_dir();
    const auto path = dir / "tensors.gguf";
    const std::vector<TensorSpec> specs = {
        {"a.f32", {64, 3}, quant::Type::F32},
        {"b.f16", {32}, quant::Type::F16},
        {"c.q8_0", {64, 2, 2}, quant::Type::Q8_0},
        {"d.q4_k", {256, 2, 1, 3}, quant::Type::Q4_K},
        {"e.bf16", {8}, quant::Type::BF16},
    };
    std::vector<std::vector<uint8_t>> data;
    {
        Writer w(path, 64);
        w.set("general.architecture", Value::str("test"));
        for (const auto& s : specs) w.add_tensor(s);
        EXPECT_EQ(w.tensor_bytes(0), 64u * 3 * 4);
        EXPECT_EQ(w.tensor_bytes(2), 8u * 34);  // 2 blocks per row, 4 rows
        EXPECT_EQ(w.tensor_bytes(3), 6u * 144);
        w.write_header();
        for (size_t i = 0; i < specs.size(); ++i) {
            data.push_back(random_bytes(w.tensor_bytes(i), static_cast<uint32_t>(i)));
            EXPECT_EQ(w.next_tensor(), i);
            w.write_tensor_data(data.back());
        }
        w.finish();
    }
    EXPECT_TRUE(tandem::testing::temp_files_of(path).empty());
    for (const LoadMode mode : {LoadMode::Mmap, LoadMode::ReadIntoMemory}) {
        const File f = File::open(path, {mode, false});
        EXPECT_EQ(f.alignment(), 64u);
        EXPECT_EQ(f.data_offset() % 64, 0u);
        EXPECT_EQ(f.file_size() % 64, 0u);
        ASSERT_EQ(f.tensors().size(), specs.size());
        for (size_t i = 0; i < specs.size(); ++i) {
            const TensorInfo& t = f.tensors()[i];
            EXPECT_EQ(t.name, specs[i].name);
            EXPECT_EQ(t.shape, specs[i].shape);
            EXPECT_EQ(t.type, specs[i].type);
            EXPECT_EQ(t.offset % 64, 0u);
            const auto bytes = f.tensor_data(t);
            ASSERT_EQ(bytes.size(), data[i].size());
            EXPECT_EQ(std::memcmp(bytes.data(), data[i].data(), bytes.size()), 0) << t.name;
        }
    }
}

TEST(GgufWriter, CopyOfTheTinyModelIsByteIdentical) {
    const File in = File::open(test_data("tiny-llama-Q4_K_M.gguf"));
    const auto path = scratch_dir() / "copy.gguf";
    {
        Writer w(path, in.alignment());
        for (const KeyValue& kv : in.metadata()) w.set(kv.key, kv.value);
        for (const TensorInfo& t : in.tensors()) w.add_tensor({t.name, t.shape, t.type});
        w.write_header();
        for (const TensorInfo& t : in.tensors()) w.write_tensor_data(in.tensor_data(t));
        w.finish();
    }
    const auto original = file_bytes(in.name());
    const auto copy = file_bytes(path);
    ASSERT_EQ(copy.size(), original.size());
    EXPECT_TRUE(copy == original);
}

TEST(GgufWriter, Version2FileIsRead) {
    const auto path = scratch_dir() / "v3.gguf";
    const auto payload = random_bytes(32 * 4, 7);
    {
        Writer w(path);
        w.set("general.architecture", Value::str("llama"));
        w.set("llama.block_count", Value::u32(2));
        w.add_tensor({"w", {32}, quant::Type::F32});
        w.write_header();
        w.write_tensor_data(payload);
        w.finish();
    }
    auto bytes = file_bytes(path);
    uint32_t version = 0;
    std::memcpy(&version, bytes.data() + 4, 4);
    ASSERT_EQ(version, 3u);
    version = 2;  // v2 and v3 share the layout; v3 only added big-endian files
    std::memcpy(bytes.data() + 4, &version, 4);
    const File f = File::from_bytes(bytes, "v2.gguf");
    EXPECT_EQ(f.version(), 2u);
    EXPECT_EQ(f.get_uint("llama.block_count"), 2u);
    const auto data = f.tensor_data(f.tensors().at(0));
    EXPECT_EQ(std::vector<uint8_t>(data.begin(), data.end()), payload);
}

TEST(GgufWriter, HeaderOnlyFiles) {
    const auto dir = scratch_dir();
    const auto path = dir / "plan.gguf";
    {
        Writer w(path);
        w.set("general.architecture", Value::str("llama"));
        w.set(std::string(kHeaderOnlyKey), Value::boolean(true));
        w.add_tensor({"big", {4096, 4096}, quant::Type::Q4_K});
        w.add_tensor({"norm", {4096}, quant::Type::F32});
        w.write_header();
        w.finish();
    }
    const File f = File::open(path);
    EXPECT_TRUE(f.header_only());
    EXPECT_EQ(f.file_size(), f.data_offset());  // no data section at all
    ASSERT_EQ(f.tensors().size(), 2u);
    EXPECT_EQ(f.total_tensor_bytes(), 4096u * 16 * 144 + 4096 * 4);
    const std::string msg = error_of([&] { f.tensor_data(f.tensors()[0]); });
    EXPECT_TRUE(contains(msg, "tandem synth --header-only")) << msg;
    EXPECT_TRUE(contains(msg, "planned but not run")) << msg;
    EXPECT_TRUE(contains(msg, "'big'")) << msg;

    // Without the key, a header with no data is refused by the writer...
    const auto bad = dir / "bad.gguf";
    {
        Writer w(bad);
        w.set("general.architecture", Value::str("llama"));
        w.add_tensor({"big", {256}, quant::Type::Q4_K});
        w.write_header();
        const std::string m = error_of([&] { w.finish(); });
        EXPECT_TRUE(contains(m, "tandem.header_only")) << m;
    }
    EXPECT_FALSE(std::filesystem::exists(bad));
    EXPECT_FALSE(std::filesystem::exists(bad.string() + ".partial"));

    // ...and set to false it is no header-only file: the data is missing.
    const auto no = dir / "no.gguf";
    {
        Writer w(no);
        w.set("general.architecture", Value::str("llama"));
        w.set(std::string(kHeaderOnlyKey), Value::boolean(false));
        w.add_tensor({"big", {256}, quant::Type::Q4_K});
        EXPECT_THROW(w.finish(), tandem::Error);
    }
}

TEST(GgufWriter, PartialFileRemovedWithoutFinish) {
    const auto dir = scratch_dir();
    const auto path = dir / "model.gguf";
    std::ofstream(path) << "the previous model";
    {
        Writer w(path);
        w.set("general.architecture", Value::str("llama"));
        w.add_tensor({"a", {32}, quant::Type::F32});
        w.add_tensor({"b", {32}, quant::Type::F32});
        w.write_header();
        w.write_tensor_data(random_bytes(128, 1));
        EXPECT_EQ(tandem::testing::temp_files_of(path).size(), 1u);
        EXPECT_EQ(slurp(path), "the previous model");  // not clobbered while writing
    }
    EXPECT_TRUE(tandem::testing::temp_files_of(path).empty());
    EXPECT_EQ(slurp(path), "the previous model");

    {
        Writer w(path);
        w.set("general.architecture", Value::str("llama"));
        w.finish();
    }
    EXPECT_TRUE(tandem::testing::temp_files_of(path).empty());
    EXPECT_EQ(File::open(path).architecture(), "llama");
}

TEST(GgufWriter, SetReplacesAndKeepsOrder) {
    const auto path = scratch_dir() / "order.gguf";
    {
        Writer w(path, 128);
        w.set("general.architecture", Value::str("a"));
        w.set("x", Value::u32(1));
        w.set("general.alignment", Value::u64(7));  // position kept, value is the writer's
        w.set("y", Value::u32(2));
        w.set("x", Value::str("replaced"));
        w.finish();
    }
    const File f = File::open(path);
    ASSERT_EQ(f.metadata().size(), 4u);
    EXPECT_EQ(f.metadata()[1].key, "x");
    EXPECT_EQ(f.get_string("x"), "replaced");
    EXPECT_EQ(f.metadata()[2].key, "general.alignment");
    EXPECT_TRUE(f.metadata()[2].value == Value::u32(128));
    EXPECT_EQ(f.alignment(), 128u);
}

TEST(GgufWriter, RejectsWhatTheReaderWouldReject) {
    const auto dir = scratch_dir();
    const auto path = dir / "bad.gguf";
    EXPECT_THROW(Writer(path, 0), tandem::Error);
    EXPECT_THROW(Writer(path, 48), tandem::Error);
    EXPECT_THROW(Writer(path, uint64_t{1} << 32), tandem::Error);

    Writer w(path);
    const auto expect_error = [](auto&& fn, std::string_view phrase) {
        const std::string msg = error_of(fn);
        EXPECT_TRUE(contains(msg, phrase)) << "expected '" << phrase << "' in: " << msg;
    };
    expect_error([&] { w.set("", Value::u8(1)); }, "non-empty key");
    expect_error([&] { w.set(std::string(70000, 'k'), Value::u8(1)); }, "at most 65535 bytes");
    expect_error([&] { w.set("k", Value{ValueType::U8, uint64_t{300}}); }, "does not match its declared type u8");
    expect_error([&] { w.set("k", Value{ValueType::I8, int64_t{-300}}); }, "declared type i8");
    expect_error([&] { w.set("k", Value{ValueType::STRING, uint64_t{1}}); }, "declared type string");
    expect_error([&] { w.set("k", Value{ValueType::ARRAY, Array{ValueType::U8, {Value::u16(1)}}}); },
                 "expected array items of type u8, found one of type u16");
    expect_error([&] { w.set("k", Value{static_cast<ValueType>(13), uint64_t{1}}); }, "found 13");
    Value deep = Value::u8(1);
    for (int i = 0; i <= kMaxArrayDepth; ++i) deep = Value::array(deep.type, {deep});
    expect_error([&] { w.set("k", deep); }, "nested at most");

    expect_error([&] { w.add_tensor({"", {32}, quant::Type::F32}); }, "non-empty tensor name");
    expect_error([&] { w.add_tensor({"t", {}, quant::Type::F32}); }, "1 to 4 dimensions, found 0");
    expect_error([&] { w.add_tensor({"t", {1, 1, 1, 1, 1}, quant::Type::F32}); }, "found 5");
    expect_error([&] { w.add_tensor({"t", {32, -1}, quant::Type::F32}); }, "ne[1]: expected a positive dimension");
    expect_error([&] { w.add_tensor({"t", {100}, quant::Type::Q4_K}); }, "multiple of 256 (the Q4_K block size)");
    expect_error([&] { w.add_tensor({"t", {1 << 30, 1 << 30, 1 << 30}, quant::Type::F32}); }, "overflow");
    w.add_tensor({"t", {32}, quant::Type::F32});
    expect_error([&] { w.add_tensor({"t", {32}, quant::Type::F32}); }, "duplicate");

    expect_error([&] { w.write_tensor_data(random_bytes(128, 0)); }, "before write_header");
    expect_error([&] { w.write_header(); }, "general.architecture");
    w.set("general.architecture", Value::str("llama"));
    w.set(std::string(kHeaderOnlyKey), Value::u8(1));
    expect_error([&] { w.write_header(); }, "expected a bool");
    w.set(std::string(kHeaderOnlyKey), Value::boolean(false));
    w.write_header();
    expect_error([&] { w.set("late", Value::u8(1)); }, "frozen");
    expect_error([&] { w.add_tensor({"late", {32}, quant::Type::F32}); }, "frozen");
    expect_error([&] { w.write_header(); }, "frozen");
    expect_error([&] { w.write_tensor_data(random_bytes(127, 0)); }, "tensor 't': expected 128 bytes, found 127");
    w.write_tensor_data(random_bytes(128, 0));
    expect_error([&] { w.write_tensor_data(random_bytes(128, 0)); }, "one more");
    w.finish();
    expect_error([&] { w.finish(); }, "twice");
    EXPECT_EQ(File::open(path).tensors().size(), 1u);
}

TEST(GgufWriter, UnwritableDestinationIsAnError) {
    const auto dir = scratch_dir();
    Writer w(dir / "no-such-dir" / "x.gguf");
    w.set("general.architecture", Value::str("llama"));
    const std::string msg = error_of([&] { w.write_header(); });
    EXPECT_TRUE(contains(msg, "cannot create")) << msg;
}

}  // namespace
}  // namespace tandem::gguf
