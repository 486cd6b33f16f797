// The draft-model proposer: a second, smaller model with the target's
// vocabulary drafts greedily (temperature 0) or by sampling (temperature >
// 0, reporting each draft token's distribution q for the accept/reject
// rule), and stops early where it is unsure.
//
// DraftModel is the model opened once, its session holding one sequence
// per stream that drafts (run: one; serve: one per slot), drafting for
// several streams in one batch per draft position. DraftModelProposer is
// run's single stream over it.
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/serving/speculative.h"

namespace tandem::spec {

// Throws tandem::Error unless the two vocabularies are the same, token for
// token: the message names the first id whose text differs (or that one of
// them lacks) and both texts. `what` names the draft in the message.
void check_same_vocabulary(const Tokenizer& target, const Tokenizer& draft, const std::string& what);

// check_same_vocabulary on the tokenizers of two model files, without
// loading either model (what a command checks before it starts).
void check_draft_vocabulary(const std::string& target_path, const std::string& draft_path);

// The draft's top probability at temperature 1 over the whole vocabulary
// (softmax of its raw logits): the confidence --draft-p-min compares.
double top_probability(std::span<const float> logits);

// The generator a stream's draft samples with, from the request's seed
// (not the target's own sequence of draws).
std::mt19937_64 draft_generator(uint64_t seed);

// One stream's drafting at one step.
struct DraftRequest {
    int32_t seq = 0;                    // the draft session's sequence for this stream
    std::span<const int32_t> context;   // every token so far; the target has not evaluated the last one
    int max = 0;                        // most tokens to draft (0: only bring the cache up to date)
    const SamplerParams* sp = nullptr;  // the stream's sampling: temperature 0 drafts the argmax; else
                                        // drawn from the same filters (no repetition penalty) with q reported
    std::mt19937_64* rng = nullptr;     // for temperature > 0
    Draft* out = nullptr;
    bool behind = false;  // set by propose: the catch-up budget ran out before this context; nothing drafted
};

class DraftModel {
public:
    // Opens `path` on the CPU with `so` (context, micro-batch, threads,
    // cache type, sequences: the caller's) and checks its vocabulary
    // against `target_tokenizer` and its logits width against
    // `target_vocab`. p_min: drafting stops before a token whose
    // top_probability() is below it. single_order: every evaluation in the
    // one-token order (Session::eval_batch_single_order), so that a
    // stream's drafts do not depend on what the other streams draft beside
    // it, nor on how its catch-up was cut.
    DraftModel(const std::string& path, const Tokenizer& target_tokenizer, int64_t target_vocab,
               const SessionOptions& so, float p_min, bool single_order = false);
    ~DraftModel();
    DraftModel(const DraftModel&) = delete;
    DraftModel& operator=(const DraftModel&) = delete;

    // Drafts for every request together. First each request's sequence is
    // brought up to its context: what the sequence holds of it is kept, the
    // rest evaluated, all sequences in one batch (catch_up >= 0 bounds the
    // tokens evaluated over all requests: those with the least to evaluate
    // go first; a request left behind drafts nothing this time). Then one
    // batch per draft position over the requests still drafting: a request
    // stops before a token whose top probability is below p_min, at its
    // max, or at the end of its sequence's room.
    void propose(std::span<DraftRequest> reqs, int64_t catch_up = -1);
    // Keeps the first n positions of sequence seq, forgets the rest (the
    // drafts the target refused).
    void keep(int32_t seq, size_t n);
    // Forgets every sequence's cache (after an error left them unknown).
    void clear();

    int64_t passes() const { return passes_; }  // batches evaluated
    // Positions sequence seq holds (0.. in order).
    size_t held(int32_t seq) const { return held_.at(static_cast<size_t>(seq)).size(); }
    int32_t n_seq() const { return static_cast<int32_t>(held_.size()); }
    float p_min() const { return p_min_; }
    const std::string& path() const { return path_; }
    Session& session() { return *session_; }

private:
    void eval(std::span<const BatchToken> batch);

    std::string path_;
    std::unique_ptr<gguf::File> file_;
    std::unique_ptr<model::ModelSpec> spec_;
    std::unique_ptr<Session> session_;
    float p_min_;
    bool single_order_;
    int64_t seq_room_;  // positions one sequence can hold
    std::vector<std::vector<int32_t>> held_;  // per sequence: the tokens its cache holds, positions 0..
    std::vector<BatchToken> batch_;
    std::vector<float> logits_;
    int64_t passes_ = 0;
};

class DraftModelProposer final : public Proposer {
public:
    // A DraftModel of one sequence. sp: the run's sampling parameters; the
    // draft samples (temperature > 0) from the same filtered distribution
    // without the repetition penalty, from its own generator.
    DraftModelProposer(const std::string& path, const Tokenizer& target_tokenizer, int64_t target_vocab,
                       const SessionOptions& so, const SamplerParams& sp, float p_min);
    ~DraftModelProposer() override;

    void prepare(std::span<const int32_t> prompt) override;
    void propose(std::span<const int32_t> context, int max, Draft& out) override;
    bool expensive() const override { return true; }
    std::string name() const override;
    int64_t passes() const override { return model_.passes(); }
    Session& session() { return model_.session(); }

private:
    DraftModel model_;
    SamplerParams sp_;
    std::mt19937_64 rng_;
};

}  // namespace tandem::spec
