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
#include <functional>
#include <span>
#include <string>

#include "runtime/backend/memory_ledger.h"
#include "runtime/backend/weight_stream.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"

namespace tandem {

struct BackendConfig {
    int64_t n_ctx = 0;
    int64_t n_ubatch = 0;
    model::CacheType cache_type = model::CacheType::F16;
    // An accelerator calls this with the bytes of each tensor as it is
    // copied to the device, the host as it copies a matrix out of the
    // mapping (copy_host_weights): a progress bar's feed; may be empty.
    std::function<void(uint64_t)> on_upload;
    // The host's ledger, where an accelerator records the pinned host
    // buffers it stages uploads through; may be null (then unrecorded).
    MemoryLedger* host_ledger = nullptr;
    // The host backend copies its weight matrices out of the mapped file
    // into memory it owns (runtime/backend/host_weight_arena.h: faster to
    // stream); false multiplies them from the mapping.
    bool copy_host_weights = false;
};

// The tensors of one layer as a backend holds them: matrices as `Matrix`
// (that device's view of the GGUF blocks), norm vectors as `Vector` (floats
// on that device; empty or null when the architecture has none).
template <class Matrix, class Vector>
struct LayerTensors {
    Matrix q, k, v, o, gate, up, down;
    Vector attn_norm{}, q_norm{}, k_norm{}, attn_post_norm{}, ffn_norm{}, ffn_post_norm{};
    bool sliding_window = false;
    float rope_base = 10000.0f;
};

// Binds layer il's tensors through a backend's own upload functions:
// matrix(const TensorInfo&) for the required matrices, vector(const
// TensorInfo*) for the norms (nullptr where the architecture has none).
// One list of roles for every backend, so none can forget one.
template <class Matrix, class Vector, class UploadMatrix, class UploadVector>
LayerTensors<Matrix, Vector> bind_layer_tensors(const model::ModelSpec& spec, int64_t il, UploadMatrix&& matrix,
                                                UploadVector&& vector) {
    using model::LayerTensor;
    const model::LayerSpec& ls = spec.layers.at(static_cast<size_t>(il));
    LayerTensors<Matrix, Vector> w;
    w.q = matrix(*ls.get(LayerTensor::AttnQ));
    w.k = matrix(*ls.get(LayerTensor::AttnK));
    w.v = matrix(*ls.get(LayerTensor::AttnV));
    w.o = matrix(*ls.get(LayerTensor::AttnOutput));
    w.gate = matrix(*ls.get(LayerTensor::FfnGate));
    w.up = matrix(*ls.get(LayerTensor::FfnUp));
    w.down = matrix(*ls.get(LayerTensor::FfnDown));
    w.attn_norm = vector(ls.get(LayerTensor::AttnNorm));
    w.q_norm = vector(ls.get(LayerTensor::AttnQNorm));
    w.k_norm = vector(ls.get(LayerTensor::AttnKNorm));
    w.attn_post_norm = vector(ls.get(LayerTensor::AttnPostNorm));
    w.ffn_norm = vector(ls.get(LayerTensor::FfnNorm));
    w.ffn_post_norm = vector(ls.get(LayerTensor::FfnPostNorm));
    w.sliding_window = ls.sliding_window;
    w.rope_base = static_cast<float>(ls.rope_base);
    return w;
}

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

    // An accelerator that can multiply matrices it does not hold reserves
    // what streaming layers [first_layer, n_layer) costs it
    // (model::stream_bytes) and returns the stream, owned by the backend;
    // nullptr when it cannot stream. Throws OutOfDeviceMemory (then nothing
    // stays reserved).
    virtual WeightStream* enable_weight_stream(int64_t /*first_layer*/) { return nullptr; }
};

}  // namespace tandem
