#include "planner/draft_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/common/memory_ledger.h"

namespace tandem::planner {

PlanInputs draft_inputs(const PlanInputs& target, std::optional<int64_t> draft_ngl) {
    PlanInputs d = target;
    d.ngl = draft_ngl;
    d.candidates.assign(std::begin(kAllCandidates), std::end(kAllCandidates));
    d.rules = {};
    d.weight_stream = false;
    return d;
}

PlanInputs inputs_beside_draft(const PlanInputs& target, const Plan& draft) {
    PlanInputs t = target;
    if (t.device_capacity) {
        const uint64_t cap = *t.device_capacity;
        if (!t.margin) t.margin = default_margin(cap);
        t.device_capacity = cap - std::min(cap, draft.vram.total());
    }
    if (t.host_ram) t.host_ram = *t.host_ram - std::min(*t.host_ram, draft.ram.total());
    return t;
}

std::string draft_reason(const Plan& draft) {
    if (!draft.has_device) {
        return fmt::format("the draft model runs on the CPU beside it and takes {} of host RAM",
                           format_bytes(draft.ram.total()));
    }
    const bool whole = draft.ngl > draft.n_layer && draft.host_layers == 0;
    const std::string where = whole ? "whole on the accelerator" : draft.ngl == 0 ? "on the CPU" : "split";
    return fmt::format("the draft model runs {} ({}) and takes {} of the accelerator and {} of host RAM; this plan "
                       "has the rest",
                       where, placement_flags(draft), format_bytes(draft.vram.total()),
                       format_bytes(draft.ram.total()));
}

PairPlan plan_with_draft(const model::ModelSpec& target, const model::ModelSpec& draft, const PlanInputs& in,
                         std::optional<int64_t> draft_ngl) {
    PairPlan pp;
    pp.draft = plan(draft, draft_inputs(in, draft_ngl));
    pp.target = plan(target, inputs_beside_draft(in, pp.draft));
    pp.target.reasons.insert(pp.target.reasons.begin(), draft_reason(pp.draft));
    return pp;
}

}  // namespace tandem::planner
