// `tandem imatrix`'s llama-imatrix modes against llama-imatrix's own output
// (tests/data/imatrix, written by scripts/llamacpp/imatrix_reference.sh
// from synth-llama-F16 and calib.txt): --in-file (combining GGUF and
// legacy files, with and without a text), --output-format dat,
// --show-statistics (text and --json) and --process-output; and the
// collector's fitting of stored sums.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/gguf/gguf_file.h"
#include "runtime/quant/imatrix_file.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"
#include "tools/imatrix.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
namespace imx = tools::imatrix;
using testing::contains;
using testing::error_of;
using testing::shell_quote;

std::string ref_file(const std::string& name) { return testing::test_data("imatrix/" + name).string(); }

std::vector<std::string> datasets_of(const gguf::File& f) {
    std::vector<std::string> out;
    if (const gguf::Value* v = f.find("imatrix.datasets"); v != nullptr && v->as_array() != nullptr) {
        for (const auto& item : v->as_array()->items) out.push_back(item.as_string() ? *item.as_string() : "?");
    }
    return out;
}

std::vector<float> floats(const gguf::File& f, const gguf::TensorInfo& t) {
    const auto bytes = f.tensor_data(t);
    std::vector<float> v(bytes.size() / sizeof(float));
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
}

// Same keys, tensor names and shapes, exact counts; sums within rel_tol
// (0: the same bits). Returns the largest relative difference.
double expect_same_matrix(const std::string& mine_path, const std::string& ref_path, double rel_tol,
                          bool same_datasets = true) {
    const gguf::File mine = gguf::File::open(mine_path);
    const gguf::File want = gguf::File::open(ref_path);
    if (same_datasets) {
        EXPECT_EQ(datasets_of(mine), datasets_of(want));
    }
    EXPECT_EQ(mine.find_uint("imatrix.chunk_count"), want.find_uint("imatrix.chunk_count"));
    EXPECT_EQ(mine.find_uint("imatrix.chunk_size"), want.find_uint("imatrix.chunk_size"));
    EXPECT_EQ(mine.tensors().size(), want.tensors().size());
    double worst = 0.0;
    for (size_t i = 0; i < std::min(mine.tensors().size(), want.tensors().size()); ++i) {
        const gguf::TensorInfo& t = want.tensors()[i];
        EXPECT_EQ(mine.tensors()[i].name, t.name);
        EXPECT_EQ(mine.tensors()[i].shape, t.shape) << t.name;
        const std::vector<float> a = floats(mine, mine.tensors()[i]), b = floats(want, t);
        if (rel_tol == 0.0 || t.name.ends_with(".counts")) {
            EXPECT_EQ(a, b) << t.name;
            continue;
        }
        if (a.size() != b.size()) {
            ADD_FAILURE() << t.name;
            continue;
        }
        for (size_t j = 0; j < b.size(); ++j) worst = std::max(worst, std::abs(double(a[j]) - b[j]) / std::abs(b[j]));
    }
    EXPECT_LE(worst, rel_tol);
    return worst;
}

class ImatrixFiles : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = testing::scratch_dir();
        if (!fs::exists(ref_file("combined.gguf"))) GTEST_SKIP() << "reference data absent: " << ref_file("combined.gguf");
    }
    testing::CommandResult run(const std::string& args) { return testing::run_tandem("imatrix " + args, dir_); }
    std::string out(const std::string& name) const { return (dir_ / name).string(); }
    fs::path dir_;
};

TEST_F(ImatrixFiles, CombinesGgufAndLegacyFilesAsLlamaImatrix) {
    // Repeated --in-file, and comma-separated as llama-imatrix spells it.
    for (const std::string& in : {"--in-file " + shell_quote(ref_file("a.gguf")) + " --in-file " + shell_quote(ref_file("b.dat")),
                                 "--in-file " + shell_quote(ref_file("a.gguf") + "," + ref_file("b.dat"))}) {
        const auto r = run("-c 64 " + in + " -o " + shell_quote(out("c.gguf")));
        ASSERT_EQ(r.exit_code, 0) << r.err;
        // The same keys and tensors, bit for bit (Tandem's writer adds a general.alignment key).
        expect_same_matrix(out("c.gguf"), ref_file("combined.gguf"), 0.0);
    }
}

TEST_F(ImatrixFiles, WritesTheLegacyFormatAsLlamaImatrix) {
    const auto r = run("-c 64 --in-file " + shell_quote(ref_file("a.gguf") + "," + ref_file("b.dat")) +
                       " --output-format dat -o " + shell_quote(out("c.dat")));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string mine = testing::slurp(out("c.dat")), want = testing::slurp(ref_file("combined.dat"));
    EXPECT_EQ(mine.size(), want.size());
    EXPECT_TRUE(mine == want) << "c.dat differs from llama-imatrix's combined.dat";
    // Read back: the quantizer's importances from the .dat are the GGUF's (within float rounding).
    const quant::ImportanceMatrix dat = quant::load_importance_matrix(out("c.dat"));
    const quant::ImportanceMatrix gguf = quant::load_importance_matrix(ref_file("combined.gguf"));
    EXPECT_TRUE(dat.legacy);
    EXPECT_EQ(dat.chunk_count, 4u);
    EXPECT_EQ(dat.datasets, std::vector<std::string>{"calib.txt"});
    ASSERT_EQ(dat.weights.size(), gguf.weights.size());
    for (const auto& [name, w] : gguf.weights) {
        const std::vector<float>* d = dat.find(name);
        ASSERT_NE(d, nullptr) << name;
        ASSERT_EQ(d->size(), w.size());
        for (size_t j = 0; j < w.size(); ++j) EXPECT_NEAR((*d)[j], w[j], 1e-6 * std::abs(w[j])) << name;
    }
}

TEST_F(ImatrixFiles, OutputNamedDatWithoutTheFormatIsGgufWithAWarning) {
    // llama-imatrix's rule: the suffix does not choose the format.
    const auto r = run("-c 64 --in-file " + shell_quote(ref_file("b.dat")) + " -o " + shell_quote(out("b2.dat")));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "--output-format dat")) << r.err;
    EXPECT_EQ(testing::slurp(out("b2.dat")).substr(0, 4), "GGUF");
}

// llama-imatrix's table, but for the file name in its first line.
void expect_same_table(const std::string& mine, const std::string& want) {
    const auto body = [](const std::string& s) { return s.substr(s.find('\n')); };
    ASSERT_NE(mine.find('\n'), std::string::npos) << mine;
    EXPECT_EQ(body(mine), body(want));
}

TEST_F(ImatrixFiles, ShowsLlamaImatrixsStatistics) {
    for (const char* name : {"combined.gguf", "b.dat", "process-output.gguf"}) {
        const auto r = run("-c 64 --show-statistics --in-file " + shell_quote(ref_file(name)));
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_TRUE(r.out.starts_with("Computing statistics for " + ref_file(name) + " (")) << r.out;
        expect_same_table(r.out, testing::slurp(ref_file(std::string(name) + ".stats.txt")));
    }
}

TEST_F(ImatrixFiles, StatisticsAsJson) {
    const auto r = run("-c 64 --show-statistics --json --in-file " + shell_quote(ref_file("process-output.gguf")));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["file"], ref_file("process-output.gguf"));
    ASSERT_EQ(j["tensors"].size(), 29u);  // the 28 layer weights and the output head
    ASSERT_EQ(j["layers"].size(), 4u);
    // The table's first row (attn_k, largest sum first) and its output row.
    const std::string table = testing::slurp(ref_file("process-output.gguf.stats.txt"));
    const nlohmann::json& first = j["tensors"][0];
    EXPECT_EQ(first["tensor"], "attn_k");
    EXPECT_TRUE(contains(table, fmt::format("{:>5}\tattn_k              \t{:10.2f}\t", first["layer"].get<std::string>(),
                                            first["sum_act2"].get<double>())))
        << first.dump();
    bool head = false;
    for (const auto& t : j["tensors"]) head |= t["name"] == "output.weight" && t["layer"] == "-" && t["n"] == 256;
    EXPECT_TRUE(head) << r.out;
    for (const auto& l : j["layers"]) EXPECT_GT(l["mean_sum_act2"].get<double>(), 0.0);
}

TEST_F(ImatrixFiles, BadModeFlagsAreOneLineErrors) {
    const std::string a = shell_quote(ref_file("a.gguf")), o = " -o " + shell_quote(out("x.gguf"));
    testing::expect_one_line_error(run("--show-statistics" + o), "expected one importance matrix");
    testing::expect_one_line_error(run("--show-statistics --in-file " + a + "," + a), "found 2");
    testing::expect_one_line_error(run("-c 64" + o), "found neither");
    testing::expect_one_line_error(run("-f " + shell_quote(ref_file("calib.txt")) + o), "-m");
    testing::expect_one_line_error(run("--json --in-file " + a + o), "--show-statistics");
    testing::expect_one_line_error(run("--in-file " + a + " --output-format txt" + o), "--output-format");
    testing::expect_one_line_error(run("--in-file " + shell_quote(ref_file("calib.txt")) + o), "calib.txt");
    EXPECT_FALSE(fs::exists(out("x.gguf")));
}

// ---- with the model: the sums llama-imatrix computed --------------------------------------

// The sums of a run over the model: llama-imatrix's attention rounds
// differently from Tandem's (the sums of blk.0's attention output differ
// first), by up to 1.8e-3 over these 128 tokens on the machine that wrote
// the files, so the sums get a bound of 5e-3 (a missing --in-file matrix
// would be off by about half); the names, shapes, counts and chunk counts
// must be exact.
class ImatrixFilesModel : public ImatrixFiles {
protected:
    void SetUp() override {
        ImatrixFiles::SetUp();
        if (IsSkipped()) return;
        TANDEM_REQUIRE_SHARED(model_);
    }
    std::string args(const std::string& more) const {
        return "-m " + shell_quote(model_.string()) + " -f " + shell_quote(ref_file("calib.txt")) + " -c 64 -t 2 --no-ppl " +
               more;
    }
    fs::path model_ = testing::shared("models/synth-llama-F16.gguf");
};

TEST_F(ImatrixFilesModel, ProcessOutputCollectsTheOutputHead) {
    const auto r = run(args("--chunks 2 --process-output -o " + shell_quote(out("p.gguf"))));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const double worst = expect_same_matrix(out("p.gguf"), ref_file("process-output.gguf"), 5e-3, false);
    std::printf("--process-output: max relative difference from llama-imatrix: %.3g\n", worst);
    const gguf::File f = gguf::File::open(out("p.gguf"));
    const gguf::TensorInfo* counts = f.find_tensor("output.weight.counts");
    ASSERT_NE(counts, nullptr);
    EXPECT_EQ(floats(f, *counts), std::vector<float>{128});  // every token of the 2 chunks
}

TEST_F(ImatrixFilesModel, InFileSumsAreTheStartOfTheRun) {
    const auto r = run(args("--chunk 2 --chunks 2 --in-file " + shell_quote(ref_file("a.gguf")) + " -o " +
                            shell_quote(out("s.gguf"))));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const double worst = expect_same_matrix(out("s.gguf"), ref_file("seeded.gguf"), 5e-3, false);
    std::printf("--in-file with a text: max relative difference from llama-imatrix: %.3g\n", worst);
    const gguf::File f = gguf::File::open(out("s.gguf"));
    EXPECT_EQ(datasets_of(f), (std::vector<std::string>{"calib.txt", ref_file("calib.txt")}));  // the file's, then -f
    EXPECT_EQ(f.find_uint("imatrix.chunk_count"), 4u);
}

// ---- the collector's fitting of stored sums ------------------------------------------------

gguf::TensorInfo weight(std::string name, std::vector<int64_t> shape) {
    gguf::TensorInfo t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    return t;
}

TEST(ImatrixStored, LegacyValuesCountAsCallsOfChunkSizeTokens) {
    quant::StoredImatrix m;
    m.legacy = true;
    m.entries["blk.0.ffn_up.weight"] = {{0.5f, 2.0f}, {3}};  // means 1/6 and 2/3, times 3 calls
    imx::Collector c;
    c.add_stored(m, 10, "x.dat");
    const imx::Entry& e = c.entries().at("blk.0.ffn_up.weight");
    EXPECT_EQ(e.in_sum2, (std::vector<float>{5.0f, 20.0f}));
    EXPECT_EQ(e.counts, std::vector<int64_t>{30});
    EXPECT_EQ(c.chunk_count(10), 3u);
}

TEST(ImatrixStored, OneCountOfAnExpertTensorIsEveryExpertsAndEqualDenseCountsBecomeOne) {
    quant::StoredImatrix m;
    m.entries["blk.0.ffn_up_exps.weight"] = {{1, 1, 1, 1}, {4}};  // 2 experts of 2 columns, one count
    m.entries["blk.0.attn_q.weight"] = {{1, 1, 1, 1}, {4, 4}};
    imx::Collector c;
    c.add_stored(m, 10, "x.gguf");
    const float x[16 * 4] = {};  // zeros: only the counts move
    c.on_matmul(weight("blk.0.ffn_up_exps.weight", {2, 8, 2}), 1, x, 1, 2);
    c.on_matmul(weight("blk.0.attn_q.weight", {4, 8}), -1, x, 16, 4);
    EXPECT_EQ(c.entries().at("blk.0.ffn_up_exps.weight").counts, (std::vector<int64_t>{4, 5}));
    const imx::Entry& q = c.entries().at("blk.0.attn_q.weight");
    EXPECT_EQ(q.counts, std::vector<int64_t>{20});
    EXPECT_EQ(q.n_per_row, 4);
    // Another file's sums of another length are refused, naming the file.
    quant::StoredImatrix other;
    other.entries["blk.0.attn_q.weight"] = {{1, 1}, {4}};
    EXPECT_TRUE(contains(error_of([&] { c.add_stored(other, 10, "y.gguf"); }), "y.gguf"));
    // And a product of another width than the stored sums.
    EXPECT_TRUE(contains(error_of([&] { c.on_matmul(weight("blk.0.attn_q.weight", {8, 8}), -1, x, 16, 8); }),
                         "blk.0.attn_q.weight"));
}

TEST(ImatrixStored, OutputHeadOnlyWithProcessOutput) {
    const float x[16 * 4] = {1.0f};
    imx::Collector plain, with_head(true);
    for (imx::Collector* c : {&plain, &with_head}) c->on_matmul(weight("output.weight", {4, 100}), -1, x, 16, 4);
    EXPECT_TRUE(plain.entries().empty());
    ASSERT_EQ(with_head.entries().count("output.weight"), 1u);
    EXPECT_EQ(with_head.entries().at("output.weight").counts, std::vector<int64_t>{16});
    EXPECT_EQ(with_head.entries().at("output.weight").in_sum2[0], 1.0f);
}

}  // namespace
}  // namespace tandem
