// The draft-model proposer: a second, smaller model with the target's
// vocabulary drafts greedily (temperature 0) or by sampling (temperature >
// 0, reporting each draft token's distribution q for the accept/reject
// rule), and stops early where it is unsure.
#pragma once

#include <memory>
#include <string>

#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/speculative/speculative.h"

namespace tandem::spec {

// Throws tandem::Error unless the two vocabularies are the same, token for
// token: the message names the first id whose text differs (or that one of
// them lacks) and both texts. `what` names the draft in the message.
void check_same_vocabulary(const Tokenizer& target, const Tokenizer& draft, const std::string& what);

// The draft's top probability at temperature 1 over the whole vocabulary
// (softmax of its raw logits): the confidence --draft-p-min compares.
double top_probability(std::span<const float> logits);

class DraftModelProposer final : public Proposer {
public:
    // Opens `path` on the CPU with `so` (context, micro-batch, threads,
    // cache type: the target's) and checks its vocabulary against
    // `target_tokenizer` and its logits width against `target_vocab`.
    // sp: the run's sampling parameters; the draft samples (temperature >
    // 0) from the same filtered distribution without the repetition
    // penalty, from its own generator. p_min: drafting stops before a token
    // whose top_probability() is below it.
    DraftModelProposer(const std::string& path, const Tokenizer& target_tokenizer, int64_t target_vocab,
                       const SessionOptions& so, const SamplerParams& sp, float p_min);
    ~DraftModelProposer() override;

    void prepare(std::span<const int32_t> prompt) override;
    void propose(std::span<const int32_t> context, int max, Draft& out) override;
    bool expensive() const override { return true; }
    std::string name() const override;
    int64_t passes() const override { return passes_; }
    Session& session() { return *session_; }

private:
    // Makes the draft's cache hold context[0, n - 1] and `logits_` the
    // last token's.
    void sync(std::span<const int32_t> context);

    std::string path_;
    std::unique_ptr<gguf::File> file_;
    std::unique_ptr<model::ModelSpec> spec_;
    std::unique_ptr<Session> session_;
    SamplerParams sp_;
    float p_min_;
    std::mt19937_64 rng_;
    std::vector<int32_t> held_;  // the tokens the draft's cache holds, positions 0..
    std::vector<float> logits_;
    int64_t passes_ = 0;
};

}  // namespace tandem::spec
