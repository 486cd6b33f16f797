// Hostile input for the GGUF reader: hand-made files that are wrong in one
// field each, and the real tiny model cut short at many points. Every one
// must raise tandem::Error naming the file and a byte offset, never crash,
// hang or allocate without bound.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <thread>

#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "tests/gguf_bytes.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace tandem::gguf {
namespace {

using tandem::testing::GgufBytes;

constexpr uint32_t kF32 = 0;
constexpr uint32_t kQ8_0 = 8;

// The first key is long, and its value a long string, so that a cut inside
// them still leaves enough bytes for the header's counts to be plausible:
// the cut is then reported by the read it interrupts, not by the up-front
// count check (which fires for cuts in the first ~100 bytes).
constexpr std::string_view kLongKey = "test.a.deliberately.long.key.so.that.cuts.inside.it.keep.counts.plausible";

// A small valid file, with the offsets of each section recorded so that the
// tests can cut or patch it in a chosen place.
struct Sample {
    GgufBytes b;
    size_t first_key = 0;     // length field of the first key
    size_t long_value = 0;    // the first key's string value
    size_t string_value = 0;  // general.architecture's string value
    size_t array_value = 0;   // test.numbers' array head (element type)
    size_t words_value = 0;   // test.words' array head
    size_t tensor_info = 0;   // first tensor info
    size_t second_tensor_info = 0;
    size_t padding = 0;       // end of the tensor infos
    size_t data = 0;          // data section
};

Sample make_sample() {
    Sample s;
    GgufBytes& b = s.b;
    b.header(/*tensors=*/2, /*kv=*/5);
    s.first_key = b.size();
    b.key(kLongKey, ValueType::STRING);
    s.long_value = b.size();
    b.str(std::string(100, 'v'));
    b.key("general.architecture", ValueType::STRING);
    s.string_value = b.size();
    b.str("llama");
    b.kv_u32("general.alignment", 32);
    b.key("test.numbers", ValueType::ARRAY);
    s.array_value = b.size();
    b.array_head(ValueType::U32, 3).u32(1).u32(2).u32(3);
    b.key("test.words", ValueType::ARRAY);
    s.words_value = b.size();
    b.array_head(ValueType::STRING, 2).str("a").str("bc");
    s.tensor_info = b.size();
    b.tensor_info("a", {32}, kF32, 0);  // 128 bytes at 0
    s.second_tensor_info = b.size();
    b.tensor_info("b", {32, 2}, kQ8_0, 128);  // 2 blocks of 34 bytes at 128
    s.padding = b.size();
    b.pad_to(32);
    s.data = b.size();
    b.zeros(128 + 68);
    return s;
}

// The Error message parsing `bytes` raises, or "<accepted>".
std::string parse_error(std::span<const uint8_t> bytes) {
    try {
        File::from_bytes(bytes, "bad.gguf");
    } catch (const tandem::Error& e) {
        return e.what();
    }
    return "<accepted>";
}

void expect_rejected(std::span<const uint8_t> bytes, std::string_view phrase) {
    const std::string msg = parse_error(bytes);
    EXPECT_EQ(msg.rfind("bad.gguf: offset 0x", 0), 0u) << msg;
    EXPECT_NE(msg.find(phrase), std::string::npos) << "expected '" << phrase << "' in: " << msg;
}

void expect_rejected(const GgufBytes& b, std::string_view phrase) { expect_rejected(b.span(), phrase); }

// The sample cut to its first `n` bytes.
GgufBytes cut(const Sample& s, size_t n) {
    GgufBytes b = s.b;
    b.truncate(n);
    return b;
}

TEST(GgufMalformed, SampleIsValid) {
    const Sample s = make_sample();
    ASSERT_GT(s.data, s.padding);  // the sample has real padding to lose
    const File f = File::from_bytes(s.b.span(), "sample.gguf");
    EXPECT_EQ(f.tensors().size(), 2u);
    EXPECT_EQ(f.data_offset(), s.data);
    EXPECT_EQ(f.tensors()[1].n_bytes, 68u);
    EXPECT_EQ(f.file_size(), s.b.size());
}

// Every proper prefix of the sample is a truncated file, and is reported as
// one, whichever field the cut lands in.
TEST(GgufMalformed, TruncatedAtEveryByte) {
    const Sample s = make_sample();
    for (size_t n = 0; n < s.b.size(); ++n) {
        SCOPED_TRACE(n);
        expect_rejected(cut(s, n), n == 0 ? "empty file" : "truncated");
    }
}

TEST(GgufMalformed, TruncatedInsideEachSection) {
    const Sample s = make_sample();
    const std::string long_key = fmt::format("key '{}'", kLongKey);
    expect_rejected(cut(s, 2), "header: magic: truncated file: expected 4 more bytes, found 2");
    expect_rejected(cut(s, 6), "header: version: truncated");
    expect_rejected(cut(s, 12), "header: tensor count: truncated");
    expect_rejected(cut(s, 20), "header: metadata count: truncated");
    // Too few bytes left for the counts: caught before anything is read.
    expect_rejected(cut(s, 40), "offset 0x10: metadata count: expected at most 1 key/value pairs in a 40-byte file, "
                                "found 5 (corrupt count or truncated file)");
    // Inside the first key (the bytes are counted by the length check).
    expect_rejected(cut(s, s.first_key + 8 + 70),
                    "metadata key/value pair #0: string length: expected at most 70 bytes (names are at most 65535 "
                    "bytes and must fit in the file), found 73 (corrupt length or truncated file)");
    expect_rejected(cut(s, s.long_value - 2), long_key + ": value type: truncated");
    expect_rejected(cut(s, s.long_value + 4), long_key + ": value: truncated");
    expect_rejected(cut(s, s.long_value + 50), long_key + ": string length: expected at most 42 bytes (the bytes "
                                                          "left in the file), found 100 (corrupt length or truncated file)");
    expect_rejected(cut(s, s.array_value + 2), "key 'test.numbers': array element type: truncated");
    expect_rejected(cut(s, s.array_value + 6), "key 'test.numbers': array count: truncated");
    expect_rejected(cut(s, s.array_value + 18),
                    "key 'test.numbers': array count: expected at most 1 u32 elements in the 6 bytes left, found 3 "
                    "(corrupt count or truncated file)");
    // Two strings need 16 bytes at least; with exactly 16 left the second
    // one's length field is cut.
    expect_rejected(cut(s, s.words_value + 12 + 16), "key 'test.words': element 1: value: truncated");
    expect_rejected(cut(s, s.tensor_info + 5), "tensor info #0: name: truncated");
    expect_rejected(cut(s, s.tensor_info + 11), "tensor 'a': dimension count: truncated");
    expect_rejected(cut(s, s.tensor_info + 15), "tensor 'a': ne[0]: truncated");
    expect_rejected(cut(s, s.tensor_info + 23), "tensor 'a': type: truncated");
    expect_rejected(cut(s, s.tensor_info + 29), "tensor 'a': data offset: truncated");
    expect_rejected(cut(s, s.second_tensor_info + 27), "tensor 'b': ne[1]: truncated");
    expect_rejected(cut(s, s.padding), "padding before the data section");
    expect_rejected(cut(s, s.padding + 3), "found only 3 bytes (truncated file)");
    expect_rejected(cut(s, s.data), "tensor 'a': data: expected 128 bytes");
    expect_rejected(cut(s, s.data), "data offset past the end of the file");
    expect_rejected(cut(s, s.data + 150), "tensor 'b': data: expected 68 bytes at file offsets");
    expect_rejected(cut(s, s.data + 150), "data runs past the end of the file");
}

TEST(GgufMalformed, BadMagicAndVersion) {
    Sample s = make_sample();
    GgufBytes b = s.b;
    b.patch_u32(0, 0x67676d6c);  // "lmgg": a pre-GGUF ggml file
    expect_rejected(b, "pre-GGUF");
    b.patch_u32(0, 0x12345678);
    expect_rejected(b, "magic: expected \"GGUF\", found \"xV4\\x12\"");

    b = s.b;
    b.patch_u32(4, 1);
    expect_rejected(b, "version 1 used 32-bit counts");
    b.patch_u32(4, 4);
    expect_rejected(b, "expected version 2 or 3, found version 4");
    b.patch_u32(4, 0x03000000);
    expect_rejected(b, "big-endian");
    b.patch_u32(4, 2);
    EXPECT_EQ(File::from_bytes(b.span(), "v2.gguf").version(), 2u);
}

TEST(GgufMalformed, AbsurdCountsAndLengths) {
    const Sample s = make_sample();
    GgufBytes b = s.b;
    b.patch_u64(16, 47);
    expect_rejected(b, "offset 0x10: metadata count: expected at most 46 key/value pairs in a 676-byte file, found 47");
    b = s.b;
    b.patch_u64(8, uint64_t{1} << 40);
    expect_rejected(b, "offset 0x8: tensor count: expected at most 1048576 tensors");
    b = s.b;
    b.patch_u64(8, 20);  // 20 infos need at least 660 bytes; the file has 676
    expect_rejected(b, "offset 0x8: tensor count: expected at most");
    expect_rejected(b, "(corrupt count or truncated file)");
    b = s.b;
    b.patch_u64(16, (uint64_t{1} << 20) + 1);
    expect_rejected(b, "offset 0x10: metadata count: expected at most 1048576 key/value pairs, found 1048577");

    b = s.b;
    b.patch_u64(s.first_key, uint64_t{1} << 62);
    expect_rejected(b, "metadata key/value pair #0: string length: expected at most");
    b = s.b;
    b.patch_u64(s.string_value, 1000);
    expect_rejected(b, "key 'general.architecture': string length: expected at most");
    b = s.b;
    b.patch_u64(s.array_value + 4, UINT64_MAX / 2);
    expect_rejected(b, "key 'test.numbers': array count: expected at most");
    b = s.b;
    b.patch_u64(s.words_value + 4, 100);  // 100 strings need at least 800 bytes
    expect_rejected(b, "key 'test.words': array count: expected at most");
    b = s.b;
    b.patch_u64(s.words_value + 12, 9999);
    expect_rejected(b, "key 'test.words': element 0: string length");

    // A key longer than any name may be, although the bytes are present.
    GgufBytes big;
    big.header(0, 1).key(std::string(70000, 'k'), ValueType::U8).u8(1);
    expect_rejected(big, "at most 65535 bytes");

    // More array elements in all than the reader will hold in memory.
    GgufBytes many;
    many.header(0, 2).kv_string("general.architecture", "x").key("big", ValueType::ARRAY);
    many.array_head(ValueType::U8, (uint64_t{1} << 24) + 1).zeros((size_t{1} << 24) + 1);
    expect_rejected(many, "array elements in the whole file");
}

TEST(GgufMalformed, InvalidValueTypes) {
    const Sample s = make_sample();
    GgufBytes b = s.b;
    b.patch_u32(s.string_value - 4, 13);
    expect_rejected(b, "key 'general.architecture': value type: expected a value type id 0..12");
    b.patch_u32(s.string_value - 4, 0xffffffff);
    expect_rejected(b, "found 4294967295 (invalid value type)");
    b = s.b;
    b.patch_u32(s.array_value, 99);
    expect_rejected(b, "key 'test.numbers': array element type: expected a value type id");

    GgufBytes flag;
    flag.header(0, 2).kv_string("general.architecture", "x").key("flag", ValueType::BOOL).u8(2);
    expect_rejected(flag, "key 'flag': value: expected a bool (0 or 1), found 2");
}

TEST(GgufMalformed, UnknownTensorTypes) {
    const Sample s = make_sample();
    for (const uint32_t id : {4u, 5u, 24u, 31u, 34u, 40u, 99u, 0xffffffffu}) {
        GgufBytes b = s.b;
        b.patch_u32(s.tensor_info + 8 + 1 + 4 + 8, id);
        SCOPED_TRACE(id);
        expect_rejected(b, "tensor 'a': type: expected a supported tensor type");
        expect_rejected(b, fmt::format("found unknown tensor type id {}", id));
        expect_rejected(b, "Q4_K=12");
    }
}

TEST(GgufMalformed, DuplicatesAndEmptyNames) {
    GgufBytes b;
    b.header(0, 3).kv_string("general.architecture", "x").kv_u32("k", 1).kv_u32("k", 2);
    expect_rejected(b, "key 'k': expected each key once, found a duplicate key (first defined at offset 0x");

    b = GgufBytes();
    b.header(0, 2).kv_string("general.architecture", "x").kv_u32("", 1);
    expect_rejected(b, "metadata key/value pair #1: key: expected a non-empty name, found an empty string");

    b = GgufBytes();
    b.header(2, 1).kv_string("general.architecture", "x");
    b.tensor_info("t", {32}, kF32, 0).tensor_info("t", {32}, kF32, 128).pad_to(32).zeros(256);
    expect_rejected(b, "tensor 't': expected each tensor name once, found a duplicate tensor name");

    b = GgufBytes();
    b.header(1, 1).kv_string("general.architecture", "x");
    b.tensor_info("", {32}, kF32, 0).pad_to(32).zeros(128);
    expect_rejected(b, "tensor info #0: name: expected a non-empty name");
}

// A corrupt name (a flipped length byte makes one kilobytes of binary) is
// shown as its first 80 bytes, escaped, and its length: one short line.
TEST(GgufMalformed, LongBinaryNamesAreCutInMessages) {
    std::string name;
    for (int i = 0; i < 5000; ++i) name += static_cast<char>(i % 256 == 0 ? 1 : i % 256);
    GgufBytes b;
    b.header(2, 1).kv_string("general.architecture", "x");
    b.tensor_info(name, {32}, kF32, 0).tensor_info(name, {32}, kF32, 128).pad_to(32).zeros(256);
    try {
        (void)File::from_bytes(b.span());
        ADD_FAILURE() << "accepted";
    } catch (const tandem::Error& e) {
        const std::string what = e.what();
        EXPECT_LT(what.size(), 600u) << what.size() << " bytes";
        EXPECT_NE(what.find("... (5000 bytes)"), std::string::npos) << what;
        EXPECT_NE(what.find("\\x01\\x01\\x02"), std::string::npos) << what;
    }
}

// A file with one tensor of the given shape and type, data present.
GgufBytes one_tensor(const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset = 0, size_t data = 256) {
    GgufBytes b;
    b.header(1, 1).kv_string("general.architecture", "x").tensor_info("t", ne, type, offset).pad_to(32).zeros(data);
    return b;
}

TEST(GgufMalformed, BadShapes) {
    EXPECT_NO_THROW(File::from_bytes(one_tensor({64}, kF32).span()));
    expect_rejected(one_tensor({}, kF32), "tensor 't': dimension count: expected 1 to 4 dimensions, found 0");
    expect_rejected(one_tensor({1, 1, 1, 1, 1}, kF32), "expected 1 to 4 dimensions, found 5");
    expect_rejected(one_tensor({32, 0}, kF32), "tensor 't': ne[1]: expected a dimension between 1 and 2^63-1, found 0");
    expect_rejected(one_tensor({uint64_t(-5)}, kF32), "(-5 as a signed number)");
    expect_rejected(one_tensor({uint64_t{1} << 32, uint64_t{1} << 32}, kF32), "dimension product that overflows");
    expect_rejected(one_tensor({uint64_t{1} << 31, uint64_t{1} << 31}, kF32), "tensor 't': size: expected a byte size below 2^63");
    expect_rejected(one_tensor({100}, kQ8_0), "tensor 't': ne[0]: expected a multiple of 32 (the Q8_0 block size), found 100");
    // n_dims itself absurd: a u32 far beyond 4, not a reason to read 4 billion dims.
    GgufBytes b;
    b.header(1, 1).kv_string("general.architecture", "x").str("t").u32(0xffffffff);
    expect_rejected(b, "found 4294967295");
}

TEST(GgufMalformed, BadOffsets) {
    expect_rejected(one_tensor({32}, kF32, 16), "tensor 't': data offset: expected a multiple of the alignment 32, found 0x10 (misaligned)");
    expect_rejected(one_tensor({32}, kF32, 4096), "data offset past the end of the file");
    expect_rejected(one_tensor({64}, kF32, 0, 200), "data runs past the end of the file");
    expect_rejected(one_tensor({32}, kF32, UINT64_MAX - 31), "tensor 't': data range: expected a range that fits in 64 bits");

    GgufBytes b;
    b.header(2, 1).kv_string("general.architecture", "x");
    b.tensor_info("a", {64}, kF32, 0).tensor_info("b", {32}, kF32, 128).pad_to(32).zeros(512);
    expect_rejected(b, "tensor 'b': data offset: expected a range not overlapping tensor 'a' (data 0x0..0x100)");
    expect_rejected(b, "(overlapping tensor data)");

    // Declared out of order, still overlapping.
    b = GgufBytes();
    b.header(2, 1).kv_string("general.architecture", "x");
    b.tensor_info("late", {32}, kF32, 96).tensor_info("early", {64}, kF32, 0).pad_to(32).zeros(512);
    expect_rejected(b, "tensor 'late': data offset: expected a range not overlapping tensor 'early'");

    // Two tensors at the same offset.
    b = GgufBytes();
    b.header(2, 1).kv_string("general.architecture", "x");
    b.tensor_info("a", {32}, kF32, 0).tensor_info("b", {32}, kF32, 0).pad_to(32).zeros(512);
    expect_rejected(b, "overlapping");
}

TEST(GgufMalformed, BadAlignment) {
    const auto with_alignment = [](auto&& write_value) {
        GgufBytes b;
        b.header(1, 2).kv_string("general.architecture", "x");
        write_value(b);
        b.tensor_info("t", {32}, kF32, 0).pad_to(64).zeros(128);
        return b;
    };
    expect_rejected(with_alignment([](GgufBytes& b) { b.kv_u32("general.alignment", 0); }),
                    "key 'general.alignment': expected a nonzero power of two, found 0 (bad alignment)");
    expect_rejected(with_alignment([](GgufBytes& b) { b.kv_u32("general.alignment", 48); }), "found 48 (bad alignment)");
    expect_rejected(with_alignment([](GgufBytes& b) { b.key("general.alignment", ValueType::U64).u64(32); }),
                    "key 'general.alignment': expected type u32, found u64 32");
    expect_rejected(with_alignment([](GgufBytes& b) { b.kv_string("general.alignment", "32"); }),
                    "expected type u32, found string \"32\"");
    // A valid but huge alignment puts the data section past the end.
    expect_rejected(with_alignment([](GgufBytes& b) { b.kv_u32("general.alignment", 1u << 31); }), "padding");
    const File ok = File::from_bytes(with_alignment([](GgufBytes& b) { b.kv_u32("general.alignment", 64); }).span());
    EXPECT_EQ(ok.alignment(), 64u);
    EXPECT_EQ(ok.data_offset() % 64, 0u);
}

TEST(GgufMalformed, ArchitectureRequired) {
    GgufBytes b;
    b.header(0, 1).kv_u32("llama.block_count", 4);
    expect_rejected(b, "offset 0x18: metadata: expected the required key general.architecture");
    b = GgufBytes();
    b.header(0, 0);
    expect_rejected(b, "missing general.architecture");
    b = GgufBytes();
    b.header(0, 1).kv_u32("general.architecture", 4);
    expect_rejected(b, "key 'general.architecture': expected a non-empty string, found u32 4");
    b = GgufBytes();
    b.header(0, 1).kv_string("general.architecture", "");
    expect_rejected(b, "expected a non-empty string, found string \"\"");
}

// Builds `depth` levels of arrays, the innermost holding one u8.
GgufBytes nested_arrays(int depth) {
    GgufBytes b;
    b.header(0, 2).kv_string("general.architecture", "x").key("deep", ValueType::ARRAY);
    for (int level = 1; level < depth; ++level) b.array_head(ValueType::ARRAY, 1);
    b.array_head(ValueType::U8, 1).u8(7);
    return b;
}

TEST(GgufMalformed, NestingTooDeep) {
    const File ok = File::from_bytes(nested_arrays(kMaxArrayDepth).span());
    EXPECT_EQ(ok.find("deep")->type, ValueType::ARRAY);
    expect_rejected(nested_arrays(kMaxArrayDepth + 1), "arrays nested too deep");
    // A hostile file nesting as deep as its size allows must not overflow the stack.
    GgufBytes b;
    b.header(0, 2).kv_string("general.architecture", "x").key("deep", ValueType::ARRAY);
    for (int level = 0; level < 100000; ++level) b.array_head(ValueType::ARRAY, 1);
    expect_rejected(b, "nested too deep");
}

TEST(GgufMalformed, HeaderOnlyKey) {
    GgufBytes b;
    b.header(1, 2).kv_string("general.architecture", "x").kv_u32(std::string(kHeaderOnlyKey), 1);
    b.tensor_info("t", {32}, kF32, 0);
    expect_rejected(b, "key 'tandem.header_only': expected type bool, found u32 1");

    // Header-only: the file may end anywhere after the tensor infos...
    b = GgufBytes();
    b.header(1, 2).kv_string("general.architecture", "x").kv_bool(std::string(kHeaderOnlyKey), true);
    b.tensor_info("t", {4096, 4096}, kF32, 0);
    const File f = File::from_bytes(b.span());
    EXPECT_TRUE(f.header_only());
    EXPECT_THROW(f.tensor_data(f.tensors()[0]), tandem::Error);
    // ...but its tensor infos are still checked.
    b.patch_u64(b.size() - 8, 16);
    expect_rejected(b, "misaligned");
    b.truncate(b.size() - 1);
    expect_rejected(b, "tensor 't': data offset: truncated");

    // Set to false, missing data is a truncation naming the tensor.
    b = GgufBytes();
    b.header(1, 2).kv_string("general.architecture", "x").kv_bool(std::string(kHeaderOnlyKey), false);
    b.tensor_info("t", {32}, kF32, 0).pad_to(32);
    expect_rejected(b, "tensor 't': data");
}

TEST(GgufMalformed, NoTensorsNeedNoDataSection) {
    GgufBytes b;
    b.header(0, 1).kv_string("general.architecture", "x");  // ends unpadded, as vocab-only files do
    const File f = File::from_bytes(b.span());
    EXPECT_EQ(f.tensors().size(), 0u);
    EXPECT_GT(f.data_offset(), f.file_size());
}

// The real model cut short: every byte of the header outside the three
// 32000-entry vocabulary arrays (header, every key and value, every tensor
// info, the padding), the first and last 256 bytes of each of those arrays
// and a stride through the rest (every byte there would be 720k parses of a
// growing vocabulary, an hour under ASan, for no path not already taken),
// then the edges of every tensor and a stride through the data.
TEST(GgufMalformed, TruncatedRealModelFailsCleanly) {
    const auto path = tandem::testing::test_data("tiny-llama-Q4_K_M.gguf");
    const std::string text = tandem::testing::slurp(path);
    const std::vector<uint8_t> bytes(text.begin(), text.end());
    const File whole = File::from_bytes(bytes, "whole.gguf");

    std::set<uint64_t> cuts;
    // Every byte of a short record; under the sanitizers (where a parse is
    // ~40x slower: 260 s of the ASan run) its first and last 16 bytes and
    // every 7th between.
#if defined(__SANITIZE_ADDRESS__)
    constexpr uint64_t kStride = 7;
    constexpr size_t kMinCuts = 1000;
#else
    constexpr uint64_t kStride = 1;
    constexpr size_t kMinCuts = 5000;
#endif
    const auto every_byte = [&](uint64_t begin, uint64_t end) {
        for (uint64_t n = begin; n < end; ++n) {
            if (n < begin + 16 || n + 16 >= end || (n - begin) % kStride == 0) cuts.insert(n);
        }
    };
    // Record boundaries: each key's start, then the tensor infos.
    std::vector<uint64_t> starts;
    for (const KeyValue& kv : whole.metadata()) starts.push_back(kv.offset);
    starts.push_back(whole.tensors().front().info_offset);
    for (size_t i = 0; i + 1 < starts.size(); ++i) {
        const uint64_t begin = starts[i];
        const uint64_t end = starts[i + 1];
        if (end - begin <= 4096) {
            every_byte(begin, end);
        } else {
            for (uint64_t n = begin; n < begin + 256; ++n) cuts.insert(n);
            for (uint64_t n = begin + 256; n < end - 256; n += 1021) cuts.insert(n);
            for (uint64_t n = end - 256; n < end; ++n) cuts.insert(n);
        }
    }
    every_byte(0, starts.front());
    every_byte(starts.back(), whole.data_offset());
    for (const TensorInfo& t : whole.tensors()) {
        const uint64_t start = whole.data_offset() + t.offset;
        for (const uint64_t n : {start, start + 1, start + t.n_bytes - 1}) cuts.insert(n);
    }
    const uint64_t data_size = bytes.size() - whole.data_offset();
    for (uint64_t n = whole.data_offset(); n < bytes.size(); n += data_size / 64 + 1) cuts.insert(n);
    cuts.insert(bytes.size() - 1);

    // Each cut re-parses up to a vocabulary's worth of header: spread the
    // cuts over the cores, collect failures, report them here.
    const std::vector<uint64_t> cut_list(cuts.begin(), cuts.end());
    const unsigned workers = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
    std::vector<std::vector<std::string>> failures(workers);
    std::vector<std::thread> threads;
    for (unsigned w = 0; w < workers; ++w) {
        threads.emplace_back([&, w] {
            for (size_t i = w; i < cut_list.size(); i += workers) {
                const uint64_t n = cut_list[i];
                const std::string msg = parse_error(std::span<const uint8_t>(bytes).first(n));
                const bool clean = msg.rfind("bad.gguf: offset 0x", 0) == 0 &&
                                   msg.find(n == 0 ? "empty file" : "truncated") != std::string::npos;
                if (!clean) failures[w].push_back(fmt::format("cut at {}: {}", n, msg));
            }
        });
    }
    for (auto& t : threads) t.join();
    for (const auto& list : failures) {
        for (const auto& f : list) ADD_FAILURE() << f;
    }
    const size_t checked = cut_list.size();
    EXPECT_GT(checked, kMinCuts);
}

}  // namespace
}  // namespace tandem::gguf
