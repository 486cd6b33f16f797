// AVX2 row kernels of the 256-element i-quants against Q8_K: one row
// against a tile of up to kMaxTileTokens tokens, single rows
// (IqLanesOrder) and batches of 8 or more (IqTiledOrder); the body is
// iq_dot_avx2.h's. Built three times (kernels_cpu/CMakeLists.txt): *_avx2,
// *_avx2w with AVX-512VL and BMI2 for the AVX-512 levels, and *_avx2b
// (IQ1_S and IQ1_M) with BMI2 for AVX2 CPUs with a fast pdep.
#include "kernels_cpu/avx2/iq_dot_avx2.h"
#include "kernels_cpu/vec_dot.h"

namespace tandem::cpu::detail {

using namespace iq_avx2;

#define TANDEM_IQ_ROW_KERNELS(name, D, Order)                                                               \
    void TANDEM_AVX2_FN(dot_##name)(TANDEM_DOT_ARGS) {                                                     \
        tile<IqDotAvx2<D, Order>::K>(n, w, a, a_stride, nt, y, ldy);                                       \
    }                                                                                                      \
    void TANDEM_AVX2_FN(dot_##name##_batch)(TANDEM_DOT_ARGS) {                                             \
        tile<IqDotAvx2<D, Order, dot::Form::Batch>::K>(n, w, a, a_stride, nt, y, ldy);                     \
    }
TANDEM_IQ_AVX2_TYPES(TANDEM_IQ_ROW_KERNELS)
#undef TANDEM_IQ_ROW_KERNELS

}  // namespace tandem::cpu::detail
