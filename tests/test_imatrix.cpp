// `tandem imatrix` (tools/imatrix.h): the collector's sums on hand-made
// rows, llama-imatrix's batches, the file through the quantizer's reader,
// a session's sums against activations captured and recomputed by hand,
// the CLI's file and errors, and the shared synth-llama matrix made by
// llama-imatrix.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "runtime/engine/device.h"
#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/quant/imatrix_file.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"
#include "tools/imatrix.h"

namespace tandem {
namespace {

namespace imx = tools::imatrix;
using testing::contains;
using testing::error_of;
using testing::shell_quote;

gguf::TensorInfo weight(std::string name, std::vector<int64_t> shape) {
    gguf::TensorInfo t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    return t;
}

// n rows of n_in values: row r, column j = (r + 1) * 0.5 - j.
std::vector<float> ramp(int64_t n, int64_t n_in) {
    std::vector<float> x(static_cast<size_t>(n * n_in));
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t j = 0; j < n_in; ++j) x[static_cast<size_t>(r * n_in + j)] = 0.5f * (r + 1) - j;
    }
    return x;
}

std::vector<float> f32_tensor(const gguf::File& f, const std::string& name) {
    const gguf::TensorInfo* t = f.find_tensor(name);
    if (t == nullptr) return {};
    const auto bytes = f.tensor_data(*t);
    std::vector<float> v(bytes.size() / sizeof(float));
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
}

// A text of varied words, well over the tokens the CLI tests ask for.
std::string words_text(int n_words) {
    const char* words[] = {"the",     "river",    "ran",    "past", "an",     "old",   "mill",
                           "where",   "children", "played", "in",   "summer", "and",   "farmers",
                           "brought", "grain",    "to",     "be",   "ground", "slowly"};
    std::string text;
    for (int i = 0; i < n_words; ++i) {
        text += words[(i * 7 + i / 20) % 20];
        text += (i % 13 == 12) ? ". " : " ";
    }
    return text;
}

// ---- the collector -------------------------------------------------------------

TEST(Imatrix, DenseSumsAreSquaresOverTokensAndCountsAreTokens) {
    imx::Collector c;
    const gguf::TensorInfo w = weight("blk.0.attn_q.weight", {3, 8});
    const std::vector<float> x = ramp(20, 3);
    c.on_matmul(w, -1, x.data(), 20, 3);
    c.on_matmul(w, -1, x.data(), 16, 3);  // 16 rows: the smallest batch llama-imatrix counts
    const imx::Entry& e = c.entries().at("blk.0.attn_q.weight");
    ASSERT_EQ(e.n_per_row, 3);
    ASSERT_EQ(e.counts, std::vector<int64_t>{36});
    for (int64_t j = 0; j < 3; ++j) {
        double want = 0.0;
        for (int64_t r = 0; r < 20; ++r) want += std::pow(0.5 * (r + 1) - j, 2);
        for (int64_t r = 0; r < 16; ++r) want += std::pow(0.5 * (r + 1) - j, 2);
        EXPECT_DOUBLE_EQ(e.in_sum2[static_cast<size_t>(j)], want) << "column " << j;  // exact: halves squared
    }
    EXPECT_EQ(c.chunk_count(12), 3u);  // 36 tokens in chunks of 12
}

TEST(Imatrix, SmallBatchesAndWeightsOutsideTheLayersAreNotCounted) {
    imx::Collector c;
    const std::vector<float> x = ramp(64, 4);
    c.on_matmul(weight("blk.1.ffn_up.weight", {4, 8}), -1, x.data(), 15, 4);  // a generation-sized batch
    c.on_matmul(weight("output.weight", {4, 100}), -1, x.data(), 64, 4);
    EXPECT_TRUE(c.entries().empty());
}

TEST(Imatrix, ExpertRowsGoToTheirExpertWithOneCountEach) {
    imx::Collector c;
    const gguf::TensorInfo w = weight("blk.2.ffn_up_exps.weight", {2, 6, 4});  // 4 experts of 2 columns
    const float a[2] = {1.0f, 2.0f}, b[2] = {3.0f, -1.0f};
    c.on_matmul(w, 2, a, 1, 2);
    c.on_matmul(w, 2, b, 1, 2);
    c.on_matmul(w, 0, b, 1, 2);
    const imx::Entry& e = c.entries().at("blk.2.ffn_up_exps.weight");
    EXPECT_EQ(e.counts, (std::vector<int64_t>{1, 0, 2, 0}));
    EXPECT_EQ(e.in_sum2, (std::vector<float>{9, 1, 0, 0, 10, 5, 0, 0}));
    EXPECT_EQ(c.partial_entries(), std::vector<std::string>{"blk.2.ffn_up_exps.weight"});
}

// A per-head product (MLA's k_b) is a dense product to llama-imatrix:
// fewer than 16 tokens are ignored, the heads' sums sit side by side in
// one row, and the tensor has one count (its tokens, once).
TEST(Imatrix, HeadRowsSitSideBySideWithOneCountForTheTensor) {
    imx::Collector c;
    const gguf::TensorInfo w = weight("blk.1.attn_k_b.weight", {2, 3, 2});  // 2 heads of 2 columns
    const std::vector<float> x = ramp(32, 1);                                // 16 rows of 2
    c.on_head_matmul(w, 0, x.data(), 16, 2);
    c.on_head_matmul(w, 1, x.data(), 8, 2);  // a short batch: ignored
    c.on_head_matmul(w, 1, x.data(), 16, 2);
    const imx::Entry& e = c.entries().at("blk.1.attn_k_b.weight");
    EXPECT_EQ(e.counts, (std::vector<int64_t>{16}));
    float even = 0.0f, odd = 0.0f;
    for (size_t i = 0; i < x.size(); i += 2) {
        even += x[i] * x[i];
        odd += x[i + 1] * x[i + 1];
    }
    EXPECT_EQ(e.in_sum2, (std::vector<float>{even, odd, even, odd}));
}

TEST(Imatrix, NonFiniteActivationsAreAnErrorNamingTheWeight) {
    imx::Collector c;
    std::vector<float> x = ramp(16, 2);
    x[5] = std::numeric_limits<float>::infinity();
    const std::string m = error_of([&] { c.on_matmul(weight("blk.3.attn_v.weight", {2, 2}), -1, x.data(), 16, 2); });
    EXPECT_TRUE(contains(m, "non-finite")) << m;
    EXPECT_TRUE(contains(m, "blk.3.attn_v.weight")) << m;
}

// ---- llama-imatrix's batches ---------------------------------------------------

TEST(Imatrix, ChunksRunSideBySideInEqualSharesAsLlamaImatrix) {
    // -c 256 -b 2048 -ub 512: 8 chunks a batch, micro-batches of 64
    // tokens of each, sequence after sequence.
    const imx::Packing p = imx::pack(256, 2048, 512);
    EXPECT_EQ(p.n_seq, 8);
    EXPECT_EQ(p.seq_batch, 256);
    EXPECT_EQ(p.n_ubatch, 512);
    std::vector<std::vector<int32_t>> chunks(8, std::vector<int32_t>(256));
    for (int s = 0; s < 8; ++s) {
        for (int i = 0; i < 256; ++i) chunks[s][i] = s * 1000 + i;
    }
    const auto mbs = imx::micro_batches(chunks, p, 128);
    ASSERT_EQ(mbs.size(), 4u);
    for (size_t u = 0; u < mbs.size(); ++u) {
        ASSERT_EQ(mbs[u].size(), 512u);
        for (size_t k = 0; k < 512; ++k) {
            const BatchToken& t = mbs[u][k];
            const int s = static_cast<int>(k / 64), pos = static_cast<int>(u * 64 + k % 64);
            EXPECT_EQ(t.seq, s);
            EXPECT_EQ(t.pos, pos);
            EXPECT_EQ(t.id, s * 1000 + pos);
            EXPECT_EQ(t.logits, pos >= 128 && pos < 255);  // the scored half, less the last token
        }
    }
    // The last group may hold fewer chunks: the shares grow to fill the micro-batch.
    EXPECT_EQ(imx::micro_batches(std::span(chunks).first(3), p, 256).front().size(), 3u * 170u);
}

TEST(Imatrix, OneChunkABatchIsCutIntoMicroBatchesInOrder) {
    // -c 1024 -b 512 -ub 256: one sequence, batches of 512, micro-batches of 256.
    const imx::Packing p = imx::pack(1024, 512, 256);
    EXPECT_EQ(p.n_seq, 1);
    EXPECT_EQ(p.seq_batch, 512);
    std::vector<std::vector<int32_t>> chunk(1, std::vector<int32_t>(1024, 7));
    const auto mbs = imx::micro_batches(chunk, p, 1024);
    ASSERT_EQ(mbs.size(), 4u);
    for (size_t u = 0; u < 4; ++u) {
        EXPECT_EQ(mbs[u].front().pos, static_cast<int32_t>(u * 256));
        EXPECT_EQ(mbs[u].size(), 256u);
        EXPECT_FALSE(mbs[u].front().logits);
    }
    EXPECT_EQ(imx::pack(64, 2048, 512).n_seq, 32);
    EXPECT_EQ(imx::pack(16, 2048, 512).n_seq, kMaxSequences);  // capped where the session's sequence ids end
}

// ---- the file --------------------------------------------------------------------

TEST(Imatrix, FileRoundTripsThroughTheQuantizersReader) {
    const auto dir = testing::scratch_dir();
    imx::Collector c;
    const std::vector<float> x = ramp(32, 4);
    c.on_matmul(weight("blk.0.ffn_down.weight", {4, 2}), -1, x.data(), 32, 4);
    const gguf::TensorInfo exps = weight("blk.0.ffn_down_exps.weight", {4, 2, 3});
    for (int64_t r = 0; r < 5; ++r) c.on_matmul(exps, r % 2, x.data() + r * 4, 1, 4);
    const auto path = dir / "m.imatrix";
    imx::write_file(path, c.entries(), {{"calib.txt"}, 2, 16});
    EXPECT_TRUE(testing::temp_files_of(path).empty());

    const quant::ImportanceMatrix m = quant::load_importance_matrix(path);
    EXPECT_EQ(m.datasets, std::vector<std::string>{"calib.txt"});
    EXPECT_EQ(m.chunk_count, 2u);
    EXPECT_EQ(m.chunk_size, 16u);
    ASSERT_EQ(m.weights.size(), 2u);
    const imx::Entry& dense = c.entries().at("blk.0.ffn_down.weight");
    const std::vector<float>* w = m.find("blk.0.ffn_down.weight");
    ASSERT_NE(w, nullptr);
    for (size_t j = 0; j < 4; ++j) EXPECT_FLOAT_EQ((*w)[j], dense.in_sum2[j] / 32.0f);
    // Experts 0 and 1 saw 3 and 2 rows, expert 2 none: the reader's weight 1.
    const std::vector<float>* we = m.find("blk.0.ffn_down_exps.weight");
    ASSERT_NE(we, nullptr);
    ASSERT_EQ(we->size(), 12u);
    EXPECT_FLOAT_EQ((*we)[0], c.entries().at("blk.0.ffn_down_exps.weight").in_sum2[0] / 3.0f);
    EXPECT_FLOAT_EQ((*we)[4], c.entries().at("blk.0.ffn_down_exps.weight").in_sum2[4] / 2.0f);
    EXPECT_EQ((*we)[8], 1.0f);

    // Shapes as ggml stores them: a 2-D weight's trailing 1 dropped.
    const gguf::File f = gguf::File::open(path);
    EXPECT_EQ(f.find_string("general.type"), "imatrix");
    EXPECT_EQ(f.find_tensor("blk.0.ffn_down.weight.in_sum2")->shape, (std::vector<int64_t>{4}));
    EXPECT_EQ(f.find_tensor("blk.0.ffn_down.weight.counts")->shape, (std::vector<int64_t>{1}));
    EXPECT_EQ(f.find_tensor("blk.0.ffn_down_exps.weight.in_sum2")->shape, (std::vector<int64_t>{4, 3}));
    EXPECT_EQ(f32_tensor(f, "blk.0.ffn_down_exps.weight.counts"), (std::vector<float>{3, 2, 0}));
}

TEST(Imatrix, NothingObservedIsAnErrorAndWritesNoFile) {
    const auto dir = testing::scratch_dir();
    const std::string m = error_of([&] { imx::write_file(dir / "e.imatrix", {}, {{"t"}, 0, 16}); });
    EXPECT_TRUE(contains(m, "no weight product")) << m;
    EXPECT_FALSE(std::filesystem::exists(dir / "e.imatrix"));
}

// ---- a session's activations -------------------------------------------------------

// Keeps the input rows of one weight and passes every call on.
class Capture final : public ActivationObserver {
public:
    Capture(ActivationObserver& next, std::string name) : next_(next), name_(std::move(name)) {}
    void on_matmul(const gguf::TensorInfo& w, int64_t expert, const float* x, int64_t n_rows, int64_t n_in) override {
        if (w.name == name_) rows.insert(rows.end(), x, x + n_rows * n_in);
        next_.on_matmul(w, expert, x, n_rows, n_in);
    }
    void on_head_matmul(const gguf::TensorInfo& w, int64_t head, const float* x, int64_t n_rows,
                        int64_t n_in) override {
        if (w.name == name_) rows.insert(rows.end(), x, x + n_rows * n_in);
        next_.on_head_matmul(w, head, x, n_rows, n_in);
    }
    std::vector<float> rows;

private:
    ActivationObserver& next_;
    std::string name_;
};

TEST(Imatrix, SessionSumsAreTheSquaresOfTheProductInputs) {
    const auto path = testing::test_data("tiny-llama-Q4_K_M.gguf");
    const gguf::File file = gguf::File::open(path);
    const model::ModelSpec spec = model::load_model_spec(file);
    SessionOptions so;
    so.n_ctx = 64;
    so.n_threads = 2;
    so.cpu_blas = false;
    Session session(file, spec, so);
    imx::Collector collector;
    Capture capture(collector, "blk.0.attn_q.weight");
    session.set_activation_observer(&capture);
    std::vector<int32_t> ids(40);
    for (int i = 0; i < 40; ++i) ids[static_cast<size_t>(i)] = 1 + (i * 977) % 31999;
    std::vector<float> logits;
    session.eval(ids, false, logits);
    session.set_activation_observer(nullptr);
    session.eval(std::span<const int32_t>(ids).first(20), false, logits);  // unobserved

    const int64_t n_embd = spec.hp.n_embd;
    ASSERT_EQ(capture.rows.size(), static_cast<size_t>(40 * n_embd));
    // Layer 0's Q input by hand: RMSNorm(embedding) * attn_norm, in double.
    const std::vector<float> embd = tensor_floats(file, *file.find_tensor("token_embd.weight"));
    const std::vector<float> norm = tensor_floats(file, *file.find_tensor("blk.0.attn_norm.weight"));
    for (int t = 0; t < 40; ++t) {
        const float* e = embd.data() + static_cast<int64_t>(ids[static_cast<size_t>(t)]) * n_embd;
        double ss = 0.0;
        for (int64_t j = 0; j < n_embd; ++j) ss += static_cast<double>(e[j]) * e[j];
        const double scale = 1.0 / std::sqrt(ss / static_cast<double>(n_embd) + spec.hp.rms_eps);
        for (int64_t j = 0; j < n_embd; ++j) {
            const double want = e[j] * scale * norm[static_cast<size_t>(j)];
            ASSERT_NEAR(capture.rows[static_cast<size_t>(t * n_embd + j)], want, 1e-5 * (1.0 + std::abs(want)))
                << "token " << t << " column " << j;
        }
    }
    // Every product of every layer was counted once per token; the sums are
    // the captured rows' squares.
    ASSERT_EQ(collector.entries().size(), static_cast<size_t>(7 * spec.hp.n_layer));
    for (const auto& [name, e] : collector.entries()) EXPECT_EQ(e.counts, std::vector<int64_t>{40}) << name;
    const imx::Entry& q = collector.entries().at("blk.0.attn_q.weight");
    for (int64_t j = 0; j < n_embd; ++j) {
        double want = 0.0;
        for (int t = 0; t < 40; ++t)
            want += std::pow(static_cast<double>(capture.rows[static_cast<size_t>(t * n_embd + j)]), 2);
        EXPECT_NEAR(q.in_sum2[static_cast<size_t>(j)], want, 1e-5 * want) << "column " << j;
    }
    // Q, K and V multiply the same rows.
    EXPECT_EQ(q.in_sum2, collector.entries().at("blk.0.attn_k.weight").in_sum2);
}

// ---- the command -------------------------------------------------------------------

class ImatrixCli : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = testing::scratch_dir();
        text_ = (dir_ / "text.txt").string();
        std::ofstream(text_) << words_text(400);
    }
    testing::CommandResult run(const std::string& model, const std::string& args) {
        return testing::run_tandem("imatrix -m " + shell_quote(model) + " " + args, dir_);
    }
    std::string out(const std::string& name) const { return (dir_ / name).string(); }
    static std::string tiny() { return testing::test_data("tiny-llama-Q4_K_M.gguf").string(); }

    std::filesystem::path dir_;
    std::string text_;
};

TEST_F(ImatrixCli, WritesLlamaImatrixsFileForTheLayersWeights) {
    const auto r = run(tiny(), "-f " + shell_quote(text_) + " -c 64 --chunks 3 -t 2 -o " + shell_quote(out("m.gguf")));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.out, "Final estimate: PPL = ")) << r.out;
    EXPECT_TRUE(contains(r.out, "28 weights from 3 chunks of 64 tokens")) << r.out;
    const quant::ImportanceMatrix m = quant::load_importance_matrix(out("m.gguf"));
    EXPECT_EQ(m.datasets, std::vector<std::string>{text_});
    EXPECT_EQ(m.chunk_count, 3u);
    EXPECT_EQ(m.chunk_size, 64u);
    EXPECT_EQ(m.weights.size(), 28u);  // 4 layers x q, k, v, output, gate, up, down
    EXPECT_EQ(m.find("token_embd.weight"), nullptr);
    EXPECT_EQ(m.find("output.weight"), nullptr);
    const gguf::File f = gguf::File::open(out("m.gguf"));
    EXPECT_EQ(f32_tensor(f, "blk.3.ffn_down.weight.counts"), std::vector<float>{192});  // every token evaluated
    EXPECT_EQ(f.find_tensor("blk.3.ffn_down.weight.in_sum2")->shape, (std::vector<int64_t>{768}));
    EXPECT_TRUE(testing::temp_files_of(out("m.gguf")).empty());
}

TEST_F(ImatrixCli, BadInputIsAOneLineError) {
    const std::string o = " -o " + shell_quote(out("m.gguf"));
    std::ofstream(out("empty.txt")).flush();
    std::ofstream(out("short.txt")) << "a few words\n";
    testing::expect_one_line_error(run(tiny(), "-f " + shell_quote(out("absent.txt")) + o), "absent.txt");
    testing::expect_one_line_error(run(tiny(), "-f " + shell_quote(out("empty.txt")) + o), "empty");
    testing::expect_one_line_error(run(tiny(), "-f " + shell_quote(out("short.txt")) + " -c 64" + o),
                                   "needs at least 128");
    testing::expect_one_line_error(run(tiny(), "-f " + shell_quote(text_) + " -o " + shell_quote(tiny())),
                                   "one of the inputs");
    testing::expect_one_line_error(run(tiny(), "-f " + shell_quote(text_) + " -o " + shell_quote(out("no/m.gguf"))),
                                   "existing directory");
    testing::expect_one_line_error(run(out("absent.gguf"), "-f " + shell_quote(text_) + o), "absent.gguf");
    testing::expect_one_line_error(run(tiny(), "-f " + shell_quote(text_) + " -c 2" + o), "-c");
    EXPECT_FALSE(std::filesystem::exists(out("m.gguf")));
}

TEST_F(ImatrixCli, ExpertCountsAddUpToTheTokensTimesTheExpertsUsed) {
    const auto model = testing::shared("models/synth-qwen3moe-Q8_0.gguf");
    TANDEM_REQUIRE_SHARED(model);
    const auto r =
        run(model.string(), "-f " + shell_quote(text_) + " -c 64 --chunks 2 --no-ppl -o " + shell_quote(out("m.gguf")));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const gguf::File f = gguf::File::open(out("m.gguf"));
    const std::vector<float> counts = f32_tensor(f, "blk.0.ffn_up_exps.weight.counts");
    ASSERT_EQ(counts.size(), 8u);  // one per expert
    double total = 0.0;
    for (float c : counts) total += c;
    EXPECT_EQ(total, 128.0 * 2);  // 2 chunks of 64 tokens, 2 experts each
    EXPECT_EQ(f32_tensor(f, "blk.0.ffn_gate_inp.weight.counts"), std::vector<float>{128});
    EXPECT_EQ(f.find_tensor("blk.0.ffn_up_exps.weight.in_sum2")->shape, (std::vector<int64_t>{256, 8}));
}

// llama-imatrix's matrix of ../shared (16 chunks of 256 tokens of the GPL
// v3, by a llama.cpp build other than this machine's): Tandem gives the
// bits of llama-imatrix 0.3.36 on this machine, which differ from that
// file's by up to 3.4e-4 (its attention rounds differently), so the bound
// here is 1e-3; the counts and metadata are exact.
TEST_F(ImatrixCli, MatchesTheSharedSynthLlamaMatrix) {
    const auto model = testing::shared("models/synth-llama-F16.gguf");
    const auto ref_path = testing::shared("models/synth-llama.imatrix");
    const std::string gpl = "/usr/share/common-licenses/GPL-3";
    TANDEM_REQUIRE_SHARED(ref_path);
    if (!std::filesystem::exists(gpl)) GTEST_SKIP() << "calibration text absent: " << gpl;
    const auto r = run(model.string(), "-f " + gpl + " -c 256 --chunks 16 -o " + shell_quote(out("m.gguf")));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const gguf::File mine = gguf::File::open(out("m.gguf"));
    const gguf::File ref = gguf::File::open(ref_path);
    EXPECT_EQ(mine.find_uint("imatrix.chunk_count"), ref.find_uint("imatrix.chunk_count"));
    EXPECT_EQ(mine.find_uint("imatrix.chunk_size"), ref.find_uint("imatrix.chunk_size"));
    ASSERT_EQ(mine.tensors().size(), ref.tensors().size());
    double worst = 0.0;
    for (size_t i = 0; i < ref.tensors().size(); ++i) {
        const gguf::TensorInfo& t = ref.tensors()[i];
        ASSERT_EQ(mine.tensors()[i].name, t.name);
        ASSERT_EQ(mine.tensors()[i].shape, t.shape) << t.name;
        const std::vector<float> a = f32_tensor(mine, t.name), b = f32_tensor(ref, t.name);
        if (t.name.ends_with(".counts")) {
            EXPECT_EQ(a, b) << t.name;
            continue;
        }
        for (size_t j = 0; j < b.size(); ++j) worst = std::max(worst, std::abs(double(a[j]) - b[j]) / std::abs(b[j]));
    }
    EXPECT_LT(worst, 1e-3);
    std::printf("max relative difference from llama-imatrix's synth-llama.imatrix: %.3g\n", worst);
}

}  // namespace
}  // namespace tandem
