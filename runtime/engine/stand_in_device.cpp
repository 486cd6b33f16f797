#include "runtime/engine/stand_in_device.h"

#include <cstring>
#include <vector>

#include "kernels_cpu/matmul.h"
#include "runtime/engine/host_weight_arena.h"
#include "runtime/engine/weight_stream.h"
#include "runtime/model/device_layout.h"

namespace tandem {

// The stand-in's weight stream: two slots it owns, filled from the mapping
// as a GPU's would be over PCIe, and its own copies of each product's input
// and output, all reserved as the CUDA device reserves them, so the
// accounting and the prefetch order run for real. The product is the host's
// kernel, so streaming changes no bit.
class StandInDevice::Stream final : public DoubleBufferedStream {
public:
    Stream(const gguf::File& file, const model::ModelSpec& spec, int64_t first_layer, int64_t n_ubatch,
           MemoryLedger& ledger, cpu::ThreadPool& pool, cpu::SimdLevel level)
        : DoubleBufferedStream(spec, first_layer),
          file_(file),
          reservation_(ledger, MemoryCategory::Compute, model::stream_bytes(spec, first_layer, n_ubatch),
                       "weight stream slots and buffers"),
          pool_(pool),
          level_(level) {
        for (auto& slot : slots_) slot.resize(model::stream_shape(spec, first_layer).slot_bytes);
    }

protected:
    void begin_upload(int slot, const gguf::TensorInfo& t) override {
        const auto bytes = file_.tensor_data(t);
        std::memcpy(slots_[slot].data(), bytes.data(), bytes.size());
    }

    void multiply(int slot, const gguf::TensorInfo& t, const float* x, int64_t n_tokens, float* y) override {
        const int64_t cols = t.row_length(), rows = t.n_rows();
        x_.assign(x, x + n_tokens * cols);
        y_.resize(static_cast<size_t>(n_tokens * rows));
        const cpu::WeightView w{t.type, slots_[slot].data(), rows, cols, *quant::row_bytes(t.type, cols)};
        cpu::matmul(w, x_.data(), cols, n_tokens, y_.data(), rows, pool_, level_);
        std::memcpy(y, y_.data(), y_.size() * sizeof(float));
    }

private:
    const gguf::File& file_;
    LedgerReservation reservation_;
    cpu::ThreadPool& pool_;
    cpu::SimdLevel level_;
    std::vector<uint8_t> slots_[2];
    std::vector<float> x_, y_;
};

StandInDevice::StandInDevice(std::string name, std::optional<uint64_t> capacity, const gguf::File& file,
                             const model::ModelSpec& spec, const DeviceConfig& config, cpu::ThreadPool& pool,
                             cpu::SimdLevel level)
    : CpuDevice(std::move(name), capacity, file, spec, config, pool, level) {
    // An accelerator keeps pinned upload buffers in the host's RAM
    // (model::kAcceleratorStagingBytes); the stand-in reserves them as a GPU
    // does, so that the host's ledger is the one a GPU leaves.
    if (config.host_ledger != nullptr) {
        host_staging_ = LedgerReservation(*config.host_ledger, MemoryCategory::Staging,
                                          model::kAcceleratorStagingBytes, "pinned upload buffers");
    }
}

StandInDevice::~StandInDevice() = default;

const uint8_t* StandInDevice::matrix_bytes(const gguf::TensorInfo& t) {
    const uint8_t* data = arena().copy(file().tensor_data(t), &pool());
    if (config().on_upload) config().on_upload(t.n_bytes);
    return data;
}

void StandInDevice::vector_read(const gguf::TensorInfo& t) {
    if (config().on_upload) config().on_upload(t.n_bytes);
}

// A GPU's batched products dequantize into a GEMM tile
// (kernels_cuda/device_matmul.h); the stand-in reserves it as a GPU does,
// once however it is used, so that its ledger is a GPU's.
void StandInDevice::reserve_product_buffers() {
    if (gemm_tile_reserved_) return;
    reserve(MemoryCategory::Compute, model::gemm_tile_bytes(spec()), "the GEMM dequantization tile");
    gemm_tile_reserved_ = true;
}

WeightStream* StandInDevice::enable_weight_stream(int64_t first_layer) {
    if (!stream_) {
        reserve_product_buffers();
        stream_ = std::make_unique<Stream>(file(), spec(), first_layer, config().n_ubatch, mutable_ledger(), pool(),
                                           level());
    }
    return stream_.get();
}

uint64_t StandInDevice::streamed_uploads() const { return stream_ ? stream_->uploads() : 0; }

}  // namespace tandem
