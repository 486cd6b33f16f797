// Weight streaming for long prompts: the matrices of CPU-resident layers
// are copied to the accelerator one at a time and multiplied there, while
// everything else of those layers (norms, RoPE, attention over the host KV
// cache) stays on the CPU. A micro-batch of 512 tokens does ~1000 FLOPs per
// weight byte, far more than a CPU core's ~10 but well within what a GPU
// does while PCIe brings the next matrix in (~25 GB/s), so prefill of a
// model much larger than VRAM is then bound by PCIe, not by CPU arithmetic.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "runtime/model/model_spec.h"

namespace tandem {

class WeightStream {
public:
    virtual ~WeightStream() = default;
    // y (n_tokens rows of the matrix's n_rows floats, host memory) = x
    // (n_tokens rows of its row length, host memory) times the rows of
    // layer il's matrix `role`.
    virtual void matmul(int64_t il, model::LayerTensor role, const float* x, int64_t n_tokens, float* y) = 0;
};

// The double buffering every device shares. The matrices come in a fixed
// order (the model::kStreamedMatrices layer first_layer has, then of the next
// layer, ..., then the first again for the next micro-batch), so while
// matrix i is multiplied in one slot, matrix i + 1 is copied into the
// other. A device says how to start a copy and how to multiply.
class DoubleBufferedStream : public WeightStream {
public:
    DoubleBufferedStream(const model::ModelSpec& spec, int64_t first_layer);
    void matmul(int64_t il, model::LayerTensor role, const float* x, int64_t n_tokens, float* y) final;
    // Matrices copied so far (a test's view of the prefetching: a batch of L
    // layers copies 7 L matrices, plus the prefetch of the next batch's first).
    uint64_t uploads() const { return uploads_; }

protected:
    // Starts copying t's blocks into slot s; may return before the copy is
    // done. No product reading slot s is in flight when this is called.
    virtual void begin_upload(int slot, const gguf::TensorInfo& t) = 0;
    // y = x times the matrix in slot s, once its copy is done; returns when
    // y is in host memory.
    virtual void multiply(int slot, const gguf::TensorInfo& t, const float* x, int64_t n_tokens, float* y) = 0;

private:
    void upload(int slot, int64_t index);

    std::vector<const gguf::TensorInfo*> order_;
    std::map<std::pair<int64_t, model::LayerTensor>, int64_t> index_;  // (layer, role) -> order_, -1: absent
    int64_t first_layer_ = 0;
    int64_t held_[2] = {-1, -1};  // index in order_ of the matrix in each slot
    uint64_t uploads_ = 0;
};

}  // namespace tandem
