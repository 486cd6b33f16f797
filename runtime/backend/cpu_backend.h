// The CPU implementation of Backend. As the host it reads weights from the
// mapped file; as the stand-in accelerator ("cpu2") it uploads its own copy
// of every tensor it holds and refuses allocations past its capacity, so
// the split, the hand-over and the accounting run for real on machines
// without a GPU.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "kernels_cpu/matmul.h"
#include "kernels_cpu/thread_pool.h"
#include "runtime/backend/backend.h"

namespace tandem {

class CpuBackend final : public Backend {
public:
    // `pool` and `file`/`spec` must outlive the backend. accelerator: own
    // copies of weights (the stand-in device); capacity: nullopt = no limit.
    CpuBackend(std::string name, bool accelerator, std::optional<uint64_t> capacity, const gguf::File& file,
               const model::ModelSpec& spec, const BackendConfig& config, cpu::ThreadPool& pool,
               cpu::SimdLevel level);
    ~CpuBackend() override;

    const std::string& name() const override;
    bool is_accelerator() const override;
    const MemoryLedger& ledger() const override;
    // The same ledger, writable: an accelerator records its pinned staging
    // buffers (host memory) here.
    MemoryLedger& mutable_ledger();
    void load_layer(int64_t il) override;
    void load_output() override;
    void allocate_workspace(bool with_logits) override;
    void set_hidden(const float* host, int64_t n) override;
    void get_hidden(float* host, int64_t n) const override;
    void run_layer(int64_t il, std::span<const int32_t> pos) override;
    void run_output(int64_t first, int64_t count, float* host_logits) override;
    void clear_kv() override;
    uint64_t kv_bytes() const override;
    // The stand-in streams (StandInStream in cpu_backend.cpp); the host
    // does not (nullptr).
    WeightStream* enable_weight_stream(int64_t first_layer) override;
    // Matrices the stand-in's stream has copied so far (0 if none).
    uint64_t streamed_uploads() const;

    // run_layer with the layer's seven matrices multiplied through `stream`
    // (an accelerator's), everything else here.
    void run_layer_streamed(int64_t il, std::span<const int32_t> pos, WeightStream& stream);

    // The host also embeds tokens (the embedding table stays in the mapping).
    void embed(std::span<const int32_t> tokens);
    // Records the token embedding as host weights without copying it.
    void account_token_embd();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
