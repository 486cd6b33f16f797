// Steps in flight (Session::submit/collect) and the scheduler's groups a
// step apart, over a pipeline of stages in this process
// (tests/local_stage_link.h): every batch's logits are one session's bits,
// whatever else is in flight, and a served answer is the one-session answer.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/common/error.h"
#include "runtime/serving/scheduler.h"
#include "tests/local_stage_link.h"
#include "tests/serve_helpers.h"

namespace {

using tandem::BatchToken;
using tandem::Session;
using tandem::SessionOptions;
using tandem::testing::ServeModel;

SessionOptions options(int64_t n_ctx, int n_stages, bool per_sequence = true) {
    SessionOptions o;
    o.n_threads = 1;
    o.n_ctx = n_ctx;
    o.n_ubatch = 16;
    o.n_seq_max = 4;
    o.kv_per_sequence = per_sequence;
    o.cache_type = tandem::model::kCacheF16;
    if (n_stages > 1) o.next_stages = std::make_shared<tandem::testing::LocalStageLink>(n_stages);
    return o;
}

// Sequence s's prompt: n ids, different per sequence.
std::vector<BatchToken> prompt_batch(const ServeModel& m, int32_t s, int32_t n) {
    std::vector<BatchToken> b;
    for (int32_t i = 0; i < n; ++i) {
        b.push_back({static_cast<int32_t>((7 + 31 * s + 13 * i) % m.spec.hp.n_vocab), i, s, i + 1 == n});
    }
    return b;
}

// The steps of a run: each sequence's prompt, then decode steps in which
// the sequences go in two groups; each step is one batch, its logits kept.
struct Steps {
    std::vector<std::vector<float>> logits;  // per batch, in submit order
};

// One batch at a time (eval_batch / eval_batch_single_order).
Steps one_at_a_time(Session& s, const std::vector<std::vector<BatchToken>>& batches, const std::vector<bool>& single) {
    Steps r;
    for (size_t i = 0; i < batches.size(); ++i) {
        std::vector<float> out;
        if (single[i]) s.eval_batch_single_order(batches[i], out);
        else s.eval_batch(batches[i], out);
        r.logits.push_back(std::move(out));
    }
    return r;
}

// Up to `depth` batches in flight; the batches of a group never depend on
// another batch still in flight (the caller's order says so).
Steps in_flight(Session& s, const std::vector<std::vector<BatchToken>>& batches, const std::vector<bool>& single,
              size_t depth) {
    Steps r;
    size_t next = 0;
    while (r.logits.size() < batches.size()) {
        while (next < batches.size() && s.in_flight() < depth) {
            s.submit(batches[next], single[next]);
            ++next;
        }
        std::vector<float> out;
        s.collect(out);
        r.logits.push_back(std::move(out));
    }
    EXPECT_EQ(s.in_flight(), 0u);
    return r;
}

// Three prompts (several micro-batches each), then four decode steps of
// two groups, {0, 1} and {2}, with fixed ids (what a group's step holds
// depends only on its own earlier steps).
void script(const ServeModel& m, std::vector<std::vector<BatchToken>>& batches, std::vector<bool>& single) {
    for (int32_t s = 0; s < 3; ++s) {
        batches.push_back(prompt_batch(m, s, 40));
        single.push_back(false);
    }
    for (int32_t step = 0; step < 4; ++step) {
        const auto pos = 40 + step;
        batches.push_back({{11 + step, pos, 0, true}, {23 + step, pos, 1, true}});
        single.push_back(true);
        batches.push_back({{37 + step, pos, 2, true}});
        single.push_back(true);
    }
}

TEST(PipelineLocal, SubmitAndCollectWithoutAPipelineGiveEvalBits) {
    ServeModel m;
    std::vector<std::vector<BatchToken>> batches;
    std::vector<bool> single;
    script(m, batches, single);
    Session a(m.file, m.spec, options(256, 1)), b(m.file, m.spec, options(256, 1));
    EXPECT_EQ(a.pipeline_stages(), 1);
    const Steps ref = one_at_a_time(a, batches, single);
    const Steps got = in_flight(b, batches, single, 2);
    ASSERT_EQ(got.logits.size(), ref.logits.size());
    for (size_t i = 0; i < ref.logits.size(); ++i) EXPECT_EQ(got.logits[i], ref.logits[i]) << "batch " << i;

    // The synchronous calls refuse while a batch is in flight; collect
    // refuses with none.
    std::vector<float> out;
    EXPECT_THROW(b.collect(out), tandem::Error);
    const std::vector<BatchToken> one{{5, 44, 0, true}};
    b.submit(one, true);
    EXPECT_THROW(b.eval_batch(one, out), tandem::Error);
    b.collect(out);
    EXPECT_EQ(out.size(), static_cast<size_t>(m.spec.hp.n_vocab));
}

TEST(PipelineLocal, BatchesInFlightThroughStagesGiveOneSessionBits) {
    ServeModel m;
    ASSERT_GE(m.spec.hp.n_layer, 3) << "the test model needs a layer per stage";
    std::vector<std::vector<BatchToken>> batches;
    std::vector<bool> single;
    script(m, batches, single);
    Session one(m.file, m.spec, options(256, 1));
    const Steps ref = one_at_a_time(one, batches, single);
    for (const int stages : {2, 3}) {
        Session p(m.file, m.spec, options(256, stages));
        ASSERT_EQ(p.pipeline_stages(), stages);
        // Prompts all in flight at once, then the two decode groups a step
        // apart: depth 2 keeps group {0, 1} in one stage, {2} in the other.
        const Steps got = in_flight(p, batches, single, static_cast<size_t>(stages));
        ASSERT_EQ(got.logits.size(), ref.logits.size());
        for (size_t i = 0; i < ref.logits.size(); ++i) {
            EXPECT_EQ(got.logits[i], ref.logits[i]) << stages << " stages, batch " << i;
        }
    }
}

TEST(PipelineLocal, AFailedSubmitLeavesTheBatchesBeforeItCollectable) {
    ServeModel m;
    // One pool of 64 cells: a batch of 80 new positions fails at its fifth
    // micro-batch, after four went down the pipeline.
    Session one(m.file, m.spec, options(64, 1, false));
    Session p(m.file, m.spec, options(64, 2, false));
    const auto first = prompt_batch(m, 0, 8);
    std::vector<float> ref;
    one.eval_batch(first, ref);
    p.submit(first, false);
    std::vector<BatchToken> big = prompt_batch(m, 1, 40);
    for (const BatchToken& t : prompt_batch(m, 2, 40)) big.push_back(t);
    EXPECT_THROW(p.submit(big, false), tandem::Error);
    EXPECT_EQ(p.in_flight(), 1u);
    std::vector<float> got;
    p.collect(got);
    EXPECT_EQ(got, ref);
    // The link is in step: after the same failure and clean-up, the next
    // batch is the one session's.
    EXPECT_THROW(one.eval_batch(big, ref), tandem::Error);
    for (Session* s : {&one, &p}) {
        s->remove_positions(1, 0, -1);
        s->remove_positions(2, 0, -1);
    }
    const auto next = prompt_batch(m, 3, 20);
    one.eval_batch(next, ref);
    p.submit(next, false);
    p.collect(got);
    EXPECT_EQ(got, ref);
}

TEST(PipelineLocal, ServedAnswersOverStagesEqualOneSessionAndStepsOverlap) {
    using tandem::serve::Scheduler;
    using tandem::serve::SchedulerOptions;
    ServeModel m;
    const std::vector<std::string> prompts = {
        "Once upon a time", "The quick brown fox jumps over the lazy dog and then",
        "In the beginning the universe was created. This has made a lot of people very angry and been widely",
        "Hello"};
    const auto serve_all = [&](Session& s) {
        Scheduler sched(s, m.tok, SchedulerOptions{4, 0, 16});  // 16-token chunks: the long prompts take several
        sched.start();
        std::vector<std::shared_ptr<tandem::serve::Job>> jobs;
        for (const auto& p : prompts) jobs.push_back(sched.submit(tandem::testing::greedy_request(m.tok.encode(p, true), 12)));
        std::vector<std::string> texts;
        for (const auto& j : jobs) {
            const auto r = tandem::testing::collect(j);
            EXPECT_EQ(r.last.finish_reason, "length");
            texts.push_back(r.text);
        }
        const auto st = sched.stats();
        sched.stop();
        return std::make_pair(texts, st.overlapped_steps);
    };
    Session one(m.file, m.spec, options(1024, 1));
    const auto [ref, ref_overlapped] = serve_all(one);
    EXPECT_EQ(ref_overlapped, 0);
    Session p(m.file, m.spec, options(1024, 2));
    const auto [got, overlapped] = serve_all(p);
    EXPECT_EQ(got, ref);
    EXPECT_GT(overlapped, 0) << "no step was submitted while another was in flight";
}

}  // namespace
