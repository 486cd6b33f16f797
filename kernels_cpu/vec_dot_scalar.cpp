// Scalar reference dot products: the definition every SIMD kernel is tested
// against bit for bit, and the fallback on CPUs without AVX2. The
// arithmetic lives in runtime/quant/dot_order.h, shared with the CUDA
// kernels: per block an exact integer sum of weight code times activation
// code, then the block scales applied in llama.cpp's float order for the
// type (single rows, or the batch form of BatchForm).
#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/dot_order.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;
using dot::Form;
using dot::OrderOf;

// Float formats: dot::float_dot, llama.cpp's order for F16 (FloatDot in
// vec_dot_avx2.cpp follows it).
float dot_f32(int64_t n, const void* w, const void* a) { return dot::float_dot<float>(n, w, a); }
float dot_f16(int64_t n, const void* w, const void* a) { return dot::float_dot<fp16_bits>(n, w, a); }
float dot_bf16(int64_t n, const void* w, const void* a) { return dot::float_dot<dot::Bf16>(n, w, a); }

// Quantized formats: each type's order (dot_order.h) run block by block.
template <Type W, Form F>
float dot_in(int64_t n, const void* w, const void* a) {
    return dot::row_dot<typename OrderOf<W, F>::type>(n, w, a);
}

}  // namespace

#define TANDEM_DEFINE_BLOCK_DOT(T, name) \
    void dot_##name##_scalar(TANDEM_DOT_ARGS) { each_token<dot_in<Type::T, Form::Single>>(n, w, a, a_stride, nt, y, ldy); }
#define TANDEM_DEFINE_BATCH_DOT(T, name)                                                            \
    void dot_##name##_batch_scalar(TANDEM_DOT_ARGS) {                                               \
        each_token<dot_in<Type::T, Form::Batch>>(n, w, a, a_stride, nt, y, ldy);                   \
    }
void dot_f32_scalar(TANDEM_DOT_ARGS) { each_token<dot_f32>(n, w, a, a_stride, nt, y, ldy); }
void dot_f16_scalar(TANDEM_DOT_ARGS) { each_token<dot_f16>(n, w, a, a_stride, nt, y, ldy); }
void dot_bf16_scalar(TANDEM_DOT_ARGS) { each_token<dot_bf16>(n, w, a, a_stride, nt, y, ldy); }
TANDEM_DEFINE_BLOCK_DOT(Q4_0, q4_0)
TANDEM_DEFINE_BLOCK_DOT(Q4_1, q4_1)
TANDEM_DEFINE_BLOCK_DOT(Q5_0, q5_0)
TANDEM_DEFINE_BLOCK_DOT(Q5_1, q5_1)
TANDEM_DEFINE_BLOCK_DOT(Q8_0, q8_0)
TANDEM_DEFINE_BLOCK_DOT(Q2_K, q2_K)
TANDEM_DEFINE_BLOCK_DOT(Q3_K, q3_K)
TANDEM_DEFINE_BLOCK_DOT(Q4_K, q4_K)
TANDEM_DEFINE_BLOCK_DOT(Q5_K, q5_K)
TANDEM_DEFINE_BLOCK_DOT(Q6_K, q6_K)
TANDEM_DEFINE_BLOCK_DOT(IQ2_XXS, iq2_xxs)
TANDEM_DEFINE_BLOCK_DOT(IQ2_XS, iq2_xs)
TANDEM_DEFINE_BLOCK_DOT(IQ2_S, iq2_s)
TANDEM_DEFINE_BLOCK_DOT(IQ3_XXS, iq3_xxs)
TANDEM_DEFINE_BLOCK_DOT(IQ3_S, iq3_s)
TANDEM_DEFINE_BLOCK_DOT(IQ1_S, iq1_s)
TANDEM_DEFINE_BLOCK_DOT(IQ1_M, iq1_m)
TANDEM_DEFINE_BLOCK_DOT(IQ4_NL, iq4_nl)
TANDEM_DEFINE_BLOCK_DOT(IQ4_XS, iq4_xs)
TANDEM_DEFINE_BLOCK_DOT(MXFP4, mxfp4)
TANDEM_DEFINE_BATCH_DOT(Q2_K, q2_K)
TANDEM_DEFINE_BATCH_DOT(Q3_K, q3_K)
TANDEM_DEFINE_BATCH_DOT(Q4_K, q4_K)
TANDEM_DEFINE_BATCH_DOT(Q5_K, q5_K)
TANDEM_DEFINE_BATCH_DOT(Q6_K, q6_K)
TANDEM_DEFINE_BATCH_DOT(IQ2_XXS, iq2_xxs)
TANDEM_DEFINE_BATCH_DOT(IQ2_XS, iq2_xs)
TANDEM_DEFINE_BATCH_DOT(IQ2_S, iq2_s)
TANDEM_DEFINE_BATCH_DOT(IQ3_XXS, iq3_xxs)
TANDEM_DEFINE_BATCH_DOT(IQ3_S, iq3_s)
TANDEM_DEFINE_BATCH_DOT(IQ1_S, iq1_s)
TANDEM_DEFINE_BATCH_DOT(IQ1_M, iq1_m)
TANDEM_DEFINE_BATCH_DOT(IQ4_XS, iq4_xs)
#undef TANDEM_DEFINE_BLOCK_DOT
#undef TANDEM_DEFINE_BATCH_DOT

}  // namespace tandem::cpu::detail
