// The CUDA emulator's cuBLAS subset (kernels_cuda/emulator/cublas.cpp): a
// handle bound to a stream, and the GEMM with cuBLAS's column-major
// semantics, transposes, leading dimensions and argument checks. fp32
// operands, fp32 accumulation by fused multiply-adds in k order (TF32
// rounds the operands to 10 bits first). TANDEM_CUDA_EMULATE_FAIL_CUBLAS=1
// makes cublasCreate fail (CUBLAS_STATUS_NOT_INITIALIZED).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

using cublasHandle_t = struct tandem_emu_cublas*;

enum cublasStatus_t : int {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
};

enum cublasOperation_t : int { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
enum cublasMath_t : int {
    CUBLAS_DEFAULT_MATH = 0,
    CUBLAS_TENSOR_OP_MATH = 1,
    CUBLAS_PEDANTIC_MATH = 2,
    CUBLAS_TF32_TENSOR_OP_MATH = 3,
};
enum cublasComputeType_t : int {
    CUBLAS_COMPUTE_16F = 64,
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_PEDANTIC = 69,
    CUBLAS_COMPUTE_32F_FAST_16F = 74,
    CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
};
enum cudaDataType_t : int { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
using cudaDataType = cudaDataType_t;
enum cublasGemmAlgo_t : int { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 };

cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t* stream);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t bytes);
const char* cublasGetStatusString(cublasStatus_t status);
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType_t a_type, int lda, const void* B,
                            cudaDataType_t b_type, int ldb, const void* beta, void* C, cudaDataType_t c_type, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo);
cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                           const float* beta, float* C, int ldc);
