// Attention sinks (gpt-oss; AttentionShape::sinks) and the end of the
// online softmax on every CPU path alike: runtime/quant/attention_order.h's
// finish (shared with CUDA) with std::exp. The sink is one more step of the
// online softmax that has no value, after the pass over the cells, whose
// rescale the f32 accumulator takes (the fp16 one of an F16 cache widened
// first). Internal to kernels_cpu.
#pragma once

#include <cmath>

#include "runtime/quant/attention_order.h"

namespace tandem::cpu::detail {

struct HostExp {
    float operator()(float x) const { return std::exp(x); }
};

// A * ms * inv is the output of an accumulator A whose pass ended at
// running maximum m and sum s; sink: the head's sink logit, or null.
inline quant::attn::Finish finish_softmax(float m, float s, const float* sink) {
    return quant::attn::finish(m, s, sink, HostExp{});
}

}  // namespace tandem::cpu::detail
