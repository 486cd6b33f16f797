// Watching the activations that multiply the weights (what an importance
// matrix is made of: tools/imatrix.h). A session given an observer
// (Session::set_activation_observer) calls it before every product of a
// layer's weight, with the product's float input as the op reads it (on
// the CPU, before it is quantized for the dot products). Without one the
// cost is a null check per product.
#pragma once

#include <cstdint>

#include "runtime/gguf/gguf_file.h"

namespace tandem {

class ActivationObserver {
public:
    virtual ~ActivationObserver() = default;

    // `x` holds n_rows rows of n_in floats (host memory, valid during the
    // call only) that multiply weight `w`.
    //   expert < 0: a dense product, one row per token of the micro-batch.
    //   expert >= 0: a row that multiplies expert `expert` of a 3-D weight
    //     (n_rows is 1); the executor reports them slot by slot, the tokens
    //     in order within each slot, as llama.cpp's MUL_MAT_ID lists them.
    // The output head's product is reported as a dense one (its weight,
    // e.g. output.weight or token_embd.weight when tied), once per run of
    // consecutive tokens that ask for logits.
    virtual void on_matmul(const gguf::TensorInfo& w, int64_t expert, const float* x, int64_t n_rows, int64_t n_in) = 0;
    // A per-head product (MLA's k_b and v_b): head `head`'s rows of the
    // micro-batch's n_rows tokens multiply slice `head` of the 3-D weight
    // w, as llama.cpp's MUL_MAT of a 3-D weight lists them.
    virtual void on_head_matmul(const gguf::TensorInfo& w, int64_t head, const float* x, int64_t n_rows,
                                int64_t n_in) = 0;
};

}  // namespace tandem
