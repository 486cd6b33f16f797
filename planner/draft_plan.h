// Two models on one machine: a speculative decoding draft beside its
// target (run, serve and bench with -md, plan with -md). The draft is
// planned first, with the whole accelerator: a draft is small, it usually
// fits whole, and on the accelerator its many short passes cost least. The
// target is then planned with what the draft leaves, so the two plans
// together never ask for more than the device and the host have.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "planner/planner.h"

namespace tandem::planner {

// The draft's inputs from the target's: the same device, context,
// micro-batch, cache type and speeds; its own split when draft_ngl is given
// (-ngld), else the best of every candidate; none of the user's placement
// rules (they name the target's tensors) and no weight streaming (its
// batches are the few tokens it catches up on and drafts).
PlanInputs draft_inputs(const PlanInputs& target, std::optional<int64_t> draft_ngl);

// The target's inputs beside a planned draft: the device capacity less the
// draft's device bytes and the host RAM less its host bytes (each at least
// 0), with the margin of the whole device kept. Unchanged where there is no
// device or no RAM limit.
PlanInputs inputs_beside_draft(const PlanInputs& target, const Plan& draft);

// One line for the target's reasons: where the draft sits and what it takes.
std::string draft_reason(const Plan& draft);

struct PairPlan {
    Plan draft;
    Plan target;
};

// The draft with draft_inputs, then the target with inputs_beside_draft;
// the target's reasons start with draft_reason. Throws what plan() throws.
PairPlan plan_with_draft(const model::ModelSpec& target, const model::ModelSpec& draft, const PlanInputs& in,
                         std::optional<int64_t> draft_ngl);

}  // namespace tandem::planner
