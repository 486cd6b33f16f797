// How an accelerator lays out the buffers it carves from one allocation,
// so that the planner counts exactly the bytes the device allocates: each
// buffer starts on a 256-byte boundary (device_aligned).
//
// One layer's KV cache: K rows, V rows, the cells' positions, the cell of
// each token being stored. One figure for the planner
// (model::kv_bytes_for_cells), the CUDA device, which allocates exactly
// this, and the CPU, which reserves it. The boundaries matter: a Q8_0 row
// is 34 bytes a block, so with an odd number of blocks per row and an odd
// number of cells the K and V arrays end 2 bytes past a multiple of 4, and
// int32 positions placed right after them would fault on a misaligned
// address.
#pragma once

#include <cstdint>

namespace tandem::model {

// Pinned host memory an accelerator in use keeps for its whole life, in
// the host's Staging: two chunks the weights pass through (at load, and
// the weight stream's copies overlap the next chunk's fill with this one's
// send) and two halves a step's positions, cells and indices pass through.
inline constexpr uint64_t kUploadChunkBytes = uint64_t{16} << 20;
inline constexpr uint64_t kStepUploadHalfBytes = uint64_t{256} << 10;
inline constexpr uint64_t kAcceleratorStagingBytes = 2 * kUploadChunkBytes + 2 * kStepUploadHalfBytes;

inline constexpr uint64_t kDeviceAlign = 256;
inline constexpr uint64_t device_aligned(uint64_t n) { return (n + kDeviceAlign - 1) / kDeviceAlign * kDeviceAlign; }

struct KvLayout {
    uint64_t k = 0, v = 0, cell_pos = 0, token_cells = 0;  // byte offsets from the allocation's start
    uint64_t bytes = 0;                                    // the allocation
};

// n_cells cells of rows of k_row_bytes and v_row_bytes; room for the cells
// of one micro-batch of n_ubatch tokens.
inline KvLayout kv_layout(uint64_t k_row_bytes, uint64_t v_row_bytes, int64_t n_cells, int64_t n_ubatch) {
    KvLayout l;
    const auto cells = static_cast<uint64_t>(n_cells);
    l.k = 0;
    l.v = l.k + device_aligned(cells * k_row_bytes);
    l.cell_pos = l.v + device_aligned(cells * v_row_bytes);
    l.token_cells = l.cell_pos + device_aligned(cells * sizeof(int32_t));
    l.bytes = l.token_cells + static_cast<uint64_t>(n_ubatch) * sizeof(int32_t);
    return l;
}

}  // namespace tandem::model
