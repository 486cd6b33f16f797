// Device memory with its ledger reservation: reserved first (so the ledger
// refuses what the capacity cannot hold, as the planner predicts), freed on
// every exit path; a real cudaMalloc failure becomes the same
// OutOfDeviceMemory. Internal to kernels_cuda.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include <fmt/format.h>

#include "kernels_cuda/cuda_check.h"
#include "runtime/common/memory_ledger.h"

namespace tandem::cuda {

class DeviceAlloc {
public:
    // Reserves `bytes` (the planner's figure) and allocates them; 0 bytes
    // allocates nothing (get() is null).
    DeviceAlloc(MemoryLedger& ledger, MemoryCategory c, uint64_t bytes, const std::string& what)
        : reservation_(ledger, c, bytes, what) {
        if (bytes == 0) return;
        const cudaError_t err = cudaMalloc(&ptr_, bytes);
        if (err == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();
            size_t free_b = 0, total_b = 0;
            (void)cudaMemGetInfo(&free_b, &total_b);
            throw OutOfDeviceMemory(fmt::format("{}: cannot allocate {}: {} asked, {} available on the device",
                                                ledger.device(), what, format_bytes(bytes),
                                                format_bytes(free_b)));
        }
        TANDEM_CUDA_CHECK(err);
    }
    ~DeviceAlloc() { cudaFree(ptr_); }
    DeviceAlloc(const DeviceAlloc&) = delete;
    DeviceAlloc& operator=(const DeviceAlloc&) = delete;
    void* get() const { return ptr_; }

private:
    LedgerReservation reservation_;
    void* ptr_ = nullptr;
};

}  // namespace tandem::cuda
