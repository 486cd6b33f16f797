// Bandwidth measurements for `tandem bench --calibrate`: the planner's
// decode prediction is bytes of weights over memory bandwidth, and uploads
// of the CPU's share cross the host-to-device link, so both are measured
// with plain copies timed by CUDA events (no kernels needed).
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels_cuda/cuda_api.h"
#include "kernels_cuda/cuda_direct.h"
#include "kernels_cuda/cuda_check.h"

namespace tandem::cuda {
namespace {

constexpr int kRuns = 5;

// Owns the CUDA objects so a thrown error frees them.
struct Resources {
    void* dev_a = nullptr;
    void* dev_b = nullptr;
    void* host = nullptr;
    cudaEvent_t start = nullptr;
    cudaEvent_t stop = nullptr;
    ~Resources() {
        if (dev_a) cudaFree(dev_a);
        if (dev_b) cudaFree(dev_b);
        if (host) cudaFreeHost(host);
        if (start) cudaEventDestroy(start);
        if (stop) cudaEventDestroy(stop);
    }
};

// Best of kRuns, in seconds, of one copy of `bytes`.
double best_copy_seconds(Resources& r, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    TANDEM_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));  // warm-up: first-touch and clocks
    float best_ms = 0.0f;
    for (int i = 0; i < kRuns; ++i) {
        TANDEM_CUDA_CHECK(cudaEventRecord(r.start));
        TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind));
        TANDEM_CUDA_CHECK(cudaEventRecord(r.stop));
        TANDEM_CUDA_CHECK(cudaEventSynchronize(r.stop));
        float ms = 0.0f;
        TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, r.start, r.stop));
        if (i == 0 || ms < best_ms) best_ms = ms;
    }
    return std::max(1e-9, static_cast<double>(best_ms) / 1e3);
}

}  // namespace

BandwidthMeasurement direct::measure_bandwidth(int device, size_t bytes) {
    TANDEM_CUDA_CHECK(cudaSetDevice(device));
    size_t free_b = 0, total_b = 0;
    TANDEM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    // Two device buffers must fit with room to spare for other processes.
    bytes = std::min(bytes, free_b / 4) & ~size_t{4095};
    if (bytes == 0) throw Error("measure_bandwidth: no free device memory to measure with");
    Resources r;
    TANDEM_CUDA_CHECK(cudaMalloc(&r.dev_a, bytes));
    TANDEM_CUDA_CHECK(cudaMalloc(&r.dev_b, bytes));
    // Pinned host memory: what the runtime's staging buffers use, and the
    // only kind the copy engine reads at full speed.
    TANDEM_CUDA_CHECK(cudaMallocHost(&r.host, bytes));
    TANDEM_CUDA_CHECK(cudaEventCreate(&r.start));
    TANDEM_CUDA_CHECK(cudaEventCreate(&r.stop));
    TANDEM_CUDA_CHECK(cudaMemset(r.dev_a, 1, bytes));
    std::fill_n(static_cast<unsigned char*>(r.host), bytes, static_cast<unsigned char>(2));
    BandwidthMeasurement m;
    // A device-to-device copy reads and writes every byte: 2x the traffic.
    m.device_gbps = 2.0 * static_cast<double>(bytes) /
                    best_copy_seconds(r, r.dev_b, r.dev_a, bytes, cudaMemcpyDeviceToDevice) / 1e9;
    m.host_to_device_gbps =
        static_cast<double>(bytes) / best_copy_seconds(r, r.dev_a, r.host, bytes, cudaMemcpyHostToDevice) / 1e9;
    m.bytes = bytes;
    return m;
}

}  // namespace tandem::cuda
