// Every weight product on a GPU goes through here, which picks the kernel
// (uses_cublas): quantized weights always take the element kernel of
// matmul.cu over activations quantized as the CPU quantizes them (decode
// reads each weight once per four tokens); float weights (F32, F16, BF16)
// take it below kCublasMinTokens and from there on are read into a fixed
// fp32 tile and multiplied by a cuBLAS fp32 GEMM. Quantized batches left
// cuBLAS when the emulator ran the real kernels: a float GEMM over
// dequantized tiles moved synth-qwen3's logits to KL 1.3e-3 to 1.8e-3
// against the CPU (the bound is 1e-3), where the element kernel stays
// within it (issue 46 replaces both with integer block sums). The GEMM's
// activations are the partner type's values read back as floats
// (math::act_roundtrip), without TF32, whose 10-bit operands alone move
// the tiny models' logits past the bound. fp32 tiles, not fp16:
// activations of Gemma-like models exceed fp16's range.
// Internal to kernels_cuda (no CUDA type in this header).
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/quant/quant_types.h"

namespace tandem::cuda {

inline constexpr int64_t kCublasMinTokens = 16;
// Whether a product of n_tokens rows takes the cuBLAS path.
constexpr bool uses_cublas(quant::Type w, int64_t n_tokens) {
    return n_tokens >= kCublasMinTokens && (w == quant::Type::F32 || w == quant::Type::F16 || w == quant::Type::BF16);
}
// The cuBLAS path's two choices.
inline constexpr bool kBatchRoundTripsActivations = true;  // x -> partner type -> floats
inline constexpr bool kBatchUsesTf32 = false;              // CUBLAS_COMPUTE_32F, default math

class DeviceMatmul {
public:
    // `tile`: device memory of tile_bytes, and `workspace` of
    // workspace_bytes that cuBLAS uses instead of its own (null: cuBLAS's
    // default); the caller's allocations, so that they are accounted where
    // the caller accounts. Creates a cuBLAS handle on the current device.
    // Throws Error.
    DeviceMatmul(void* tile, uint64_t tile_bytes, void* workspace = nullptr, uint64_t workspace_bytes = 0);
    ~DeviceMatmul();
    DeviceMatmul(const DeviceMatmul&) = delete;
    DeviceMatmul& operator=(const DeviceMatmul&) = delete;

    // y[t * ldy + r] = sum_i w(r, i) x(t, i) for r < n_rows, t < n_tokens,
    // on the legacy default stream. `scratch` holds the quantized
    // activations of the small-batch kernel, or the batch path's
    // activations read back as floats (kernels::matmul_scratch_bytes).
    // Throws Error for a type without a kernel or a failed launch.
    void run(quant::Type type, const void* w, uint64_t w_row_bytes, int64_t n_rows, int64_t n_cols, const float* x,
             int64_t n_tokens, void* scratch, float* y, int64_t ldy);
    // Every token in the single-row order (no batch forms, no cuBLAS): a
    // batch then gives each token the bits it gets alone.
    void set_single_token_order(bool on) { single_order_ = on; }

private:
    float* tile_;
    uint64_t tile_bytes_;
    void* handle_ = nullptr;  // cublasHandle_t
    bool single_order_ = false;
};

}  // namespace tandem::cuda
