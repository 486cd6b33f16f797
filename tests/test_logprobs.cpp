// Logprobs, logit bias and OpenAI's presence and frequency penalties: the
// pure pieces (runtime/sampler/) and the server's request fields and
// response shapes for them (tools/serve/openai_api.h).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/sampler/logprobs.h"
#include "runtime/sampler/sampler.h"
#include "runtime/serving/scheduler.h"
#include "tests/chat_messages.h"
#include "tests/serve_helpers.h"
#include "tools/serve/openai_api.h"

namespace {

using nlohmann::json;
using tandem::SamplerParams;
using tandem::TokenHistory;
using tandem::TokenLogprobs;

// ---- token_logprobs

TEST(TokenLogprobs, AreTheLogSoftmaxOfTheRawLogits) {
    const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
    double z = 0.0;
    for (float l : logits) z += std::exp(static_cast<double>(l));
    const TokenLogprobs r = tandem::token_logprobs(logits, 4, 3);
    EXPECT_EQ(r.chosen.id, 4);
    EXPECT_NEAR(r.chosen.logprob, 0.5 - std::log(z), 1e-6);
    // The most likely first, the lower id first among equals.
    ASSERT_EQ(r.top.size(), 3u);
    EXPECT_EQ(r.top[0].id, 1);
    EXPECT_EQ(r.top[1].id, 3);
    EXPECT_EQ(r.top[2].id, 0);
    EXPECT_EQ(r.top[0].logprob, r.top[1].logprob);
    EXPECT_NEAR(r.top[2].logprob, 1.0 - std::log(z), 1e-6);
    double mass = 0.0;
    for (size_t i = 0; i < logits.size(); ++i) {
        mass += std::exp(tandem::token_logprobs(logits, static_cast<int32_t>(i), 0).chosen.logprob);
    }
    EXPECT_NEAR(mass, 1.0, 1e-6);
}

TEST(TokenLogprobs, LargeLogitsStayFiniteAndTheTopIsCapped) {
    const std::vector<float> logits = {1000.0f, 999.0f};
    const TokenLogprobs r = tandem::token_logprobs(logits, 0, 20);
    EXPECT_TRUE(std::isfinite(r.chosen.logprob));
    EXPECT_NEAR(r.chosen.logprob, -std::log1p(std::exp(-1.0)), 1e-5);
    EXPECT_EQ(r.top.size(), 2u);  // capped by the vocabulary
    EXPECT_TRUE(tandem::token_logprobs(logits, 1, 0).top.empty());
    EXPECT_THROW(tandem::token_logprobs(logits, 2, 1), tandem::InternalError);
}

// ---- logit bias and penalties

TEST(SamplerPenalties, LogitBiasAddsAndMinus100Bans) {
    std::vector<float> l = {1.0f, 2.0f, 3.0f, 4.0f};
    tandem::apply_logit_bias(std::vector<std::pair<int32_t, float>>{{0, 5.0f}, {3, -100.0f}, {1, -0.5f}, {9, 1.0f}}, l);
    EXPECT_EQ(l[0], 6.0f);
    EXPECT_EQ(l[1], 1.5f);
    EXPECT_EQ(l[2], 3.0f);
    EXPECT_EQ(l[3], -std::numeric_limits<float>::infinity());
}

TEST(SamplerPenalties, PresenceAndFrequencyFollowOpenAIsFormula) {
    std::vector<float> l = {1.0f, 1.0f, 1.0f, 1.0f};
    // logit -= frequency * count + presence * (count > 0)
    tandem::apply_presence_frequency(0.5f, 0.25f, {{1, 1}, {2, 4}}, l);
    EXPECT_EQ(l[0], 1.0f);
    EXPECT_FLOAT_EQ(l[1], 1.0f - 0.25f - 0.5f);
    EXPECT_FLOAT_EQ(l[2], 1.0f - 1.0f - 0.5f);
    EXPECT_EQ(l[3], 1.0f);
    std::vector<float> m = {1.0f, 1.0f};
    tandem::apply_presence_frequency(-1.0f, -0.5f, {{0, 2}}, m);  // negative: encourages repeats
    EXPECT_FLOAT_EQ(m[0], 3.0f);
}

TEST(SamplerPenalties, CountGeneratedTokensOnlyWithoutAWindow) {
    TokenHistory h(2);  // the repetition penalty's window: 2 tokens
    h.accept_prompt(5);
    h.accept_prompt(5);
    for (int i = 0; i < 4; ++i) h.accept(7);
    h.accept(8);
    EXPECT_EQ(h.generated().count(5), 0u);  // the prompt is not counted
    EXPECT_EQ(h.generated().at(7), 4);      // nor cut by the window
    EXPECT_EQ(h.generated().at(8), 1);
    EXPECT_EQ(std::vector<int32_t>(h.recent().begin(), h.recent().end()), (std::vector<int32_t>{7, 8}));
}

TEST(SamplerPenalties, GreedyChoiceTakesBiasThenPenalties) {
    SamplerParams p;
    p.temperature = 0.0f;
    p.logit_bias = {{2, -100.0f}};
    tandem::Sampler s(p);
    std::vector<float> l = {0.0f, 1.0f, 5.0f};
    EXPECT_EQ(s.sample(l), 1);  // 2 banned
    SamplerParams q;
    q.temperature = 0.0f;
    q.frequency_penalty = 2.0f;
    tandem::Sampler t(q);
    t.accept_prompt(0);  // a prompt token: no penalty
    std::vector<float> a = {3.0f, 2.0f};
    EXPECT_EQ(t.sample(a), 0);
    t.accept(0);
    std::vector<float> b = {3.0f, 2.0f};
    EXPECT_EQ(t.sample(b), 1);  // 3 - 2 * 1 < 2
    EXPECT_FLOAT_EQ(b[0], 1.0f);
}

TEST(SamplerPenalties, ValidateNamesTheField) {
    const auto field = [](SamplerParams p) {
        try {
            tandem::validate(p);
        } catch (const tandem::FieldError& e) {
            return e.field();
        }
        return std::string("<valid>");
    };
    SamplerParams p;
    p.presence_penalty = 2.5f;
    EXPECT_EQ(field(p), "presence_penalty");
    p = {};
    p.frequency_penalty = -3.0f;
    EXPECT_EQ(field(p), "frequency_penalty");
    p = {};
    p.logit_bias = {{1, 101.0f}};
    EXPECT_EQ(field(p), "logit_bias");
    p = {};
    p.logit_bias = {{-1, 1.0f}};
    EXPECT_EQ(field(p), "logit_bias");
    p = {};
    p.logit_bias = {{1, -100.0f}};
    EXPECT_EQ(field(p), "<valid>");
}

// ---- the server's fields

std::string param_of(const json& body, bool chat = true) {
    const auto e = tandem::testing::request_error(body, chat);
    return e ? e->param : "<accepted>";
}

json chat_body(json extra) {
    extra["messages"] = tandem::testing::user_turn();
    return extra;
}

TEST(ServeLogprobRequests, BadValuesAreRefusedNamingTheField) {
    EXPECT_EQ(param_of(chat_body({{"logprobs", "yes"}})), "logprobs");
    EXPECT_EQ(param_of(chat_body({{"logprobs", 1}})), "logprobs");
    EXPECT_EQ(param_of(chat_body({{"logprobs", true}, {"top_logprobs", 21}})), "top_logprobs");
    EXPECT_EQ(param_of(chat_body({{"logprobs", true}, {"top_logprobs", -1}})), "top_logprobs");
    EXPECT_EQ(param_of(chat_body({{"logprobs", true}, {"top_logprobs", 1.5}})), "top_logprobs");
    EXPECT_EQ(param_of(chat_body({{"top_logprobs", 3}})), "top_logprobs");  // without logprobs
    EXPECT_EQ(param_of(chat_body({{"logprobs", false}, {"top_logprobs", 3}})), "top_logprobs");
    EXPECT_EQ(param_of(chat_body({{"presence_penalty", 2.5}})), "presence_penalty");
    EXPECT_EQ(param_of(chat_body({{"frequency_penalty", -3}})), "frequency_penalty");
    EXPECT_EQ(param_of(chat_body({{"frequency_penalty", "lots"}})), "frequency_penalty");
    EXPECT_EQ(param_of(chat_body({{"logit_bias", {{"12", 101}}}})), "logit_bias.12");
    EXPECT_EQ(param_of(chat_body({{"logit_bias", {{"12", "x"}}}})), "logit_bias.12");
    EXPECT_EQ(param_of(chat_body({{"logit_bias", {{"hello", 1}}}})), "logit_bias");
    EXPECT_EQ(param_of(chat_body({{"logit_bias", {{"-3", 1}}}})), "logit_bias");
    EXPECT_EQ(param_of(chat_body({{"logit_bias", 5}})), "logit_bias");
    EXPECT_EQ(param_of(chat_body({{"logit_bias", json::array({json::array({1})})}})), "logit_bias[0]");
    EXPECT_EQ(param_of({{"prompt", "a"}, {"logprobs", 21}}, false), "logprobs");
    EXPECT_EQ(param_of({{"prompt", "a"}, {"logprobs", -1}}, false), "logprobs");
    EXPECT_EQ(param_of({{"prompt", "a"}, {"logprobs", true}}, false), "logprobs");
    EXPECT_EQ(param_of(chat_body({{"logprobs", true}, {"top_logprobs", 20}})), "<accepted>");
}

TEST(ServeLogprobRequests, ValuesAreTaken) {
    const auto r = tandem::serve::parse_chat_request(
        chat_body({{"logprobs", true},
                   {"top_logprobs", 5},
                   {"presence_penalty", 0.5},
                   {"frequency_penalty", -1.5},
                   {"logit_bias", {{"42", -100}, {"7", 3.5}}}}),
        1);
    EXPECT_TRUE(r.params.logprobs);
    EXPECT_EQ(r.params.top_logprobs, 5);
    EXPECT_EQ(r.params.sampling.presence_penalty, 0.5f);
    EXPECT_EQ(r.params.sampling.frequency_penalty, -1.5f);
    EXPECT_EQ(r.params.sampling.logit_bias,
              (std::vector<std::pair<int32_t, float>>{{42, -100.0f}, {7, 3.5f}}));
    const auto plain = tandem::serve::parse_chat_request(chat_body({{"logprobs", true}}), 1);
    EXPECT_TRUE(plain.params.logprobs);
    EXPECT_EQ(plain.params.top_logprobs, 0);  // OpenAI's default: no alternatives
    const auto off = tandem::serve::parse_chat_request(chat_body({}), 1);
    EXPECT_FALSE(off.params.logprobs);
    // llama-server's forms: [[id, bias]] and false for a ban.
    const auto ls = tandem::serve::parse_chat_request(
        chat_body({{"logit_bias", json::array({json::array({3, false}), json::array({4, 2})})}}), 1);
    EXPECT_EQ(ls.params.sampling.logit_bias, (std::vector<std::pair<int32_t, float>>{{3, -100.0f}, {4, 2.0f}}));
    const auto c = tandem::serve::parse_completion_request({{"prompt", "a"}, {"logprobs", 3}}, 1);
    EXPECT_TRUE(c.params.logprobs);
    EXPECT_EQ(c.params.top_logprobs, 3);
    const auto c0 = tandem::serve::parse_completion_request({{"prompt", "a"}, {"logprobs", 0}}, 1);
    EXPECT_TRUE(c0.params.logprobs);
    EXPECT_EQ(c0.params.top_logprobs, 0);
    EXPECT_FALSE(tandem::serve::parse_completion_request({{"prompt", "a"}}, 1).params.logprobs);
}

TEST(ServeLogprobResponses, ChatAndLegacyShapes) {
    const std::vector<TokenLogprobs> lps = {
        {{1, -0.5f}, {{1, -0.5f}, {2, -1.0f}}},
        {{3, -2.0f}, {{2, -0.1f}, {3, -2.0f}}},
    };
    const tandem::serve::TokenPiece piece = [](int32_t id) {
        return std::vector<std::string>{"", "Hi", " th\xC3\xA9", "\xC3"}[static_cast<size_t>(id)];
    };
    const json chat = tandem::serve::chat_logprobs(lps, piece);
    ASSERT_EQ(chat["content"].size(), 2u);
    const json& first = chat["content"][0];
    EXPECT_EQ(first["token"], "Hi");
    EXPECT_EQ(first["logprob"], -0.5f);
    EXPECT_EQ(first["bytes"], json::array({72, 105}));
    ASSERT_EQ(first["top_logprobs"].size(), 2u);
    EXPECT_EQ(first["top_logprobs"][1]["token"], " th\xC3\xA9");
    EXPECT_EQ(first["top_logprobs"][1]["bytes"], json::array({32, 116, 104, 0xC3, 0xA9}));
    EXPECT_EQ(chat["content"][1]["bytes"], json::array({0xC3}));  // a partial character: its byte
    int64_t offset = 10;  // the prompt's characters
    const json legacy = tandem::serve::completion_logprobs(lps, piece, offset);
    EXPECT_EQ(legacy["tokens"], json::array({"Hi", "\xC3"}));
    EXPECT_EQ(legacy["token_logprobs"], json::array({-0.5f, -2.0f}));
    EXPECT_EQ(legacy["top_logprobs"][0], json({{"Hi", -0.5f}, {" th\xC3\xA9", -1.0f}}));
    EXPECT_EQ(legacy["text_offset"], json::array({10, 12}));
    EXPECT_EQ(offset, 13);
    EXPECT_EQ(tandem::serve::utf8_chars(" th\xC3\xA9"), 4);
}

// ---- the scheduler on the tiny model

struct Collected {
    std::string text;
    std::vector<TokenLogprobs> lps;
    tandem::serve::Event last;
};

Collected run_job(tandem::serve::Scheduler& sched, tandem::serve::GenerationRequest g) {
    Collected c;
    auto job = sched.submit(std::move(g));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
        auto e = job->next(std::chrono::milliseconds(100));
        if (!e) continue;
        // Each event's logprobs are those of the tokens whose text it starts.
        if (!e->done) {
            EXPECT_FALSE(e->text.empty());
        }
        c.text += e->text;
        c.lps.insert(c.lps.end(), e->logprobs.begin(), e->logprobs.end());
        if (e->done) {
            c.last = *e;
            return c;
        }
    }
    ADD_FAILURE() << "a job did not finish in 120 s";
    return c;
}

// A started scheduler of one slot over its own session of the tiny model.
struct OneSlot {
    tandem::testing::ServeModel m;
    std::unique_ptr<tandem::Session> session = m.session(1);
    tandem::serve::Scheduler sched{*session, m.tok, tandem::serve::SchedulerOptions{1, 0, 64}};
    OneSlot() { sched.start(); }
};

TEST(ServeSchedulerLogprobs, EachTokenHasItsRawLogprobsAndGreedyPicksTheTop) {
    OneSlot one;
    const auto& m = one.m;
    auto& sched = one.sched;
    const auto prompt = m.tok.encode("Once upon a time", true);
    auto g = tandem::testing::greedy_request(prompt, 20);
    g.logprobs = true;
    g.top_logprobs = 4;
    g.sampling.repeat_penalty = 1.3f;  // the logprobs are the raw logits' all the same
    const Collected c = run_job(sched, g);
    ASSERT_EQ(c.lps.size(), c.last.tokens.size());
    ASSERT_EQ(c.lps.size(), 20u);
    for (size_t i = 0; i < c.lps.size(); ++i) {
        EXPECT_EQ(c.lps[i].chosen.id, c.last.tokens[i]);
        ASSERT_EQ(c.lps[i].top.size(), 4u);
        for (size_t j = 1; j < 4; ++j) EXPECT_GE(c.lps[i].top[j - 1].logprob, c.lps[i].top[j].logprob);
        EXPECT_LE(c.lps[i].chosen.logprob, 0.0f);
    }
    // Without penalties, greedy picks the top token, whose logprob is the chosen one's.
    auto plain = tandem::testing::greedy_request(prompt, 20);
    plain.logprobs = true;
    plain.top_logprobs = 1;
    const Collected p = run_job(sched, plain);
    ASSERT_EQ(p.lps.size(), 20u);
    for (const TokenLogprobs& t : p.lps) {
        EXPECT_EQ(t.chosen.id, t.top[0].id);
        EXPECT_EQ(t.chosen.logprob, t.top[0].logprob);
    }
    // Not asked: none.
    EXPECT_TRUE(run_job(sched, tandem::testing::greedy_request(prompt, 5)).lps.empty());
}

TEST(ServeSchedulerLogprobs, AStopStringDropsTheTokensItCut) {
    OneSlot one;
    const auto& m = one.m;
    auto& sched = one.sched;
    const auto prompt = m.tok.encode("Once upon a time", true);
    const std::string full = tandem::testing::plain_greedy(m, prompt, 30);
    ASSERT_GT(full.size(), 12u);
    auto g = tandem::testing::greedy_request(prompt, 30);
    g.logprobs = true;
    g.stop = {full.substr(8, 4)};
    const Collected c = run_job(sched, g);
    EXPECT_EQ(c.last.finish_reason, "stop");
    // The tokens whose text starts before the cut.
    size_t start = 0, want = 0;
    for (int32_t t : c.last.tokens) {
        if (start < c.text.size()) ++want;
        start += m.tok.token_to_piece(t).size();
    }
    EXPECT_EQ(c.lps.size(), want);
    EXPECT_LE(c.lps.size(), c.last.tokens.size());
}

TEST(ServeSchedulerLogprobs, SpeculationGivesThePlainLogprobs) {
    tandem::testing::ServeModel m;
    const auto prompt = m.tok.encode("one two three one two three one two three one two", true);
    auto g = tandem::testing::greedy_request(prompt, 24);
    g.logprobs = true;
    g.top_logprobs = 2;
    std::vector<Collected> out;
    for (int ngram : {0, 2}) {
        auto s = m.session(1);
        tandem::serve::SchedulerOptions o{1, 0, 64};
        o.spec_ngram = ngram;
        tandem::serve::Scheduler sched(*s, m.tok, o);
        sched.start();
        out.push_back(run_job(sched, g));
    }
    ASSERT_EQ(out[0].lps.size(), 24u);
    ASSERT_EQ(out[1].lps.size(), 24u);
    for (size_t i = 0; i < 24; ++i) {
        EXPECT_EQ(out[1].lps[i].chosen.id, out[0].lps[i].chosen.id);
        EXPECT_NEAR(out[1].lps[i].chosen.logprob, out[0].lps[i].chosen.logprob, 1e-4);
    }
}

TEST(ServeSchedulerLogprobs, ABannedTokenIsNeverChosen) {
    OneSlot one;
    const auto& m = one.m;
    auto& sched = one.sched;
    const auto prompt = m.tok.encode("Once upon a time", true);
    const Collected a = run_job(sched, tandem::testing::greedy_request(prompt, 8));
    ASSERT_FALSE(a.last.tokens.empty());
    auto g = tandem::testing::greedy_request(prompt, 8);
    g.sampling.logit_bias = {{a.last.tokens[0], -100.0f}};
    const Collected b = run_job(sched, g);
    ASSERT_FALSE(b.last.tokens.empty());
    EXPECT_NE(b.last.tokens[0], a.last.tokens[0]);
    for (int32_t t : b.last.tokens) EXPECT_NE(t, a.last.tokens[0]);
}

}  // namespace
