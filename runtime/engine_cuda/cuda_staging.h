// Uploads from the mapped file to device memory through two pinned host
// buffers: the CPU copies chunk i+1 out of the mapping (page faults and
// all) while the DMA engine sends chunk i, and pinned memory lets the copy
// run at full PCIe speed (pageable cudaMemcpy stages through a driver
// buffer one chunk at a time). Internal to kernels_cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "runtime/common/memory_ledger.h"
#include "runtime/model/device_layout.h"

namespace tandem::cuda {

class StagingUploader {
public:
    static constexpr size_t kChunkBytes = model::kUploadChunkBytes;

    // host_ledger: where the pinned bytes are recorded (Staging); may be
    // null. If pinned memory cannot be had, uploads fall back to plain
    // cudaMemcpy, slower but correct.
    explicit StagingUploader(MemoryLedger* host_ledger);
    ~StagingUploader();
    StagingUploader(const StagingUploader&) = delete;
    StagingUploader& operator=(const StagingUploader&) = delete;

    // Queues the copy of n bytes; src must stay valid until finish().
    void upload(void* device_dst, const void* host_src, size_t n);
    // Waits for every queued copy.
    void finish();

private:
    void* pinned_[2] = {nullptr, nullptr};
    cudaEvent_t done_[2] = {nullptr, nullptr};
    cudaStream_t stream_ = nullptr;
    int next_ = 0;
    LedgerReservation reservation_;
};

}  // namespace tandem::cuda
