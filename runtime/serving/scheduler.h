// Continuous batching over one Session: up to n_slots sequences decode
// together, one token each per step, so one pass over the weights serves
// them all, each stream getting the bits it would alone. A request waits in
// a queue until a slot is free, then joins at the next step; its prompt is
// evaluated in chunks, one a step beside the running decodes, so their
// streams keep flowing.
//
// A slot keeps the tokens its cache holds after a request ends. The next
// request whose prompt starts with them (a chat resending its history) goes
// to that slot and evaluates only the rest.
//
// Speculative decoding per slot (SchedulerOptions): prompt lookup or a
// draft model proposes the next few tokens of each slot, the slot's step
// evaluates them after its token in the one-token order, and the tokens
// are settled as plain decoding would settle them: greedy, those the
// model agrees with (the same text); sampling, by the standard
// accept/reject rule (the same distribution; runtime/serving/).
//
// A request for n choices (OpenAI's `n`) takes n free slots at once: the
// first evaluates the prompt once, the others then get a copy of its cells
// (Session::save_sequence and restore_sequence, into their own part of the
// cache) and sample their first token from the same logits row, and the n
// decode side by side, choice i with seed + i. It
// waits at the head of the queue until n slots are free, holding none
// meanwhile, and the requests behind it wait too (first come, first
// served): it cannot be starved by smaller requests, and nothing is held
// while waiting, so no two requests can wait on each other.
//
// Under --pipeline (Session::pipeline_stages() D > 1) a step is in flight
// per stage: the decoding slots go in D groups, each group's next step
// submitted as soon as its logits land, and a prompt's chunks follow each
// other without waiting for the one before, so every stage works at once.
// A slot's tokens are the same bits either way (each token in the
// one-token order, each sequence in its own cells).
//
// Only the scheduler's thread touches the Session. Other threads submit
// requests and read their events from the Job each submit() returns.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "runtime/engine/session.h"
#include "runtime/sampler/logprobs.h"
#include "runtime/sampler/sampler.h"
#include "runtime/tokenizer/tokenizer.h"

#include "runtime/serving/embedding.h"
#include "runtime/serving/speculative.h"

namespace tandem::spec {
class DraftModel;
}

namespace tandem::serve {

struct GenerationRequest {
    std::vector<int32_t> prompt;
    SamplerParams sampling;
    int64_t max_tokens = -1;  // -1: until the slot's context is full
    std::vector<std::string> stop;  // stop strings (the text ends before them)
    std::vector<int32_t> stop_tokens;  // besides the vocabulary's end-of-generation tokens
    bool cache_prompt = true;  // reuse a slot's cached prefix
    bool ignore_eos = false;
    // Each generated token's log-probability (token_logprobs: the model's
    // raw logits, before bias, penalties and temperature) and those of the
    // top_logprobs most likely tokens, in Event::logprobs.
    bool logprobs = false;
    int32_t top_logprobs = 0;
    // Whether the client that asked has gone (closed its connection): the
    // scheduler asks before a request takes a slot and before every step,
    // so a request nobody waits for frees its slot between two decode steps
    // or two prompt chunks, streamed or not. Called on the scheduler's
    // thread; it must be quick (a look at a socket). Empty: never gone.
    std::function<bool()> client_gone;
    // Choices (1..n_slots): each event names its choice (Event::index),
    // and each choice ends with a done event of its own; choice i samples
    // with sampling.seed + i.
    int32_t n = 1;
    // Set: an embedding request. Its prompt is evaluated (in chunks, as
    // any prompt, taking a slot's turn) for the final hidden states, which
    // are pooled so (not None) into Event::embedding of the last event
    // (not normalized: the caller's choice, normalize_embedding); nothing is generated and no cached prefix is reused (the
    // rows of the whole prompt are pooled). The prompt may fill the slot.
    std::optional<Pooling> embed;
};

struct Usage {
    int64_t prompt_tokens = 0;
    int64_t cached_tokens = 0;  // of prompt_tokens, taken from a slot's cache
    int64_t completion_tokens = 0;
    double queued_ms = 0;       // waiting for a slot
    double prompt_ms = 0;       // from getting a slot to the first token
    double generation_ms = 0;   // first token to the last
};

struct Event {
    std::string text;           // more of the completion
    bool done = false;          // the last event of the job
    std::string finish_reason;  // with done: "stop", "length", "cancelled", or "error"
    std::string error;          // with finish_reason "error"
    Usage usage;                // with done
    std::vector<int32_t> tokens;  // with done: the ids generated, in order (any text a stop string cut included)
    // With logprobs asked: those of the tokens whose text starts in this
    // event's text (a token that adds no text goes with the next event
    // that does); the last event has the rest, except tokens wholly inside
    // what a stop string cut off. An end-of-generation token has none.
    std::vector<TokenLogprobs> logprobs;
    int32_t slot = -1;
    int32_t index = 0;          // the choice (GenerationRequest::n)
    std::string stop_string;    // with finish_reason "stop": the stop string that ended it ("" for a token)
    std::vector<float> embedding;  // with done: an embedding request's pooled vector (when it finished, "stop")
};

// One request's way back: the scheduler pushes events, the caller pops.
class Job {
public:
    // Waits up to `timeout` for the next event.
    std::optional<Event> next(std::chrono::milliseconds timeout);
    // Stops generation at the next step and frees the slot (a client that
    // went away). Safe from any thread, any number of times.
    void cancel() { cancelled_.store(true); }
    bool cancelled() const { return cancelled_.load(); }

    // The scheduler's side.
    void push(Event e);

private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Event> events_;
    std::atomic<bool> cancelled_{false};
};

struct SchedulerOptions {
    int32_t n_slots = 4;
    int64_t n_ctx_slot = 0;   // positions one slot may hold (0: the session's context / n_slots)
    int64_t step_tokens = 512;  // tokens evaluated per step, decodes and prompt chunks together
    // Speculation per slot, for greedy and sampling requests: a slot's
    // step evaluates its token and up to draft_max tokens proposed from its
    // own context, by prompt lookup (--spec-ngram N; 0: off) or by `draft`
    // (-md: a draft model with a sequence per slot, owned by the caller;
    // not both), the length adapting per request as for run.
    int spec_ngram = 0;
    int draft_max = 16;
    int draft_min = 0;  // shorter drafts are not checked
    bool draft_adaptive = true;  // false (--draft-fixed): always up to draft_max
    spec::DraftModel* draft = nullptr;

    // Throws FieldError naming the field at fault, for a session of n_ctx
    // positions in micro-batches of n_ubatch tokens: the slot count, the
    // context each slot gets, and speculation (check_one_proposer,
    // spec::Config::validate and check_fits; a draft model holding a
    // sequence per slot).
    void validate(int64_t n_ctx, int64_t n_ubatch) const;
    spec::Config spec_config() const { return {draft_max, draft_min, draft_adaptive}; }
};

// Throws FieldError ({n_slots}) unless 1 <= n_slots <= kMaxSequences: the
// sequences one session can hold side by side (serve's slots, chat's,
// bench's parallel streams).
void check_slot_count(int64_t n_slots);

struct SlotInfo {
    int32_t id = 0;
    bool busy = false;
    int64_t cached_tokens = 0;  // positions its cache holds
    int64_t draft_cached_tokens = 0;  // positions the draft model (-md) holds for it: never more
};

struct SchedulerStats {
    int64_t prompt_tokens = 0;     // evaluated (cached ones not counted)
    int64_t generated_tokens = 0;
    double prompt_seconds = 0;     // steps that evaluated prompt tokens
    double generation_seconds = 0; // steps that only decoded
    int64_t requests_done = 0;
    int64_t queued = 0;
    int64_t running = 0;
    int64_t kv_cells_used = 0;     // positions held, summed over slots
    int64_t draft_proposed = 0;    // speculation: draft tokens evaluated
    int64_t draft_accepted = 0;    // of those, kept
    // Steps submitted while another was in flight (--pipeline: the
    // stages working on several at once).
    int64_t overlapped_steps = 0;
    std::vector<SlotInfo> slots;
};

class Scheduler {
public:
    Scheduler(Session& session, const Tokenizer& tokenizer, SchedulerOptions options);
    ~Scheduler();
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;

    // Starts the loop on its own thread / stops it: running jobs end with
    // what they generated ("length"), jobs still waiting get "cancelled".
    void start();
    void stop();

    // Queues a request. A request that cannot run (empty prompt, prompt
    // longer than a slot's context, n outside 1..n_slots) gets an "error"
    // event for each choice.
    std::shared_ptr<Job> submit(GenerationRequest request);

    // Runs fn on the loop's thread between steps, with the session to itself
    // and the slot's cached tokens (the slot must not be busy: then fn is not
    // run and the result says so). Blocks until done. For saving and restoring
    // a slot's cache.
    using SlotTask = std::function<void(Session& session, int32_t seq, std::vector<int32_t>& cached_tokens)>;
    // Returns "" on success, else why not (busy, no such slot, or fn's Error).
    std::string with_idle_slot(int32_t slot, const SlotTask& fn);

    // A free slot's state (Session::save_sequence of its cache and the
    // tokens it holds) into `state`, their count into n_tokens. Returns ""
    // or why not (busy, no such slot).
    std::string save_slot(int32_t slot, std::vector<uint8_t>& state, size_t& n_tokens);
    // Replaces a free slot's state with one save_slot gave. Returns "" or
    // why not: a state the session refuses changes nothing; one holding
    // more tokens than a slot's context leaves the slot empty.
    std::string restore_slot(int32_t slot, std::span<const uint8_t> state, size_t& n_tokens);

    SchedulerStats stats() const;
    int64_t n_ctx_slot() const { return options_.n_ctx_slot; }
    int32_t n_slots() const { return options_.n_slots; }

private:
    struct Slot;
    using Clock = std::chrono::steady_clock;
    struct Pending {
        GenerationRequest request;
        std::shared_ptr<Job> job;
        Clock::time_point queued_at;
    };
    struct Task {
        int32_t slot;
        const SlotTask* fn;
        std::string result;
        bool done = false;
    };

    // A step submitted and not yet landed: its decodes (each slot's
    // next_token and drafts, in the one-token order) and its prompt chunk.
    struct Flight {
        std::vector<Slot*> decoding;
        Slot* prefill = nullptr;
        std::vector<BatchToken> chunk;
        bool ends_prompt = false;  // the chunk's last row settles the first token
        Clock::time_point t0;
    };

    void loop();
    bool step();  // false when there was nothing to do
    // Submits a step for the slots free to take one (false: none is);
    // under a pipeline of D stages, a D-th of the decoding slots, so that D
    // groups take turns through the stages.
    bool launch();
    // Collects the oldest step in flight and settles its tokens.
    void land();
    // Nothing in flight can be trusted: every busy slot ends with `what`
    // and its sequence starts afresh.
    void fail_all(const std::string& what);
    void assign_pending();
    // Gives slot s request `req` as choice `index` of `job`.
    void take_request(Slot& s, GenerationRequest req, std::shared_ptr<Job> job, Clock::time_point queued_at,
                      int32_t index);
    // The leader's prompt is in (its last row `row`, before any chooser):
    // each waiting follower gets a copy of its cells and settles its first
    // token.
    void share_prompt(Slot& leader, std::span<const float> row);
    void run_tasks();
    void finish(Slot& s, const std::string& reason, const std::string& error = {});
    // Hands the token the slot's request settled on to its client, with
    // its logprobs from `raw_row` (the row's logits before the chooser's
    // bias and penalties; empty when not asked); false when that finished
    // the request.
    bool settle(Slot& s, int32_t token, std::span<const float> raw_row);
    // Each decoding slot's draft tokens to check after its next_token this
    // step (none when speculation is off, backing off, or no room is left).
    void propose(const std::vector<Slot*>& decoding);
    // The hidden rows of an embedding request's prompt chunk (batch from
    // `first` on) into its pooler.
    void pool_chunk(Slot& s, std::span<const BatchToken> batch, size_t first);
    bool speculating() const { return options_.spec_ngram > 0 || options_.draft != nullptr; }

    Session& session_;
    const Tokenizer& tokenizer_;
    SchedulerOptions options_;
    std::vector<std::unique_ptr<Slot>> slots_;

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Pending> pending_;
    std::deque<Task*> tasks_;
    bool stopping_ = false;
    SchedulerStats stats_;  // under mu_
    std::thread thread_;
    std::deque<Flight> flights_;  // oldest first
    Clock::time_point last_land_{};
    std::vector<float> logits_;
    std::vector<float> chunk_logits_;
    std::vector<float> raw_rows_;  // a slot's rows before its chooser, when it asks for logprobs
    std::vector<float> hidden_;    // an embedding request's chunk: the rows its pooler asks for
};

}  // namespace tandem::serve
