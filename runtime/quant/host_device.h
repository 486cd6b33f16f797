// TANDEM_HOST_DEVICE: a function compiled for the host and, under nvcc,
// for the device too (the headers shared by the CPU and CUDA code).
#pragma once

#if defined(__CUDACC__)
#define TANDEM_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TANDEM_HOST_DEVICE inline
#endif
