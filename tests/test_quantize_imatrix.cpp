// Importance matrices end to end: the reader on llama-imatrix's files (GGUF
// and legacy) and on broken ones, and `tandem quantize --imatrix` against
// llama-quantize's own output for every i-quant preset
// (../shared/models/synth-llama-TYPE.gguf, made from synth-llama-F16.gguf
// and synth-llama.imatrix), tensor by tensor and byte by byte.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/gguf/gguf_writer.h"
#include "runtime/quant/imatrix_file.h"
#include "runtime/quant/quant_types.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace tandem::quant {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::error_of;
using testing::expect_one_line_error;
using testing::run_tandem;
using testing::scratch_dir;
using testing::shared;
using testing::shell_quote;

#define REQUIRE_SHARED(path) \
    if (!fs::exists(path)) GTEST_SKIP() << "shared asset absent: " << (path)

const fs::path kImatrix = shared("models/synth-llama.imatrix");
const fs::path kF16 = shared("models/synth-llama-F16.gguf");

std::vector<float> floats_of(const gguf::File& f, const std::string& name) {
    const gguf::TensorInfo* t = f.find_tensor(name);
    EXPECT_NE(t, nullptr) << name;
    if (t == nullptr) return {};
    const auto bytes = f.tensor_data(*t);
    std::vector<float> out(bytes.size() / 4);
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
}

// ---- The reader -----------------------------------------------------------------

TEST(ImatrixFile, ReadsLlamaImatrixGguf) {
    REQUIRE_SHARED(kImatrix);
    const ImportanceMatrix m = load_importance_matrix(kImatrix);
    EXPECT_FALSE(m.legacy);
    EXPECT_EQ(m.weights.size(), 28u);  // q, k, v, output, gate, up, down of 4 layers
    EXPECT_EQ(m.chunk_count, 16u);
    EXPECT_EQ(m.chunk_size, 256u);
    ASSERT_EQ(m.datasets.size(), 1u);
    EXPECT_TRUE(contains(m.datasets[0], "GPL-3"));
    EXPECT_EQ(m.find("token_embd.weight"), nullptr);

    // Each value is in_sum2 / counts, read here straight from the file.
    const gguf::File raw = gguf::File::open(kImatrix);
    for (const std::string name : {"blk.0.attn_q.weight", "blk.3.ffn_down.weight"}) {
        const std::vector<float>* w = m.find(name);
        ASSERT_NE(w, nullptr) << name;
        const auto sums = floats_of(raw, name + ".in_sum2");
        const auto counts = floats_of(raw, name + ".counts");
        ASSERT_EQ(counts.size(), 1u);
        EXPECT_EQ(counts[0], 16.0f * 256.0f) << "every token of every chunk counts";
        ASSERT_EQ(w->size(), sums.size());
        for (size_t i = 0; i < w->size(); ++i) {
            EXPECT_EQ((*w)[i], sums[i] / counts[0]) << name << " " << i;
            EXPECT_GT((*w)[i], 0.0f);
        }
    }
    EXPECT_EQ(m.find("blk.3.ffn_down.weight")->size(), 768u);  // n_ff columns
}

void write_bytes(const fs::path& p, const std::vector<char>& bytes) {
    std::ofstream out(p, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <class T>
void put(std::vector<char>& out, T v) {
    const auto* p = reinterpret_cast<const char*>(&v);
    out.insert(out.end(), p, p + sizeof v);
}

void put_entry(std::vector<char>& out, const std::string& name, int32_t ncall, const std::vector<float>& values) {
    put<int32_t>(out, static_cast<int32_t>(name.size()));
    out.insert(out.end(), name.begin(), name.end());
    put<int32_t>(out, ncall);
    put<int32_t>(out, static_cast<int32_t>(values.size()));
    for (float v : values) put(out, v);
}

TEST(ImatrixFile, ReadsTheLegacyFormat) {
    const fs::path p = scratch_dir() / "old.dat";
    std::vector<char> bytes;
    put<int32_t>(bytes, 2);
    put_entry(bytes, "blk.0.attn_q.weight", 4, {4.0f, 8.0f, 2.0f});
    put_entry(bytes, "blk.0.ffn_up.weight", 0, {3.0f});
    put<int32_t>(bytes, 7);  // chunks
    put<int32_t>(bytes, 5);
    for (char c : std::string("wiki!")) bytes.push_back(c);
    write_bytes(p, bytes);

    const ImportanceMatrix m = load_importance_matrix(p);
    EXPECT_TRUE(m.legacy);
    EXPECT_EQ(m.chunk_count, 7u);
    EXPECT_EQ(m.datasets, std::vector<std::string>{"wiki!"});
    EXPECT_EQ(*m.find("blk.0.attn_q.weight"), (std::vector<float>{1.0f, 2.0f, 0.5f}));  // divided by ncall
    EXPECT_EQ(*m.find("blk.0.ffn_up.weight"), (std::vector<float>{3.0f}));             // ncall 0: as stored
}

TEST(ImatrixFile, BrokenFilesAreClearErrors) {
    const fs::path dir = scratch_dir();
    // Truncated legacy entry.
    std::vector<char> bytes;
    put<int32_t>(bytes, 1);
    put_entry(bytes, "blk.0.attn_q.weight", 1, {1.0f, 2.0f, 3.0f});
    bytes.resize(bytes.size() - 4);
    write_bytes(dir / "short.dat", bytes);
    EXPECT_TRUE(contains(error_of([&] { load_importance_matrix(dir / "short.dat"); }), "truncated"));
    // A non-finite importance.
    bytes.clear();
    put<int32_t>(bytes, 1);
    put_entry(bytes, "blk.0.attn_q.weight", 1, {1.0f, NAN});
    write_bytes(dir / "nan.dat", bytes);
    EXPECT_TRUE(contains(error_of([&] { load_importance_matrix(dir / "nan.dat"); }), "finite"));
    EXPECT_TRUE(contains(error_of([&] { load_importance_matrix(dir / "absent.dat"); }), "cannot open"));

    // GGUF: sums without counts, and a file without llama-imatrix's keys.
    auto write_gguf = [&](const fs::path& p, bool with_keys, bool with_counts) {
        gguf::Writer w(p);
        w.set("general.type", gguf::Value::str("imatrix"));
        if (with_keys) {
            w.set("imatrix.datasets", gguf::Value::string_array({"t.txt"}));
            w.set("imatrix.chunk_count", gguf::Value::u32(1));
            w.set("imatrix.chunk_size", gguf::Value::u32(8));
        }
        w.add_tensor({"blk.0.attn_q.weight.in_sum2", {4, 1}, Type::F32});
        if (with_counts) w.add_tensor({"blk.0.attn_q.weight.counts", {1, 1}, Type::F32});
        w.write_header();
        const std::vector<float> sums{8.0f, 16.0f, 0.0f, 4.0f}, counts{8.0f};
        w.write_tensor_data({reinterpret_cast<const uint8_t*>(sums.data()), 16});
        if (with_counts) w.write_tensor_data({reinterpret_cast<const uint8_t*>(counts.data()), 4});
        w.finish();
    };
    write_gguf(dir / "ok.gguf", true, true);
    EXPECT_EQ(*load_importance_matrix(dir / "ok.gguf").find("blk.0.attn_q.weight"),
              (std::vector<float>{1.0f, 2.0f, 0.0f, 0.5f}));
    write_gguf(dir / "nocounts.gguf", true, false);
    EXPECT_TRUE(contains(error_of([&] { load_importance_matrix(dir / "nocounts.gguf"); }), "no .counts"));
    write_gguf(dir / "nokeys.gguf", false, true);
    EXPECT_TRUE(contains(error_of([&] { load_importance_matrix(dir / "nokeys.gguf"); }), "imatrix.datasets"));
}

// ---- quantize --imatrix ------------------------------------------------------

// How many of a tensor's blocks differ between two files, and how many of
// those are near ties: blocks whose importance-weighted squared error
// against the F16 source is within 1e-3 of llama-quantize's choice. The
// searches compare float sums, so a build that rounds one sum differently
// (another compiler, FMA contraction) may pick the other of two almost
// equal candidates: ../shared's IQ1_M file differs in one block from the
// llama-quantize 0.3.36 built here, which Tandem matches byte for byte.
struct TensorDiff {
    std::string name;
    size_t blocks = 0, differing = 0, near_ties = 0;
};

double weighted_error(Type t, const uint8_t* block, const float* x, const float* qw, int64_t n) {
    std::vector<float> y(static_cast<size_t>(n));
    dequantize_row(t, block, y.data(), n);
    double e = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(x[i]) - y[static_cast<size_t>(i)];
        e += (qw != nullptr ? qw[i] : 1.0) * d * d;
    }
    return e;
}

std::vector<TensorDiff> differing_tensors(const gguf::File& got, const gguf::File& want, const gguf::File& source,
                                          const ImportanceMatrix& imatrix) {
    std::vector<TensorDiff> out;
    for (const auto& t : want.tensors()) {
        const gguf::TensorInfo* g = got.find_tensor(t.name);
        if (g == nullptr || g->type != t.type) {
            out.push_back({t.name + (g ? " (type " + std::string(traits(g->type).name) + ")" : " (absent)"), 0, 1});
            continue;
        }
        const auto a = got.tensor_data(*g), b = want.tensor_data(t);
        const size_t block = traits(t.type).block_bytes;
        const int64_t block_elems = traits(t.type).block_elems;
        const int64_t n_cols = t.row_length();
        TensorDiff d{t.name, a.size() / block, 0, 0};
        std::vector<float> x;
        for (size_t i = 0; i + block <= a.size(); i += block) {
            if (std::memcmp(a.data() + i, b.data() + i, block) == 0) continue;
            ++d.differing;
            if (x.empty()) {  // the source floats, once per tensor with a difference
                const gguf::TensorInfo* s = source.find_tensor(t.name);
                if (s == nullptr) continue;
                x.resize(static_cast<size_t>(s->n_elements));
                dequantize_row(s->type, source.tensor_data(*s).data(), x.data(), static_cast<int64_t>(x.size()));
            }
            const int64_t first = static_cast<int64_t>(i / block) * block_elems;
            const std::vector<float>* qw = imatrix.find(t.name);
            const float* w = qw != nullptr ? qw->data() + first % n_cols : nullptr;
            const double e_got = weighted_error(t.type, a.data() + i, x.data() + first, w, block_elems);
            const double e_want = weighted_error(t.type, b.data() + i, x.data() + first, w, block_elems);
            if (std::fabs(e_got - e_want) <= 1e-3 * e_want) ++d.near_ties;
        }
        if (d.differing > 0) out.push_back(d);
    }
    return out;
}

class QuantizeLikeLlamaQuantize : public ::testing::TestWithParam<const char*> {};

TEST_P(QuantizeLikeLlamaQuantize, SameBytesAsLlamaQuantizeWithImatrix) {
    const fs::path want_path = shared(std::string("models/synth-llama-") + GetParam() + ".gguf");
    REQUIRE_SHARED(want_path);
    REQUIRE_SHARED(kF16);
    REQUIRE_SHARED(kImatrix);
    const fs::path dir = scratch_dir();
    const fs::path out = dir / "q.gguf";
    const auto r = run_tandem("quantize --imatrix " + shell_quote(kImatrix.string()) + " " +
                                  shell_quote(kF16.string()) + " " + shell_quote(out.string()) + " " + GetParam() +
                                  " -t 2",
                              dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const gguf::File got = gguf::File::open(out), want = gguf::File::open(want_path), source = gguf::File::open(kF16);
    EXPECT_EQ(got.tensors().size(), want.tensors().size());
    std::string report;
    size_t ties = 0;
    for (const auto& d : differing_tensors(got, want, source, load_importance_matrix(kImatrix))) {
        if (d.differing == d.near_ties && d.near_ties <= 2) {
            ties += d.near_ties;
            continue;
        }
        report += "\n  " + d.name + ": " + std::to_string(d.differing) + " of " + std::to_string(d.blocks) +
                  " blocks (" + std::to_string(d.near_ties) + " near ties)";
    }
    EXPECT_TRUE(report.empty()) << "tensors that differ from llama-quantize's:" << report;
    EXPECT_LE(ties, 2u) << "blocks that differ from llama-quantize's as near ties";
    if (ties > 0) std::printf("%zu block(s) differ from the reference file as near ties\n", ties);
    EXPECT_EQ(got.find_uint("general.file_type"), want.find_uint("general.file_type"));
    EXPECT_EQ(got.find_uint("quantize.imatrix.entries_count"), 28u);
}

INSTANTIATE_TEST_SUITE_P(SynthLlama, QuantizeLikeLlamaQuantize,
                         ::testing::Values("Q8_0", "IQ4_NL", "IQ4_XS", "IQ3_XXS", "IQ3_S", "IQ2_XXS", "IQ2_XS",
                                           "IQ2_M", "IQ1_S", "IQ1_M"));

TEST(QuantizeImatrix, VeryLowBitTypesAreRefusedWithoutOne) {
    REQUIRE_SHARED(kF16);
    const fs::path dir = scratch_dir();
    for (const char* type : {"IQ2_XS", "IQ1_M", "IQ3_XXS", "IQ2_M"}) {
        const fs::path out = dir / (std::string(type) + ".gguf");
        const auto r = run_tandem("quantize " + shell_quote(kF16.string()) + " " + shell_quote(out.string()) + " " +
                                      type,
                                  dir);
        expect_one_line_error(r, "needs an importance matrix");
        EXPECT_FALSE(fs::exists(out)) << type;
        EXPECT_TRUE(testing::temp_files_of(out).empty()) << type;
    }
    // IQ4_XS and IQ3_S are made without one, as llama-quantize makes them.
    const auto r = run_tandem("quantize " + shell_quote(kF16.string()) + " " + shell_quote((dir / "x.gguf").string()) +
                                  " IQ4_XS",
                              dir);
    EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(QuantizeImatrix, AMatrixOfAnotherModelIsAnError) {
    REQUIRE_SHARED(kF16);
    const fs::path dir = scratch_dir();
    std::vector<char> bytes;
    put<int32_t>(bytes, 1);
    put_entry(bytes, "blk.0.attn_q.weight", 1, std::vector<float>(100, 1.0f));
    write_bytes(dir / "other.dat", bytes);
    const fs::path out = dir / "q.gguf";
    const auto r = run_tandem("quantize --imatrix " + shell_quote((dir / "other.dat").string()) + " " +
                                  shell_quote(kF16.string()) + " " + shell_quote(out.string()) + " IQ4_XS",
                              dir);
    expect_one_line_error(r, "expected 256 importance values");
    EXPECT_FALSE(fs::exists(out));
    // A matrix without an entry for a tensor a very low-bit type needs it for.
    bytes.clear();
    put<int32_t>(bytes, 1);
    put_entry(bytes, "blk.0.attn_q.weight", 1, std::vector<float>(256, 1.0f));
    write_bytes(dir / "partial.dat", bytes);
    const auto r2 = run_tandem("quantize --imatrix " + shell_quote((dir / "partial.dat").string()) + " " +
                                   shell_quote(kF16.string()) + " " + shell_quote(out.string()) + " IQ2_XS",
                               dir);
    expect_one_line_error(r2, "has no entry for 'blk.0.attn_k.weight'");
    EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace tandem::quant
