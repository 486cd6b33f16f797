// Attention sinks (gpt-oss; AttentionShape::sinks) as ggml's CPU flash
// attention applies them, on every path alike: after the pass over the
// cells, as one more step of the online softmax that has no value, whose
// rescale the f32 accumulator takes (the fp16 one of an F16 cache widened
// first). Internal to kernels_cpu.
#pragma once

#include <cmath>

namespace tandem::cpu::detail {

// Folds the sink logit into the running maximum and sum; returns the factor
// for the accumulator: exp(max - sink) when the sink is the new maximum,
// else 1 (a multiply that changes no bit).
inline float apply_sink(float sink, float& running_max, float& running_sum) {
    float ms = 1.0f, vs = 1.0f;
    if (sink > running_max) {
        ms = std::exp(running_max - sink);  // 0 if no cell was visible
        running_max = sink;
    } else {
        vs = std::exp(sink - running_max);
    }
    // One rounding, as ggml's S = S*ms + vs compiles (contracted).
    running_sum = std::fma(running_sum, ms, vs);
    return ms;
}

}  // namespace tandem::cpu::detail
