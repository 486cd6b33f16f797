#include "runtime/engine/weight_stream.h"


#include "runtime/common/error.h"

namespace tandem {

DoubleBufferedStream::DoubleBufferedStream(const model::ModelSpec& spec, int64_t first_layer)
    : first_layer_(first_layer) {
    TANDEM_CHECK(first_layer >= 0 && first_layer < spec.hp.n_layer, "weight stream: no layer to stream");
    for (int64_t il = first_layer; il < spec.hp.n_layer; ++il) {
        for (const model::LayerTensor role : model::kStreamedMatrices) {
            const gguf::TensorInfo* t = spec.layers[static_cast<size_t>(il)].get(role);
            index_[{il, role}] = t ? static_cast<int64_t>(order_.size()) : -1;
            if (t) order_.push_back(t);
        }
    }
}

void DoubleBufferedStream::upload(int slot, int64_t index) {
    begin_upload(slot, *order_[static_cast<size_t>(index)]);
    held_[slot] = index;
    ++uploads_;
}

void DoubleBufferedStream::matmul(int64_t il, model::LayerTensor role, const float* x, int64_t n_tokens, float* y) {
    const auto it = index_.find({il, role});
    TANDEM_CHECK(it != index_.end() && it->second >= 0, "weight stream: a matrix outside the streamed layers");
    const int64_t i = it->second;
    const int64_t next = (i + 1) % static_cast<int64_t>(order_.size());
    int s = held_[0] == i ? 0 : held_[1] == i ? 1 : -1;
    if (s < 0) {  // not prefetched (the first product of a run): copy it now
        s = held_[0] == next ? 1 : 0;
        upload(s, i);
    }
    // Products run one at a time and return with their result, so the
    // other slot is free: start the next matrix's copy before this product.
    if (held_[s ^ 1] != next && next != i) upload(s ^ 1, next);
    multiply(s, *order_[static_cast<size_t>(i)], x, n_tokens, y);
}

}  // namespace tandem
