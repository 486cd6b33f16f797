// The check PlannerVsLedger-style tests share: after a session loads, each
// device's ledger holds, category by category, the bytes the plan gave it.
#pragma once

#include <vector>

#include <gtest/gtest.h>

#include "planner/planner.h"
#include "runtime/common/memory_ledger.h"
#include "runtime/engine/session.h"

namespace tandem::testing {

// ram: the host's planned bytes; vram: the accelerator's (compared when the
// session has a second ledger). The caller checks the ledger count.
inline void expect_ledgers_equal_plan(const Session& s, const planner::DeviceBytes& ram,
                                      const planner::DeviceBytes& vram) {
    const auto ledgers = s.ledgers();
    struct Row {
        const planner::DeviceBytes& plan;
        const MemoryLedger& ledger;
    };
    std::vector<Row> rows{Row{ram, *ledgers[0]}};
    if (ledgers.size() == 2) rows.push_back(Row{vram, *ledgers[1]});
    for (const Row& r : rows) {
        SCOPED_TRACE(r.ledger.device());
        EXPECT_EQ(r.ledger.used(MemoryCategory::Weights), r.plan.weights);
        EXPECT_EQ(r.ledger.used(MemoryCategory::KvCache), r.plan.kv);
        EXPECT_EQ(r.ledger.used(MemoryCategory::Compute), r.plan.compute);
        EXPECT_EQ(r.ledger.used(MemoryCategory::Staging), r.plan.staging);
        EXPECT_EQ(r.ledger.used(MemoryCategory::Overhead), r.plan.overhead);
        EXPECT_EQ(r.ledger.total(), r.plan.total());
    }
}

}  // namespace tandem::testing
