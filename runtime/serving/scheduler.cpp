#include "runtime/serving/scheduler.h"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/serving/text_stream.h"
#include "runtime/serving/draft_model.h"
#include "runtime/serving/speculative.h"

namespace tandem::serve {

using Clock = std::chrono::steady_clock;

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    const size_t n = std::min(a.size(), b.size());
    size_t i = 0;
    while (i < n && a[i] == b[i]) ++i;
    return i;
}

Event final_event(std::string reason, std::string error = {}) {
    Event e;
    e.done = true;
    e.finish_reason = std::move(reason);
    e.error = std::move(error);
    return e;
}

}  // namespace

std::optional<Event> Job::next(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
    Event e = std::move(events_.front());
    events_.pop_front();
    return e;
}

void Job::push(Event e) {
    {
        std::lock_guard lock(mu_);
        events_.push_back(std::move(e));
    }
    cv_.notify_all();
}

struct Scheduler::Slot {
    int32_t id = 0;
    std::vector<int32_t> cache;  // the tokens at positions 0.. of this sequence
    Clock::time_point last_used{};

    // The request it serves, when busy.
    std::shared_ptr<Job> job;
    GenerationRequest req;
    std::optional<spec::TargetChooser> chooser;  // settles tokens as plain decoding draws them
    std::optional<TextStream> text;
    size_t prompt_done = 0;   // prompt tokens in the cache
    bool generating = false;  // the prompt is in; next_token waits to be evaluated
    int32_t next_token = -1;
    int64_t generated = 0;
    Usage usage;
    Clock::time_point assigned_at{}, first_token_at{};
    std::vector<int32_t> generated_ids;
    std::optional<spec::DraftLength> draft_length;  // per request, adapting as for run
    spec::Draft draft;             // this step's, after next_token
    bool asked = false;            // the proposer was asked this step
    std::vector<int32_t> context;  // what it was asked about: cache and next_token
    std::mt19937_64 draft_rng;     // the draft model's draws for a sampling request

    bool busy() const { return job != nullptr; }
};

void check_slot_count(int64_t n_slots) {
    if (n_slots < 1 || n_slots > kMaxSequences) {
        throw FieldError("n_slots", fmt::format("{{n_slots}}: expected 1..{} slots, found {}", kMaxSequences, n_slots));
    }
}

void SchedulerOptions::validate(int64_t n_ctx, int64_t n_ubatch) const {
    check_slot_count(n_slots);
    const int64_t per_slot = n_ctx_slot > 0 ? n_ctx_slot : n_ctx / n_slots;
    if (per_slot < 2) {
        throw FieldError("n_ctx", fmt::format("a context ({{n_ctx}}) of {} split over {} slots leaves {} positions "
                                              "each; give a larger one",
                                              n_ctx, n_slots, per_slot));
    }
    spec::check_one_proposer(spec_ngram, draft != nullptr);
    const spec::Config c = spec_config();
    c.validate();
    if (draft != nullptr && draft->n_seq() < n_slots) {
        throw FieldError("draft", fmt::format("the draft model holds {} sequences, expected one per slot ({})",
                                              draft->n_seq(), n_slots));
    }
    if (spec_ngram > 0 || draft != nullptr) c.check_fits(n_ubatch);
}

Scheduler::Scheduler(Session& session, const Tokenizer& tokenizer, SchedulerOptions options)
    : session_(session), tokenizer_(tokenizer), options_(options) {
    options_.validate(session_.n_ctx(), session_.n_ubatch());
    if (options_.n_ctx_slot <= 0) options_.n_ctx_slot = session_.n_ctx() / options_.n_slots;
    options_.step_tokens = std::max<int64_t>(options_.step_tokens, options_.n_slots);
    for (int32_t i = 0; i < options_.n_slots; ++i) {
        auto s = std::make_unique<Slot>();
        s->id = i;
        slots_.push_back(std::move(s));
    }
    stats_.slots.resize(slots_.size());
    for (size_t i = 0; i < stats_.slots.size(); ++i) stats_.slots[i].id = static_cast<int32_t>(i);
    session_.remove_positions(-1, 0, -1);
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::start() {
    if (thread_.joinable()) return;
    thread_ = std::thread([this] { loop(); });
}

void Scheduler::stop() {
    {
        std::lock_guard lock(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    std::lock_guard lock(mu_);
    for (Pending& p : pending_) p.job->push(final_event("cancelled"));
    pending_.clear();
    for (Task* t : tasks_) {
        t->result = "the server is stopping";
        t->done = true;
    }
    tasks_.clear();
    cv_.notify_all();
}

std::shared_ptr<Job> Scheduler::submit(GenerationRequest request) {
    auto job = std::make_shared<Job>();
    std::string why;
    if (request.prompt.empty()) {
        why = "the prompt gives no tokens";
    } else if (static_cast<int64_t>(request.prompt.size()) >= options_.n_ctx_slot) {
        why = fmt::format("the prompt has {} tokens but a slot's context holds {}", request.prompt.size(),
                          options_.n_ctx_slot);
    } else {
        try {
            validate(request.sampling);
        } catch (const Error& e) {
            why = e.what();
        }
    }
    if (!why.empty()) {
        job->push(final_event("error", why));
        return job;
    }
    {
        std::lock_guard lock(mu_);
        if (stopping_) {
            job->push(final_event("cancelled"));
            return job;
        }
        pending_.push_back(Pending{std::move(request), job, Clock::now()});
        stats_.queued = static_cast<int64_t>(pending_.size());
    }
    cv_.notify_all();
    return job;
}

std::string Scheduler::with_idle_slot(int32_t slot, const SlotTask& fn) {
    if (slot < 0 || slot >= options_.n_slots) {
        return fmt::format("no slot {}: the slots are 0..{}", slot, options_.n_slots - 1);
    }
    Task task{slot, &fn, {}, false};
    std::unique_lock lock(mu_);
    if (stopping_) return "the server is stopping";
    tasks_.push_back(&task);
    cv_.notify_all();
    cv_.wait(lock, [&] { return task.done; });
    return task.result;
}

std::string Scheduler::save_slot(int32_t slot, std::vector<uint8_t>& state, size_t& n_tokens) {
    return with_idle_slot(slot, [&](Session& session, int32_t seq, std::vector<int32_t>& cached) {
        state = session.save_sequence(seq, cached);
        n_tokens = cached.size();
    });
}

std::string Scheduler::restore_slot(int32_t slot, std::span<const uint8_t> state, size_t& n_tokens) {
    return with_idle_slot(slot, [&](Session& session, int32_t seq, std::vector<int32_t>& cached) {
        std::vector<int32_t> tokens = session.restore_sequence(seq, state);  // a bad state changes nothing
        if (static_cast<int64_t>(tokens.size()) > options_.n_ctx_slot) {
            session.remove_positions(seq, 0, -1);
            cached.clear();
            throw Error(fmt::format("the state holds {} tokens; a slot's context holds {}", tokens.size(),
                                    options_.n_ctx_slot));
        }
        cached = std::move(tokens);
        n_tokens = cached.size();
    });
}

SchedulerStats Scheduler::stats() const {
    std::lock_guard lock(mu_);
    return stats_;
}

void Scheduler::loop() {
    while (true) {
        {
            std::unique_lock lock(mu_);
            const bool any_busy = std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return s->busy(); });
            if (!any_busy) cv_.wait(lock, [&] { return stopping_ || !pending_.empty() || !tasks_.empty(); });
            if (stopping_) break;
        }
        run_tasks();
        assign_pending();
        step();
    }
    // Jobs still running end here, with what they generated so far, as a
    // reply cut by its token limit ("length"; the client sees a whole reply).
    for (auto& s : slots_) {
        if (s->busy()) finish(*s, "length");
    }
}

void Scheduler::run_tasks() {
    std::unique_lock lock(mu_);
    while (!tasks_.empty()) {
        Task* t = tasks_.front();
        tasks_.pop_front();
        Slot& s = *slots_[static_cast<size_t>(t->slot)];
        if (s.busy()) {
            t->result = fmt::format("slot {} is busy with a request", t->slot);
        } else {
            lock.unlock();
            std::string result;
            try {
                (*t->fn)(session_, s.id, s.cache);
            } catch (const Error& e) {
                result = e.what();
            }
            lock.lock();
            t->result = std::move(result);
        }
        t->done = true;
        stats_.slots[static_cast<size_t>(s.id)].cached_tokens = static_cast<int64_t>(s.cache.size());
    }
    cv_.notify_all();
}

void Scheduler::assign_pending() {
    while (true) {
        Pending p;
        Slot* chosen = nullptr;
        {
            std::lock_guard lock(mu_);
            if (pending_.empty()) return;
            // The idle slot whose cache shares the longest prefix with the
            // prompt; among equals, the one unused longest.
            size_t best = 0;
            for (auto& s : slots_) {
                if (s->busy()) continue;
                const size_t common =
                    pending_.front().request.cache_prompt ? common_prefix(s->cache, pending_.front().request.prompt) : 0;
                if (chosen == nullptr || common > best || (common == best && s->last_used < chosen->last_used)) {
                    chosen = s.get();
                    best = common;
                }
            }
            if (chosen == nullptr) return;
            p = std::move(pending_.front());
            pending_.pop_front();
            stats_.queued = static_cast<int64_t>(pending_.size());
        }
        if (p.job->cancelled()) {
            p.job->push(final_event("cancelled"));
            continue;
        }
        Slot& s = *chosen;
        const auto now = Clock::now();
        s.job = p.job;
        s.req = std::move(p.request);
        s.usage = Usage{};
        s.usage.prompt_tokens = static_cast<int64_t>(s.req.prompt.size());
        s.usage.queued_ms = ms_between(p.queued_at, now);
        s.assigned_at = now;
        s.generated = 0;
        s.generating = false;
        s.next_token = -1;
        // Keep the cached prefix, but evaluate at least the prompt's last
        // token: its logits choose the first generated one.
        size_t keep = s.req.cache_prompt ? common_prefix(s.cache, s.req.prompt) : 0;
        keep = std::min(keep, s.req.prompt.size() - 1);
        keep = static_cast<size_t>(session_.held_prefix(s.id, static_cast<int32_t>(keep)));
        session_.remove_positions(s.id, static_cast<int32_t>(keep), -1);
        s.cache.resize(keep);
        if (options_.draft != nullptr) options_.draft->keep(s.id, keep);
        s.prompt_done = keep;
        s.usage.cached_tokens = static_cast<int64_t>(keep);
        s.chooser.emplace(s.req.sampling);
        for (int32_t t : s.req.prompt) s.chooser->accept(t);
        s.generated_ids.clear();
        s.draft_length.emplace(options_.draft_max, options_.draft_min, options_.draft_adaptive,
                               options_.draft != nullptr);
        s.draft = spec::Draft{};
        s.asked = false;
        s.draft_rng = spec::draft_generator(s.req.sampling.seed);
        s.text.emplace(s.req.stop);
        std::lock_guard lock(mu_);
        stats_.running = std::count_if(slots_.begin(), slots_.end(), [](const auto& x) { return x->busy(); });
        stats_.slots[static_cast<size_t>(s.id)].busy = true;
    }
}

void Scheduler::finish(Slot& s, const std::string& reason, const std::string& error) {
    Event e;
    e.done = true;
    e.finish_reason = reason;
    e.error = error;
    e.slot = s.id;
    if (reason == "stop" || reason == "length") e.text = s.text->finish();
    const auto now = Clock::now();
    if (s.generating) s.usage.generation_ms = ms_between(s.first_token_at, now);
    else s.usage.prompt_ms = ms_between(s.assigned_at, now);
    e.usage = s.usage;
    e.tokens = std::move(s.generated_ids);
    s.generated_ids.clear();
    std::shared_ptr<Job> job = std::move(s.job);
    s.job.reset();
    s.text.reset();
    s.last_used = now;
    {
        // The counts first: whoever reads the last event sees them.
        std::lock_guard lock(mu_);
        stats_.requests_done += 1;
        stats_.running = std::count_if(slots_.begin(), slots_.end(), [](const auto& x) { return x->busy(); });
        stats_.slots[static_cast<size_t>(s.id)].busy = false;
    }
    job->push(std::move(e));
}

bool Scheduler::settle(Slot& s, int32_t tok) {
    const auto now = Clock::now();
    if (!s.generating) {
        s.generating = true;
        s.first_token_at = now;
        s.usage.prompt_ms = ms_between(s.assigned_at, now);
    }
    const bool end = tokenizer_.is_end_of_generation(tok) ||
                     std::find(s.req.stop_tokens.begin(), s.req.stop_tokens.end(), tok) != s.req.stop_tokens.end();
    if (end && !s.req.ignore_eos) {
        finish(s, "stop");
        return false;
    }
    s.chooser->accept(tok);
    ++s.generated;
    s.generated_ids.push_back(tok);
    s.usage.completion_tokens = s.generated;
    std::string text = s.text->push(tokenizer_.token_to_piece(tok));
    if (!text.empty()) {
        Event e;
        e.text = std::move(text);
        e.slot = s.id;
        s.job->push(std::move(e));
    }
    if (s.text->stopped()) {
        finish(s, "stop");
        return false;
    }
    if ((s.req.max_tokens >= 0 && s.generated >= s.req.max_tokens) ||
        static_cast<int64_t>(s.cache.size()) >= options_.n_ctx_slot) {  // no position left for tok
        finish(s, "length");
        return false;
    }
    s.next_token = tok;
    return true;
}

void Scheduler::propose(const std::vector<Slot*>& decoding) {
    std::vector<spec::DraftRequest> reqs;
    std::vector<Slot*> by_model;
    for (Slot* s : decoding) {
        s->draft.tokens.clear();
        s->draft.q.clear();
        s->asked = false;
        if (!speculating() || !s->draft_length) continue;
        // Room: the drafts and the token after them must fit the slot's
        // context and max_tokens (the token settled after the last draft
        // counts too).
        int64_t room = options_.n_ctx_slot - static_cast<int64_t>(s->cache.size()) - 2;
        if (s->req.max_tokens >= 0) room = std::min(room, s->req.max_tokens - s->generated - 1);
        const int64_t k = std::min<int64_t>(s->draft_length->allowed(), room);
        if (k <= 0 || k < options_.draft_min) continue;
        s->asked = true;
        s->context = s->cache;
        s->context.push_back(s->next_token);
        if (options_.spec_ngram > 0) {
            s->draft.tokens = spec::ngram_lookup(s->context, options_.spec_ngram, 1, static_cast<int>(k));
        } else {
            reqs.push_back({s->id, s->context, static_cast<int>(k), &s->req.sampling, &s->draft_rng, &s->draft});
            by_model.push_back(s);
        }
    }
    if (!reqs.empty()) {
        // All slots' drafts together, a batch per draft position; a long
        // catch-up (a new prompt) is spread over steps, the slot decoding
        // without drafts meanwhile.
        try {
            options_.draft->propose(reqs, options_.step_tokens);
        } catch (const Error&) {
            // What the draft's sequences hold is unknown: it forgets them,
            // and this step goes without drafts.
            options_.draft->clear();
            for (Slot* s : by_model) {
                s->draft.tokens.clear();
                s->draft.q.clear();
                s->asked = false;
            }
        }
        for (size_t i = 0; i < reqs.size(); ++i) {
            if (reqs[i].behind) by_model[i]->asked = false;  // catching up is no failed draft
        }
    }
    for (Slot* s : decoding) {
        if (static_cast<int>(s->draft.tokens.size()) < options_.draft_min) {
            s->draft.tokens.clear();
            s->draft.q.clear();
        }
    }
}

bool Scheduler::step() {
    for (auto& s : slots_) {
        if (s->busy() && s->job->cancelled()) finish(*s, "cancelled");
    }
    std::vector<BatchToken> batch;
    std::vector<Slot*> rows;  // the slot of each logits row
    std::vector<Slot*> decoding;
    for (auto& s : slots_) {
        if (s->busy() && s->generating) decoding.push_back(s.get());
    }
    const auto t0 = Clock::now();  // the drafting counts in the step's time
    propose(decoding);
    for (Slot* s : decoding) {
        const auto pos = static_cast<int32_t>(s->cache.size());
        batch.push_back({s->next_token, pos, s->id, true});
        rows.push_back(s);
        for (size_t i = 0; i < s->draft.tokens.size(); ++i) {
            batch.push_back({s->draft.tokens[i], pos + 1 + static_cast<int32_t>(i), s->id, true});
            rows.push_back(s);
        }
    }
    const size_t n_decode = batch.size();
    // One prompt chunk a step, the longest-waiting slot's, of up to
    // step_tokens whatever else runs: where a prompt is cut then depends on
    // that request alone.
    Slot* prefill = nullptr;
    for (auto& s : slots_) {
        if (s->busy() && !s->generating && (prefill == nullptr || s->assigned_at < prefill->assigned_at)) {
            prefill = s.get();
        }
    }
    size_t chunk = 0;
    if (prefill != nullptr) {
        chunk = std::min(static_cast<size_t>(options_.step_tokens), prefill->req.prompt.size() - prefill->prompt_done);
        for (size_t i = 0; i < chunk; ++i) {
            const size_t p = prefill->prompt_done + i;
            const bool last = p + 1 == prefill->req.prompt.size();
            batch.push_back({prefill->req.prompt[p], static_cast<int32_t>(p), prefill->id, last});
            if (last) rows.push_back(prefill);
        }
    }
    if (batch.empty()) return false;

    // The decodes in the one-token order (each stream's logits are the bits
    // it gets alone, whatever the batch), the prompt chunk apart in the
    // fastest order: two passes over the weights on a step that has both.
    try {
        const auto n_vocab_floats = static_cast<size_t>(session_.n_vocab());
        std::span<const BatchToken> all(batch);
        if (n_decode > 0) session_.eval_batch_single_order(all.first(n_decode), logits_);
        if (chunk > 0) {
            session_.eval_batch(all.subspan(n_decode), chunk_logits_);
            logits_.resize(n_decode * n_vocab_floats);
            logits_.insert(logits_.end(), chunk_logits_.begin(), chunk_logits_.end());
        }
    } catch (const Error& e) {
        // Nothing of this batch can be trusted: its sequences start afresh.
        for (auto& s : slots_) {
            if (!s->busy()) continue;
            session_.remove_positions(s->id, 0, -1);
            s->cache.clear();
            if (options_.draft != nullptr) options_.draft->keep(s->id, 0);
            finish(*s, "error", e.what());
        }
        return true;
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const auto prompt_evaluated = static_cast<int64_t>(chunk);
    if (chunk > 0) {
        prefill->cache.insert(prefill->cache.end(), prefill->req.prompt.begin() + static_cast<ptrdiff_t>(prefill->prompt_done),
                              prefill->req.prompt.begin() + static_cast<ptrdiff_t>(prefill->prompt_done + chunk));
        prefill->prompt_done += chunk;
    }
    const auto n_vocab = static_cast<size_t>(session_.n_vocab());
    const auto rows_of = [&](size_t r, size_t n) {
        return std::span<float>(logits_).subspan(r * n_vocab, n * n_vocab);
    };
    // Each decoding slot: its token's row settles the next token, and each
    // draft either is kept (its row settling the token after it) or is
    // replaced, as spec::verify rules (the rows are those plain decoding
    // would compute, token by token). The refused drafts leave the slot's
    // cache and the draft model's.
    int64_t sampled = 0, proposed = 0, accepted = 0;
    size_t r = 0;
    for (Slot* s : decoding) {
        const size_t k = s->draft.tokens.size();
        s->cache.push_back(s->next_token);
        size_t settled = 0;
        const spec::Verdict v = spec::verify(*s->chooser, rows_of(r, k + 1), static_cast<int64_t>(n_vocab), s->draft,
                                             [&](int32_t tok) {
                                                 // Settling row i means draft i - 1 was kept.
                                                 if (settled > 0) s->cache.push_back(s->draft.tokens[settled - 1]);
                                                 ++settled;
                                                 return settle(*s, tok);
                                             });
        sampled += static_cast<int64_t>(settled);
        r += k + 1;
        const auto kept = static_cast<size_t>(v.kept);
        if (kept < k) session_.remove_positions(s->id, static_cast<int32_t>(s->cache.size()), -1);
        if (options_.draft != nullptr) options_.draft->keep(s->id, s->cache.size());
        if (s->asked) s->draft_length->update(static_cast<int>(k), static_cast<int>(kept));
        proposed += static_cast<int64_t>(k);
        accepted += static_cast<int64_t>(kept);
    }
    if (chunk > 0 && rows.size() > n_decode) {
        settle(*prefill, prefill->chooser->choose(rows_of(n_decode, 1)));
        ++sampled;
    }
    std::lock_guard lock(mu_);
    stats_.prompt_tokens += prompt_evaluated;
    stats_.generated_tokens += sampled;
    stats_.draft_proposed += proposed;
    stats_.draft_accepted += accepted;
    if (prompt_evaluated > 0) stats_.prompt_seconds += seconds;
    else stats_.generation_seconds += seconds;
    int64_t cells = 0;
    for (auto& s : slots_) {
        cells += static_cast<int64_t>(s->cache.size());
        stats_.slots[static_cast<size_t>(s->id)].cached_tokens = static_cast<int64_t>(s->cache.size());
        stats_.slots[static_cast<size_t>(s->id)].draft_cached_tokens =
            options_.draft != nullptr ? static_cast<int64_t>(options_.draft->held(s->id)) : 0;
    }
    stats_.kv_cells_used = cells;
    return true;
}

}  // namespace tandem::serve
