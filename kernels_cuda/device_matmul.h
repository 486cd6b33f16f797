// Every weight product on a GPU goes through here, which picks the kernel
// by batch size: below kCublasMinTokens the integer/element kernel of
// matmul.cu (decode reads each weight once per four tokens, fine for 1-8
// tokens); from there on, rows are dequantized to fp32 in a fixed tile and
// multiplied by a cuBLAS fp32 GEMM (each dequantized row then serves every
// token of the micro-batch). The activations are first quantized to the
// weight type's partner as the CPU quantizes them and read back as floats
// (math::act_roundtrip), and the GEMM runs without TF32: unquantized
// activations or TF32's 10-bit operands each move the tiny models' logits
// past the golden KL bound of 1e-3 (emulated on the host in
// tests/test_cuda_batch_host.cpp). fp32 tiles, not fp16: activations of
// Gemma-like models exceed fp16's range. The weights themselves stay in
// their GGUF blocks; only the tile is float.
// Internal to kernels_cuda (no CUDA type in this header).
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/quant/quant_types.h"

namespace tandem::cuda {

inline constexpr int64_t kCublasMinTokens = 16;
// The batch path's two choices, read by the host emulation of it.
inline constexpr bool kBatchRoundTripsActivations = true;  // x -> partner type -> floats
inline constexpr bool kBatchUsesTf32 = false;              // CUBLAS_COMPUTE_32F, default math

class DeviceMatmul {
public:
    // `tile`: device memory of tile_bytes (the caller's allocation, so
    // that it is accounted where the caller accounts); creates a cuBLAS
    // handle on the current device. Throws Error.
    DeviceMatmul(void* tile, uint64_t tile_bytes);
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

private:
    float* tile_;
    uint64_t tile_bytes_;
    void* handle_ = nullptr;  // cublasHandle_t
};

}  // namespace tandem::cuda
