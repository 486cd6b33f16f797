// Float-weight products of prompt batches through OpenBLAS's sgemm, as
// llama.cpp's BLAS backend does: F32 weights go to sgemm as they are,
// F16/BF16 weights are widened to f32 a tile of rows at a time first.
// cpu::matmul takes this path for those types from blas_min_tokens() on
// when the build links OpenBLAS (TANDEM_HAVE_BLAS); shorter batches and
// single tokens stay on Tandem's kernels, whose bits follow llama.cpp's
// CPU backend. The results match those kernels within float rounding, not
// bit for bit: the activations are rounded to F16/BF16 as those kernels
// round them, so the products are the same and only the order of the sums
// differs.
//
// Threads: OpenBLAS is held to one thread (openblas_set_num_threads(1));
// the pool's threads each take tiles of weight rows and call sgemm on their
// own tile, so no OpenBLAS worker competes with the pinned pool threads.
#pragma once

#include <cstdint>

#include "kernels_cpu/matmul.h"

namespace tandem::cpu::detail {

// Smallest batch that goes to sgemm, per type (bench/bench_blas.cpp, 2
// threads, Zen 4, medians against Tandem's AVX2/AVX-512 kernels): F32
// weights win from 64 tokens on (1.3-1.8x there, 2.2-2.7x at 256-512);
// F16/BF16 ones pay for widening each weight tile, which 64 tokens do not
// repay (0.75-1.15x) while 256 do (1.24-1.63x) and 512 more so (1.38-2.2x).
int64_t blas_min_tokens(quant::Type w_type);

// True when this build links OpenBLAS.
bool blas_available();
// OpenBLAS's own thread count: 1 from the start of every Tandem process
// (its idle workers are stopped before main, so none spins beside the
// pool); 0 without OpenBLAS.
int blas_threads();

// True when matmul hands this product to blas_matmul: a build with BLAS,
// F32/F16/BF16 weights, n_tokens >= blas_min_tokens(w_type).
bool blas_wanted(quant::Type w_type, int64_t n_tokens);

// Y = X W^T through sgemm (see above). Throws when the build has no BLAS or
// the type is not F32/F16/BF16. `level` picks the F16 widening kernel.
void blas_matmul(const WeightView& w, const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy,
                 ThreadPool& pool, SimdLevel level);

// Tandem's own kernels, whatever blas_wanted says (for benchmarks and tests).
void native_matmul(const WeightView& w, const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy,
                   ThreadPool& pool, SimdLevel level, MatmulOrder order = MatmulOrder::Fastest);

}  // namespace tandem::cpu::detail
