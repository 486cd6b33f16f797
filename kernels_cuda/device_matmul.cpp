#include "kernels_cuda/device_matmul.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>

#include <fmt/format.h>

#include "kernels_cuda/cuda_kernels.h"
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/matmul_types.h"
#include "runtime/common/error.h"

namespace tandem::cuda {
namespace {

void check_cublas(cublasStatus_t st, const char* what) {
    if (st != CUBLAS_STATUS_SUCCESS) {
        throw Error(fmt::format("cuBLAS {} failed: {} ({})", what, cublasGetStatusString(st), static_cast<int>(st)));
    }
}

}  // namespace

DeviceMatmul::DeviceMatmul(void* room, uint64_t room_bytes)
    : tile_(reinterpret_cast<float*>(static_cast<uint8_t*>(room) + workspace_bytes_for(room_bytes))),
      tile_bytes_(room_bytes - workspace_bytes_for(room_bytes)) {
    cublasHandle_t h = nullptr;
    check_cublas(cublasCreate(&h), "cublasCreate");
    handle_ = h;
    check_cublas(cublasSetWorkspace(h, room, workspace_bytes_for(room_bytes)), "cublasSetWorkspace");
    // Plain fp32 products unless kBatchUsesTf32: TF32's 10-bit operands
    // alone move the tiny models' logits by KL 1.4e-3 to 2.5e-3.
    check_cublas(cublasSetMathMode(h, kBatchUsesTf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
                 "cublasSetMathMode");
}

DeviceMatmul::~DeviceMatmul() {
    if (handle_) cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

void DeviceMatmul::run(quant::Type type, const void* w, uint64_t w_row_bytes, int64_t n_rows, int64_t n_cols,
                       const float* x, int64_t ldx, int64_t n_tokens, void* scratch, float* y, int64_t ldy) {
    if (n_rows <= 0 || n_tokens <= 0) return;
    if (single_order_ || !uses_cublas(type, n_rows, n_tokens)) {
        const bool ok = kernels::launch_matmul(type, w, w_row_bytes, n_rows, n_cols, x, ldx, n_tokens, scratch, y,
                                               ldy, single_order_, nullptr);
        if (!ok) throw Error(fmt::format("no CUDA matmul for type {}", quant::traits(type).name));
        TANDEM_CUDA_CHECK(cudaGetLastError());
        return;
    }
    const auto h = static_cast<cublasHandle_t>(handle_);
    float* tile = tile_;
    const int64_t tile_rows = static_cast<int64_t>(tile_bytes_ / (static_cast<uint64_t>(n_cols) * sizeof(float)));
    if (tile_rows < 1) throw Error(fmt::format("GEMM tile of {} bytes is smaller than one row of {}", tile_bytes_, n_cols));
    const float one = 1.0f, zero = 0.0f;
    // The CPU's activation values: x through the partner type, in scratch
    // (F32 weights multiply x as it is).
    quant::Type a_type = quant::Type::F32;
    matmul_activation_type(type, a_type);
    const float* xa = x;
    int64_t lda = ldx;
    if (kBatchRoundTripsActivations && a_type != quant::Type::F32) {
        auto* out = static_cast<float*>(scratch);
        lda = n_cols;
        if (!kernels::launch_act_roundtrip(type, x, ldx, n_cols, n_tokens, out, nullptr)) {
            throw Error(fmt::format("no CUDA activation quantizer for type {}", quant::traits(type).name));
        }
        TANDEM_CUDA_CHECK(cudaGetLastError());
        xa = out;
    }
    const cublasComputeType_t compute = kBatchUsesTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    for (int64_t r0 = 0; r0 < n_rows; r0 += tile_rows) {
        const int64_t m = std::min(tile_rows, n_rows - r0);
        // Rows are whole blocks back to back, so m rows dequantize as one run.
        const void* src = static_cast<const uint8_t*>(w) + static_cast<uint64_t>(r0) * w_row_bytes;
        if (!kernels::launch_dequantize(type, src, tile, m * n_cols, nullptr)) {
            throw Error(fmt::format("no CUDA dequantization for type {}", quant::traits(type).name));
        }
        TANDEM_CUDA_CHECK(cudaGetLastError());
        // Column-major view: the tile is n_cols x m (ld n_cols), x is n_cols
        // x n_tokens (ld n_cols), y + r0 is m x n_tokens (ld ldy):
        // y = tile^T x.
        check_cublas(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m), static_cast<int>(n_tokens),
                                  static_cast<int>(n_cols), &one, tile, CUDA_R_32F, static_cast<int>(n_cols), xa,
                                  CUDA_R_32F, static_cast<int>(lda), &zero, y + r0, CUDA_R_32F,
                                  static_cast<int>(ldy), compute, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx");
    }
}

}  // namespace tandem::cuda
