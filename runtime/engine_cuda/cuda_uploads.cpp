#include "runtime/engine_cuda/cuda_uploads.h"

#include <cstring>

#include "kernels_cuda/cuda_check.h"

namespace tandem::cuda {

AsyncUploads::AsyncUploads(MemoryLedger* host_ledger) {
    void* p = nullptr;
    if (cudaHostAlloc(&p, 2 * kHalfBytes, cudaHostAllocDefault) != cudaSuccess) {
        (void)cudaGetLastError();
        return;  // plain copies
    }
    pinned_ = static_cast<unsigned char*>(p);
    if (host_ledger) {
        reservation_ = LedgerReservation(*host_ledger, MemoryCategory::Staging, 2 * kHalfBytes, "pinned step uploads");
    }
    for (auto& e : left_) TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

AsyncUploads::~AsyncUploads() {
    if (pinned_ == nullptr) return;
    // The queued copies read the pinned memory: done before it goes.
    cudaDeviceSynchronize();
    for (auto& e : left_) {
        if (e) cudaEventDestroy(e);
    }
    cudaFreeHost(pinned_);
}

void AsyncUploads::switch_half() {
    TANDEM_CUDA_CHECK(cudaEventRecord(left_[half_], nullptr));
    recorded_[half_] = true;
    half_ ^= 1;
    used_ = 0;
    if (recorded_[half_] && cudaEventQuery(left_[half_]) != cudaSuccess) {
        (void)cudaGetLastError();  // cudaErrorNotReady is no error
        TANDEM_CUDA_CHECK(cudaEventSynchronize(left_[half_]));
    }
}

void AsyncUploads::upload(void* device_dst, const void* src, size_t n) {
    if (n == 0) return;
    if (pinned_ == nullptr || n > kHalfBytes) {
        TANDEM_CUDA_CHECK(cudaMemcpy(device_dst, src, n, cudaMemcpyHostToDevice));
        return;
    }
    constexpr size_t kAlign = 16;
    const size_t start = (used_ + kAlign - 1) / kAlign * kAlign;
    if (start + n > kHalfBytes) switch_half();
    const size_t at = used_ == 0 ? 0 : (used_ + kAlign - 1) / kAlign * kAlign;
    unsigned char* slot = pinned_ + static_cast<size_t>(half_) * kHalfBytes + at;
    std::memcpy(slot, src, n);
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(device_dst, slot, n, cudaMemcpyHostToDevice, nullptr));
    used_ = at + n;
}

}  // namespace tandem::cuda
