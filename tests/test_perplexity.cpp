// `tandem perplexity`: the windowing, nll and KL math on hand-built logits
// whose answers are known in closed form, the logits file format (round
// trip, and refusal of truncated, foreign and mismatched files), and an end
// to end run on the tiny model.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/run_command.h"
#include "tests/test_paths.h"

#include "tools/perplexity.h"

namespace tandem {
namespace {

namespace ppl = tools::ppl;
using testing::contains;
using testing::error_of;

TEST(Perplexity, WindowsFollowLlamaPerplexity) {
    const ppl::Windows w = ppl::make_windows(1000, 100, 0);
    EXPECT_EQ(w.n_ctx, 100);
    EXPECT_EQ(w.n_chunk, 10);  // floor(1000 / 100)
    EXPECT_EQ(w.first, 50);
    EXPECT_EQ(w.scored_per_chunk(), 49);  // positions 50 .. 98 predict tokens 51 .. 99
    EXPECT_EQ(ppl::make_windows(1099, 100, 0).n_chunk, 10);
    EXPECT_EQ(ppl::make_windows(1000, 100, 3).n_chunk, 3);
    EXPECT_EQ(ppl::make_windows(1000, 100, 50).n_chunk, 10);
    EXPECT_EQ(ppl::make_windows(200, 100, 0).n_chunk, 2);

    const std::string short_text = error_of([] { ppl::make_windows(199, 100, 0); });
    EXPECT_TRUE(contains(short_text, "199 tokens")) << short_text;
    EXPECT_TRUE(contains(short_text, "at least 200")) << short_text;
    EXPECT_TRUE(contains(error_of([] { ppl::make_windows(1000, 3, 0); }), "-c"));
}

TEST(Perplexity, ChunkStartsWithBosWhenTheModelAddsIt) {
    std::vector<int32_t> text(40);
    std::iota(text.begin(), text.end(), 100);
    const ppl::Windows w = ppl::make_windows(40, 16, 0);
    const std::vector<int32_t> c1 = ppl::chunk_tokens(text, w, 1, 7);
    ASSERT_EQ(c1.size(), 16u);
    EXPECT_EQ(c1[0], 7);
    EXPECT_EQ(c1[1], 117);
    EXPECT_EQ(c1[15], 131);
    EXPECT_EQ(ppl::chunk_tokens(text, w, 1, -1)[0], 116);  // no BOS: the text's own token
}

TEST(Perplexity, UniformLogitsGivePerplexityNVocab) {
    constexpr int kVocab = 50;
    ppl::NllStats s;
    for (int row = 0; row < 20; ++row) {
        const std::vector<float> logits(kVocab, 3.25f * static_cast<float>(row));  // any constant row is uniform
        s.add(ppl::token_nll(logits, row % kVocab));
    }
    EXPECT_EQ(s.count(), 20);
    EXPECT_NEAR(s.ppl(), kVocab, 1e-10);
    EXPECT_EQ(s.ppl_unc(), 0.0);  // every nll is the same: no spread
}

TEST(Perplexity, KnownDistributionsGiveKnownNllAndUncertainty) {
    // softmax of (1, 0, 0) is (e, 1, 1) / (e + 2); shifted by 1000 (exact in
    // float) so only max-subtraction keeps exp() finite.
    const std::vector<float> logits = {1001.0f, 1000.0f, 1000.0f};
    const double z = std::log(std::exp(1.0) + 2.0);
    EXPECT_NEAR(ppl::token_nll(logits, 0), z - 1.0, 1e-7);  // float exp: exact to an ulp
    EXPECT_NEAR(ppl::token_nll(logits, 1), z, 1e-7);

    const double l2 = std::log(2.0);
    ppl::NllStats s;
    s.add(l2);
    s.add(2 * l2);
    EXPECT_NEAR(s.ppl(), std::sqrt(8.0), 1e-12);
    // mean 1.5 ln2, mean of squares 2.5 ln2^2: variance 0.25 ln2^2 over n - 1 = 1.
    EXPECT_NEAR(s.ppl_unc(), std::sqrt(8.0) * 0.5 * l2, 1e-12);

    std::vector<float> logp(3);
    ppl::log_softmax(logits, logp);
    EXPECT_NEAR(logp[0], 1.0 - z, 1e-6);
    EXPECT_NEAR(logp[1], -z, 1e-6);
    EXPECT_NEAR(std::exp(logp[0]) + std::exp(logp[1]) + std::exp(logp[2]), 1.0, 1e-6);
}

TEST(Perplexity, KlOfIdenticalRowsIsExactlyZero) {
    std::vector<float> row(1000);
    for (size_t i = 0; i < row.size(); ++i) row[i] = std::sin(static_cast<float>(i) * 0.37f) * 6.0f;
    std::vector<float> logp(row.size());
    ppl::log_softmax(row, logp);
    const ppl::RowComparison r = ppl::compare_rows(logp, logp, 17);
    EXPECT_EQ(r.kl, 0.0);
    EXPECT_TRUE(r.same_top);
    EXPECT_NEAR(r.base_nll, ppl::token_nll(row, 17), 1e-5);
}

TEST(Perplexity, KlOfKnownDistributionsMatchesTheClosedForm) {
    // base (1/2, 1/2), current (1/4, 3/4): KL = 1/2 ln 2 + 1/2 ln(2/3).
    // Rows need not be normalized (a f16 base is not, quite): both are.
    const std::vector<float> base = {5.0f, 5.0f};
    const std::vector<float> cur = {std::log(0.25f) - 2.0f, std::log(0.75f) - 2.0f};
    const ppl::RowComparison r = ppl::compare_rows(base, cur, 1);
    EXPECT_NEAR(r.kl, 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0), 1e-7);
    EXPECT_FALSE(r.same_top);  // the base's tie goes to its first token; the current's top is token 1
    EXPECT_NEAR(r.base_nll, std::log(2.0), 1e-12);

    // A zero-probability base token contributes nothing (not NaN).
    const float ninf = -std::numeric_limits<float>::infinity();
    const ppl::RowComparison z = ppl::compare_rows(std::vector<float>{0.0f, ninf}, std::vector<float>{-1.0f, -1.0f}, 0);
    EXPECT_NEAR(z.kl, std::log(2.0), 1e-12);  // KL((1,0) || (1/2,1/2)) = ln 2
}

TEST(Perplexity, PercentilesInterpolateBetweenRanks) {
    const std::vector<double> v = {1, 2, 3, 4, 5};
    EXPECT_DOUBLE_EQ(ppl::percentile(v, 0.5), 3.0);
    EXPECT_DOUBLE_EQ(ppl::percentile(v, 0.25), 2.0);
    EXPECT_NEAR(ppl::percentile(v, 0.99), 4.96, 1e-12);
    EXPECT_DOUBLE_EQ(ppl::percentile(v, 1.0), 5.0);
    EXPECT_DOUBLE_EQ(ppl::percentile(std::vector<double>{1, 2, 3, 4}, 0.5), 2.5);

    ppl::KlStats k;
    const double kls[] = {0.4, 0.1, 0.3, 0.2};
    for (int i = 0; i < 4; ++i) k.add({kls[i], i != 2, std::log(4.0)});
    const ppl::KlSummary s = k.summarize();
    EXPECT_EQ(s.count, 4);
    EXPECT_NEAR(s.mean, 0.25, 1e-12);
    // population variance 0.0125, over n - 1 = 3
    EXPECT_NEAR(s.unc, std::sqrt(0.0125 / 3.0), 1e-12);
    EXPECT_DOUBLE_EQ(s.max, 0.4);
    EXPECT_NEAR(s.median, 0.25, 1e-12);
    EXPECT_NEAR(s.top1, 0.75, 1e-12);
    EXPECT_NEAR(s.base_ppl, 4.0, 1e-12);
}

ppl::LogitsHeader small_header(ppl::RowType type) {
    ppl::LogitsHeader h;
    h.row_type = type;
    h.n_vocab = 10;
    h.n_ctx = 8;
    h.first = 4;
    h.n_chunk = 2;
    h.tokens.resize(20);
    std::iota(h.tokens.begin(), h.tokens.end(), 1);
    return h;
}

// Writes rows() rows whose values encode their row and column.
std::vector<std::vector<float>> write_rows(const std::string& path, const ppl::LogitsHeader& h) {
    std::vector<std::vector<float>> rows;
    ppl::LogitsWriter writer(path, h);
    for (int64_t r = 0; r < h.rows(); ++r) {
        std::vector<float> row(static_cast<size_t>(h.n_vocab));
        for (size_t i = 0; i < row.size(); ++i) row[i] = -0.1f * static_cast<float>(r) - 0.37f * static_cast<float>(i);
        writer.write_row(row);
        rows.push_back(row);
    }
    writer.finish();
    return rows;
}

TEST(Perplexity, LogitsFileRoundTrips) {
    const auto dir = testing::scratch_dir();
    for (const auto type : {ppl::RowType::F32, ppl::RowType::F16}) {
        const std::string path = (dir / "base.logp").string();
        const ppl::LogitsHeader h = small_header(type);
        const auto rows = write_rows(path, h);
        EXPECT_TRUE(tandem::testing::temp_files_of(path).empty());
        EXPECT_EQ(std::filesystem::file_size(path), h.file_bytes());
        EXPECT_EQ(h.rows(), 6);  // 2 chunks of 8 - 1 - 4

        ppl::LogitsReader reader(path);
        EXPECT_EQ(reader.header().row_type, type);
        EXPECT_EQ(reader.header().n_vocab, 10);
        EXPECT_EQ(reader.header().n_ctx, 8);
        EXPECT_EQ(reader.header().n_chunk, 2);
        EXPECT_EQ(reader.header().tokens, h.tokens);
        std::vector<float> got(10);
        for (const auto& row : rows) {
            reader.read_row(got);
            for (size_t i = 0; i < row.size(); ++i) {
                if (type == ppl::RowType::F32) EXPECT_EQ(got[i], row[i]);
                else EXPECT_NEAR(got[i], row[i], 4e-3);  // half precision on values below 8
            }
        }
    }
}

TEST(Perplexity, UnfinishedWriterLeavesNoFile) {
    const auto dir = testing::scratch_dir();
    const std::string path = (dir / "base.logp").string();
    {
        ppl::LogitsWriter writer(path, small_header(ppl::RowType::F32));
        writer.write_row(std::vector<float>(10, -1.0f));
    }
    EXPECT_FALSE(std::filesystem::exists(path));
    EXPECT_TRUE(tandem::testing::temp_files_of(path).empty());
}

void rewrite(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(Perplexity, DamagedLogitsFilesAreRefusedWithAReason) {
    const auto dir = testing::scratch_dir();
    const std::string path = (dir / "base.logp").string();
    write_rows(path, small_header(ppl::RowType::F16));
    const std::string good = testing::slurp(path);
    auto open_error = [&](const std::string& bytes) {
        rewrite(path, bytes);
        return error_of([&] { ppl::LogitsReader r(path); });
    };
    EXPECT_TRUE(contains(open_error(good.substr(0, good.size() - 1)), "truncated"));
    EXPECT_TRUE(contains(open_error(good.substr(0, 100)), "truncated"));  // in the token ids
    EXPECT_TRUE(contains(open_error(good.substr(0, 10)), "not a Tandem logits file"));
    EXPECT_TRUE(contains(open_error(good + "xx"), "longer than its header says"));
    EXPECT_TRUE(contains(open_error(std::string(good.size(), 'x')), "not a Tandem logits file"));
    std::string v2 = good;
    v2[8] = 2;
    EXPECT_TRUE(contains(open_error(v2), "version 2"));
    std::string huge = good;  // a token count that would overflow a size computation
    for (int i = 32; i < 40; ++i) huge[static_cast<size_t>(i)] = '\xff';
    EXPECT_TRUE(contains(open_error(huge), "truncated"));
    std::string ctx = good;
    ctx[20] = 2;  // n_ctx 2: first no longer n_ctx / 2
    EXPECT_TRUE(contains(open_error(ctx), "invalid header"));
    EXPECT_TRUE(contains(error_of([&] { ppl::LogitsReader r((dir / "absent").string()); }), "cannot read"));
}

TEST(Perplexity, MismatchedBaseIsRefusedNamingTheDifference) {
    const ppl::LogitsHeader base = small_header(ppl::RowType::F16);
    const ppl::Windows w = ppl::make_windows(20, 8, 0);
    const std::string ok = error_of([&] { ppl::check_base_matches(base, "b", 10, w, base.tokens); });
    EXPECT_EQ(ok, "<no error>");
    EXPECT_TRUE(contains(error_of([&] { ppl::check_base_matches(base, "b", 11, w, base.tokens); }), "n_vocab 10"));
    const ppl::Windows w6 = ppl::make_windows(20, 6, 0);
    EXPECT_TRUE(contains(error_of([&] { ppl::check_base_matches(base, "b", 10, w6, base.tokens); }), "-c 8"));
    std::vector<int32_t> other = base.tokens;
    other[5] = 999;
    EXPECT_TRUE(contains(error_of([&] { ppl::check_base_matches(base, "b", 10, w, other); }), "position 5"));
    other.push_back(1);
    EXPECT_TRUE(contains(error_of([&] { ppl::check_base_matches(base, "b", 10, w, other); }), "20 tokens"));
    ppl::LogitsHeader one_chunk = base;
    one_chunk.n_chunk = 1;
    EXPECT_TRUE(contains(error_of([&] { ppl::check_base_matches(one_chunk, "b", 10, w, base.tokens); }),
                         "--chunks 1"));
}

// ---- End to end on the tiny model -----------------------------------------------

class PerplexityCli : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = testing::scratch_dir();
        // A few hundred words of varied text: well over 2 * 64 tokens.
        std::string text;
        const char* words[] = {"the", "river", "ran", "past", "an", "old", "mill", "where", "children", "played",
                               "in", "summer", "and", "farmers", "brought", "grain", "to", "be", "ground", "slowly"};
        for (int i = 0; i < 400; ++i) {
            text += words[(i * 7 + i / 20) % 20];
            text += (i % 13 == 12) ? ". " : " ";
        }
        text_ = (dir_ / "text.txt").string();
        std::ofstream(text_) << text;
    }
    testing::CommandResult ppl_run(const std::string& extra) {
        return testing::run_tandem("perplexity -m " + testing::shell_quote(model()) + " -f " +
                                       testing::shell_quote(text_) + " -c 64 --chunks 3 " + extra,
                                   dir_);
    }
    static std::string model() { return testing::test_data("tiny-llama-Q4_K_M.gguf").string(); }
    std::string path(const std::string& name) const { return testing::shell_quote((dir_ / name).string()); }

    std::filesystem::path dir_;
    std::string text_;
};

TEST_F(PerplexityCli, ScoresTheTextAndMatchesItsOwnSavedLogits) {
    const auto r = ppl_run("--json --save-logits-type f32 --save-logits " + path("base.logp"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    const double p = j.at("ppl").get<double>();
    EXPECT_TRUE(std::isfinite(p));
    EXPECT_GT(p, 1.0);
    EXPECT_GT(j.at("ppl_unc").get<double>(), 0.0);
    EXPECT_EQ(j.at("n_ctx").get<int>(), 64);
    EXPECT_EQ(j.at("n_chunk").get<int>(), 3);
    EXPECT_EQ(j.at("n_tokens_scored").get<int>(), 3 * 31);
    EXPECT_GT(j.at("tokens_per_second").get<double>(), 0.0);
    EXPECT_TRUE(std::filesystem::exists(dir_ / "base.logp"));

    const auto k = ppl_run("--json --kl-base " + path("base.logp"));
    ASSERT_EQ(k.exit_code, 0) << k.err;
    const auto jk = nlohmann::json::parse(k.out);
    EXPECT_EQ(jk.at("kl_mean").get<double>(), 0.0);
    EXPECT_EQ(jk.at("kl_max").get<double>(), 0.0);
    EXPECT_EQ(jk.at("top1_agreement").get<double>(), 1.0);
    EXPECT_NEAR(jk.at("base_ppl").get<double>(), p, 1e-4 * p);
    EXPECT_NEAR(jk.at("ppl").get<double>(), p, 1e-9 * p);

    // The text report, with the llama.cpp-style running estimates.
    const auto t = ppl_run("--kl-base " + path("base.logp"));
    ASSERT_EQ(t.exit_code, 0) << t.err;
    EXPECT_TRUE(contains(t.out, "[1]")) << t.out;
    EXPECT_TRUE(contains(t.out, "[3]")) << t.out;
    EXPECT_TRUE(contains(t.out, "Final estimate: PPL = ")) << t.out;
    EXPECT_TRUE(contains(t.out, "Mean KLD")) << t.out;
}

TEST_F(PerplexityCli, DropsOneTrailingNewlineAsLlamaCppDoes) {
    const std::string text = testing::slurp(text_);
    ASSERT_NE(text.back(), '\n');
    std::ofstream(dir_ / "nl.txt", std::ios::binary) << text << "\n";
    auto n_tokens = [&](const std::string& file) {
        const auto r = testing::run_tandem("perplexity -m " + testing::shell_quote(model()) + " -f " + file +
                                               " -c 64 --chunks 1 --json",
                                           dir_);
        EXPECT_EQ(r.exit_code, 0) << r.err;
        return nlohmann::json::parse(r.out).at("n_tokens").get<int>();
    };
    EXPECT_EQ(n_tokens(path("nl.txt")), n_tokens(testing::shell_quote(text_)));
}

TEST_F(PerplexityCli, BadInputIsAOneLineError) {
    std::ofstream(dir_ / "short.txt") << "far too short";
    testing::expect_one_line_error(
        testing::run_tandem("perplexity -m " + testing::shell_quote(model()) + " -f " + path("short.txt"), dir_),
        "needs at least 1024");
    testing::expect_one_line_error(
        testing::run_tandem("perplexity -m " + testing::shell_quote(model()) + " -f " + path("absent.txt"), dir_),
        "absent.txt");
    testing::expect_one_line_error(
        testing::run_tandem("perplexity -m " + testing::shell_quote(model()) + " -f " + testing::shell_quote(text_) +
                                " -c 2",
                            dir_),
        "-c");
    std::ofstream(dir_ / "junk.logp") << "this is not a logits file at all, not even close";
    testing::expect_one_line_error(ppl_run("--kl-base " + path("junk.logp")), "not a Tandem logits file");
    // A base made with another context: same text, different windows.
    ASSERT_EQ(testing::run_tandem("perplexity -m " + testing::shell_quote(model()) + " -f " +
                                      testing::shell_quote(text_) + " -c 32 --chunks 2 --save-logits " +
                                      path("c32.logp"),
                                  dir_)
                  .exit_code,
              0);
    testing::expect_one_line_error(ppl_run("--kl-base " + path("c32.logp")), "-c 32");
    // Truncated: the run must refuse it before scoring anything.
    const std::string bytes = testing::slurp(dir_ / "c32.logp");
    std::ofstream(dir_ / "cut.logp", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    testing::expect_one_line_error(ppl_run("--kl-base " + path("cut.logp")), "truncated");
}

}  // namespace
}  // namespace tandem
