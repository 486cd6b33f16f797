// The server's parts without HTTP: the text stream (stop strings, UTF-8),
// the OpenAI request checks, and the scheduler's continuous batching,
// prompt reuse and cancellation on a real (tiny) model.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/sampler/sampler.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/chat_messages.h"
#include "tests/run_command.h"
#include "tests/serve_helpers.h"
#include "tests/test_paths.h"
#include "tools/serve/openai_api.h"
#include "runtime/serving/scheduler.h"
#include "runtime/serving/text_stream.h"

namespace {

using nlohmann::json;
using tandem::serve::ApiError;
using tandem::serve::Event;
using tandem::serve::GenerationRequest;
using tandem::serve::Scheduler;
using tandem::serve::SchedulerOptions;
using tandem::serve::TextStream;

// ---- TextStream

std::string feed(TextStream& ts, const std::vector<std::string>& pieces) {
    std::string out;
    for (const auto& p : pieces) out += ts.push(p);
    return out + ts.finish();
}

TEST(ServeTextStream, StopStringSplitAcrossPiecesIsNeverSent) {
    TextStream ts({"<|im_end|>"});
    std::string out;
    out += ts.push("Paris is the");
    out += ts.push(" capital.<|im");
    EXPECT_EQ(out, "Paris is the capital.");  // "<|im" held back
    out += ts.push("_end|> and more");
    EXPECT_TRUE(ts.stopped());
    out += ts.push("ignored");
    out += ts.finish();
    EXPECT_EQ(out, "Paris is the capital.");
    EXPECT_EQ(ts.sent(), out);
}

TEST(ServeTextStream, HeldBackTextThatNeverBecomesAStopIsSent) {
    TextStream ts({"STOP"});
    EXPECT_EQ(feed(ts, {"a S", "T", "x", " ST"}), "a STx ST");
    EXPECT_FALSE(ts.stopped());
}

TEST(ServeTextStream, TheEarliestOfSeveralStopsWins) {
    TextStream ts({"world", "lo"});
    EXPECT_EQ(feed(ts, {"hello world"}), "hel");
}

// Anthropic's stop_sequence names the one that ended the text: the earliest.
TEST(ServeTextStream, TheStopStringThatEndedItIsKnown) {
    TextStream ts({"world", "lo", "zz"});
    EXPECT_EQ(ts.stop_string(), "");
    EXPECT_EQ(feed(ts, {"hel", "lo world"}), "hel");
    EXPECT_EQ(ts.stop_string(), "lo");
}

TEST(ServeTextStream, IncompleteUtf8WaitsForItsLastByte) {
    TextStream ts;
    const std::string euro = "\xE2\x82\xAC";
    EXPECT_EQ(ts.push("a" + euro.substr(0, 2)), "a");
    EXPECT_EQ(ts.push(euro.substr(2)), euro);
    EXPECT_EQ(ts.finish(), "");
}

// ---- OpenAI request checks

std::string api_error(const json& body, bool chat = true) {
    const auto e = tandem::testing::request_error(body, chat);
    return e ? e->param + ": " + e->what() : "<accepted>";
}

TEST(ServeRequests, EachBadFieldIsNamed) {
    const json ok_messages = tandem::testing::user_turn();
    EXPECT_EQ(api_error({{"messages", ok_messages}}), "<accepted>");
    struct Case {
        json body;
        std::string param;
    };
    const std::vector<Case> cases = {
        {json::object(), "messages"},
        {{{"messages", json::array()}}, "messages"},
        {{{"messages", "hi"}}, "messages"},
        {{{"messages", json::array({{{"role", "wizard"}, {"content", "x"}}})}}, "messages[0].role"},
        {{{"messages", json::array({{{"role", 3}, {"content", "x"}}})}}, "messages[0].role"},
        {{{"messages", json::array({{{"role", "user"}}})}}, "messages[0].content"},
        {{{"messages", json::array({{{"role", "user"}, {"content", 5}}})}}, "messages[0].content"},
        {{{"messages", json::array({"not an object"})}}, "messages[0]"},
        {{{"messages", ok_messages}, {"temperature", "hot"}}, "temperature"},
        {{{"messages", ok_messages}, {"temperature", 7}}, "temperature"},
        {{{"messages", ok_messages}, {"top_p", 0}}, "top_p"},
        {{{"messages", ok_messages}, {"max_tokens", 0}}, "max_tokens"},
        {{{"messages", ok_messages}, {"max_tokens", 1.5}}, "max_tokens"},
        {{{"messages", ok_messages}, {"max_tokens", "10"}}, "max_tokens"},
        {{{"messages", ok_messages}, {"stop", 3}}, "stop"},
        {{{"messages", ok_messages}, {"stop", json::array({"a", 1})}}, "stop[1]"},
        {{{"messages", ok_messages}, {"stream", "yes"}}, "stream"},
        {{{"messages", ok_messages}, {"stream_options", 1}}, "stream_options"},
        {{{"messages", ok_messages}, {"seed", "x"}}, "seed"},
        {{{"messages", ok_messages}, {"n", "two"}}, "n"},
        {{{"messages", ok_messages}, {"n", 1.5}}, "n"},
    };
    for (const Case& c : cases) {
        const std::string e = api_error(c.body);
        EXPECT_EQ(e.rfind(c.param + ": ", 0), 0u) << c.body.dump() << " -> " << e;
    }
    EXPECT_EQ(api_error(json::object(), false).rfind("prompt: ", 0), 0u);
    EXPECT_EQ(api_error({{"prompt", json::array({1, 2})}}, false).rfind("prompt: ", 0), 0u);
    EXPECT_THROW(tandem::serve::parse_body("{\"messages\": ["), ApiError);
    EXPECT_THROW(tandem::serve::parse_body("[1, 2]"), ApiError);
}

TEST(ServeRequests, ValuesAreTaken) {
    const json body = {{"messages", json::array({{{"role", "developer"}, {"content", json::array({{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}})}}})},
                       {"temperature", 0},
                       {"max_tokens", 7},
                       {"stop", "x"},
                       {"seed", 42},
                       {"stream", true},
                       {"stream_options", {{"include_usage", true}}}};
    const auto r = tandem::serve::parse_chat_request(body, 1);
    ASSERT_EQ(r.messages.size(), 1u);
    EXPECT_EQ(r.messages[0].role, "system");
    EXPECT_EQ(r.messages[0].content, "ab");
    EXPECT_EQ(r.params.sampling.temperature, 0.0f);
    EXPECT_EQ(r.params.max_tokens, 7);
    EXPECT_EQ(r.params.stop, std::vector<std::string>{"x"});
    EXPECT_EQ(r.params.sampling.seed, 42u);
    EXPECT_TRUE(r.params.stream);
    EXPECT_TRUE(r.params.include_usage);
}

// ---- Scheduler on the tiny model

using tandem::testing::ServeModel;
using Result = tandem::testing::ServeResult;
using tandem::testing::collect;
using tandem::testing::plain_greedy;

GenerationRequest greedy(const std::vector<int32_t>& prompt, int64_t n) {
    return tandem::testing::greedy_request(prompt, n);
}

TEST(ServeScheduler, OneRequestMatchesPlainGreedyDecoding) {
    ServeModel m;
    auto s = m.session(1);
    Scheduler sched(*s, m.tok, SchedulerOptions{1, 0, 64});
    sched.start();
    const auto prompt = m.tok.encode("Once upon a time", true);
    const Result r = collect(sched.submit(greedy(prompt, 24)));
    EXPECT_EQ(r.last.finish_reason, "length");
    EXPECT_EQ(r.last.usage.completion_tokens, 24);
    EXPECT_EQ(r.last.usage.prompt_tokens, static_cast<int64_t>(prompt.size()));
    EXPECT_EQ(r.text, plain_greedy(m, prompt, 24));
}

TEST(ServeScheduler, ParallelRequestsEachGiveWhatTheyGiveAlone) {
    ServeModel m;
    const std::vector<std::string> prompts = {"Once upon a time", "The capital of France is", "1, 2, 3, 4,",
                                              "A long time ago in a galaxy", "Hello", "The quick brown fox"};
    std::vector<std::string> alone;
    for (const auto& p : prompts) alone.push_back(plain_greedy(m, m.tok.encode(p, true), 20));
    auto s = m.session(4);
    // Small steps: prompts are chunked beside running decodes.
    Scheduler sched(*s, m.tok, SchedulerOptions{4, 0, 8});
    sched.start();
    std::vector<std::shared_ptr<tandem::serve::Job>> jobs;
    for (const auto& p : prompts) jobs.push_back(sched.submit(greedy(m.tok.encode(p, true), 20)));
    int mismatches = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
        const Result r = collect(jobs[i]);
        EXPECT_EQ(r.last.finish_reason, "length");
        if (r.text != alone[i]) ++mismatches;
        EXPECT_EQ(r.text, alone[i]) << "prompt " << i;
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_EQ(sched.stats().requests_done, static_cast<int64_t>(prompts.size()));
}

TEST(ServeScheduler, ASecondTurnReusesTheCachedPrefix) {
    ServeModel m;
    auto s = m.session(2);
    Scheduler sched(*s, m.tok, SchedulerOptions{2, 0, 64});
    sched.start();
    const auto first = m.tok.encode("Once upon a time, there was a little robot who wanted to learn.", true);
    const Result a = collect(sched.submit(greedy(first, 8)));
    ASSERT_EQ(a.last.finish_reason, "length");
    EXPECT_EQ(a.last.usage.cached_tokens, 0);
    auto second = first;
    const auto more = m.tok.encode(" It went to school.", false);
    second.insert(second.end(), more.begin(), more.end());
    const Result b = collect(sched.submit(greedy(second, 8)));
    EXPECT_EQ(b.last.usage.cached_tokens, static_cast<int64_t>(first.size()));
    EXPECT_EQ(b.text, plain_greedy(m, second, 8));
    // cache_prompt false evaluates everything again, same text.
    auto again = greedy(second, 8);
    again.cache_prompt = false;
    const Result c = collect(sched.submit(again));
    EXPECT_EQ(c.last.usage.cached_tokens, 0);
    EXPECT_EQ(c.text, b.text);
}

TEST(ServeScheduler, CancelledJobFreesItsSlotAndTheNextOneRuns) {
    ServeModel m;
    auto s = m.session(1);
    Scheduler sched(*s, m.tok, SchedulerOptions{1, 0, 64});
    sched.start();
    auto long_job = sched.submit(greedy(m.tok.encode("Once upon a time", true), 100000));
    auto waiting = sched.submit(greedy(m.tok.encode("Hello", true), 4));
    // Let the first one produce something, then go away.
    while (true) {
        auto e = long_job->next(std::chrono::milliseconds(1000));
        ASSERT_TRUE(e.has_value());
        if (!e->text.empty()) break;
    }
    long_job->cancel();
    const Result w = collect(waiting);
    EXPECT_EQ(w.last.finish_reason, "length");
    const Result l = collect(long_job);
    EXPECT_EQ(l.last.finish_reason, "cancelled");
}

// A client that leaves (GenerationRequest::client_gone) is asked about
// before every step: a prompt being evaluated stops between two chunks, and
// the slot goes to the next request.
TEST(ServeScheduler, AGoneClientStopsItsPromptBetweenChunks) {
    ServeModel m;
    auto s = m.session(1);
    const int64_t chunk = 16;
    Scheduler sched(*s, m.tok, SchedulerOptions{1, 0, chunk});
    sched.start();
    std::string text;
    for (int i = 0; i < 40; ++i) text += "The quick brown fox jumps over the lazy dog. ";
    const auto prompt = m.tok.encode(text, true);
    ASSERT_GT(prompt.size(), static_cast<size_t>(8 * chunk));
    auto asked = std::make_shared<std::atomic<int>>(0);
    GenerationRequest g = greedy(prompt, 8);
    g.client_gone = [asked] { return asked->fetch_add(1) >= 3; };  // gone once asked three times
    auto left = sched.submit(std::move(g));
    auto next = sched.submit(greedy(m.tok.encode("Hello", true), 4));
    const Result l = collect(left);
    EXPECT_EQ(l.last.finish_reason, "cancelled");
    EXPECT_EQ(l.last.usage.completion_tokens, 0);
    // Three answers of "still there" let at most three chunks in.
    EXPECT_LE(sched.stats().prompt_tokens, 3 * chunk);
    EXPECT_EQ(collect(next).last.finish_reason, "length");
}

TEST(ServeScheduler, AGoneClientFreesItsSlotBetweenDecodeSteps) {
    ServeModel m;
    auto s = m.session(1);
    Scheduler sched(*s, m.tok, SchedulerOptions{1, 0, 64});
    sched.start();
    auto gone = std::make_shared<std::atomic<bool>>(false);
    GenerationRequest g = greedy(m.tok.encode("Once upon a time", true), 100000);
    g.client_gone = [gone] { return gone->load(); };
    auto left = sched.submit(std::move(g));
    // A client gone before its request gets a slot: it never runs.
    GenerationRequest q = greedy(m.tok.encode("Hello", true), 4);
    q.client_gone = [] { return true; };
    auto never = sched.submit(std::move(q));
    auto next = sched.submit(greedy(m.tok.encode("Hello", true), 4));
    int64_t seen = 0;
    while (seen < 3) {
        auto e = left->next(std::chrono::milliseconds(10000));
        ASSERT_TRUE(e.has_value());
        if (!e->text.empty()) ++seen;
    }
    gone->store(true);
    const Result l = collect(left);
    EXPECT_EQ(l.last.finish_reason, "cancelled");
    EXPECT_LT(l.last.usage.completion_tokens, 100);
    const Result n = collect(never);
    EXPECT_EQ(n.last.finish_reason, "cancelled");
    EXPECT_EQ(n.last.slot, -1);  // it never had one
    EXPECT_EQ(collect(next).last.finish_reason, "length");
}

// SIGTERM's path: a running job ends with its text as a reply cut by its
// limit, so a stream gets its last chunk; a waiting one is cancelled.
TEST(ServeScheduler, StopEndsRunningJobsWithWhatTheyHaveAndCancelsWaitingOnes) {
    ServeModel m;
    auto s = m.session(1);
    Scheduler sched(*s, m.tok, SchedulerOptions{1, 0, 64});
    sched.start();
    auto running = sched.submit(greedy(m.tok.encode("Once upon a time", true), 100000));
    auto waiting = sched.submit(greedy(m.tok.encode("Hello", true), 4));
    std::string seen;
    while (seen.empty()) {
        auto e = running->next(std::chrono::milliseconds(1000));
        ASSERT_TRUE(e.has_value());
        seen += e->text;
    }
    sched.stop();
    const Result r = collect(running);
    EXPECT_EQ(r.last.finish_reason, "length");
    EXPECT_GT(r.last.usage.completion_tokens, 0);
    EXPECT_EQ(collect(waiting).last.finish_reason, "cancelled");
}

TEST(ServeScheduler, StopsAtTheSlotContextAndRefusesAPromptThatFillsIt) {
    ServeModel m;
    auto s = m.session(2, 128);  // 64 positions a slot
    Scheduler sched(*s, m.tok, SchedulerOptions{2, 0, 64});
    sched.start();
    EXPECT_EQ(sched.n_ctx_slot(), 64);
    const auto prompt = m.tok.encode("Once upon a time", true);
    const Result r = collect(sched.submit(greedy(prompt, -1)));
    EXPECT_EQ(r.last.finish_reason, "length");
    // Every position used; the last token generated is never evaluated.
    EXPECT_EQ(r.last.usage.completion_tokens + static_cast<int64_t>(prompt.size()) - 1, 64);
    std::vector<int32_t> big(64, prompt[1]);
    const Result e = collect(sched.submit(greedy(big, 4)));
    EXPECT_EQ(e.last.finish_reason, "error");
    EXPECT_TRUE(tandem::testing::contains(e.last.error, "64 tokens")) << e.last.error;
}

TEST(ServeScheduler, StopStringsEndTheTextBeforeThem) {
    ServeModel m;
    const auto prompt = m.tok.encode("Once upon a time", true);
    const std::string full = plain_greedy(m, prompt, 30);
    ASSERT_GT(full.size(), 12u);
    const std::string stop = full.substr(8, 4);
    auto s = m.session(1);
    Scheduler sched(*s, m.tok, SchedulerOptions{1, 0, 64});
    sched.start();
    auto g = greedy(prompt, 30);
    g.stop = {stop};
    const Result r = collect(sched.submit(g));
    EXPECT_EQ(r.last.finish_reason, "stop");
    EXPECT_EQ(r.text, full.substr(0, full.find(stop)));
}

}  // namespace

namespace {

using tandem::testing::run_tandem;
using tandem::testing::shell_quote;

std::string tiny_model() { return shell_quote(tandem::testing::test_data("tiny-llama-Q4_K_M.gguf").string()); }

TEST(ServeCli, BadFlagsAreOneLineBeforeAnythingLoads) {
    const auto dir = tandem::testing::scratch_dir();
    tandem::testing::expect_one_line_error(run_tandem("serve -m " + tiny_model() + " --port 70000", dir), "--port");
    tandem::testing::expect_one_line_error(run_tandem("serve -m " + tiny_model() + " -np 0", dir), "--parallel");
    tandem::testing::expect_one_line_error(
        run_tandem("serve -m " + tiny_model() + " --slot-save-path " + shell_quote((dir / "none").string()), dir),
        "--slot-save-path");
    tandem::testing::expect_one_line_error(run_tandem("serve -m " + shell_quote((dir / "x.gguf").string()), dir));
    tandem::testing::expect_one_line_error(
        run_tandem("serve -m " + tiny_model() + " --chat-template " + shell_quote((dir / "none.jinja").string()), dir),
        "--chat-template");
    // -md: a file that is not there, or with --spec-ngram, is refused before loading.
    tandem::testing::expect_one_line_error(
        run_tandem("serve -m " + tiny_model() + " -md " + shell_quote((dir / "none.gguf").string()), dir),
        "--model-draft");
    tandem::testing::expect_one_line_error(
        run_tandem("serve -m " + tiny_model() + " --spec-ngram -md " + tiny_model(), dir), "not both");
    tandem::testing::expect_one_line_error(
        run_tandem("serve -m " + tiny_model() + " -md " + tiny_model() + " --draft-p-min 2", dir), "--draft-p-min");
    tandem::testing::expect_one_line_error(run_tandem("serve -m " + tiny_model() + " --spec-ngram 0", dir),
                                           "--spec-ngram");
    tandem::testing::expect_one_line_error(
        run_tandem("serve -m " + tiny_model() + " --spec-ngram 3 --draft-max 600 -ub 64", dir), "--draft-max");
}

TEST(ChatCli, RepliesToEachLineUntilExit) {
    const auto dir = tandem::testing::scratch_dir();
    // Two turns from standard input, then /exit; the second turn reuses the
    // first's cache (--verbose says how much).
    std::ofstream(dir / "in.txt") << "Hello there\nTell me more\n/exit\nnever read\n";
    const std::string cmd = shell_quote(tandem::testing::tandem_binary().string()) + " chat -m " + tiny_model() +
                            " --temp 0 -n 6 --verbose <" + shell_quote((dir / "in.txt").string()) + " >" +
                            shell_quote((dir / "out.txt").string()) + " 2>" + shell_quote((dir / "err.txt").string());
    ASSERT_EQ(std::system(cmd.c_str()), 0) << tandem::testing::slurp(dir / "err.txt");
    const std::string err = tandem::testing::slurp(dir / "err.txt");
    EXPECT_TRUE(tandem::testing::contains(err, "ChatML (the model file has no tokenizer.chat_template)")) << err;
    // Two replies, the second with the first turn cached.
    size_t replies = 0;
    for (size_t at = err.find("[prompt "); at != std::string::npos; at = err.find("[prompt ", at + 1)) ++replies;
    EXPECT_EQ(replies, 2u) << err;
    EXPECT_TRUE(tandem::testing::contains(err, "cached)")) << err;
    EXPECT_FALSE(tandem::testing::contains(err, "(0 cached); 6 tokens")) << "the second turn reused nothing: " << err;
    EXPECT_FALSE(tandem::testing::slurp(dir / "out.txt").empty());
}

}  // namespace

namespace {

// --spec-ngram per slot: greedy requests give the text they give without
// it (each alone, several at once, a prompt in chunks beside them), the
// repetitive ones in fewer steps: drafts are proposed and most kept.
TEST(ServeScheduler, NgramSpeculationGivesThePlainTextInFewerSteps) {
    ServeModel m;
    const std::vector<std::string> prompts = {
        "The cat sat on the mat. The dog sat on the log. The cat sat on the mat. The dog sat on the log. The cat",
        "1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2,", "Once upon a time", "Hello"};
    std::vector<std::string> alone;
    for (const auto& p : prompts) alone.push_back(plain_greedy(m, m.tok.encode(p, true), 40));
    auto s = m.session(3);
    SchedulerOptions o{3, 0, 8};
    o.spec_ngram = 3;
    o.draft_max = 8;
    Scheduler sched(*s, m.tok, o);
    sched.start();
    std::vector<std::shared_ptr<tandem::serve::Job>> jobs;
    for (const auto& p : prompts) jobs.push_back(sched.submit(greedy(m.tok.encode(p, true), 40)));
    for (size_t i = 0; i < jobs.size(); ++i) {
        const Result r = collect(jobs[i]);
        EXPECT_EQ(r.last.finish_reason, "length");
        EXPECT_EQ(r.last.usage.completion_tokens, 40);
        EXPECT_EQ(r.text, alone[i]) << "prompt " << i;
    }
    const auto st = sched.stats();
    EXPECT_GT(st.draft_proposed, 0);
    EXPECT_GT(st.draft_accepted, 0);
    EXPECT_LE(st.draft_accepted, st.draft_proposed);
    // A second round on the same slots reuses their caches: the refused
    // drafts left them, so the cached prefixes are the texts' own.
    const Result again = collect(sched.submit(greedy(m.tok.encode(prompts[0], true), 40)));
    EXPECT_EQ(again.text, alone[0]);
    // A draft longer than a micro-batch can hold is refused.
    SchedulerOptions bad{1, 0, 8};
    bad.spec_ngram = 3;
    bad.draft_max = 64;
    EXPECT_THROW(Scheduler(*m.session(1), m.tok, bad), tandem::Error);
}

}  // namespace
