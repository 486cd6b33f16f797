// The CPU implementation of Device: the host, which multiplies its weights
// where they are, in the mapped file or its own copies of them. The
// stand-in accelerator (stand_in_device.h) is the same device with its own
// way to its weights (uploaded copies) and a GPU's buffers; the hooks it
// overrides are the protected section below.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "kernels_cpu/matmul.h"
#include "kernels_cpu/thread_pool.h"
#include "runtime/engine/device.h"

namespace tandem {

class HostWeightArena;

class CpuDevice : public Device {
public:
    // `pool` and `file`/`spec` must outlive the device; capacity: nullopt =
    // no limit.
    CpuDevice(std::string name, std::optional<uint64_t> capacity, const gguf::File& file,
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
    void load_kv(int64_t il, const KvCells& cells) override;
    void allocate_workspace(bool with_logits) override;

    void write_act(Act a, const float* host, int64_t n_floats) override;
    void read_act(Act a, float* host, int64_t n_floats) override;
    float* host_act(Act a) override;

    void rms_norm(Act x, RowView xv, const gguf::TensorInfo& w, Act y, RowView yv, int64_t rows,
                  float eps) override;
    void matmul(std::span<const MatmulOut> outs, Act in, int64_t n) override;
    void rope(Act a, RowView v, int64_t n_heads, std::span<const int32_t> pos, const RopeOp& op) override;
    void attention(int64_t il, std::span<const int32_t> cells, std::span<const int32_t> pos, std::span<const int32_t> seq,
                   const AttentionOp& op) override;
    void matmul_experts(std::span<const MatmulOut> outs, Act in, const ExpertOp& op, int64_t n) override;
    void moe_route(const MoeRouteOp& op, int64_t n) override;
    void add_vector(Act a, const gguf::TensorInfo& b, int64_t len, int64_t rows) override;
    void copy_rows(Act src, RowView sv, Act dst, RowView dv, int64_t rows) override;
    void matmul_heads(const MatmulOut& o, Act in, RowView iv, RowView ov, int64_t n_heads, int64_t n) override;
    void glu(model::FfnActivation act, int64_t n_ff, int64_t n) override;
    void add(Act y, Act x, int64_t len, int64_t rows) override;
    void scale(Act a, int64_t n_floats, float s) override;
    void softcap(Act a, int64_t n_floats, float cap) override;
    void hadamard(Act a, int64_t n_floats, int64_t block) override;

    void set_single_token_order(bool on) override;
    uint64_t kv_bytes() const override;
    KvSeqRows kv_read_rows(int64_t il, std::span<const int64_t> cells) const override;
    void kv_write_rows(int64_t il, std::span<const int64_t> cells, const KvSeqRows& rows) override;

    // The host does not stream (nullptr): it multiplies what it holds.
    WeightStream* enable_weight_stream(int64_t first_layer) override;

    // The host embeds tokens into X (the embedding table stays in the mapping).
    void embed(std::span<const int32_t> tokens);
    // Records the token embedding as host weights without copying it.
    void account_token_embd();

protected:
    // The bytes a matrix is multiplied from, once its Weights are reserved:
    // the host's mapping, or its copy when config.copy_host_weights.
    virtual const uint8_t* matrix_bytes(const gguf::TensorInfo& t);
    // Whether the tied output head is the token embedding this device
    // already counts (the host's, whose embedding table it is).
    virtual bool counts_token_embd() const { return true; }
    // A norm, bias or RoPE factor table read from the file into the device.
    virtual void vector_read(const gguf::TensorInfo& /*t*/) {}
    // What its products need besides the activations, reserved with them.
    virtual void reserve_product_buffers() {}

    const gguf::File& file() const;
    const model::ModelSpec& spec() const;
    const DeviceConfig& config() const;
    cpu::ThreadPool& pool() const;
    cpu::SimdLevel level() const;
    HostWeightArena& arena();
    void reserve(MemoryCategory c, uint64_t bytes, const std::string& what);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
