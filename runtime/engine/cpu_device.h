// The CPU implementation of Device. As the host it reads weights from the
// mapped file (or its own copies of them); as the stand-in accelerator
// ("cpu2") it uploads its own copy of every tensor it holds and refuses
// allocations past its capacity, so the split, the hand-over and the
// accounting run for real on machines without a GPU.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "kernels_cpu/matmul.h"
#include "kernels_cpu/thread_pool.h"
#include "runtime/engine/device.h"

namespace tandem {

class CpuDevice final : public Device {
public:
    // `pool` and `file`/`spec` must outlive the device. accelerator: own
    // copies of weights (the stand-in device); capacity: nullopt = no limit.
    CpuDevice(std::string name, bool accelerator, std::optional<uint64_t> capacity, const gguf::File& file,
              const model::ModelSpec& spec, const DeviceConfig& config, cpu::ThreadPool& pool, cpu::SimdLevel level);
    ~CpuDevice() override;

    const std::string& name() const override;
    bool is_accelerator() const override;
    const MemoryLedger& ledger() const override;
    // The same ledger, writable: an accelerator records its pinned staging
    // buffers (host memory) here.
    MemoryLedger& mutable_ledger();

    void load_matrix(const gguf::TensorInfo& t) override;
    void load_vector(const gguf::TensorInfo& t) override;
    void load_kv(int64_t il, int64_t n_cells, int64_t ring_span, int64_t n_regions) override;
    void allocate_workspace(bool with_logits) override;

    void write_act(Act a, const float* host, int64_t n_floats) override;
    void read_act(Act a, float* host, int64_t n_floats) override;
    float* host_act(Act a) override;

    void rms_norm(Act x, int64_t x_row0, const gguf::TensorInfo& w, Act y, int64_t len, int64_t rows,
                  float eps) override;
    void matmul(std::span<const MatmulOut> outs, Act in, int64_t n) override;
    void rope(Act a, int64_t n_heads, int64_t head_dim, std::span<const int32_t> pos, const RopeOp& op) override;
    void attention(int64_t il, std::span<const int32_t> pos, std::span<const int32_t> seq,
                   const AttentionOp& op) override;
    void matmul_experts(std::span<const MatmulOut> outs, Act in, const ExpertOp& op, int64_t n) override;
    void moe_route(const MoeRouteOp& op, int64_t n) override;
    void add_vector(Act a, const gguf::TensorInfo& b, int64_t len, int64_t rows) override;
    void copy_cols(Act src, int64_t src_width, int64_t col0, Act dst, int64_t width, int64_t rows) override;
    void glu(model::FfnActivation act, int64_t n_ff, int64_t n) override;
    void add(Act y, Act x, int64_t len, int64_t rows) override;
    void scale(Act a, int64_t n_floats, float s) override;
    void softcap(Act a, int64_t n_floats, float cap) override;

    void kv_remove(int32_t seq, int32_t p0, int32_t p1) override;
    void kv_copy(int32_t src, int32_t dst, int32_t p0, int32_t p1) override;
    void kv_clear() override;
    void set_single_token_order(bool on) override;
    uint64_t kv_bytes() const override;
    int32_t kv_pos_max(int32_t seq) const override;
    const KvCells& kv_cells(int64_t il) const override;
    KvSeqRows kv_read_seq(int64_t il, int32_t seq) const override;
    void kv_write_seq(int64_t il, int32_t seq, const KvSeqRows& rows) override;

    // The stand-in streams (StandInStream in cpu_device.cpp); the host
    // does not (nullptr).
    WeightStream* enable_weight_stream(int64_t first_layer) override;
    // Matrices the stand-in's stream has copied so far (0 if none).
    uint64_t streamed_uploads() const;

    // The host embeds tokens into X (the embedding table stays in the mapping).
    void embed(std::span<const int32_t> tokens);
    // Records the token embedding as host weights without copying it.
    void account_token_embd();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
