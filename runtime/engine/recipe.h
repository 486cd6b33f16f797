// The forward pass, written once for every architecture and every device:
// a transformer layer as a sequence of ops (norm, matmul, RoPE, attention
// over the KV cache, gated activation, residual add, soft-capping), each
// run on the device of its weight (attention on the device of the layer's
// cache). Architecture quirks come from the ArchSpec row and the tensors
// the model has, never from the architecture's name.
//
// The recipe also moves activations: it knows which devices hold each
// buffer's (Act's) current value; an op on a device without it gets it
// copied there first, through host floats, once per crossing, and the
// bytes are counted. A copy stays valid until the buffer is written again.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <utility>
#include <span>
#include <vector>

#include "runtime/engine/device.h"
#include "runtime/placement/placement.h"

namespace tandem {

struct RecipeBatch {
    int64_t n = 0;                      // tokens in the micro-batch
    std::span<const int32_t> pos;       // position of each token
    std::span<const int32_t> seq;       // sequence of each token
    // Weight streaming: the host's matrices of layers >= stream_first are
    // multiplied through `stream` (on the accelerator) instead of here.
    WeightStream* stream = nullptr;
    int64_t stream_first = 0;
};

class LayerRecipe {
public:
    // devices[d] runs what the placement puts on device d; all must outlive
    // the recipe. devices[kHostDevice] must keep its buffers in host memory.
    LayerRecipe(const model::ModelSpec& spec, const Placement& placement, std::vector<Device*> devices);

    // The hidden state X has just been written on `device` (the embedding).
    void x_written_on(int device);
    // Every layer, from X (n rows) to X.
    void layers(const RecipeBatch& b);
    // Logits of X's rows [first, first + count) into host memory.
    void output(int64_t first, int64_t count, float* logits);

    // Activation bytes moved between devices, and the number of moves.
    uint64_t bytes_moved() const { return bytes_moved_; }
    int64_t crossings() const { return crossings_; }

private:
    void layer(int64_t il, const RecipeBatch& b);
    // The ops, each choosing its device and moving its inputs there.
    // y = RMSNorm(x) * w for n tokens of `heads` rows of len floats each
    // (x's rows from x_row0); on w's device.
    void norm(const gguf::TensorInfo* w, Act x, Act y, int64_t len, int64_t n, int64_t heads = 1, int64_t x_row0 = 0);
    void matmul(int64_t il, std::span<const model::LayerTensor> roles, std::span<const Act> outs, Act in,
                const RecipeBatch& b);
    void matmul_experts(int64_t il, std::span<const model::LayerTensor> roles, std::span<const Act> outs, Act in,
                        const ExpertOp& op, int64_t n);
    // fn(d, products) for each device d holding some of the roles' weights.
    void for_each_device(int64_t il, std::span<const model::LayerTensor> roles, std::span<const Act> outs,
                         const std::function<void(int, std::span<const MatmulOut>)>& fn);
    // A fused product's columns into the parts' buffers, in order.
    void split(Act fused, std::initializer_list<std::pair<Act, int64_t>> parts, int64_t n);
    void add_bias(const gguf::TensorInfo* bias, Act a, int64_t n);
    // Gate = act(Gate) * Up over `rows` rows of len floats (n tokens' worth).
    void glu(int64_t len, int64_t rows, int64_t n);
    void experts(int64_t il, const RecipeBatch& b);
    void rope(Act a, int64_t n_heads, const RecipeBatch& b, float base);
    void attention(int64_t il, const RecipeBatch& b);
    void residual(Act y, Act x, int64_t n);

    Device& on(int d) { return *devices_[static_cast<size_t>(d)]; }
    // Makes device d hold a's first `rows` rows (tokens) as well.
    void need(Act a, int d, int64_t rows);
    // Device d has just written a: the only current copy is there.
    void wrote(Act a, int d) { valid_[static_cast<size_t>(a)] = 1u << d; }
    // A device holding a's current value (the first one written).
    int home(Act a) const { return std::countr_zero(valid_[static_cast<size_t>(a)]); }

    const model::ModelSpec& spec_;
    const model::HParams& hp_;
    const Placement& placement_;
    std::vector<Device*> devices_;
    std::array<unsigned, kActCount> valid_{};  // bit d: device d holds the buffer's current value
    std::vector<float> staging_;             // host floats of a move between two devices
    uint64_t bytes_moved_ = 0;
    int64_t crossings_ = 0;
};

}  // namespace tandem
