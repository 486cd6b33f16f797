// Every weight product on a GPU goes through here, which picks the kernel
// (uses_cublas): quantized weights always take matmul.cu's block-sum
// kernels (the CPU's integer block sums in its float order, so its bits;
// decode reads each weight once per eight tokens; batches on the int8
// tensor cores); float weights (F32, F16, BF16) take them below
// kCublasMinTokens or kCublasMinRows and from there on are read into a
// fixed fp32 tile and multiplied by a cuBLAS fp32 GEMM (within rounding of
// the CPU, not its bits). A matrix of few rows is a router, whose logits
// choose the experts (a drift there changes which run): it keeps the CPU's
// order, at no cost worth a GEMM. The GEMM's activations are the
// partner type's values read back as floats (math::act_roundtrip), without
// TF32, whose 10-bit operands alone move the tiny models' logits past the
// bound. fp32 tiles, not fp16: activations of Gemma-like models exceed
// fp16's range.
// Internal to kernels_cuda (no CUDA type in this header).
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/quant/quant_types.h"

namespace tandem::cuda {

inline constexpr int64_t kCublasMinTokens = 16;
inline constexpr int64_t kCublasMinRows = 1024;
// Whether a product of an n_rows matrix and n_tokens rows takes the cuBLAS
// path.
constexpr bool uses_cublas(quant::Type w, int64_t n_rows, int64_t n_tokens) {
    return n_tokens >= kCublasMinTokens && n_rows >= kCublasMinRows && quant::is_float_weight(w);
}
// The cuBLAS path's two choices.
inline constexpr bool kBatchRoundTripsActivations = true;  // x -> partner type -> floats
inline constexpr bool kBatchUsesTf32 = false;              // CUBLAS_COMPUTE_32F, default math

class DeviceMatmul {
public:
    // `room`: device memory of room_bytes (model::gemm_tile_bytes, the
    // caller's allocation, so that it is accounted where the caller
    // accounts): cuBLAS's workspace first (workspace_bytes_for, whole 256
    // bytes), then the tile; the workspace given with cublasSetWorkspace so that cuBLAS
    // allocates none of its own. Creates a cuBLAS handle on the current
    // device. Throws Error.
    DeviceMatmul(void* room, uint64_t room_bytes);
    // cuBLAS's share of a room: 4 MiB (its own default before Hopper), at
    // most a quarter of the room, in whole 256 bytes.
    static constexpr uint64_t workspace_bytes_for(uint64_t room_bytes) {
        const uint64_t quarter = room_bytes / 4 / 256 * 256;
        return quarter < (uint64_t{4} << 20) ? quarter : uint64_t{4} << 20;
    }
    ~DeviceMatmul();
    DeviceMatmul(const DeviceMatmul&) = delete;
    DeviceMatmul& operator=(const DeviceMatmul&) = delete;

    // y[t * ldy + r] = sum_i w(r, i) x[t * ldx + i] for r < n_rows, t < n_tokens,
    // on the legacy default stream. `scratch` holds the quantized
    // activations of the small-batch kernel, or the batch path's
    // activations read back as floats (kernels::matmul_scratch_bytes).
    // Throws Error for a type without a kernel or a failed launch.
    void run(quant::Type type, const void* w, uint64_t w_row_bytes, int64_t n_rows, int64_t n_cols, const float* x,
             int64_t ldx, int64_t n_tokens, void* scratch, float* y, int64_t ldy);
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
