// The KV cache's element types on the device (model::cache_element_types),
// written once for the host and the device so that CPU-only tests check
// them against the CPU's cache and attention:
// - kv_store_block: one block of a K or V row as the CPU's cache stores it
//   (cpu::detail::cache_row_quantizer): F16 and BF16 rounded to nearest
//   even, Q8_0 by ggml's CPU activation quantizer (127 / amax, half to
//   even), IQ4_NL by its plain row conversion, Q4_0/Q4_1/Q5_0/Q5_1 by their
//   reference quantizers.
// - KeyDot: the query's partner for K's dot product and how one block of it
//   is made, as the CPU's attention makes it (ggml's CPU conversion to
//   quant::dot_type(K): fp16 for F16, the activation Q8_0/Q8_1 quantizer,
//   127 / amax and half to even, for the blocks), and the block types' dot
//   order (dot_order.h).
// - kv_element: element i of a row of V, as quant::dequantize_row gives it.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels_cuda/matmul_math.h"
#include "runtime/quant/dot_order.h"
#include "runtime/quant/quant_ref_element.h"

namespace tandem::cuda::math {

// X(Type) for each cache type, in llama.cpp's order.
#define TANDEM_FOR_EACH_KV_TYPE(X) X(F32) X(F16) X(BF16) X(Q8_0) X(Q4_0) X(Q4_1) X(IQ4_NL) X(Q5_0) X(Q5_1)

template <quant::Type T>
TANDEM_HOST_DEVICE void kv_store_block(const float* x, typename Elem<T>::block& y) {
    if constexpr (T == quant::Type::F32) {
        y = *x;
    } else if constexpr (T == quant::Type::F16) {
        y = el::float_to_half(*x);
    } else if constexpr (T == quant::Type::BF16) {
        y = el::float_to_bf16(*x);
    } else if constexpr (T == quant::Type::Q8_0) {
        el::act_block(x, y);
    } else {
        el::ref_block(x, y);
    }
}

// The block types: the query in K's partner blocks (Q8_0 or Q8_1) by the
// activation quantizer, K.Q in K's single-row order.
template <quant::Type K>
struct KeyDot {
    using Order = typename quant::dot::OrderOf<K, quant::dot::Form::Single>::type;
    using Query = typename Order::ABlock;
    static constexpr int kQueryElems = Order::kElems;
    TANDEM_HOST_DEVICE static void query(const float* x, Query& y) { el::act_block(x, y); }
};
// F16: the query rounded to fp16 (kept as floats), K.Q in ggml's fp16 order.
template <>
struct KeyDot<quant::Type::F16> {
    using Query = float;
    static constexpr int kQueryElems = 1;
    TANDEM_HOST_DEVICE static void query(const float* x, Query& y) { y = el::half_to_float(el::float_to_half(*x)); }
};
// F32 and BF16: the query in K's type, K.Q as dot::float_dot.
template <>
struct KeyDot<quant::Type::F32> {
    using Query = float;
    static constexpr int kQueryElems = 1;
    TANDEM_HOST_DEVICE static void query(const float* x, Query& y) { y = *x; }
};
template <>
struct KeyDot<quant::Type::BF16> {
    using Query = quant::dot::Bf16;
    static constexpr int kQueryElems = 1;
    TANDEM_HOST_DEVICE static void query(const float* x, Query& y) { y.bits = el::float_to_bf16(*x); }
};

// Element i of a V row of type t (a cache type; 0 for any other).
TANDEM_HOST_DEVICE float kv_element(quant::Type t, const void* row, int64_t i) {
#define TANDEM_KV_ELEMENT(T) \
    if (t == quant::Type::T) return Elem<quant::Type::T>::get(row, i);
    TANDEM_FOR_EACH_KV_TYPE(TANDEM_KV_ELEMENT)
#undef TANDEM_KV_ELEMENT
    return 0.0f;
}

}  // namespace tandem::cuda::math
