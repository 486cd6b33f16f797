// Speculative decoding in `tandem serve` (tools/serve/scheduler.cpp over
// runtime/serving/): a draft model with a sequence per slot gives every
// greedy request the plain text, several at once; sampling requests, with
// n-gram or draft-model proposals, keep the distribution plain sampling
// draws from (chi-square); a draft with another vocabulary is refused at
// start; and the binary serves with -md, counting drafts in /metrics.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "runtime/engine/session.h"
#include "runtime/sampler/sampler.h"
#include "tests/run_command.h"
#include "tests/serve_helpers.h"
#include "tests/spec_helpers.h"
#include "tests/test_paths.h"
#include "runtime/serving/scheduler.h"
#include "runtime/serving/draft_model.h"
#include "tools/spec_flags.h"

namespace {

namespace fs = std::filesystem;
namespace spec = tandem::spec;
using nlohmann::json;
using tandem::SamplerParams;
using tandem::serve::GenerationRequest;
using tandem::serve::Scheduler;
using tandem::serve::SchedulerOptions;
using tandem::testing::collect;
using tandem::testing::contains;
using tandem::testing::ServeModel;
using tandem::testing::ServeResult;
using tandem::testing::kRepetitive;
using tandem::testing::shell_quote;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;  // ASan runs the model ~10x slower: shorter runs, fewer samples
#else
constexpr bool kSanitized = false;
#endif


// A draft model beside `target` as `serve -md` opens it: a sequence per
// slot, the one-token order.
std::unique_ptr<spec::DraftModel> open_draft(const fs::path& path, const ServeModel& m, const tandem::Session& target,
                                             int n_slots, float p_min) {
    return std::make_unique<spec::DraftModel>(
        path.string(), m.tok, target.n_vocab(),
        tandem::tools::draft_session_options(std::nullopt, target, target.n_ubatch(), tandem::model::kCacheF16, n_slots), p_min,
        true);
}

// ------------------------------------------------------------------ greedy

// Several greedy requests on three slots (prompts cut in chunks beside the
// decodes), each drafted by its slot's sequence of the draft model: every
// text is plain greedy decoding's. The target drafting for itself keeps
// most drafts; another quantization of it has some refused, which leave
// both caches.
TEST(ServeSpec, DraftModelGivesEverySlotThePlainGreedyText) {
    const fs::path target = tandem::testing::shared("models/tiny-llama-Q8_0.gguf");
    if (!fs::exists(target)) GTEST_SKIP() << "../shared/models/tiny-llama-Q8_0.gguf not found";
    const ServeModel m(target);
    const int n = kSanitized ? 16 : 40;
    const std::vector<std::string> prompts = {kRepetitive, "1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2,",
                                              "Once upon a time", "Hello", "The quick brown fox"};
    std::vector<std::string> alone;
    for (const auto& p : prompts) alone.push_back(tandem::testing::plain_greedy(m, m.tok.encode(p, true), n));
    std::vector<fs::path> drafts = {target};
    const fs::path other = tandem::testing::shared("models/tiny-llama-Q2_K.gguf");
    if (fs::exists(other) && !kSanitized) drafts.push_back(other);
    for (const fs::path& d : drafts) {
        SCOPED_TRACE(d.filename().string());
        auto s = m.session(3, 1024, 1);  // one thread: steady on a loaded machine
        auto draft = open_draft(d, m, *s, 3, 0.0f);  // the random model is never sure: no p-min
        SchedulerOptions o{3, 0, 8};
        o.draft = draft.get();
        o.draft_max = 6;
        Scheduler sched(*s, m.tok, o);
        sched.start();
        std::vector<std::shared_ptr<tandem::serve::Job>> jobs;
        for (const auto& p : prompts) {
            jobs.push_back(sched.submit(tandem::testing::greedy_request(m.tok.encode(p, true), n)));
        }
        // While they run: after every step the draft model holds no more of
        // a slot than the slot's cache (refused drafts left both at once).
        int64_t looked = 0, violations = 0;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
        while (std::chrono::steady_clock::now() < deadline) {
            const auto st = sched.stats();
            for (const auto& slot : st.slots) {
                ++looked;
                if (slot.draft_cached_tokens > slot.cached_tokens) ++violations;
            }
            if (st.requests_done == static_cast<int64_t>(jobs.size())) break;
            std::this_thread::sleep_for(std::chrono::microseconds(500));
        }
        EXPECT_EQ(violations, 0) << "of " << looked << " looks";
        for (size_t i = 0; i < jobs.size(); ++i) {
            const ServeResult r = collect(jobs[i]);
            EXPECT_EQ(r.last.finish_reason, "length");
            EXPECT_EQ(r.last.usage.completion_tokens, n);
            EXPECT_EQ(r.last.tokens.size(), static_cast<size_t>(n));
            EXPECT_EQ(r.text, alone[i]) << "prompt " << i;
        }
        // A second round on the same slots: the cached prefixes (target
        // and draft) hold the texts' own tokens, no refused draft.
        const ServeResult again =
            collect(sched.submit(tandem::testing::greedy_request(m.tok.encode(prompts[0], true), n)));
        EXPECT_EQ(again.text, alone[0]);
        EXPECT_GT(again.last.usage.cached_tokens, 0);
        sched.stop();
        const auto st = sched.stats();
        EXPECT_GT(st.draft_proposed, 0);
        EXPECT_GT(st.draft_accepted, 0);
        EXPECT_LE(st.draft_accepted, st.draft_proposed);
        if (d == target) {
            EXPECT_GT(2 * st.draft_accepted, st.draft_proposed);
        }
        // Refused drafts left both caches: each holds no position past the
        // slot's tokens.
        ASSERT_EQ(st.slots.size(), 3u);
        for (int32_t i = 0; i < 3; ++i) {
            const auto& slot = st.slots[static_cast<size_t>(i)];
            EXPECT_EQ(slot.id, i);
            EXPECT_EQ(s->seq_pos_max(i) + 1, slot.cached_tokens) << "slot " << i;
            EXPECT_EQ(draft->session().seq_pos_max(i) + 1, slot.draft_cached_tokens) << "slot " << i;
            EXPECT_LE(slot.draft_cached_tokens, slot.cached_tokens) << "slot " << i;
            EXPECT_GT(slot.draft_cached_tokens, 0) << "slot " << i;
        }
    }
}

// ---------------------------------------------------------------- sampling

// The 2nd and 3rd generated tokens of many sampling requests (a seed each),
// served with speculation, against as many drawn by plain sampling from the
// Sampler (other seeds: independent samples): the same distribution.
TEST(ServeSpec, SamplingRequestsKeepThePlainDistribution) {
    const ServeModel m;
    const int kThreads = 1;  // a tiny model: one thread is as fast, and steady on a loaded machine
    SamplerParams sp;
    sp.temperature = 1.0f;
    sp.top_k = 3;  // few outcomes: a skewed rule shows in few samples
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    // The prompt: a text followed by the model's own samples, so that the
    // token it samples next has mostly come before, followed by a likely
    // token, which prompt lookup then proposes.
    std::vector<int32_t> prompt = m.tok.encode("The cat sat on the mat. The cat sat", true);
    {
        auto s = m.session(1, 256);
        std::vector<float> logits;
        s->eval(prompt, false, logits);
        SamplerParams g = sp;
        g.seed = 1234;
        tandem::Sampler sampler(g);
        for (int32_t x : prompt) sampler.accept(x);
        for (int i = 0; i < 48; ++i) {
            prompt.push_back(sampler.sample(logits));
            sampler.accept(prompt.back());
            s->eval(std::span<const int32_t>(&prompt.back(), 1), false, logits);
        }
    }
    const int trials = kSanitized ? 150 : 600;
    const auto n_prompt = static_cast<int32_t>(prompt.size());

    // Plain sampling, as `run` and a plain slot draw.
    std::map<int32_t, int64_t> plain2, plain3;
    {
        auto s = m.session(1, 256, kThreads);
        std::vector<float> prompt_logits;
        s->eval(prompt, false, prompt_logits);
        for (int t = 0; t < trials; ++t) {
            SamplerParams p = sp;
            p.seed = 500000u + static_cast<uint64_t>(t);  // not the served seeds: independent samples
            s->remove_positions(0, n_prompt, -1);
            tandem::Sampler sampler(p);
            for (int32_t x : prompt) sampler.accept(x);
            std::vector<float> logits = prompt_logits;
            std::vector<int32_t> out;
            for (int i = 0; i < 3; ++i) {
                out.push_back(sampler.sample(logits));
                sampler.accept(out.back());
                if (i < 2) s->eval(std::span<const int32_t>(&out.back(), 1), false, logits);
            }
            ++plain2[out[1]];
            ++plain3[out[2]];
        }
    }

    struct Case {
        std::string what;
        int ngram = 0;
        fs::path draft;
    };
    // The draft: another quantization of the model where ../shared has one
    // (its q differs from p: the rule keeps and refuses), else the model
    // itself (q nearly p: nearly all kept).
    const fs::path self = tandem::testing::test_data("tiny-llama-Q4_K_M.gguf");
    const fs::path q2 = tandem::testing::shared("models/tiny-llama-Q2_K.gguf");
    const bool other_draft = fs::exists(q2);
    const std::vector<Case> cases = {{"n-gram", 3, {}}, {"draft model", 0, other_draft ? q2 : self}};
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        auto s = m.session(4, 1024, kThreads);
        std::unique_ptr<spec::DraftModel> draft;
        if (!c.draft.empty()) draft = open_draft(c.draft, m, *s, 4, 0.0f);
        SchedulerOptions o{4, 0, 512};
        o.spec_ngram = c.ngram;
        o.draft = draft.get();
        o.draft_max = 4;
        Scheduler sched(*s, m.tok, o);
        sched.start();
        std::vector<std::shared_ptr<tandem::serve::Job>> jobs;
        for (int t = 0; t < trials; ++t) {
            GenerationRequest g;
            g.prompt = prompt;
            g.sampling = sp;
            g.sampling.seed = 90000u + static_cast<uint64_t>(t);
            // 4 tokens: after the first, a step may draft 2, so that the
            // 2nd and 3rd both go through the rule.
            g.max_tokens = 4;
            g.ignore_eos = true;
            jobs.push_back(sched.submit(g));
        }
        std::map<int32_t, int64_t> spec2, spec3;
        for (const auto& job : jobs) {
            const ServeResult r = collect(job);
            ASSERT_EQ(r.last.tokens.size(), 4u) << r.last.finish_reason << " " << r.last.error;
            ++spec2[r.last.tokens[1]];
            ++spec3[r.last.tokens[2]];
        }
        const auto st = sched.stats();
        // Speculation ran for these sampling requests, and the rule both
        // kept drafts and (n-gram, another model) refused them.
        EXPECT_GT(st.draft_proposed, trials / 4);
        if (!c.draft.empty()) {
            EXPECT_GT(st.draft_accepted, st.draft_proposed / 10);
        }
        if (c.draft.empty() || other_draft) {
            EXPECT_LT(st.draft_accepted, st.draft_proposed);
        }
        int df2 = 0, df3 = 0;
        const double x2 = tandem::testing::chi2_two_sample(plain2, spec2, df2);
        const double x3 = tandem::testing::chi2_two_sample(plain3, spec3, df3);
        ASSERT_GT(df2, 3);
        ASSERT_GT(df3, 3);
        EXPECT_LT(x2, tandem::testing::chi2_critical(df2)) << "2nd token, df " << df2;
        EXPECT_LT(x3, tandem::testing::chi2_critical(df3)) << "3rd token, df " << df3;
    }
}

// ------------------------------------------- the draft length, shared with run

// A draft model that has nothing to say once backs off for a step, then
// drafts again (run's loop used to count each skipped step as one more
// failure, so such a draft never drafted again).
TEST(ServeSpec, ADraftModelDraftsAgainAfterBackingOff) {
    struct Quiet final : spec::Proposer {
        int calls = 0;
        void propose(std::span<const int32_t> context, int max, spec::Draft& out) override {
            out.q.clear();
            out.tokens.clear();
            if (calls++ > 0 && max > 0) out.tokens.push_back(context.back());  // a guess, mostly refused
        }
        bool expensive() const override { return true; }
        std::string name() const override { return "quiet"; }
    } quiet;
    const ServeModel m;
    auto s = m.session(1, 256, 1);
    const auto prompt = m.tok.encode("Once upon a time", true);
    std::vector<float> logits;
    s->eval(prompt, false, logits);
    SamplerParams sp;
    sp.temperature = 0.0f;
    int64_t n = 0;
    spec::generate(*s, prompt, logits, sp, quiet, spec::Config{}, 48, 64, [&](int32_t) { return ++n < 48; });
    EXPECT_GE(quiet.calls, 3);
}

// -------------------------------------------------------------- the binary

std::string tiny_model() { return shell_quote(tandem::testing::test_data("tiny-llama-Q4_K_M.gguf").string()); }

TEST(ServeSpecCli, DraftWithAnotherVocabularyIsRefusedAtStart) {
    const auto dir = tandem::testing::scratch_dir();
    const fs::path other = dir / "other-vocab.gguf";
    const ServeModel m;
    const std::string old_text(m.tok.token_text(300));
    tandem::testing::write_with_token_text(tandem::testing::test_data("tiny-llama-Q4_K_M.gguf"), other, 300,
                                           "SPEC_TEST_TOKEN");
    // One line before the server listens, naming the flag, the file and
    // the first token that differs.
    const auto r = tandem::testing::run_tandem("serve -m " + tiny_model() + " -md " + shell_quote(other.string()) +
                                                   " --port 0",
                                               dir);
    tandem::testing::expect_one_line_error(
        r, "token 300 is \"" + old_text + "\" in the model, \"SPEC_TEST_TOKEN\" in the draft");
    EXPECT_TRUE(contains(r.err, "--model-draft " + other.string())) << r.err;
    // The draft model as the server opens it refuses it the same way.
    auto s = m.session(2);
    const std::string e = tandem::testing::error_of([&] { open_draft(other, m, *s, 2, 0.75f); });
    EXPECT_TRUE(contains(e, "token 300 is")) << e;
    fs::remove_all(dir);
}

TEST(ServeSpecCli, HelpDocumentsTheDraftModel) {
    const auto dir = tandem::testing::scratch_dir();
    const auto r = tandem::testing::run_tandem("serve --help", dir);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.out, "--model-draft")) << r.out;
    EXPECT_TRUE(contains(r.out, "-md DRAFT.gguf")) << r.out;
    EXPECT_TRUE(contains(r.out, "accept/reject")) << r.out;
    fs::remove_all(dir);
}

// `tandem serve -md` end to end: it starts, a greedy completion is the
// plain greedy text, a sampling one is served, /metrics counts the drafts,
// and SIGTERM stops it (exit 0).
TEST(ServeSpecCli, ServesWithADraftModelAndCountsItsDrafts) {
    const auto dir = tandem::testing::scratch_dir();
    const std::string bin = tandem::testing::tandem_binary().string();
    const std::string model = tandem::testing::test_data("tiny-llama-Q4_K_M.gguf").string();
    const fs::path err_path = dir / "stderr.txt";
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        const std::vector<std::string> args = {bin, "serve", "-m", model, "-md", model, "--draft-p-min", "0",
                                               "--port", "0", "-np", "2", "-c", "512", "-t", "1", "-ub", "64"};
        std::vector<char*> argv;
        for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        std::freopen("/dev/null", "w", stdout);
        std::freopen(err_path.c_str(), "w", stderr);
        ::execv(bin.c_str(), argv.data());
        ::_exit(127);
    }
    struct Stop {  // whatever fails below, the server goes
        pid_t pid;
        int status = -1;
        void now() {
            if (pid <= 0) return;
            ::kill(pid, SIGTERM);
            ::waitpid(pid, &status, 0);
            pid = 0;
        }
        ~Stop() { now(); }
    } stop{pid};
    int port = 0;
    const std::regex ready(R"(ready on http://127\.0\.0\.1:(\d+))");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (port == 0 && std::chrono::steady_clock::now() < deadline) {
        if (::waitpid(pid, &stop.status, WNOHANG) == pid) {
            stop.pid = 0;  // gone already
            FAIL() << "tandem serve exited: " << tandem::testing::slurp(err_path);
        }
        std::smatch match;
        const std::string log = tandem::testing::slurp(err_path);
        if (std::regex_search(log, match, ready)) port = std::stoi(match[1].str());
        else std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_NE(port, 0) << "not ready in 60 s: " << tandem::testing::slurp(err_path);
    EXPECT_TRUE(contains(tandem::testing::slurp(err_path), "draft model")) << tandem::testing::slurp(err_path);
    httplib::Client cli("127.0.0.1", port);
    cli.set_read_timeout(120, 0);
    const int n = 24;
    const std::string prompt = kRepetitive;
    const json greedy = {{"prompt", prompt}, {"max_tokens", n}, {"temperature", 0}, {"ignore_eos", true}};
    auto res = cli.Post("/v1/completions", greedy.dump(), "application/json");
    ASSERT_TRUE(res) << "no answer";
    ASSERT_EQ(res->status, 200) << res->body;
    const json body = json::parse(res->body);
    const ServeModel m;
    EXPECT_EQ(body["choices"][0]["text"].get<std::string>(),
              tandem::testing::plain_greedy(m, m.tok.encode(prompt, m.tok.add_bos_by_default()), n));
    EXPECT_EQ(body["usage"]["completion_tokens"].get<int64_t>(), n);
    const json sampling = {
        {"prompt", prompt}, {"max_tokens", n}, {"temperature", 0.8}, {"seed", 7}, {"ignore_eos", true}};
    res = cli.Post("/v1/completions", sampling.dump(), "application/json");
    ASSERT_TRUE(res) << "no answer";
    ASSERT_EQ(res->status, 200) << res->body;
    EXPECT_EQ(json::parse(res->body)["usage"]["completion_tokens"].get<int64_t>(), n);
    res = cli.Get("/metrics");
    ASSERT_TRUE(res) << "no answer";
    ASSERT_EQ(res->status, 200);
    const auto metric = [&](const std::string& name) {
        std::smatch match;
        const std::regex line("\ntandem:" + name + " ([0-9.e+]+)");
        return std::regex_search(res->body, match, line) ? std::stod(match[1].str()) : -1.0;
    };
    EXPECT_GT(metric("draft_tokens_total"), 0) << res->body;
    EXPECT_GT(metric("draft_tokens_accepted_total"), 0) << res->body;
    EXPECT_LE(metric("draft_tokens_accepted_total"), metric("draft_tokens_total"));
    stop.now();
    EXPECT_TRUE(WIFEXITED(stop.status) && WEXITSTATUS(stop.status) == 0)
        << "status " << stop.status << ": " << tandem::testing::slurp(err_path);
    fs::remove_all(dir);
}

}  // namespace
