#include "kernels_cuda/expert_matmul.h"

#include <cuda_runtime.h>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/cuda_kernels.h"

namespace tandem::cuda {

void run_expert_products(DeviceMatmul& mm, const ExpertCall& c, std::span<const ExpertWeight> weights) {
    const ExpertRows& p = *c.plan;
    const int32_t* in_rows = c.indices;
    const int32_t* grouped_row = c.indices + p.total;
    kernels::launch_gather_rows(c.x, c.n_cols, in_rows, p.total, c.n_cols, c.x_grouped, c.n_cols, nullptr);
    TANDEM_CUDA_CHECK(cudaGetLastError());
    const auto n_expert = static_cast<int64_t>(p.offsets.size()) - 1;
    for (const ExpertWeight& w : weights) {
        for (int64_t e = 0; e < n_expert; ++e) {
            const int64_t first = p.offsets[static_cast<size_t>(e)];
            const int64_t count = p.offsets[static_cast<size_t>(e) + 1] - first;
            if (count == 0) continue;  // an expert nobody chose is not read
            const void* slice = static_cast<const uint8_t*>(w.data) + static_cast<uint64_t>(e * w.rows) * w.row_bytes;
            mm.run(w.type, slice, w.row_bytes, w.rows, c.n_cols, c.x_grouped + first * c.n_cols, c.n_cols, count, c.scratch,
                   c.y_grouped + first * w.rows, w.rows);
            // Before the route's weight, as ggml's add_id (cpu::add per row).
            if (w.bias) kernels::launch_add_rows(c.y_grouped + first * w.rows, w.bias + e * w.rows, w.rows, count, nullptr);
        }
        // y_grouped is reused by the next weight: these launches read it first
        // (one stream).
        if (c.sum_slots) {
            kernels::launch_slot_sum(c.y_grouped, grouped_row, c.route, c.n_used, w.rows, c.n_tokens, w.out, nullptr);
        } else {
            kernels::launch_gather_rows(c.y_grouped, w.rows, grouped_row, p.total, w.rows, w.out, w.rows, nullptr);
        }
        TANDEM_CUDA_CHECK(cudaGetLastError());
    }
}

}  // namespace tandem::cuda
