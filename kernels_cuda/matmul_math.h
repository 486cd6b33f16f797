// Element access of each stored type, and the cuBLAS path's activations,
// written once for the host and the device (as op_math.h). The products'
// own arithmetic is runtime/quant/dot_order.h, the CPU's.
// - act_roundtrip: the batch path's activations (device_matmul.cpp): one
//   block quantized to the weight type's partner, as the CPU quantizes it,
//   and read back as floats, so that cuBLAS multiplies the values the CPU
//   multiplies.
#pragma once

#include <cstdint>

#include "kernels_cuda/matmul_types.h"
#include "runtime/quant/act_element.h"

namespace tandem::cuda::math {

namespace el = quant::element;

// Block layout and element access of each stored type, from the table.
template <quant::Type T>
struct Elem;

#define TANDEM_ELEM(Name, Block, Fn, QK)                                              \
    template <>                                                                     \
    struct Elem<quant::Type::Name> {                                                \
        using block = Block;                                                        \
        static constexpr int qk() { return QK; }                                    \
        TANDEM_HOST_DEVICE static float get(const void* row, int64_t i) {           \
            return el::row_element<Block, el::Fn, QK>(row, i);                      \
        }                                                                           \
    };
TANDEM_FOR_EACH_ELEMENT_TYPE(TANDEM_ELEM)
#undef TANDEM_ELEM

// Elements of one activation block of the partner type A.
template <quant::Type A>
constexpr int act_block_elems() {
    return Elem<A>::qk();
}

// x (act_block_elems<A>() floats) quantized to one block of A by the
// functions the small-batch kernel uses (act_element.h: the CPU's codes and
// scales), then dequantized into y. y may be x.
template <quant::Type A>
TANDEM_HOST_DEVICE void act_roundtrip(const float* x, float* y) {
    using B = typename Elem<A>::block;
    constexpr int qk = Elem<A>::qk();
    B b;
    if constexpr (A == quant::Type::BF16) {
        el::act_block_bf16(x, b);
    } else {
        el::act_block(x, b);
    }
    for (int j = 0; j < qk; ++j) y[j] = Elem<A>::get(&b, j);
}

}  // namespace tandem::cuda::math
