// Grammar requests in the serve scheduler: the text matches the grammar,
// and speculation (n-gram drafts) changes nothing: a draft is kept only
// when it is the token the grammar-constrained Sampler chooses, so greedy
// and sampled requests give the very tokens they give without it.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/grammar/json_schema.h"
#include "runtime/sampler/grammar_constraint.h"
#include "runtime/serving/scheduler.h"
#include "tests/serve_helpers.h"

namespace tandem {
namespace {

using serve::GenerationRequest;
using serve::Scheduler;
using serve::SchedulerOptions;
using testing::collect;
using testing::ServeModel;
using testing::ServeResult;

// A list the n-gram proposer finds repeats in.
const char* kSchema = R"({"type": "array", "items": {"enum": ["cat", "dog", "fish"]}, "minItems": 6, "maxItems": 12})";

std::vector<ServeResult> run_all(const ServeModel& m, int spec_ngram, const std::vector<GenerationRequest>& reqs,
                                 int64_t* proposed) {
    auto s = m.session(2, 1024, 1);
    SchedulerOptions o{2, 0, 16};
    o.spec_ngram = spec_ngram;
    o.draft_max = 4;
    Scheduler sched(*s, m.tok, o);
    sched.start();
    std::vector<std::shared_ptr<serve::Job>> jobs;
    for (const auto& r : reqs) jobs.push_back(sched.submit(r));
    std::vector<ServeResult> out;
    for (const auto& j : jobs) out.push_back(collect(j));
    sched.stop();
    *proposed = sched.stats().draft_proposed;
    return out;
}

TEST(GrammarServe, SpeculationGivesThePlainConstrainedTokens) {
    const ServeModel m;
    const auto sg = std::make_shared<const SamplingGrammar>(
        SamplingGrammar{grammar::compile_json_schema(nlohmann::ordered_json::parse(kSchema)), grammar_tokens(m.tok)});
    std::vector<GenerationRequest> reqs;
    for (int i = 0; i < 4; ++i) {
        GenerationRequest g;
        g.prompt = m.tok.encode("Pets: cat, dog, cat, dog, cat, dog, cat,", true);
        g.sampling.temperature = i == 0 ? 0.0f : 1.0f;  // greedy, then sampled with three seeds
        g.sampling.seed = static_cast<uint64_t>(i);
        g.sampling.grammar = sg;
        g.max_tokens = 120;
        reqs.push_back(g);
    }
    int64_t plain_proposed = 0, spec_proposed = 0;
    const auto plain = run_all(m, 0, reqs, &plain_proposed);
    const auto sped = run_all(m, 2, reqs, &spec_proposed);
    EXPECT_EQ(plain_proposed, 0);
    EXPECT_GT(spec_proposed, 0);  // the drafts were checked
    for (size_t i = 0; i < reqs.size(); ++i) {
        SCOPED_TRACE("request " + std::to_string(i));
        EXPECT_EQ(sped[i].last.tokens, plain[i].last.tokens);
        EXPECT_EQ(sped[i].text, plain[i].text);
        // The text is a whole match of the schema's grammar when the
        // request stopped (a random model may run out of tokens first).
        grammar::Matcher check(sg->grammar);
        EXPECT_TRUE(check.accept(plain[i].text)) << plain[i].text;
        if (plain[i].last.finish_reason == "stop") {
            EXPECT_TRUE(check.can_end()) << plain[i].text;
            const auto parsed = nlohmann::json::parse(plain[i].text, nullptr, false);
            EXPECT_TRUE(parsed.is_array() && parsed.size() >= 6) << plain[i].text;
        }
    }
}

}  // namespace
}  // namespace tandem
