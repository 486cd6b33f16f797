// Speculative decoding (runtime/serving/): greedy output equal to plain
// decoding token for token, with n-gram lookup and with a draft model;
// under sampling, the accept/reject rule keeps the Sampler's distribution
// (an exact check of the distribution, chi-square checks of the rule and of
// whole runs); a draft with another vocabulary is refused naming the token.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/sampler/sampler.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/run_command.h"
#include "tests/spec_helpers.h"
#include "kernels_cuda/cuda_api.h"
#include "tests/test_cuda_inputs.h"
#include "tests/test_paths.h"
#include "runtime/serving/draft_model.h"
#include "runtime/serving/speculative.h"

namespace {

namespace fs = std::filesystem;
namespace spec = tandem::spec;
using tandem::testing::chi2_critical;
using tandem::testing::chi2_two_sample;
using tandem::SamplerParams;
using tandem::testing::contains;
using tandem::testing::kRepetitive;
using tandem::testing::error_of;
using tandem::testing::run_tandem;
using tandem::testing::shell_quote;

// ---------------------------------------------------------------- pure parts

TEST(SpecNgram, MostRecentEarlierOccurrenceThenShorter) {
    // "1 2 3 9 | 1 2 3 7 8 | 1 2 3": the last 3 tokens last occurred before 7 8.
    const std::vector<int32_t> ctx = {1, 2, 3, 9, 1, 2, 3, 7, 8, 1, 2, 3};
    EXPECT_EQ(spec::ngram_lookup(ctx, 3, 1, 4), (std::vector<int32_t>{7, 8, 1, 2}));
    EXPECT_EQ(spec::ngram_lookup(ctx, 3, 1, 1), (std::vector<int32_t>{7}));
    // No earlier "5 3": falls back to "3", whose latest earlier occurrence
    // is before 7; past the end the copy repeats the period (7 8 5 3).
    const std::vector<int32_t> c2 = {1, 2, 3, 7, 8, 5, 3};
    EXPECT_EQ(spec::ngram_lookup(c2, 3, 1, 3), (std::vector<int32_t>{7, 8, 5}));
    EXPECT_EQ(spec::ngram_lookup(c2, 3, 1, 10), (std::vector<int32_t>{7, 8, 5, 3, 7, 8, 5, 3, 7, 8}));
    EXPECT_TRUE(spec::ngram_lookup(c2, 3, 2, 8).empty());  // min n 2: "5 3" only
    // A repeated token: a loop of period 1.
    const std::vector<int32_t> c3 = {9, 4, 4, 4};
    EXPECT_EQ(spec::ngram_lookup(c3, 2, 1, 5), (std::vector<int32_t>{4, 4, 4, 4, 4}));
    const std::vector<int32_t> c4 = {1, 2, 1, 2, 1};  // "2 1" before "2 1": period 2
    EXPECT_EQ(spec::ngram_lookup(c4, 2, 1, 4), (std::vector<int32_t>{2, 1, 2, 1}));
    EXPECT_TRUE(spec::ngram_lookup(std::vector<int32_t>{1, 2, 3}, 3, 1, 5).empty());
    EXPECT_TRUE(spec::ngram_lookup(std::vector<int32_t>{5}, 3, 1, 5).empty());
    EXPECT_TRUE(spec::ngram_lookup(ctx, 3, 1, 0).empty());
}

TEST(SpecDraftLength, GrowsShrinksAndBacksOff) {
    spec::DraftLength len(16, 0, true);
    EXPECT_EQ(len.allowed(), 16);
    len.update(16, 0);  // full rejection: halve
    EXPECT_EQ(len.allowed(), 8);
    len.update(8, 2);  // partial: 2 * 2 + 1
    EXPECT_EQ(len.allowed(), 5);
    len.update(5, 5);  // full acceptance: +2
    EXPECT_EQ(len.allowed(), 7);
    len.update(0, 0);  // a free proposer with nothing to say: no change
    EXPECT_EQ(len.allowed(), 7);
    for (int i = 0; i < 2; ++i) len.update(len.allowed(), 0);  // 7 -> 3 -> 1
    EXPECT_EQ(len.current(), 1);
    // At 1, a rejection pauses speculation for 1, then 2, then 4 ... steps.
    len.update(1, 0);
    EXPECT_EQ(len.allowed(), 0);
    EXPECT_EQ(len.allowed(), 1);
    len.update(1, 0);
    EXPECT_EQ(len.allowed(), 0);
    EXPECT_EQ(len.allowed(), 0);
    EXPECT_EQ(len.allowed(), 1);
    for (int i = 0; i < 10; ++i) len.update(1, 0);
    int skipped = 0;
    while (len.allowed() == 0) ++skipped;
    EXPECT_EQ(skipped, 32);  // bounded
    len.update(1, 1);  // any acceptance resets the back-off
    EXPECT_EQ(len.allowed(), 3);
    // A draft model with nothing to say backs off too.
    spec::DraftLength d(4, 0, true, true);
    d.update(0, 0);
    EXPECT_EQ(d.allowed(), 0);
    EXPECT_EQ(d.allowed(), 4);
    // A draft model starts short (its refused drafts cost passes) and
    // backs off further: up to 128 steps.
    spec::DraftLength e(16, 0, true, true);
    EXPECT_EQ(e.allowed(), spec::DraftLength::kExpensiveStart);
    // One that has never been kept gives up after kExpensiveGiveUp fails.
    spec::DraftLength never(16, 0, true, true);
    int asked = 0;
    for (int step = 0; step < 1000; ++step) {
        const int k = never.allowed();
        if (k == 0) continue;
        ++asked;
        never.update(0, 0);  // nothing proposed (p-min)
    }
    EXPECT_EQ(asked, spec::DraftLength::kExpensiveGiveUp);
    // Likewise when its drafts are refused: 4, 2, 1, 1 tokens, then no more.
    spec::DraftLength refused(16, 0, true, true);
    std::vector<int> sizes;
    for (int step = 0; step < 1000; ++step) {
        const int k = refused.allowed();
        if (k == 0) continue;
        sizes.push_back(k);
        refused.update(k, 0);
    }
    EXPECT_EQ(sizes, (std::vector<int>{4, 2, 1, 1}));
    e.update(4, 4);
    EXPECT_EQ(e.allowed(), 6);
    for (int i = 0; i < 12; ++i) e.update(1, 0);
    int skipped_e = 0;
    while (e.allowed() == 0) ++skipped_e;
    EXPECT_EQ(skipped_e, 128);
    EXPECT_EQ(spec::DraftLength(2, 0, true, true).allowed(), 2);  // never above --draft-max
    EXPECT_EQ(spec::DraftLength(16, 0, false, true).allowed(), 16);  // --draft-fixed: draft_max
    // Fixed length: always draft_max.
    spec::DraftLength f(6, 0, false);
    f.update(6, 0);
    EXPECT_EQ(f.allowed(), 6);
}

std::vector<float> random_logits(std::mt19937& g, int n, float scale) {
    std::normal_distribution<float> nd(0.0f, scale);
    std::vector<float> l(static_cast<size_t>(n));
    for (auto& x : l) x = nd(g);
    // Ties, which the order must break as the Sampler does.
    l[7] = l[3];
    l[11] = l[3];
    return l;
}

// target_distribution + draw give exactly the Sampler's token, for every
// filter, the repetition penalty, the logit bias and the presence and
// frequency penalties.
TEST(SpecTargetDistribution, DrawsWhatTheSamplerDraws) {
    std::mt19937 g(1234);
    const SamplerParams cases[] = {
        {0.8f, 40, 0.95f, 0.05f, 1.0f, 64, 0, 0.0f, 0.0f, {}, {}},  {1.0f, 0, 1.0f, 0.0f, 1.0f, 64, 0, 0.0f, 0.0f, {}, {}},
        {1.5f, 5, 1.0f, 0.0f, 1.3f, 8, 0, 0.0f, 0.0f, {}, {}},      {0.5f, 0, 0.5f, 0.0f, 1.1f, 64, 0, 0.0f, 0.0f, {}, {}},
        {1.2f, 100, 0.9f, 0.2f, 0.9f, 3, 0, 0.0f, 0.0f, {}, {}},    {2.0f, 1, 0.95f, 0.05f, 1.0f, 0, 0, 0.0f, 0.0f, {}, {}},
        // The logit bias (a ban included) and OpenAI's penalties.
        {1.0f, 0, 1.0f, 0.0f, 1.1f, 8, 0, 0.5f, 1.0f, {{3, 5.0f}, {7, -100.0f}, {299, -2.5f}}, {}},
        {0.7f, 20, 0.9f, 0.05f, 1.0f, 64, 0, -1.0f, 2.0f, {{0, 100.0f}}, {}},
    };
    int checked = 0;
    for (const SamplerParams& base : cases) {
        for (int trial = 0; trial < 200; ++trial) {
            SamplerParams p = base;
            p.seed = 1000u + static_cast<uint64_t>(trial);
            const std::vector<float> logits = random_logits(g, 300, 1.0f + static_cast<float>(trial % 4));
            std::vector<int32_t> recent;
            for (int i = 0; i < 20; ++i) recent.push_back(static_cast<int32_t>(g() % 300));
            tandem::Sampler sampler(p);
            tandem::TokenHistory history(p.repeat_last_n);
            for (int32_t t : recent) {
                sampler.accept(t);
                history.accept(t);
            }
            std::vector<float> a = logits, b = logits;
            const int32_t want = sampler.sample(a);
            std::mt19937_64 rng(p.seed);
            const spec::TokenDist d = spec::target_distribution(p, history, b);
            ASSERT_EQ(spec::draw(d, rng), want) << "case temp " << p.temperature << " trial " << trial;
            ASSERT_EQ(a, b);  // the same penalty applied
            ++checked;
        }
    }
    EXPECT_EQ(checked, 1600);
}

// Pearson's statistic of counts against probabilities (expected >= 5 each).
double chi2_vs(const std::vector<int64_t>& counts, const std::vector<double>& probs, int64_t n) {
    double x = 0.0;
    for (size_t i = 0; i < counts.size(); ++i) {
        const double e = probs[i] * static_cast<double>(n);
        x += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
    }
    return x;
}

spec::TokenDist dist(std::vector<int32_t> ids, std::vector<double> w) {
    spec::TokenDist d;
    d.ids = std::move(ids);
    d.weights = std::move(w);
    for (double x : d.weights) d.total += x;
    return d;
}

// The rule keeps p, whatever q is: a draft model's (d drawn from q) and a
// deterministic proposer's (one-hot q). And a wrong rule fails the test.
TEST(SpecAcceptRule, OutputIsDistributedAsTheTarget) {
    const spec::TokenDist p = dist({0, 1, 2, 3, 4, 5}, {0.30, 0.25, 0.20, 0.15, 0.07, 0.03});
    const spec::TokenDist q = dist({5, 4, 0, 6}, {0.40, 0.30, 0.20, 0.10});  // 6: outside p's support
    const std::vector<double> want = {0.30, 0.25, 0.20, 0.15, 0.07, 0.03};
    const int64_t n = 200000;
    std::mt19937_64 rng(7);
    auto run = [&](const spec::TokenDist* qq, int32_t fixed_d, bool wrong) {
        std::vector<int64_t> counts(6, 0);
        int64_t kept = 0;
        for (int64_t t = 0; t < n; ++t) {
            const int32_t d = qq != nullptr ? spec::draw(*qq, rng) : fixed_d;
            bool ok = false;
            int32_t tok = wrong ? (p.prob_of(d) > 0 ? d : spec::draw(p, rng))
                                : spec::accept_or_resample(p, qq, d, rng, ok);
            kept += ok;
            EXPECT_GE(tok, 0);
            EXPECT_LT(tok, 6);
            ++counts[static_cast<size_t>(tok)];
        }
        return std::make_pair(chi2_vs(counts, want, n), kept);
    };
    const double crit = chi2_critical(5);
    const auto [x_model, kept_model] = run(&q, 0, false);
    EXPECT_LT(x_model, crit);
    // Acceptance is sum min(p, q) = 0.2 + 0.07 + 0.03 = 0.30.
    EXPECT_NEAR(static_cast<double>(kept_model) / n, 0.30, 0.01);
    for (int32_t d : {0, 3, 5, 9}) {  // one-hot q: kept with probability p(d)
        const auto [x, kept] = run(nullptr, d, false);
        EXPECT_LT(x, crit) << "d " << d;
        EXPECT_NEAR(static_cast<double>(kept) / n, d < 6 ? want[static_cast<size_t>(d)] : 0.0, 0.01);
    }
    // "Keep whatever p allows" skews towards the draft: caught.
    EXPECT_GT(run(&q, 0, true).first, 100 * crit);
    EXPECT_GT(run(nullptr, 4, true).first, 100 * crit);
}

// ---------------------------------------------------------- through models

fs::path tiny_path() { return tandem::testing::test_data("tiny-llama-Q4_K_M.gguf"); }

// Greedy equality rests on the engine giving a verification batch's tokens
// the logits they get one by one (Session::eval_batch_single_order;
// SpecPremise below checks it for K-quants, Q8_0 and Gemma 3). A plain
// eval_batch would not: K-quant batches of 4 or more tokens take llama.cpp's
// batch order. The equality tests use the shared Q8_0 model where present.
fs::path exact_model() {
    const fs::path q8 = tandem::testing::shared("models/tiny-llama-Q8_0.gguf");
    return fs::exists(q8) ? q8 : fs::path();
}

struct Model {
    explicit Model(const fs::path& path)
        : file(tandem::gguf::File::open(path)), spec(tandem::model::load_model_spec(file)),
          tok(tandem::Tokenizer::from_gguf(file)) {}
    tandem::gguf::File file;
    tandem::model::ModelSpec spec;
    tandem::Tokenizer tok;
};

tandem::SessionOptions session_options(int64_t n_ctx = 512) {
    tandem::SessionOptions so;
    so.n_ctx = n_ctx;
    so.n_ubatch = 64;
    so.n_threads = 2;
    return so;
}

// What `tandem run` does without speculation.
std::vector<int32_t> plain(tandem::Session& s, const std::vector<int32_t>& prompt, const SamplerParams& sp, int n) {
    std::vector<float> logits;
    s.eval(prompt, false, logits);
    tandem::Sampler sampler(sp);
    for (int32_t t : prompt) sampler.accept(t);
    std::vector<int32_t> out;
    while (static_cast<int>(out.size()) < n) {
        const int32_t next = sampler.sample(logits);
        sampler.accept(next);
        out.push_back(next);
        if (static_cast<int>(out.size()) == n) break;
        const int32_t one[1] = {next};
        s.eval(one, false, logits);
    }
    return out;
}

std::vector<int32_t> speculative(tandem::Session& s, const std::vector<int32_t>& prompt, const SamplerParams& sp,
                                 int n, spec::Proposer& proposer, spec::Stats* stats = nullptr,
                                 spec::Config cfg = {}) {
    std::vector<float> logits;
    s.eval(prompt, false, logits);
    proposer.prepare(prompt);
    std::vector<int32_t> out;
    const spec::Stats st = spec::generate(s, prompt, logits, sp, proposer, cfg, n, 64, [&](int32_t t) {
        out.push_back(t);
        return static_cast<int>(out.size()) < n;
    });
    EXPECT_EQ(st.generated, static_cast<int64_t>(out.size()));
    if (stats) *stats = st;
    return out;
}

SamplerParams greedy() {
    SamplerParams sp;
    sp.temperature = 0.0f;
    return sp;
}


TEST(SpecGreedy, NgramGivesThePlainTokens) {
    if (exact_model().empty()) GTEST_SKIP() << "../shared/models/tiny-llama-Q8_0.gguf not found";
    const Model m(exact_model());
    const auto prompt = m.tok.encode(kRepetitive, true);
    for (const float penalty : {1.0f, 1.3f}) {
        SamplerParams sp = greedy();
        sp.repeat_penalty = penalty;  // the greedy choice after the penalty, as plain decoding makes it
        tandem::Session a(m.file, m.spec, session_options());
        const auto want = plain(a, prompt, sp, 160);
        for (const bool adaptive : {true, false}) {
            tandem::Session b(m.file, m.spec, session_options());
            spec::NgramProposer ngram(3);
            spec::Stats st;
            spec::Config cfg;
            cfg.adaptive = adaptive;
            const auto got = speculative(b, prompt, sp, 160, ngram, &st, cfg);
            EXPECT_EQ(got, want) << "penalty " << penalty << " adaptive " << adaptive;
            EXPECT_GT(st.proposed, 0);
            // The session holds exactly the tokens: a later step would see no rejected draft.
            EXPECT_EQ(b.n_past(), static_cast<int64_t>(prompt.size() + got.size() - 1));
        }
    }
}

// Speculative verification on the CUDA device: a pass of a draft's up to
// 17 tokens runs every layer there (the output head stays on the CPU: its
// 32000 rows are most of an emulated step), and greedy output is the plain
// decoding's on the same device, token for token.
TEST(SpecGreedy, CudaNgramGivesThePlainTokens) {
    std::string why;
    if (tandem::cuda::list_devices(&why).empty()) TANDEM_CUDA_SKIP("no GPU: " << why);
    if (exact_model().empty()) TANDEM_CUDA_SKIP("../shared/models/tiny-llama-Q8_0.gguf not found");
    const Model m(exact_model());
    const auto prompt = m.tok.encode(kRepetitive, true);
    tandem::SessionOptions so = session_options();
    so.device = "cuda0";
    so.n_gpu_layers = m.spec.hp.n_layer;
    tandem::Session a(m.file, m.spec, so);
    const auto want = plain(a, prompt, greedy(), 20);
    tandem::Session b(m.file, m.spec, so);
    spec::NgramProposer ngram(3);
    spec::Stats st;
    const auto got = speculative(b, prompt, greedy(), 20, ngram, &st);
    EXPECT_EQ(got, want);
    EXPECT_GT(st.accepted, 0) << "no draft was accepted: the verification passes were not tested";
}

// A draft that is the model itself agrees always: many tokens per pass,
// and the same text. A draft from another quantization agrees often.
void expect_draft_model_matches(const fs::path& target_path, const fs::path& draft_path, int n, double min_accept) {
    const Model m(target_path);
    const auto prompt = m.tok.encode("Once upon a time, there was a little robot who", true);
    const SamplerParams sp = greedy();
    tandem::Session a(m.file, m.spec, session_options());
    const auto want = plain(a, prompt, sp, n);
    tandem::Session b(m.file, m.spec, session_options());
    spec::DraftModelProposer draft(draft_path.string(), m.tok, b.n_vocab(), session_options(), sp, 0.0f);
    spec::Stats st;
    const auto got = speculative(b, prompt, sp, n, draft, &st);
    EXPECT_EQ(got, want) << draft_path;
    EXPECT_GT(st.proposed, 0);
    EXPECT_GE(st.acceptance(), min_accept) << st.accepted << " of " << st.proposed;
    EXPECT_LT(st.target_passes, n) << "no token was gained";
}

TEST(SpecGreedy, DraftModelGivesThePlainTokens) {
    if (exact_model().empty()) GTEST_SKIP() << "../shared/models/tiny-llama-Q8_0.gguf not found";
    expect_draft_model_matches(exact_model(), exact_model(), 160, 0.99);
}

TEST(SpecGreedy, DraftFromAnotherQuantizationGivesThePlainTokens) {
    const fs::path target = tandem::testing::shared("models/tiny-llama-Q8_0.gguf");
    int done = 0;
    for (const char* d : {"models/tiny-llama-Q4_0.gguf", "models/tiny-llama-Q2_K.gguf"}) {
        const fs::path draft = tandem::testing::shared(d);
        if (!fs::exists(target) || !fs::exists(draft)) continue;
        SCOPED_TRACE(d);
        expect_draft_model_matches(target, draft, 160, 0.0);
        ++done;
    }
    if (done == 0) GTEST_SKIP() << "../shared/models/tiny-llama-Q8_0.gguf with Q4_0 or Q2_K not found";
}

TEST(SpecGreedy, Gemma3NgramAndSelfDraft) {
    const char* env = std::getenv("TANDEM_GEMMA3_GGUF");
    if (env == nullptr || !fs::exists(env)) GTEST_SKIP() << "TANDEM_GEMMA3_GGUF not set (or not a file)";
    const Model m(env);
    const std::string para =
        "The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a brass lantern and a "
        "notebook in which he recorded the colour of the sky, the direction of the wind and the ships that passed.";
    const auto prompt = m.tok.encode("<start_of_turn>user\nRepeat this text exactly:\n" + para +
                                         "<end_of_turn>\n<start_of_turn>model\n",
                                     true, true);
    const SamplerParams sp = greedy();
    tandem::Session a(m.file, m.spec, session_options(1024));
    const auto want = plain(a, prompt, sp, 128);
    tandem::Session b(m.file, m.spec, session_options(1024));
    spec::NgramProposer ngram(3);
    spec::Stats st;
    EXPECT_EQ(speculative(b, prompt, sp, 128, ngram, &st), want);
    EXPECT_GT(st.accepted, 0);
    tandem::Session c(m.file, m.spec, session_options(1024));
    spec::DraftModelProposer draft(env, m.tok, c.n_vocab(), session_options(1024), sp, 0.5f);
    EXPECT_EQ(speculative(c, prompt, sp, 128, draft), want);
}

// Every shared model (each architecture, each quantization of tiny-llama):
// greedy output with n-gram lookup and with the model as its own draft is
// the plain output, over 128 generated tokens. n-gram proposals on these
// random models are mostly rejected, so the rollback is what is tested.
TEST(SpecGreedy, EverySharedModelNgramAndSelfDraft) {
    // Under AddressSanitizer (ten times slower) a shorter run checks the
    // memory; the release build checks the 128 tokens.
#if defined(__SANITIZE_ADDRESS__)
    constexpr int kTokens = 32;
#else
    constexpr int kTokens = 128;
#endif
    const char* files[] = {"synth-gemma2-Q8_0.gguf",  "synth-mixtral-Q8_0.gguf", "synth-phi3-Q8_0.gguf",
                           "synth-qwen2-Q8_0.gguf",   "synth-qwen3-Q8_0.gguf",   "synth-qwen3moe-Q8_0.gguf",
                           "tiny-llama-F16.gguf",     "tiny-llama-Q2_K.gguf",    "tiny-llama-Q3_K_M.gguf",
                           "tiny-llama-Q4_0.gguf",    "tiny-llama-Q4_K_M.gguf",  "tiny-llama-Q5_K_M.gguf",
                           "tiny-llama-Q6_K.gguf",    "tiny-llama-Q8_0.gguf",    "tiny-llama-b-Q4_K_M.gguf"};
    int done = 0;
    int64_t proposed_all = 0;
    for (const char* f : files) {
        const fs::path path = tandem::testing::shared(std::string("models/") + f);
        if (!fs::exists(path)) continue;
        SCOPED_TRACE(f);
        const Model m(path);
        // A prompt that repeats itself, so the lookup finds matches.
        std::vector<int32_t> prompt = m.tok.encode(kRepetitive, true);
        const SamplerParams sp = greedy();
        tandem::Session a(m.file, m.spec, session_options());
        const auto want = plain(a, prompt, sp, kTokens);
        tandem::Session b(m.file, m.spec, session_options());
        spec::NgramProposer ngram(2);
        spec::Stats st;
        EXPECT_EQ(speculative(b, prompt, sp, kTokens, ngram, &st), want);
        // Over 128 tokens every model repeats itself somewhere; the short
        // sanitizer run counts proposals over all models.
        if (kTokens >= 128) {
            EXPECT_GT(st.proposed, 0);
        }
        proposed_all += st.proposed;
        EXPECT_EQ(b.n_past(), static_cast<int64_t>(prompt.size() + want.size() - 1));
        tandem::Session c(m.file, m.spec, session_options());
        spec::DraftModelProposer draft(path.string(), m.tok, c.n_vocab(), session_options(), sp, 0.0f);
        spec::Stats sd;
        EXPECT_EQ(speculative(c, prompt, sp, kTokens, draft, &sd), want);
        EXPECT_GE(sd.acceptance(), 0.99) << sd.accepted << " of " << sd.proposed;
        ++done;
    }
    if (done == 0) GTEST_SKIP() << "no model of ../shared/models found";
    EXPECT_GT(proposed_all, 0);
}

// ------------------------------------------------------ sampling, whole runs

// The 2nd and 3rd generated tokens (the first is drawn as plainly) under
// speculative sampling vs plain sampling, over many seeds, on a short
// context: same distribution. The model is the test model at a high
// temperature (flat enough to give many outcomes).
TEST(SpecSampling, TokenFrequenciesMatchPlainSampling) {
    const Model m(tiny_path());
    const auto prompt = m.tok.encode("The cat sat on the mat. The cat sat", true);
    SamplerParams sp;
    sp.temperature = 1.0f;
    sp.top_k = 20;
    sp.top_p = 0.95f;
    sp.min_p = 0.0f;
    // Under AddressSanitizer (ten times slower) 400 seeds check the memory
    // and still tell the distributions apart; the release build draws 1000.
#if defined(__SANITIZE_ADDRESS__)
    const int trials = 400;
#else
    const int trials = 1000;
#endif
    tandem::Session s(m.file, m.spec, session_options(64));
    std::vector<float> prompt_logits;
    s.eval(prompt, false, prompt_logits);
    const auto n_prompt = static_cast<int32_t>(prompt.size());

    auto collect = [&](spec::Proposer* proposer, int64_t& proposed, int64_t& accepted) {
        std::map<int32_t, int64_t> second, third;
        for (int t = 0; t < trials; ++t) {
            sp.seed = 90000u + static_cast<uint64_t>(t);
            s.remove_positions(0, n_prompt, -1);
            std::vector<int32_t> out;
            if (proposer == nullptr) {
                tandem::Sampler sampler(sp);
                for (int32_t x : prompt) sampler.accept(x);
                std::vector<float> logits = prompt_logits;
                for (int i = 0; i < 3; ++i) {
                    out.push_back(sampler.sample(logits));
                    sampler.accept(out.back());
                    if (i < 2) s.eval(std::span<const int32_t>(&out.back(), 1), false, logits);
                }
            } else {
                proposer->prepare(prompt);
                spec::Config cfg;
                cfg.adaptive = false;
                cfg.draft_max = 4;
                // max_tokens 4 lets the first step draft 2 tokens: the 2nd and 3rd
                // both go through the rule; emit stops after the 3rd.
                const spec::Stats st = spec::generate(s, prompt, prompt_logits, sp, *proposer, cfg, 4, 64,
                                                      [&](int32_t x) {
                                                          out.push_back(x);
                                                          return out.size() < 3;
                                                      });
                proposed += st.proposed;
                accepted += st.accepted;
            }
            ++second[out[1]];
            ++third[out[2]];
        }
        return std::make_pair(second, third);
    };
    int64_t p0 = 0, a0 = 0;
    const auto [plain2, plain3] = collect(nullptr, p0, a0);
    // A deterministic proposer (one-hot q): the draft model drafting
    // greedily, so that its drafts are likely tokens, often kept.
    spec::DraftModelProposer ngram(tiny_path().string(), m.tok, s.n_vocab(), session_options(64), greedy(), 0.0f);
    // The draft samples from its own, sharper distribution (q != p), so
    // that the rule both keeps and refuses.
    SamplerParams dsp = sp;
    dsp.temperature = 0.6f;
    spec::DraftModelProposer draft(tiny_path().string(), m.tok, s.n_vocab(), session_options(64), dsp, 0.0f);
    for (spec::Proposer* proposer : {static_cast<spec::Proposer*>(&ngram), static_cast<spec::Proposer*>(&draft)}) {
        SCOPED_TRACE(proposer->name());
        int64_t proposed = 0, accepted = 0;
        const auto [spec2, spec3] = collect(proposer, proposed, accepted);
        // The rule had work to do: drafts both kept and refused.
        EXPECT_GT(proposed, trials);
        EXPECT_GT(accepted, proposed / 20);
        EXPECT_LT(accepted, proposed);
        int df2 = 0, df3 = 0;
        const double x2 = chi2_two_sample(plain2, spec2, df2);
        const double x3 = chi2_two_sample(plain3, spec3, df3);
        ASSERT_GT(df2, 3);
        ASSERT_GT(df3, 3);
        EXPECT_LT(x2, chi2_critical(df2)) << "2nd token, df " << df2;
        EXPECT_LT(x3, chi2_critical(df3)) << "3rd token, df " << df3;
    }
}

// --------------------------------------------------------------- vocabulary

// tiny-llama with token `id`'s text replaced.
fs::path with_token_text(const fs::path& dir, int32_t id, const std::string& text) {
    const fs::path out = dir / "other-vocab.gguf";
    tandem::testing::write_with_token_text(tiny_path(), out, id, text);
    return out;
}

TEST(SpecVocabulary, DraftWithAnotherVocabularyIsRefusedNamingTheToken) {
    const auto dir = tandem::testing::scratch_dir();
    const Model m(tiny_path());
    const int32_t id = 300;
    const std::string old_text(m.tok.token_text(id));
    const fs::path other = with_token_text(dir, id, "SPEC_TEST_TOKEN");
    tandem::Session s(m.file, m.spec, session_options());
    const std::string e = error_of(
        [&] { spec::DraftModelProposer d(other.string(), m.tok, s.n_vocab(), session_options(), greedy(), 0.75f); });
    EXPECT_TRUE(contains(e, "token 300 is \"" + old_text + "\" in the model, \"SPEC_TEST_TOKEN\" in the draft")) << e;
    // Through the binary: one line naming the flag, the file and the token.
    const auto r = run_tandem("run -m " + shell_quote(tiny_path().string()) + " -md " + shell_quote(other.string()) +
                                  " -p Hello -n 4 --temp 0",
                              dir);
    tandem::testing::expect_one_line_error(r, "token 300 is");
    EXPECT_TRUE(contains(r.err, "--model-draft " + other.string())) << r.err;
    fs::remove_all(dir);
}

// ------------------------------------------------------------- the binary

TEST(SpecRun, SpeculativeRunsPrintThePlainText) {
    if (exact_model().empty()) GTEST_SKIP() << "../shared/models/tiny-llama-Q8_0.gguf not found";
    const auto dir = tandem::testing::scratch_dir();
    const std::string base = "run -m " + shell_quote(exact_model().string()) + " -p " + shell_quote(kRepetitive) +
                             " -n 128 --temp 0 --ignore-eos -t 2 --no-display-prompt";
    const auto plain_run = run_tandem(base, dir);
    ASSERT_EQ(plain_run.exit_code, 0) << plain_run.err;
    EXPECT_TRUE(contains(plain_run.err, "generation: 128 tokens")) << plain_run.err;
    EXPECT_FALSE(contains(plain_run.err, "speculative")) << plain_run.err;
    for (const std::string& extra :
         {std::string(" --spec-ngram"), std::string(" --spec-ngram 2 --draft-max 4"),
          " -md " + shell_quote(exact_model().string()), " --model-draft " + shell_quote(tiny_path().string()) +
                                                           " --draft-p-min 0.9 --draft-min 2 --draft-fixed"}) {
        SCOPED_TRACE(extra);
        const auto r = run_tandem(base + extra, dir);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(r.out, plain_run.out);
        EXPECT_TRUE(contains(r.err, "generation: 128 tokens")) << r.err;
        EXPECT_TRUE(contains(r.err, "speculative (")) << r.err;
        EXPECT_TRUE(contains(r.err, "tokens in ")) << r.err;
    }
    // -n -1 to the end of a small context, and the context-full line.
    const std::string small = "run -m " + shell_quote(exact_model().string()) + " -p " + shell_quote(kRepetitive) +
                              " -n -1 -c 96 --temp 0 --ignore-eos -t 2";
    const auto p2 = run_tandem(small, dir);
    const auto s2 = run_tandem(small + " --spec-ngram", dir);
    ASSERT_EQ(p2.exit_code, 0) << p2.err;
    ASSERT_EQ(s2.exit_code, 0) << s2.err;
    EXPECT_EQ(s2.out, p2.out);
    EXPECT_TRUE(contains(s2.err, "context of 96 tokens is full")) << s2.err;
    fs::remove_all(dir);
}

TEST(SpecRun, BadSpeculationFlagsAreOneLineErrors) {
    const auto dir = tandem::testing::scratch_dir();
    const std::string base = "run -m " + shell_quote(tiny_path().string()) + " -p Hello -n 2 --temp 0 ";
    tandem::testing::expect_one_line_error(run_tandem(base + "--spec-ngram 0", dir), "--spec-ngram");
    tandem::testing::expect_one_line_error(run_tandem(base + "--draft-max -1 --spec-ngram", dir), "--draft-max");
    tandem::testing::expect_one_line_error(run_tandem(base + "--draft-min 5 --draft-max 2 --spec-ngram", dir),
                                           "--draft-min 5 is more than --draft-max 2");
    tandem::testing::expect_one_line_error(
        run_tandem(base + "--spec-ngram -md " + shell_quote(tiny_path().string()), dir), "not both");
    tandem::testing::expect_one_line_error(
        run_tandem(base + "-md " + shell_quote(tiny_path().string()) + " --draft-p-min 2", dir), "--draft-p-min");
    tandem::testing::expect_one_line_error(run_tandem(base + "-md " + shell_quote((dir / "none.gguf").string()), dir),
                                           "none.gguf");
    fs::remove_all(dir);
}

}  // namespace

namespace {

// The premise of greedy equality: a batch's logits are one-by-one logits,
// bit for bit. Checked for every batch length a draft can give.
// device: "" for the CPU, else every layer and the head there; then only
// the F16 cache and batches of 5 and 17 (the emulator is slow).
void expect_batch_logits_equal_one_by_one(const fs::path& path, const std::string& device = "") {
    SCOPED_TRACE(path.string() + (device.empty() ? "" : " on " + device));
    const Model m(path);
    const auto prompt = m.tok.encode(kRepetitive, true);
    const std::vector<int32_t> cont = m.tok.encode(" the mat. The dog sat on the log. The cat sat on the mat.", false);
    ASSERT_GE(cont.size(), 17u);
    std::vector<tandem::model::CacheType> caches = {tandem::model::kCacheF16, tandem::model::kCacheQ8_0};
    std::vector<size_t> lengths = {2, 3, 4, 5, 8, 17};
    if (!device.empty()) {
        caches.pop_back();
        lengths = {5, 17};
    }
    for (const auto cache : caches) {
        tandem::SessionOptions so = session_options();
        so.cache_type = cache;
        if (!device.empty()) {
            so.device = device;
            so.n_gpu_layers = m.spec.hp.n_layer + 1;
        }
        tandem::Session one(m.file, m.spec, so), many(m.file, m.spec, so);
        std::vector<float> a, b, row;
        one.eval(prompt, false, a);
        many.eval(prompt, false, b);
        for (const size_t n : lengths) {
            std::vector<float> single;
            for (size_t i = 0; i < n; ++i) {
                one.eval(std::span<const int32_t>(&cont[i], 1), false, row);
                single.insert(single.end(), row.begin(), row.end());
            }
            std::vector<float> batch;
            std::vector<tandem::BatchToken> bt(n);
            for (size_t i = 0; i < n; ++i) {
                bt[i] = {cont[i], static_cast<int32_t>(prompt.size() + i), 0, true};
            }
            many.eval_batch_single_order(bt, batch);
            ASSERT_EQ(batch.size(), single.size());
            float worst = 0;
            size_t first = batch.size();
            for (size_t i = 0; i < batch.size(); ++i) {
                if (batch[i] != single[i] && first == batch.size()) first = i;
                worst = std::max(worst, std::fabs(batch[i] - single[i]));
            }
            EXPECT_EQ(first, batch.size()) << "cache " << tandem::model::cache_type_name(cache) << " batch of " << n
                                           << ": row " << first / static_cast<size_t>(one.n_vocab())
                                           << " differs first, max |diff| " << worst;
            const auto p0 = static_cast<int32_t>(prompt.size());
            one.remove_positions(0, p0, -1);
            many.remove_positions(0, p0, -1);
        }
    }
}

// The same on the GPU (CudaDevice::set_single_token_order): Q4_K's batch
// form from 4 tokens, and F16's cuBLAS from 16, are left for the
// one-token order. Before, the 17-token batch of the F16 model went
// through cuBLAS and missed the bits.
TEST(SpecPremise, CudaSingleOrderBatchLogitsEqualOneByOne) {
    std::string why;
    if (tandem::cuda::list_devices(&why).empty()) TANDEM_CUDA_SKIP("no GPU: " << why);
    const fs::path f16 = tandem::testing::shared("models/tiny-llama-F16.gguf");
    if (!fs::exists(f16)) TANDEM_CUDA_SKIP(f16.string() << " not found");
    expect_batch_logits_equal_one_by_one(tiny_path(), "cuda0");
    expect_batch_logits_equal_one_by_one(f16, "cuda0");
}

TEST(SpecPremise, SingleOrderBatchLogitsEqualOneByOne) {
    std::vector<fs::path> models = {tiny_path(), tandem::testing::shared("models/tiny-llama-Q8_0.gguf")};
    if (const char* env = std::getenv("TANDEM_GEMMA3_GGUF")) models.emplace_back(env);
    for (const fs::path& p : models) {
        if (fs::exists(p)) expect_batch_logits_equal_one_by_one(p);
    }
}

}  // namespace
