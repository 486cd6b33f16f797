// What a scheduler's options must satisfy (scheduler.h), apart from the
// loop that runs with them.
#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/serving/draft_model.h"
#include "runtime/serving/scheduler.h"
#include "runtime/serving/speculative.h"

namespace tandem::serve {

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

}  // namespace tandem::serve
