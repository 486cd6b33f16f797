// TANDEM_HOST_DEVICE: a function compiled for the host and, under nvcc,
// for the device too (the headers shared by the CPU and CUDA code).
#pragma once

#if defined(__CUDACC__)
#define TANDEM_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TANDEM_HOST_DEVICE inline
#endif

// A float function of one float on both sides: name(v) is device_fn(v) in
// device code and host_fn(v) on the host (the libm calls of the two may
// differ by an ulp).
#if defined(__CUDA_ARCH__)
#define TANDEM_FLOAT_FN(name, device_fn, host_fn) \
    TANDEM_HOST_DEVICE float name(float v) { return device_fn(v); }
#else
#define TANDEM_FLOAT_FN(name, device_fn, host_fn) \
    TANDEM_HOST_DEVICE float name(float v) { return host_fn(v); }
#endif
