// The experts' products on a GPU (CudaDevice::matmul_experts), in plain
// C++ over the launchers and DeviceMatmul. A call's (token, slot) rows,
// grouped by expert on the host (cpu::group_by_expert, from the route the
// device keeps a host copy of), are gathered into one block in grouped
// order; each expert with rows multiplies its part of the block by its 2-D
// slice of the 3-D weight through the device's matmul dispatch (so a slice
// is read once per call, and batches take the same element or cuBLAS path
// as any product); the products then go back to (token, slot) rows, or are
// summed over each token's slots with the route's weights in slot order.
// Internal to kernels_cuda and the CUDA device (no CUDA type here).
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "kernels_cuda/device_matmul.h"
#include "runtime/common/error.h"
#include "runtime/quant/quant_types.h"

namespace tandem::cuda {

// The host's plan of one call. Expert e serves grouped rows [offsets[e],
// offsets[e + 1]). `indices` holds the two lists the device reads, back to
// back so that one copy uploads them: for grouped row i < total, the input
// row it multiplies (its (token, slot) row, or its token's row when the
// slots share the input); then, for (token, slot) row r, its grouped row.
struct ExpertRows {
    std::vector<int64_t> offsets;
    std::vector<int32_t> indices;
    int64_t total = 0;
};

// The plan from cpu::ExpertGroups' offsets and rows (token * n_used + slot
// indices grouped by expert). Rows that are not a permutation of [0, total)
// are a checked failure.
inline void plan_expert_rows(std::span<const int64_t> offsets, std::span<const int64_t> rows, int64_t n_used,
                             bool in_per_slot, ExpertRows& plan) {
    const auto total = static_cast<int64_t>(rows.size());
    TANDEM_CHECK(n_used >= 1 && total % n_used == 0 && !offsets.empty() && offsets.back() == total &&
                     total <= std::numeric_limits<int32_t>::max(),
                 "plan_expert_rows: groups that are not one row per (token, slot)");
    plan.offsets.assign(offsets.begin(), offsets.end());
    plan.total = total;
    plan.indices.assign(static_cast<size_t>(2 * total), -1);
    for (int64_t i = 0; i < total; ++i) {
        const int64_t r = rows[static_cast<size_t>(i)];
        TANDEM_CHECK(r >= 0 && r < total && plan.indices[static_cast<size_t>(total + r)] < 0,
                     "plan_expert_rows: a (token, slot) row missing or grouped twice");
        plan.indices[static_cast<size_t>(i)] = static_cast<int32_t>(in_per_slot ? r : r / n_used);
        plan.indices[static_cast<size_t>(total + r)] = static_cast<int32_t>(i);
    }
}

// One 3-D expert weight on the device and where its products go.
struct ExpertWeight {
    quant::Type type = quant::Type::F32;
    const void* data = nullptr;  // expert e: rows [e * rows, (e + 1) * rows), whole blocks back to back
    uint64_t row_bytes = 0;
    int64_t rows = 0;       // one expert's rows: the product's width
    float* out = nullptr;   // device: (token, slot) rows of `rows`, or token rows when summing
    const float* bias = nullptr;  // device: a row of `rows` per expert, added to its products (gpt-oss); null: none
};

// One call's inputs and workspace, all device memory but `plan`.
struct ExpertCall {
    const ExpertRows* plan = nullptr;
    const int32_t* indices = nullptr;  // plan->indices, uploaded
    const float* x = nullptr;          // input rows of n_cols
    int64_t n_cols = 0;
    const float* route = nullptr;  // n_used (expert id, weight) pairs per token
    int64_t n_used = 0;
    int64_t n_tokens = 0;
    bool sum_slots = false;
    float* x_grouped = nullptr;  // total rows of n_cols
    float* y_grouped = nullptr;  // total rows of the widest weight's rows
    void* scratch = nullptr;     // kernels::matmul_scratch_bytes of n_tokens rows of n_cols
};

// Runs the products of every weight in `weights` (one input, gathered
// once), on the legacy default stream. Throws Error on a failed launch.
void run_expert_products(DeviceMatmul& mm, const ExpertCall& call, std::span<const ExpertWeight> weights);

}  // namespace tandem::cuda
