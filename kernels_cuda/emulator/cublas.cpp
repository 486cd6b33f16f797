#include <cublas_v2.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "kernels_cuda/emulator/block.h"
#include "kernels_cuda/emulator/stream.h"

struct tandem_emu_cublas {
    cudaStream_t stream = nullptr;
    cublasMath_t math = CUBLAS_DEFAULT_MATH;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
};

namespace {


// fp32 rounded to TF32 (10 mantissa bits), to nearest, ties away as the
// tensor cores' conversion does.
float to_tf32(float v) {
    if (!std::isfinite(v)) return v;
    uint32_t u;
    std::memcpy(&u, &v, 4);
    u = (u + 0x1000u) & ~0x1FFFu;
    std::memcpy(&v, &u, 4);
    return v;
}

// Whether the elements a GEMM reads of a rows x cols column-major operand
// (leading dimension ld) lie in one device allocation.
bool operand_in_device(const void* p, int64_t rows, int64_t cols, int64_t ld) {
    if (rows == 0 || cols == 0) return true;
    const int64_t last = (rows - 1) + (cols - 1) * ld;
    return tandem::emu::is_device_range(p, static_cast<size_t>(last + 1) * sizeof(float));
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
    // A test of what a failed cuBLAS start does.
    if (const char* e = std::getenv("TANDEM_CUDA_EMULATE_FAIL_CUBLAS"); e && std::string(e) == "1") {
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    *handle = new tandem_emu_cublas;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    tandem::emu::resolve(handle->stream).wait_all();
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t* stream) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    *stream = handle->stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t bytes) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes > 0 && !tandem::emu::is_device_range(workspace, bytes)) return CUBLAS_STATUS_INVALID_VALUE;
    handle->workspace = workspace;
    handle->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusString(cublasStatus_t status) {
    switch (status) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
        case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType_t a_type, int lda, const void* B,
                            cudaDataType_t b_type, int ldb, const void* beta, void* C, cudaDataType_t c_type, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
    // cuBLAS's checks: sizes not negative, each leading dimension at least
    // the stored operand's row count.
    if (m < 0 || n < 0 || k < 0 || lda < std::max(1, ta ? k : m) || ldb < std::max(1, tb ? n : k) ||
        ldc < std::max(1, m)) {
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (a_type != CUDA_R_32F || b_type != CUDA_R_32F || c_type != CUDA_R_32F ||
        (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32 &&
         compute != CUBLAS_COMPUTE_32F_PEDANTIC)) {
        return CUBLAS_STATUS_NOT_SUPPORTED;  // the emulator has what device_matmul.cpp uses
    }
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
    const bool tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
                      (handle->math == CUBLAS_TF32_TENSOR_OP_MATH && compute == CUBLAS_COMPUTE_32F);
    const auto* a = static_cast<const float*>(A);
    const auto* b = static_cast<const float*>(B);
    auto* c = static_cast<float*>(C);
    tandem::emu::enqueue(handle->stream, [=] {
        // What a GPU would fault on: an operand, as its sizes and leading
        // dimension reach, outside device memory.
        const bool a_ok = operand_in_device(a, ta ? k : m, ta ? m : k, lda);
        const bool b_ok = operand_in_device(b, tb ? n : k, tb ? k : n, ldb);
        const bool c_ok = operand_in_device(c, m, n, ldc);
        if (!a_ok || !b_ok || !c_ok) {
            tandem::emu::set_failure(fmt::format(
                "cublasGemmEx (m {} n {} k {}, lda {} ldb {} ldc {}): operand {} reaches outside device memory", m, n,
                k, lda, ldb, ldc, !a_ok ? "A" : !b_ok ? "B" : "C"));
            return;
        }
        for (int j = 0; j < n; ++j) {
            for (int i = 0; i < m; ++i) {
                float acc = 0.0f;
                for (int p = 0; p < k; ++p) {
                    float av = ta ? a[p + static_cast<int64_t>(i) * lda] : a[i + static_cast<int64_t>(p) * lda];
                    float bv = tb ? b[j + static_cast<int64_t>(p) * ldb] : b[p + static_cast<int64_t>(j) * ldb];
                    if (tf32) {
                        av = to_tf32(av);
                        bv = to_tf32(bv);
                    }
                    acc = std::fma(av, bv, acc);
                }
                float& out = c[i + static_cast<int64_t>(j) * ldc];
                out = be == 0.0f ? al * acc : al * acc + be * out;
            }
        }
    });
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                           const float* beta, float* C, int ldc) {
    return cublasGemmEx(handle, transa, transb, m, n, k, alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, beta, C,
                        CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}
