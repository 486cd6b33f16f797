// The forward pass on the devices: walks each layer's op list (the recipe,
// runtime/model/layer_ops.h, written once per model) and runs each op on
// the device of its tensor (attention on the device of the layer's cache).
// Architecture quirks the ops carry as parameters (the activation, RoPE's
// style, the attention scale, soft-capping) come from the ArchSpec row.
//
// The executor also moves activations: it knows which devices hold each
// buffer's (Act's) current value (model::Residency); an op on a device
// without one of its inputs gets it copied there first, through host
// floats, once per crossing, and the bytes are counted. A copy stays valid
// until the buffer is written again.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/engine/activation_observer.h"
#include "runtime/engine/device.h"
#include "runtime/model/layer_ops.h"
#include "runtime/placement/placement.h"

namespace tandem {

struct RecipeBatch {
    int64_t n = 0;                      // tokens in the micro-batch
    std::span<const int32_t> pos;       // position of each token
    std::span<const int32_t> seq;       // sequence of each token
    // Per layer, the KV cell the session placed each token's position in.
    std::span<const std::vector<int32_t>> cells;
    // Weight streaming: the host's matrices of layers >= stream_first are
    // multiplied through `stream` (on the accelerator) instead of here.
    WeightStream* stream = nullptr;
    int64_t stream_first = 0;
    // Shown the input of every product of a layer's weight first; null: none.
    ActivationObserver* observer = nullptr;
    // The layers to run, [first_layer, end_layer) (a pipeline stage's);
    // end_layer -1: to the last.
    int64_t first_layer = 0;
    int64_t end_layer = -1;
};

class LayerExecutor {
public:
    // devices[d] runs what the placement puts on device d; all must outlive
    // the executor. devices[kHostDevice] must keep its buffers in host memory.
    // rotation: what the attention rotates for the session's cache type
    // (model::kv_rotation).
    LayerExecutor(const model::ModelSpec& spec, const Placement& placement, std::vector<DeviceOps*> devices,
                  model::KvRotation rotation = {});

    // The hidden state X has just been written on `device` (the embedding).
    void x_written_on(int device);
    // Every layer, from X (n rows) to X.
    void layers(const RecipeBatch& b);
    // X's first n rows as host floats (copied to the host if it is elsewhere).
    const float* x_on_host(int64_t n);
    // Logits of X's rows [first, first + count) into host memory; the
    // observer, if any, is shown the head's input rows first.
    void output(int64_t first, int64_t count, float* logits, ActivationObserver* observer = nullptr);
    // The same rows after the output norm (what the head would multiply:
    // the model's final hidden state, n_embd floats a row) into host
    // memory, without running the head. For embeddings.
    void hidden(int64_t first, int64_t count, float* out);

    // Activation bytes moved between devices, and the number of moves.
    uint64_t bytes_moved() const { return bytes_moved_; }
    int64_t crossings() const { return crossings_; }

private:
    using Op = model::LayerOp;
    // The op's device: its tensor's, or the layer's cache's.
    int device_of(int64_t il, const Op& op) const;
    void run(int64_t il, const Op& op, const RecipeBatch& b);
    // The output norm of X's rows [first, first + count) into Cur's first
    // rows; returns the device that holds them.
    int final_norm(int64_t first, int64_t count);
    // One per op kind, each on device d with its inputs there.
    void norm(int64_t il, const Op& op, int d, int64_t n);
    void matmul(int64_t il, const Op& op, const RecipeBatch& b);
    void rope(int64_t il, const Op& op, int d, const RecipeBatch& b);
    void attention(int64_t il, const Op& op, int d, const RecipeBatch& b);
    MoeRouteOp route_op(const model::LayerSpec& L, const Op& op) const;
    // Shows b.observer the input rows of op's products on device d.
    void observe(const Op& op, std::span<const MatmulOut> products, int d, const RecipeBatch& b);
    void observe_heads(const Op& op, const gguf::TensorInfo& w, int d, const RecipeBatch& b);
    // The first n_floats of buffer a on device d as host floats (the
    // buffer itself on the host, else a copy in room).
    const float* host_floats(Act a, int d, int64_t n_floats, std::vector<float>& room);

    DeviceOps& on(int d) { return *devices_[static_cast<size_t>(d)]; }
    // Makes device d hold a's first `rows` rows (tokens) as well.
    void need(Act a, int d, int64_t rows);

    const model::ModelSpec& spec_;
    const model::HParams& hp_;
    const Placement& placement_;
    std::vector<DeviceOps*> devices_;
    model::WorkspaceWidths widths_;
    model::KvRotation rotation_;
    model::Residency where_{kHostDevice};
    std::vector<float> staging_;  // host floats of a move between two devices
    std::vector<float> observed_x_, observed_route_;  // an accelerator's buffers read back for the observer
    std::vector<float> observed_heads_;               // a head's rows of a per-head product, packed
    uint64_t bytes_moved_ = 0;
    int64_t crossings_ = 0;
};

}  // namespace tandem
