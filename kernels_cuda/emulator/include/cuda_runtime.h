// The CUDA emulator's cuda_runtime.h (kernels_cuda/emulator/emu.h): the
// subset of the runtime API and the device built-ins that Tandem's CUDA
// sources use, for host C++. Error codes have CUDA's values. Anything not
// here fails to compile: the emulator covers what the kernels use, no more.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels_cuda/emulator/emu.h"

// ---- qualifiers
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// One copy per OS thread: a block runs on one OS thread, its threads as
// fibers, so they share it and concurrent blocks do not.
#define __shared__ static thread_local
#define __constant__ static

using tandem::emu::dim3;
using tandem::emu::uint3;

// ---- built-in variables
#define threadIdx (::tandem::emu::detail::thread_idx())
#define blockIdx (::tandem::emu::detail::block_idx())
#define blockDim (::tandem::emu::detail::block_dim())
#define gridDim (::tandem::emu::detail::grid_dim())
inline constexpr int warpSize = 32;

// ---- barriers and warp collectives (the call site names them in errors)
#define __syncthreads() ::tandem::emu::syncthreads(__FILE__, __LINE__)
#define __syncwarp(...) ::tandem::emu::detail_syncwarp(__FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__)
#define __shfl_sync(...) ::tandem::emu::shfl(::tandem::emu::WarpOp::Shfl, __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) ::tandem::emu::shfl(::tandem::emu::WarpOp::ShflUp, __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) ::tandem::emu::shfl(::tandem::emu::WarpOp::ShflDown, __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) ::tandem::emu::shfl(::tandem::emu::WarpOp::ShflXor, __FILE__, __LINE__, __VA_ARGS__)
#define __ballot_sync(mask, p) \
    static_cast<unsigned>(::tandem::emu::warp_collective(::tandem::emu::WarpOp::Ballot, mask, (p) ? 1 : 0, 0, 32, __FILE__, __LINE__))
#define __all_sync(mask, p) \
    static_cast<int>(::tandem::emu::warp_collective(::tandem::emu::WarpOp::All, mask, (p) ? 1 : 0, 0, 32, __FILE__, __LINE__))
#define __any_sync(mask, p) \
    static_cast<int>(::tandem::emu::warp_collective(::tandem::emu::WarpOp::Any, mask, (p) ? 1 : 0, 0, 32, __FILE__, __LINE__))
#define __activemask() ::tandem::emu::active_mask()

namespace tandem::emu {

inline void detail_syncwarp(const char* file, int line, unsigned mask = 0xffffffffu) { syncwarp(mask, file, line); }

template <class T>
T shfl(WarpOp op, const char* file, int line, unsigned mask, T var, int arg, int width = 32) {
    return from_bits<T>(warp_collective(op, mask, to_bits(var), arg, width, file, line));
}

}  // namespace tandem::emu

// ---- integer and bit intrinsics
inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; ++i) c += static_cast<int8_t>(a >> (8 * i)) * static_cast<int8_t>(b >> (8 * i));
    return c;
}
inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
    for (int i = 0; i < 4; ++i) c += ((a >> (8 * i)) & 0xFFu) * ((b >> (8 * i)) & 0xFFu);
    return c;
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline int __clz(int v) { return v == 0 ? 32 : __builtin_clz(static_cast<unsigned>(v)); }
inline float __int_as_float(int v) { return __builtin_bit_cast(float, v); }
inline int __float_as_int(float v) { return __builtin_bit_cast(int, v); }
inline float __uint_as_float(unsigned v) { return __builtin_bit_cast(float, v); }
inline unsigned __float_as_uint(float v) { return __builtin_bit_cast(unsigned, v); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float v) { return std::exp(v); }
inline float rsqrtf(float v) { return 1.0f / std::sqrt(v); }

// ---- atomics (std::atomic_ref: blocks may run on several OS threads)
#include <atomic>
template <class T>
T atomicAdd(T* p, T v) {
    return std::atomic_ref<T>(*p).fetch_add(v);
}
template <class T>
T atomicSub(T* p, T v) {
    return std::atomic_ref<T>(*p).fetch_sub(v);
}
template <class T>
T atomicExch(T* p, T v) {
    return std::atomic_ref<T>(*p).exchange(v);
}
template <class T>
T atomicCAS(T* p, T expected, T desired) {
    std::atomic_ref<T>(*p).compare_exchange_strong(expected, desired);
    return expected;
}
template <class T>
T atomicMax(T* p, T v) {
    std::atomic_ref<T> a(*p);
    T old = a.load();
    while (old < v && !a.compare_exchange_weak(old, v)) {
    }
    return old;
}
template <class T>
T atomicMin(T* p, T v) {
    std::atomic_ref<T> a(*p);
    T old = a.load();
    while (v < old && !a.compare_exchange_weak(old, v)) {
    }
    return old;
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// ---- the runtime API subset
enum cudaError_t : int {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
};
using cudaError = cudaError_t;

enum cudaMemcpyKind : int {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

using cudaStream_t = tandem::emu::Stream*;
using cudaEvent_t = struct tandem_emu_event*;

inline constexpr unsigned cudaStreamDefault = 0x0;
inline constexpr unsigned cudaStreamNonBlocking = 0x1;
inline constexpr unsigned cudaEventDefault = 0x0;
inline constexpr unsigned cudaEventBlockingSync = 0x1;
inline constexpr unsigned cudaEventDisableTiming = 0x2;
inline constexpr unsigned cudaHostAllocDefault = 0x0;
inline constexpr unsigned cudaHostAllocPortable = 0x1;

struct cudaDeviceProp {
    char name[256] = {};
    size_t totalGlobalMem = 0;
    size_t sharedMemPerBlock = 0;
    int regsPerBlock = 0;
    int warpSize = 32;
    int maxThreadsPerBlock = 0;
    int maxThreadsDim[3] = {};
    int maxGridSize[3] = {};
    int major = 0;
    int minor = 0;
    int multiProcessorCount = 0;
    int memoryBusWidth = 0;
    int l2CacheSize = 0;
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDeviceReset();
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t err);
const char* cudaGetErrorName(cudaError_t err);

cudaError_t cudaMalloc(void** ptr, size_t bytes);
template <class T>
cudaError_t cudaMalloc(T** ptr, size_t bytes) {
    return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags);
cudaError_t cudaMallocHost(void** ptr, size_t bytes);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream = nullptr);

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);

cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop);
