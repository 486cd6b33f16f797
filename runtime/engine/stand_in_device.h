// The stand-in accelerator ("cpu2"): the CPU device playing a GPU, so that
// the split, the hand-over between devices, weight streaming and the
// memory accounting run for real on machines without one. It differs from
// the host (cpu_device.h) in what a GPU does differently: it uploads its
// own copy of every tensor it holds (reported to on_upload), refuses
// allocations past its capacity, reserves a GPU's pinned upload buffers in
// the host's ledger and its GEMM dequantization tile in its own, and
// streams the CPU layers' weights for long prompts. Its products are the
// host's kernels, so the bits are the host's.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "runtime/common/memory_ledger.h"
#include "runtime/engine/cpu_device.h"

namespace tandem {

class StandInDevice final : public CpuDevice {
public:
    StandInDevice(std::string name, std::optional<uint64_t> capacity, const gguf::File& file,
                  const model::ModelSpec& spec, const DeviceConfig& config, cpu::ThreadPool& pool,
                  cpu::SimdLevel level);
    ~StandInDevice() override;

    bool is_accelerator() const override { return true; }
    WeightStream* enable_weight_stream(int64_t first_layer) override;
    // Matrices its stream has copied so far (0 if none).
    uint64_t streamed_uploads() const;

protected:
    const uint8_t* matrix_bytes(const gguf::TensorInfo& t) override;
    bool counts_token_embd() const override { return false; }
    void vector_read(const gguf::TensorInfo& t) override;
    void reserve_product_buffers() override;

private:
    class Stream;
    LedgerReservation host_staging_;  // as a GPU's pinned upload buffers
    bool gemm_tile_reserved_ = false;
    std::unique_ptr<Stream> stream_;
};

}  // namespace tandem
