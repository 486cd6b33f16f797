// A step's small host-to-device uploads (positions, token cells, changed
// cell positions, routes, expert indices, the input rows) without making
// the host wait: each is copied into pinned memory and sent with
// cudaMemcpyAsync on the legacy default stream, in order with the kernels
// around it, so a decode step's only wait is its logits' read.
//
// The pinned buffer is two halves used in turn. A half is written again
// only once the copies out of it are done: an event recorded when it was
// left, by then normally passed (the step's read waited for it), so the
// check is a query and a wait only when the device is that far behind. An
// upload larger than a half, or a host without pinned memory, takes a
// plain cudaMemcpy.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "runtime/common/memory_ledger.h"
#include "runtime/model/device_layout.h"

namespace tandem::cuda {

class AsyncUploads {
public:
    static constexpr size_t kHalfBytes = model::kStepUploadHalfBytes;

    // host_ledger: where the pinned bytes are recorded (Staging); may be null.
    explicit AsyncUploads(MemoryLedger* host_ledger);
    ~AsyncUploads();
    AsyncUploads(const AsyncUploads&) = delete;
    AsyncUploads& operator=(const AsyncUploads&) = delete;

    // Queues the copy of n bytes of src (read before this returns).
    void upload(void* device_dst, const void* src, size_t n);

private:
    void switch_half();

    unsigned char* pinned_ = nullptr;  // two halves of kHalfBytes
    cudaEvent_t left_[2] = {nullptr, nullptr};
    bool recorded_[2] = {false, false};
    int half_ = 0;
    size_t used_ = 0;  // bytes of the current half taken
    LedgerReservation reservation_;
};

}  // namespace tandem::cuda
