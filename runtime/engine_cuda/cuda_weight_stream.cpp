#include "runtime/engine_cuda/cuda_weight_stream.h"

#include <cuda_runtime.h>

#include <fmt/format.h>

#include "kernels_cuda/cuda_kernels.h"
#include "kernels_cuda/matmul_types.h"
#include "runtime/common/error.h"

namespace tandem::cuda {
CudaWeightStream::CudaWeightStream(int device, MemoryLedger& ledger, StagingUploader& uploader, DeviceMatmul& matmul,
                                   const gguf::File& file, const model::ModelSpec& spec, int64_t first_layer,
                                   int64_t n_ubatch)
    : DoubleBufferedStream(spec, first_layer), device_(device), uploader_(uploader), matmul_(matmul), file_(file) {
    // Every streamed matrix needs a CUDA matmul, and its quantized input
    // room in the scratch (at most 4 bytes an element: model::stream_bytes).
    uint64_t scratch = 0;
    for (int64_t il = first_layer; il < spec.hp.n_layer; ++il) {
        for (const model::LayerTensor role : model::kStreamedMatrices) {
            const gguf::TensorInfo* t = spec.layers[static_cast<size_t>(il)].get(role);
            if (!t) continue;
            quant::Type a = quant::Type::F32;
            if (!matmul_activation_type(t->type, a)) {
                throw Error(fmt::format("{}: tensor '{}' has type {}, which has no CUDA matmul to stream it to",
                                        ledger.device(), t->name, quant::traits(t->type).name));
            }
            scratch = std::max(scratch, kernels::matmul_scratch_bytes(t->type, t->row_length(), n_ubatch));
        }
    }
    // Laid out and sized as the planner counts it (model::stream_layout).
    const model::StreamLayout l = model::stream_layout(model::stream_shape(spec, first_layer), n_ubatch);
    TANDEM_CHECK(scratch <= l.scratch_bytes, "stream scratch larger than model::stream_bytes allows");
    TANDEM_CUDA_CHECK(cudaSetDevice(device_));
    memory_ = std::make_unique<DeviceAlloc>(ledger, MemoryCategory::Compute, l.bytes, "weight stream slots and buffers");
    auto* base = static_cast<uint8_t*>(memory_->get());
    slots_[0] = base;
    slots_[1] = base + l.slot1;
    x_ = reinterpret_cast<float*>(base + l.x);
    y_ = reinterpret_cast<float*>(base + l.y);
    scratch_ = base + l.scratch;
}

CudaWeightStream::~CudaWeightStream() {
    // A copy still running writes into memory_: wait for it, whatever it threw.
    if (last_copy_.valid()) last_copy_.wait();
}

void CudaWeightStream::begin_upload(int slot, const gguf::TensorInfo& t) {
    const auto bytes = file_.tensor_data(t);
    void* dst = slots_[slot];
    std::shared_future<void> previous = last_copy_;
    last_copy_ = std::async(std::launch::async, [this, previous, dst, src = bytes.data(), n = bytes.size()] {
                     if (previous.valid()) previous.wait();
                     TANDEM_CUDA_CHECK(cudaSetDevice(device_));
                     uploader_.upload(dst, src, n);
                     uploader_.finish();
                 }).share();
    copy_done_[slot] = last_copy_;
}

void CudaWeightStream::multiply(int slot, const gguf::TensorInfo& t, const float* x, int64_t n_tokens, float* y) {
    copy_done_[slot].get();  // rethrows a failed copy
    TANDEM_CUDA_CHECK(cudaSetDevice(device_));
    const int64_t cols = t.row_length(), rows = t.n_rows();
    TANDEM_CUDA_CHECK(cudaMemcpy(x_, x, static_cast<size_t>(n_tokens * cols) * sizeof(float), cudaMemcpyHostToDevice));
    matmul_.run(t.type, slots_[slot], *quant::row_bytes(t.type, cols), rows, cols, x_, cols, n_tokens, scratch_, y_,
                rows);
    TANDEM_CUDA_CHECK(cudaMemcpy(y, y_, static_cast<size_t>(n_tokens * rows) * sizeof(float), cudaMemcpyDeviceToHost));
}

}  // namespace tandem::cuda
