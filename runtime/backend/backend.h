// The backend interface: what the scheduler needs from a device to run
// some of a model's layers. A backend owns its copy of those layers'
// weights (or, on the host, views of the mapping), their KV caches and one
// micro-batch of activations; every byte it allocates is reserved in its
// ledger first. The hidden state enters and leaves through host floats, so
// the scheduler moves it across a device boundary once per direction.
//
// Implementations: CpuBackend (the host, and the "cpu2" stand-in
// accelerator that owns uploaded copies and has a capacity); the CUDA
// backend implements the same calls with kernels_cuda.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "runtime/backend/memory_ledger.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"

namespace tandem {

struct BackendConfig {
    int64_t n_ctx = 0;
    int64_t n_ubatch = 0;
    model::CacheType cache_type = model::CacheType::F16;
};

class Backend {
public:
    virtual ~Backend() = default;

    virtual const std::string& name() const = 0;
    virtual bool is_accelerator() const = 0;
    virtual const MemoryLedger& ledger() const = 0;

    // Uploads layer il's weights and allocates its KV cache. Throws
    // OutOfDeviceMemory when the device cannot hold them.
    virtual void load_layer(int64_t il) = 0;
    // Uploads the output norm and head.
    virtual void load_output() = 0;
    // Allocates the activations of one micro-batch (with room for logits
    // when this backend runs the head).
    virtual void allocate_workspace(bool with_logits) = 0;

    // The hidden state of n tokens (n x n_embd floats) in and out.
    virtual void set_hidden(const float* host, int64_t n) = 0;
    virtual void get_hidden(float* host, int64_t n) const = 0;
    // Runs layer il on the current hidden state for tokens at positions pos.
    virtual void run_layer(int64_t il, std::span<const int32_t> pos) = 0;
    // Logits of hidden rows [first, first + count) into host memory.
    virtual void run_output(int64_t first, int64_t count, float* host_logits) = 0;
    virtual void clear_kv() = 0;
    virtual uint64_t kv_bytes() const = 0;
};

}  // namespace tandem
