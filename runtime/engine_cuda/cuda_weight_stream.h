// The CUDA weight stream (runtime/engine/weight_stream.h): two device
// slots the size of the largest streamed matrix, filled from the mapped
// file through the device's pinned staging buffers by a copier thread, so
// the copy of the next matrix (CPU page-in + PCIe DMA) overlaps this
// product and the CPU work between products (norms, attention). Products
// quantize their input with the CUDA matmul (launch_matmul) and return the
// floats to the host. Internal to kernels_cuda; compiled into tandem_engine
// with the device.
#pragma once

#include <cstdint>
#include <future>
#include <memory>

#include "kernels_cuda/cuda_device_alloc.h"
#include "runtime/engine_cuda/cuda_staging.h"
#include "kernels_cuda/device_matmul.h"
#include "runtime/engine/weight_stream.h"
#include "runtime/gguf/gguf_file.h"

namespace tandem::cuda {

class CudaWeightStream final : public DoubleBufferedStream {
public:
    // Reserves model::stream_bytes on `ledger`; throws OutOfDeviceMemory
    // when it does not fit and Error when a streamed matrix has a type the
    // CUDA matmul lacks. `uploader`, `matmul` and `file` must outlive the
    // stream.
    CudaWeightStream(int device, MemoryLedger& ledger, StagingUploader& uploader, DeviceMatmul& matmul,
                     const gguf::File& file, const model::ModelSpec& spec, int64_t first_layer, int64_t n_ubatch);
    ~CudaWeightStream() override;

protected:
    void begin_upload(int slot, const gguf::TensorInfo& t) override;
    void multiply(int slot, const gguf::TensorInfo& t, const float* x, int64_t n_tokens, float* y) override;

private:
    int device_;
    StagingUploader& uploader_;
    DeviceMatmul& matmul_;
    const gguf::File& file_;
    std::unique_ptr<DeviceAlloc> memory_;
    void* slots_[2] = {nullptr, nullptr};
    float* x_ = nullptr;
    float* y_ = nullptr;
    void* scratch_ = nullptr;
    // Copies run one after another on the copier thread (the staging
    // buffers are single-user); each slot waits for its own.
    std::shared_future<void> copy_done_[2];
    std::shared_future<void> last_copy_;
};

}  // namespace tandem::cuda
