// Matrix products of GGUF-quantized weights with float activations on the
// CPU: Y[t, r] = sum_k W[r, k] * X[t, k]. Weights stay in their GGUF blocks
// (the format shared with the GPU). Activations are quantized once per row to
// the weight type's 8-bit partner (Q8_0/Q8_1 for the 32-element formats, Q8_K
// for K-quants) so the inner loops are integer dot products; F16/BF16/F32
// weights use float dot products.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "kernels_cpu/thread_pool.h"
#include "runtime/quant/quant_types.h"

namespace tandem::cpu {

// The instruction set a session's kernels use: the vector width and
// whether the integer products may use VNNI (vpdpbusd). Resolved once, from
// CPUID or TANDEM_CPU=scalar|avx2|avxvnni|avx512|avx512vnni (an unsupported
// request is an Error), and passed down to every kernel lookup: nothing
// below reads the CPU's features again, so a level pins its kernels (and
// every level gives the same bits). Ordered by what they include.
enum class SimdLevel { Scalar, Avx2, Avx2Vnni, Avx512, Avx512Vnni };

// The 512-bit levels, and the levels whose integer products use VNNI.
constexpr bool is_avx512(SimdLevel level) { return level == SimdLevel::Avx512 || level == SimdLevel::Avx512Vnni; }
constexpr bool has_vnni(SimdLevel level) { return level == SimdLevel::Avx2Vnni || level == SimdLevel::Avx512Vnni; }

std::string_view simd_level_name(SimdLevel level);
SimdLevel best_simd_level();          // highest the CPU and OS support
SimdLevel simd_level_from_env();      // TANDEM_CPU if set, else best_simd_level()
bool simd_level_supported(SimdLevel level);
// Whether the CPU runs pdep fast (CpuFeatures::fast_pdep): the AVX2
// level then takes the BMI2 build of the kernels that have one.
bool cpu_fast_pdep();

// A weight matrix as stored: n_rows rows of n_cols elements, row-major in
// the blocks of `type`.
struct WeightView {
    quant::Type type = quant::Type::F32;
    const void* data = nullptr;
    int64_t n_rows = 0;
    int64_t n_cols = 0;
    uint64_t row_stride_bytes = 0;  // bytes between rows (== row_bytes(type, n_cols))
};

// The activation type a weight type is multiplied against.
quant::Type activation_type(quant::Type weight_type);

// Y (n_tokens x W.n_rows, row stride ldy floats) = X (n_tokens x W.n_cols,
// row stride ldx floats) times W transposed. Quantizes X once, then splits
// the rows of W (and for large batches, tiles over tokens so each unpacked
// weight block is reused across many tokens) over the pool's threads.
// Prompt batches of F32/F16/BF16 weights go to OpenBLAS instead where the
// build links it (blas_matmul.h: within rounding of the kernels).
//
// order: Fastest lets a batch take the batch kernels (llama.cpp's batch
// order for K-quants), the wide F16 kernels and BLAS, so a token's bits
// depend on the batch it is in; SingleToken gives every token exactly the
// bits of a one-token call (a speculative step's verification batch);
// LlamaCpu is Fastest without BLAS, so every batch gets the bits of
// llama.cpp's CPU backend (tandem imatrix, compared with llama-imatrix's).
enum class MatmulOrder { Fastest, SingleToken, LlamaCpu };
void matmul(const WeightView& w, const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy,
            ThreadPool& pool, SimdLevel level, MatmulOrder order = MatmulOrder::Fastest);

// Several products of one input: targets[j].y (n_tokens x w.n_rows, packed)
// = X (n_tokens x n_cols, packed) times targets[j].w transposed, all with
// the same n_cols. A single token (a decode step's Q, K and V, or gate and
// up) is quantized once and all rows go to the pool in one hand-off, so
// the threads meet once instead of once per matrix; the kernels and so the
// bits are matmul's. Batches, and inputs whose matrices want different
// activation types, run as one matmul per target. A target with its own x
// (a decode step's down products of several experts) reads that instead of
// the shared one (which may then be null); its products still go to the
// pool in the one hand-off.
struct MatmulTarget {
    const WeightView* w = nullptr;
    float* y = nullptr;
    const float* x = nullptr;  // null: the shared input
};
void matmul_shared_input(std::span<const MatmulTarget> targets, const float* x, int64_t n_tokens, ThreadPool& pool,
                         SimdLevel level, MatmulOrder order = MatmulOrder::Fastest);

// Building blocks, exposed for tests and benchmarks: the dot product of one
// weight row with one activation row already in activation_type(w_type).
float vec_dot(quant::Type w_type, const void* w_row, const void* a_row, int64_t n, SimdLevel level);

}  // namespace tandem::cpu
