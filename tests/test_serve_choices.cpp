// Requests for several choices (OpenAI's `n`, GenerationRequest::n) on the
// scheduler and the tiny model: the prompt is evaluated once and copied,
// each choice is what a request of its own seed gives, a request waits for
// all its slots without being overtaken, and the route's `n` check.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/serving/scheduler.h"
#include "tests/chat_messages.h"
#include "tests/serve_helpers.h"
#include "tests/test_paths.h"
#include "tools/serve/completions.h"
#include "tools/serve/openai_api.h"

namespace {

using tandem::serve::Event;
using tandem::serve::GenerationRequest;
using tandem::serve::Job;
using tandem::serve::Scheduler;
using tandem::serve::SchedulerOptions;
using tandem::testing::ServeModel;

struct Choice {
    std::string text;
    Event last;
    int64_t events = 0;
};

// Every event of a job of n choices, by index, until each has ended.
std::map<int32_t, Choice> collect_choices(const std::shared_ptr<Job>& job, int32_t n) {
    std::map<int32_t, Choice> out;
    int32_t done = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (done < n && std::chrono::steady_clock::now() < deadline) {
        auto e = job->next(std::chrono::milliseconds(100));
        if (!e) continue;
        Choice& c = out[e->index];
        c.text += e->text;
        ++c.events;
        if (e->done) {
            EXPECT_TRUE(c.last.finish_reason.empty()) << "choice " << e->index << " ended twice";
            c.last = *e;
            ++done;
        }
    }
    EXPECT_EQ(done, n) << "the job's choices did not all end in 120 s";
    return out;
}

GenerationRequest sampling_request(const std::vector<int32_t>& prompt, int64_t n_tokens, uint64_t seed) {
    GenerationRequest g = tandem::testing::greedy_request(prompt, n_tokens);
    g.sampling.temperature = 1.0f;
    g.sampling.seed = seed;
    g.cache_prompt = false;  // each evaluates its whole prompt: the same rows bit for bit
    return g;
}

TEST(ServeChoices, GreedyChoicesAreEqualAndThePromptIsEvaluatedOnce) {
    ServeModel m;
    auto s = m.session(4);
    Scheduler sched(*s, m.tok, SchedulerOptions{4, 0, 64});
    sched.start();
    const auto prompt = m.tok.encode("Once upon a time", true);
    const std::string alone = tandem::testing::plain_greedy(m, prompt, 16);
    GenerationRequest g = tandem::testing::greedy_request(prompt, 16);
    g.n = 3;
    const auto choices = collect_choices(sched.submit(std::move(g)), 3);
    ASSERT_EQ(choices.size(), 3u);
    std::map<int32_t, bool> slots;
    for (const auto& [i, c] : choices) {
        EXPECT_EQ(c.last.finish_reason, "length") << "choice " << i;
        EXPECT_EQ(c.text, alone) << "choice " << i;
        EXPECT_EQ(c.last.usage.completion_tokens, 16);
        EXPECT_EQ(c.last.usage.prompt_tokens, static_cast<int64_t>(prompt.size()));
        slots[c.last.slot] = true;
    }
    EXPECT_EQ(slots.size(), 3u) << "each choice decodes in a slot of its own";
    const auto st = sched.stats();
    // The followers copied the leader's cells: the prompt went through the model once.
    EXPECT_EQ(st.prompt_tokens, static_cast<int64_t>(prompt.size()));
    EXPECT_EQ(st.requests_done, 1);
}

TEST(ServeChoices, ChoiceIIsWhatARequestWithSeedPlusIGives) {
    ServeModel m;
    auto s = m.session(3);
    Scheduler sched(*s, m.tok, SchedulerOptions{3, 0, 64});
    sched.start();
    const auto prompt = m.tok.encode("The quick brown fox", true);
    GenerationRequest g = sampling_request(prompt, 24, 1234);
    g.n = 3;
    const auto choices = collect_choices(sched.submit(std::move(g)), 3);
    ASSERT_EQ(choices.size(), 3u);
    for (int32_t i = 0; i < 3; ++i) {
        const tandem::testing::ServeResult alone = tandem::testing::collect(sched.submit(sampling_request(prompt, 24, 1234 + i)));
        EXPECT_EQ(choices.at(i).text, alone.text) << "choice " << i;
    }
    EXPECT_FALSE(choices.at(0).text == choices.at(1).text && choices.at(1).text == choices.at(2).text)
        << "three seeds at temperature 1 gave one text: " << choices.at(0).text;
}

// Two slots, one busy with a long request: a request for two choices
// waits holding nothing, and a request for one, behind it, does not take
// the free slot before it (it would starve the larger one). Once the long
// one ends, both run.
TEST(ServeChoices, ARequestWaitsForAllItsSlotsAndIsNotOvertaken) {
    ServeModel m;
    auto s = m.session(2);
    Scheduler sched(*s, m.tok, SchedulerOptions{2, 0, 64});
    sched.start();
    auto long_job = sched.submit(tandem::testing::greedy_request(m.tok.encode("Once upon a time", true), 100000));
    while (true) {  // it has its slot
        auto e = long_job->next(std::chrono::milliseconds(10000));
        ASSERT_TRUE(e.has_value());
        if (!e->text.empty()) break;
    }
    GenerationRequest pair = tandem::testing::greedy_request(m.tok.encode("Hello", true), 4);
    pair.n = 2;
    auto pair_job = sched.submit(std::move(pair));
    auto single = sched.submit(tandem::testing::greedy_request(m.tok.encode("Hello", true), 4));
    // Let the scheduler take several steps with one slot free.
    int seen = 0;
    while (seen < 8) {
        auto e = long_job->next(std::chrono::milliseconds(10000));
        ASSERT_TRUE(e.has_value());
        if (!e->text.empty()) ++seen;
    }
    EXPECT_EQ(sched.stats().queued, 2);
    EXPECT_FALSE(pair_job->next(std::chrono::milliseconds(0)).has_value()) << "the pair ran on one slot";
    EXPECT_FALSE(single->next(std::chrono::milliseconds(0)).has_value()) << "the single request overtook the pair";
    long_job->cancel();
    const auto pair_choices = collect_choices(pair_job, 2);
    for (const auto& [i, c] : pair_choices) EXPECT_EQ(c.last.finish_reason, "length") << "choice " << i;
    EXPECT_EQ(tandem::testing::collect(single).last.finish_reason, "length");
}

TEST(ServeChoices, TooManyChoicesAndCancellationEndEveryChoice) {
    ServeModel m;
    auto s = m.session(2);
    Scheduler sched(*s, m.tok, SchedulerOptions{2, 0, 64});
    sched.start();
    const auto prompt = m.tok.encode("Hello", true);
    for (int32_t n : {0, 3}) {
        GenerationRequest g = tandem::testing::greedy_request(prompt, 4);
        g.n = n;
        const auto choices = collect_choices(sched.submit(std::move(g)), std::max(n, 1));
        for (const auto& [i, c] : choices) {
            EXPECT_EQ(c.last.finish_reason, "error");
            EXPECT_TRUE(tandem::testing::contains(c.last.error, "1..2 choices")) << c.last.error;
        }
    }
    GenerationRequest g = tandem::testing::greedy_request(prompt, 100000);
    g.n = 2;
    auto job = sched.submit(std::move(g));
    while (true) {
        auto e = job->next(std::chrono::milliseconds(10000));
        ASSERT_TRUE(e.has_value());
        if (!e->text.empty()) break;
    }
    job->cancel();
    const auto choices = collect_choices(job, 2);
    ASSERT_EQ(choices.size(), 2u);
    for (const auto& [i, c] : choices) EXPECT_EQ(c.last.finish_reason, "cancelled") << "choice " << i;
    // The slots are free again.
    EXPECT_EQ(tandem::testing::collect(sched.submit(tandem::testing::greedy_request(prompt, 4))).last.finish_reason,
              "length");
}

TEST(ServeChoices, TheRouteTakesOneToTheSlotCount) {
    const nlohmann::json hi = tandem::testing::user_turn();
    EXPECT_EQ(tandem::serve::parse_chat_request({{"messages", hi}, {"n", 3}}, 1).params.n, 3);
    EXPECT_EQ(tandem::serve::parse_completion_request({{"prompt", "x"}}, 1).params.n, 1);
    EXPECT_NO_THROW(tandem::serve::check_choices(4, 4));
    for (int64_t n : {0, -1, 5}) {
        try {
            tandem::serve::check_choices(n, 4);
            ADD_FAILURE() << "n " << n << " accepted";
        } catch (const tandem::serve::ApiError& e) {
            EXPECT_EQ(e.status, 400);
            EXPECT_EQ(e.param, "n");
            EXPECT_TRUE(tandem::testing::contains(e.what(), "1..4")) << e.what();
        }
    }
}

TEST(ServeChoices, UsageCountsThePromptOnceAndSumsTheChoices) {
    std::vector<Event> lasts(3);
    for (int i = 0; i < 3; ++i) {
        lasts[static_cast<size_t>(i)].usage.prompt_tokens = 10;
        lasts[static_cast<size_t>(i)].usage.completion_tokens = i + 1;
    }
    const auto u = tandem::serve::choices_usage(lasts);
    EXPECT_EQ(u.prompt_tokens, 10);
    EXPECT_EQ(u.completion_tokens, 6);
    const auto body = tandem::serve::chat_response(
        {"chatcmpl-1", "m", 0},
        nlohmann::json::array({tandem::serve::chat_choice(0, {"a", {}, {}}, "stop"),
                               tandem::serve::chat_choice(1, {"b", {}, {}}, "length")}),
        u);
    ASSERT_EQ(body["choices"].size(), 2u);
    EXPECT_EQ(body["choices"][1]["index"], 1);
    EXPECT_EQ(body["choices"][1]["finish_reason"], "length");
    EXPECT_EQ(body["usage"]["completion_tokens"], 6);
    EXPECT_EQ(body["usage"]["total_tokens"], 16);
}

}  // namespace
