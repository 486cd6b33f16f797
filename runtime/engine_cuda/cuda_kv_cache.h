// One layer's KV cache on a GPU: K and V rows each in its cache type (the
// bytes the CPU's LayerKvCache stores) and the position of each cell on
// the device, the cells' bookkeeping (KvCells) on the host, so cells are
// chosen by the CPU's rules. Internal to kernels_cuda; compiled into tandem_engine with
// the device.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels_cuda/cuda_device_alloc.h"
#include "kernels_cuda/cuda_kernels.h"
#include "runtime/engine/device.h"
#include "runtime/engine/kv_cells.h"
#include "runtime/model/model_spec.h"
#include "runtime/engine_cuda/cuda_uploads.h"

namespace tandem::cuda {

class CudaKvCache {
public:
    // Allocates the rows of the cells of `cells` (the session's
    // bookkeeping, which must outlive the cache) and room for the cell
    // index of each of n_ubatch tokens on the current device, laid out and
    // sized as the planner counts them (model::kv_layout), reserved as
    // `what`. Token cells and cell positions go up through `uploads` (which
    // must outlive the cache). What the cells forget needs no call here:
    // attention uploads the positions that changed since it last looked.
    // v_dim 0: V is each K row's first head_dim_v (MLA), none stored, in
    // K's type. Throws Error for a type the device does not store.
    CudaKvCache(MemoryLedger& ledger, AsyncUploads& uploads, const std::string& what, model::CacheType type,
                int64_t k_dim, int64_t v_dim, const KvCells& cells, int64_t n_ubatch);

    // Stores the K and V rows of each token (sequence seq[t], position
    // pos[t]) in cell cells[t] (where the session placed it), then out = attention of
    // each token's Q over its own sequence's cells. k, v, q, out: device
    // rows of the micro-batch; dev_pos: pos on the device. room: device
    // floats free during the call (room_floats), where long spans keep
    // their split partials (kernels::AttentionArgs::partials). sinks: op's
    // sinks on the device (n_head floats), or null.
    void store_and_attend(const float* k, const float* v, const float* q, const int32_t* dev_pos,
                          std::span<const int32_t> cells, std::span<const int32_t> pos, std::span<const int32_t> seq,
                          const AttentionOp& op, const float* sinks, float* out, float* room, int64_t room_floats);

    const KvCells& cells() const { return *cells_; }
    // The rows of `cells` copied to the host, with their positions and cells.
    KvSeqRows read_rows(std::span<const int64_t> cells) const;
    // Row i of `rows` into cells[i], copied to the device. Throws Error for
    // rows of another size.
    void write_rows(std::span<const int64_t> cells, const KvSeqRows& rows);
    // Bytes allocated (the real size).
    uint64_t bytes() const { return bytes_; }

private:
    // Makes the device's cell positions seq's view (cells_.cell_pos(seq)),
    // uploading only the runs of cells that differ from what it shows.
    void show(int32_t seq);

    AsyncUploads* uploads_;
    std::unique_ptr<DeviceAlloc> memory_;
    kernels::KvCache kv_;
    const KvCells* cells_;
    int32_t* token_cells_ = nullptr;   // device: the cell of each token being stored
    std::vector<int32_t> host_cells_;  // the same, chosen on the host
    std::vector<int32_t> shown_;       // what the device's cell_pos holds
    uint64_t bytes_ = 0;
};

}  // namespace tandem::cuda
