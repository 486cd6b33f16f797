// Device memory with its ledger reservation: reserved first (so the ledger
// refuses what the capacity cannot hold, as the planner predicts), freed on
// every exit path; a real cudaMalloc failure becomes the same
// OutOfDeviceMemory. Internal to kernels_cuda.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include <fmt/format.h>

#include "kernels_cuda/cuda_check.h"
#include "runtime/engine/memory_ledger.h"

namespace tandem::cuda {

class DeviceAlloc {
public:
    DeviceAlloc(MemoryLedger& ledger, MemoryCategory c, uint64_t bytes, const std::string& what)
        : DeviceAlloc(ledger, c, bytes, bytes, what) {}
    // Reserves `reserved` (the planner's figure) and allocates `allocated`.
    DeviceAlloc(MemoryLedger& ledger, MemoryCategory c, uint64_t reserved, uint64_t allocated, const std::string& what)
        : reservation_(ledger, c, reserved, what) {
        const cudaError_t err = cudaMalloc(&ptr_, allocated == 0 ? 1 : allocated);
        if (err == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();
            size_t free_b = 0, total_b = 0;
            (void)cudaMemGetInfo(&free_b, &total_b);
            throw OutOfDeviceMemory(fmt::format("{}: cannot allocate {}: {} asked, {} available on the device",
                                                ledger.device(), what, format_bytes(allocated),
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
