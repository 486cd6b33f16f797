#include "runtime/engine_cuda/cuda_staging.h"

#include <cstring>

#include "kernels_cuda/cuda_check.h"

namespace tandem::cuda {

StagingUploader::StagingUploader(MemoryLedger* host_ledger) {
    for (auto& p : pinned_) {
        if (cudaHostAlloc(&p, kChunkBytes, cudaHostAllocDefault) != cudaSuccess) {
            (void)cudaGetLastError();
            p = nullptr;
        }
    }
    if (pinned_[0] == nullptr || pinned_[1] == nullptr) {
        for (auto& p : pinned_) {
            if (p) cudaFreeHost(p);
            p = nullptr;
        }
        return;
    }
    if (host_ledger) {
        reservation_ = LedgerReservation(*host_ledger, MemoryCategory::Staging, 2 * kChunkBytes,
                                         "pinned upload buffers");
    }
    TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    for (auto& e : done_) TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

StagingUploader::~StagingUploader() {
    if (stream_) cudaStreamSynchronize(stream_);
    for (auto& e : done_) {
        if (e) cudaEventDestroy(e);
    }
    if (stream_) cudaStreamDestroy(stream_);
    for (auto& p : pinned_) {
        if (p) cudaFreeHost(p);
    }
}

void StagingUploader::upload(void* device_dst, const void* host_src, size_t n) {
    if (pinned_[0] == nullptr) {
        TANDEM_CUDA_CHECK(cudaMemcpy(device_dst, host_src, n, cudaMemcpyHostToDevice));
        return;
    }
    auto* dst = static_cast<uint8_t*>(device_dst);
    const auto* src = static_cast<const uint8_t*>(host_src);
    for (size_t off = 0; off < n; off += kChunkBytes) {
        const size_t len = n - off < kChunkBytes ? n - off : kChunkBytes;
        // The buffer is free once the copy queued from it two chunks ago is done.
        TANDEM_CUDA_CHECK(cudaEventSynchronize(done_[next_]));
        std::memcpy(pinned_[next_], src + off, len);
        TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst + off, pinned_[next_], len, cudaMemcpyHostToDevice, stream_));
        TANDEM_CUDA_CHECK(cudaEventRecord(done_[next_], stream_));
        next_ ^= 1;
    }
}

void StagingUploader::finish() {
    if (stream_) TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace tandem::cuda
