// Where the arrays of one layer's device KV cache start inside its single
// allocation: K rows, V rows, the cells' positions, the cell of each token
// being stored. Each starts on a 256-byte boundary: a Q8_0 row is 34 bytes
// a block, so with an odd number of blocks per row and an odd number of
// cells the K and V arrays end 2 bytes past a multiple of 4, and int32
// positions placed right after them would fault on a misaligned address.
// Plain C++ so that host tests check it.
#pragma once

#include <cstdint>

#include "kernels_cuda/cuda_kernels.h"

namespace tandem::cuda {

struct KvLayout {
    static constexpr uint64_t kAlign = 256;
    uint64_t k = 0, v = 0, cell_pos = 0, token_cells = 0;  // byte offsets from the allocation's start
    uint64_t bytes = 0;                                    // the allocation
};

inline uint64_t kv_aligned(uint64_t n) { return (n + KvLayout::kAlign - 1) / KvLayout::kAlign * KvLayout::kAlign; }

inline KvLayout kv_layout(const kernels::KvCache& kv, int64_t n_ubatch) {
    KvLayout l;
    const auto cells = static_cast<uint64_t>(kv.n_cells);
    l.k = 0;
    l.v = l.k + kv_aligned(cells * static_cast<uint64_t>(kv.k_row_bytes()));
    l.cell_pos = l.v + kv_aligned(cells * static_cast<uint64_t>(kv.v_row_bytes()));
    l.token_cells = l.cell_pos + kv_aligned(cells * sizeof(int32_t));
    l.bytes = l.token_cells + static_cast<uint64_t>(n_ubatch) * sizeof(int32_t);
    return l;
}

}  // namespace tandem::cuda
