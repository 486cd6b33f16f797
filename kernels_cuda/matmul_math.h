// The per-lane math of the CUDA matrix products, written once for the host
// and the device (as op_math.h) so that CPU-only tests run the kernels'
// arithmetic against kernels_cpu/ without a GPU:
// - matmul_lane: what one lane of the small-batch kernel (matmul.cu) sums
//   for one weight row and up to kMatmulTokens tokens; warp_reduce_host is
//   the kernel's xor-shuffle reduction of the 32 lanes.
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

// Q4_1 and Q5_1 store x = d * q + m. Their CPU dot products with Q8_1
// take sum(d q * da qa) + m * s per block, where s is the activation
// block's fp16 sum (d_a * sum(qa) rounded to half), not d_a * sum(qa)
// itself; so the kernel multiplies d * q and adds m * s once per block.
template <quant::Type W>
struct MinOf {
    static constexpr bool kHas = false;
    TANDEM_HOST_DEVICE static float scaled(const void* row, int64_t i) { return Elem<W>::get(row, i); }
    TANDEM_HOST_DEVICE static float min(const void*, int64_t) { return 0.0f; }
};

template <>
struct MinOf<quant::Type::Q4_1> {
    static constexpr bool kHas = true;
    TANDEM_HOST_DEVICE static float scaled(const void* row, int64_t i) {
        const auto& b = static_cast<const quant::block_q4_1*>(row)[i / 32];
        return el::half_to_float(b.d) * static_cast<float>(el::nibble32(b.qs, static_cast<int>(i % 32)));
    }
    TANDEM_HOST_DEVICE static float min(const void* row, int64_t block) {
        return el::half_to_float(static_cast<const quant::block_q4_1*>(row)[block].m);
    }
};

template <>
struct MinOf<quant::Type::Q5_1> {
    static constexpr bool kHas = true;
    TANDEM_HOST_DEVICE static float scaled(const void* row, int64_t i) {
        const auto& b = static_cast<const quant::block_q5_1*>(row)[i / 32];
        return el::half_to_float(b.d) * static_cast<float>(el::q5_value(b.qh, b.qs, static_cast<int>(i % 32)));
    }
    TANDEM_HOST_DEVICE static float min(const void* row, int64_t block) {
        return el::half_to_float(static_cast<const quant::block_q5_1*>(row)[block].m);
    }
};

inline constexpr int kMatmulTokens = 4;  // tokens one warp of the small-batch kernel serves

// Lane `lane` of 32: adds to acc[t] (t < nt <= kMatmulTokens) its share of
// row wrow times activation row t (a + t * a_row_bytes, type A), elements
// lane, lane + 32, ... of n_cols.
template <quant::Type W, quant::Type A>
TANDEM_HOST_DEVICE void matmul_lane(const void* wrow, const void* a, uint64_t a_row_bytes, int nt, int64_t n_cols,
                                    int lane, float* acc) {
    for (int64_t i = lane; i < n_cols; i += 32) {
        const float wv = MinOf<W>::scaled(wrow, i);
        for (int t = 0; t < kMatmulTokens; ++t) {
            if (t < nt) {
                const void* arow = static_cast<const char*>(a) + t * a_row_bytes;
                acc[t] += wv * Elem<A>::get(arow, i);
            }
        }
        if constexpr (MinOf<W>::kHas) {
            if (i % 32 == 0) {  // once per block (lane 0 holds every block's first element)
                const float m = MinOf<W>::min(wrow, i / 32);
                for (int t = 0; t < kMatmulTokens; ++t) {
                    if (t < nt) {
                        const auto* ab = static_cast<const quant::block_q8_1*>(
                            static_cast<const void*>(static_cast<const char*>(a) + t * a_row_bytes));
                        acc[t] += m * el::half_to_float(ab[i / 32].s);
                    }
                }
            }
        }
    }
}

// The kernel's reduction (__shfl_xor_sync at offsets 16, 8, 4, 2, 1) on
// the host: the sum lane 0 ends with.
inline float warp_reduce_host(const float* lanes) {
    float v[32];
    for (int l = 0; l < 32; ++l) v[l] = lanes[l];
    for (int off = 16; off > 0; off >>= 1) {
        float next[32];
        for (int l = 0; l < 32; ++l) next[l] = v[l] + v[l ^ off];
        for (int l = 0; l < 32; ++l) v[l] = next[l];
    }
    return v[0];
}

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
