// The CUDA emulator's own rules (kernels_cuda/emulator/emu.h): barriers,
// warp collectives and their checks, device memory and its capacity,
// copies, deferred streams, events, and the cuBLAS GEMM's semantics. Only
// in the emulated build (TANDEM_CUDA_EMULATE=ON); the kernels here are
// launched in the form the build rewrites `<<<...>>>` into.
#include <gtest/gtest.h>

#ifdef TANDEM_CUDA_EMULATED

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels_cuda/mma.h"

#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#define LAUNCH(...) % ::tandem::emu::launch(__FILE__, __LINE__, __VA_ARGS__)

namespace {

// The emulated build's tests all see the emulated GPU, and so do the
// `tandem` processes they start; a test may still say otherwise first
// (TANDEM_CUDA_EMULATE=0 for the no-GPU paths). With it set, a CUDA test
// that finds no GPU or model fails (tests/test_cuda_inputs.h).
// Two emulated GPUs, for the tests of several (tests/test_cuda_multi_gpu.cpp).
const bool kEmulated = [] {
    return setenv("TANDEM_CUDA_EMULATE", "1", 0) == 0 && setenv("TANDEM_CUDA_EMULATE_DEVICES", "2", 0) == 0;
}();

// Each check's failure is sticky, as on a GPU; these tests forget it at
// the end so that one process can run several (ctest runs each alone).
struct ForgetErrors {
    ~ForgetErrors() { tandem::emu::clear_error(); }
};

template <class T>
T* device_copy(const std::vector<T>& host) {
    T* d = nullptr;
    EXPECT_EQ(cudaMalloc(&d, host.size() * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    return d;
}

template <class T>
std::vector<T> host_copy(const T* d, size_t n) {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
}

// A launch of `kernel` as one block of `threads` over a fresh buffer of
// as many elements, which must fail: the check's message.
template <class T>
std::string failure_of(void (*kernel)(T*), unsigned threads) {
    T* d = nullptr;
    EXPECT_EQ(cudaMalloc(&d, threads * sizeof(T)), cudaSuccess);
    kernel LAUNCH(1, threads)(d);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
    return tandem::emu::last_error_message();
}

// A tree reduction over a block of 256 through shared memory.
__global__ void block_sum(const float* x, float* out) {
    __shared__ float part[256];
    part[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x];
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (threadIdx.x < static_cast<unsigned>(s)) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}

// Half the block leaves before the barrier.
__global__ void early_exit_barrier(float* out) {
    if (threadIdx.x >= 16) return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}

// Two barriers that are not the same call.
__global__ void split_barriers(float* out) {
    if (threadIdx.x % 2 == 0) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = 1.0f;
}

__global__ void warp_reduce(const int* x, int* out) {
    int v = x[threadIdx.x];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    out[threadIdx.x] = v;
}

__global__ void shuffles(const int* x, int* up, int* down, int* idx, unsigned* ballot) {
    const int v = x[threadIdx.x];
    up[threadIdx.x] = __shfl_up_sync(0xffffffffu, v, 1, 8);
    down[threadIdx.x] = __shfl_down_sync(0xffffffffu, v, 2);
    idx[threadIdx.x] = __shfl_sync(0xffffffffu, v, 5, 16);
    ballot[threadIdx.x] = __ballot_sync(0xffffffffu, v % 3 == 0);
}

// Lane 31 shuffles with a mask that leaves it out.
__global__ void mask_omits_caller(int* out) {
    const unsigned mask = threadIdx.x == 31 ? 0x7fffffffu : 0xffffffffu;
    out[threadIdx.x] = __shfl_xor_sync(mask, static_cast<int>(threadIdx.x), 1);
}

// The lower half shuffles among itself but reads the upper half's lanes.
__global__ void reads_outside_mask(int* out) {
    if (threadIdx.x < 16) out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, static_cast<int>(threadIdx.x), 16);
}

// The mask names all lanes but the upper half has gone.
__global__ void mask_lane_exited(int* out) {
    if (threadIdx.x >= 16) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

__global__ void dot4(const int* a, const int* b, int* out) { out[threadIdx.x] = __dp4a(a[threadIdx.x], b[threadIdx.x], 7); }

// One m16n8k16 s8 product a warp, fragments gathered from row-major A
// (16 x 16 bytes) and B stored by column (8 columns of 16 bytes), per
// PTX's layout (kernels_cuda/mma.h), onto C (16 x 8, row-major) as it was.
__global__ void mma_tile(const int8_t* a, const int8_t* b_cols, int32_t* c) {
    const int g = static_cast<int>(threadIdx.x) / 4, t = static_cast<int>(threadIdx.x) % 4;
    const auto word = [](const int8_t* p) {
        uint32_t v;
        std::memcpy(&v, p, 4);
        return v;
    };
    int32_t frag[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
    tandem::cuda::mma_s8_16x8x16(frag, word(a + g * 16 + 4 * t), word(a + (g + 8) * 16 + 4 * t),
                                 word(b_cols + g * 16 + 4 * t));
    c[g * 8 + 2 * t] = frag[0];
    c[g * 8 + 2 * t + 1] = frag[1];
    c[(g + 8) * 8 + 2 * t] = frag[2];
    c[(g + 8) * 8 + 2 * t + 1] = frag[3];
}

// Half the warp reaches the product.
__global__ void mma_half_warp(int32_t* c) {
    if (threadIdx.x >= 16) return;
    int32_t frag[4] = {};
    tandem::cuda::mma_s8_16x8x16(frag, 1u, 1u, 1u);
    c[threadIdx.x] = frag[0];
}

__global__ void add_one(float* x, int n) {
    const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) x[i] += 1.0f;
}

}  // namespace

TEST(CudaEmulator, ReportsTheEmulatedGpuAndItsCapacity) {
    cudaDeviceProp prop;
    ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
    EXPECT_EQ(std::string(prop.name), "emulated GPU");
    tandem::emu::set_capacity(0, size_t{64} << 20);
    size_t free_b = 0, total_b = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
    EXPECT_EQ(total_b, size_t{64} << 20);
    void* a = nullptr;
    ASSERT_EQ(cudaMalloc(&a, size_t{40} << 20), cudaSuccess);
    void* b = nullptr;
    EXPECT_EQ(cudaMalloc(&b, size_t{40} << 20), cudaErrorMemoryAllocation) << "beyond the capacity";
    EXPECT_EQ(b, nullptr);
    ASSERT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
    EXPECT_EQ(free_b, size_t{24} << 20);
    EXPECT_EQ(tandem::emu::peak_bytes(0), size_t{40} << 20);
    EXPECT_EQ(cudaFree(a), cudaSuccess);
    EXPECT_EQ(tandem::emu::used_bytes(0), 0u);
    EXPECT_EQ(cudaFree(reinterpret_cast<char*>(&free_b)), cudaErrorInvalidDevicePointer) << "not a device allocation";
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevicePointer) << "a failed call is also the last error";
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    tandem::emu::set_capacity(0, size_t{8} << 30);
}

TEST(CudaEmulator, BarriersOrderSharedMemory) {
    constexpr int kBlocks = 5;
    std::vector<float> x(256 * kBlocks);
    std::iota(x.begin(), x.end(), 0.0f);
    float* dx = device_copy(x);
    float* dout = nullptr;
    ASSERT_EQ(cudaMalloc(&dout, kBlocks * sizeof(float)), cudaSuccess);
    block_sum LAUNCH(kBlocks, 256)(dx, dout);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    const auto out = host_copy(dout, kBlocks);
    for (int b = 0; b < kBlocks; ++b) {
        double want = 0;
        for (int i = 0; i < 256; ++i) want += x[static_cast<size_t>(b * 256 + i)];
        EXPECT_EQ(out[static_cast<size_t>(b)], static_cast<float>(want)) << "block " << b;
    }
    cudaFree(dx);
    cudaFree(dout);
}

TEST(CudaEmulator, SyncthreadsNotReachedByEveryThreadIsAnError) {
    ForgetErrors forget;
    const std::string msg = failure_of(early_exit_barrier, 32);
    EXPECT_NE(msg.find("__syncthreads"), std::string::npos) << msg;
    EXPECT_NE(msg.find("not reached by every thread"), std::string::npos) << msg;
    EXPECT_NE(msg.find("16 of 32"), std::string::npos) << msg;
    void* d = nullptr;
    EXPECT_EQ(cudaMalloc(&d, 4), cudaErrorLaunchFailure) << "the error is sticky, as on a GPU";
}

TEST(CudaEmulator, ThreadsAtDifferentSyncthreadsAreAnError) {
    ForgetErrors forget;
    const std::string msg = failure_of(split_barriers, 64);
    EXPECT_NE(msg.find("different calls"), std::string::npos) << msg;
}

TEST(CudaEmulator, ShufflesAndVotesFollowTheirLaneRules) {
    std::vector<int> x(64);
    for (int i = 0; i < 64; ++i) x[static_cast<size_t>(i)] = i * 7 + 1;
    int* dx = device_copy(x);
    int *dsum = nullptr, *dup = nullptr, *ddown = nullptr, *didx = nullptr;
    unsigned* dballot = nullptr;
    for (int** p : {&dsum, &dup, &ddown, &didx}) ASSERT_EQ(cudaMalloc(p, 64 * sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dballot, 64 * sizeof(unsigned)), cudaSuccess);
    warp_reduce LAUNCH(1, 64)(dx, dsum);
    shuffles LAUNCH(1, 64)(dx, dup, ddown, didx, dballot);
    const auto sum = host_copy(dsum, 64), up = host_copy(dup, 64), down = host_copy(ddown, 64), idx = host_copy(didx, 64);
    const auto ballot = host_copy(dballot, 64);
    for (int l = 0; l < 64; ++l) {
        const int w = l / 32 * 32, lane = l % 32;
        int want_sum = 0;
        for (int i = 0; i < 32; ++i) want_sum += x[static_cast<size_t>(w + i)];
        EXPECT_EQ(sum[static_cast<size_t>(l)], want_sum) << l;
        const int want_up = lane % 8 >= 1 ? x[static_cast<size_t>(l - 1)] : x[static_cast<size_t>(l)];
        EXPECT_EQ(up[static_cast<size_t>(l)], want_up) << l;
        const int want_down = lane + 2 < 32 ? x[static_cast<size_t>(l + 2)] : x[static_cast<size_t>(l)];
        EXPECT_EQ(down[static_cast<size_t>(l)], want_down) << l;
        EXPECT_EQ(idx[static_cast<size_t>(l)], x[static_cast<size_t>(w + lane / 16 * 16 + 5)]) << l;
        unsigned want_ballot = 0;
        for (int i = 0; i < 32; ++i) want_ballot |= (x[static_cast<size_t>(w + i)] % 3 == 0 ? 1u : 0u) << i;
        EXPECT_EQ(ballot[static_cast<size_t>(l)], want_ballot) << l;
    }
}

TEST(CudaEmulator, ShuffleMaskOmittingTheCallerIsAnError) {
    ForgetErrors forget;
    const std::string msg = failure_of(mask_omits_caller, 32);
    EXPECT_NE(msg.find("omits the lane"), std::string::npos) << msg;
}

TEST(CudaEmulator, ShuffleReadingALaneOutsideTheMaskIsAnError) {
    ForgetErrors forget;
    const std::string msg = failure_of(reads_outside_mask, 32);
    EXPECT_NE(msg.find("not in the mask"), std::string::npos) << msg;
}

TEST(CudaEmulator, ShuffleWhoseMaskLanesExitedIsAnError) {
    ForgetErrors forget;
    const std::string msg = failure_of(mask_lane_exited, 32);
    EXPECT_NE(msg.find("never arrive"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ended"), std::string::npos) << msg;
}

TEST(CudaEmulator, Dp4aIsFourSignedByteProducts) {
    std::vector<int> a(32), b(32);
    std::mt19937 rng(3);
    for (int i = 0; i < 32; ++i) {
        a[static_cast<size_t>(i)] = static_cast<int>(rng());
        b[static_cast<size_t>(i)] = static_cast<int>(rng());
    }
    int *da = device_copy(a), *db = device_copy(b), *dout = nullptr;
    ASSERT_EQ(cudaMalloc(&dout, 32 * sizeof(int)), cudaSuccess);
    dot4 LAUNCH(1, 32)(da, db, dout);
    const auto out = host_copy(dout, 32);
    for (int i = 0; i < 32; ++i) {
        int want = 7;
        for (int k = 0; k < 4; ++k) {
            want += static_cast<int8_t>(a[static_cast<size_t>(i)] >> (8 * k)) *
                    static_cast<int8_t>(b[static_cast<size_t>(i)] >> (8 * k));
        }
        EXPECT_EQ(out[static_cast<size_t>(i)], want);
    }
}

TEST(CudaEmulator, MmaIsTheMatrixProductOfPtxFragments) {
    std::mt19937 rng(5);
    std::vector<int8_t> a(16 * 16), b(8 * 16);
    for (auto& v : a) v = static_cast<int8_t>(rng());
    for (auto& v : b) v = static_cast<int8_t>(rng());
    std::vector<int32_t> c(16 * 8);
    for (auto& v : c) v = static_cast<int32_t>(rng() % 1000);
    int8_t *da = device_copy(a), *db = device_copy(b);
    int32_t* dc = device_copy(c);
    mma_tile LAUNCH(1, 32)(da, db, dc);
    const auto got = host_copy(dc, c.size());
    for (int i = 0; i < 16; ++i) {
        for (int j = 0; j < 8; ++j) {
            int32_t want = c[static_cast<size_t>(i * 8 + j)];
            for (int k = 0; k < 16; ++k) want += a[static_cast<size_t>(i * 16 + k)] * b[static_cast<size_t>(j * 16 + k)];
            EXPECT_EQ(got[static_cast<size_t>(i * 8 + j)], want) << "C[" << i << "][" << j << "]";
        }
    }
}

TEST(CudaEmulator, MmaOfPartOfAWarpIsAnError) {
    ForgetErrors forget;
    const std::string msg = failure_of(mma_half_warp, 32);
    EXPECT_NE(msg.find("mma.sync"), std::string::npos) << msg;
}

TEST(CudaEmulator, HostPointerArgumentAndBadConfigurationAreErrors) {
    ForgetErrors forget;
    add_one LAUNCH(1, 2048)(static_cast<float*>(nullptr), 0);
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration) << "more than 1024 threads a block";
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "cudaGetLastError clears a launch's configuration error";
    std::vector<float> host(8);
    add_one LAUNCH(1, 8)(host.data(), 8);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
    const std::string msg = tandem::emu::last_error_message();
    EXPECT_NE(msg.find("not device memory"), std::string::npos) << msg;
}

TEST(CudaEmulator, CopiesAreCheckedAgainstTheirKind) {
    float* d = nullptr;
    ASSERT_EQ(cudaMalloc(&d, 16 * sizeof(float)), cudaSuccess);
    std::vector<float> h(32, 1.0f);
    EXPECT_EQ(cudaMemcpy(h.data(), d, 16 * sizeof(float), cudaMemcpyHostToDevice), cudaErrorInvalidValue)
        << "direction reversed";
    EXPECT_EQ(cudaMemcpy(d, h.data(), 32 * sizeof(float), cudaMemcpyHostToDevice), cudaErrorInvalidValue)
        << "past the allocation's end";
    EXPECT_EQ(cudaMemcpy(d, h.data(), 16 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    cudaFree(d);
}

// Streams run only when waited for: a pinned buffer rewritten before the
// copy queued from it has run gives the copy the new bytes, every time.
TEST(CudaEmulator, DeferredStreamsExposeAMissingWait) {
    if (const char* e = std::getenv("TANDEM_CUDA_EMULATE_EAGER"); e && std::string(e) == "1") {
        GTEST_SKIP() << "TANDEM_CUDA_EMULATE_EAGER=1 runs work at once";
    }
    float* pinned = nullptr;
    ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&pinned), 4 * sizeof(float), cudaHostAllocDefault), cudaSuccess);
    float* d = nullptr;
    ASSERT_EQ(cudaMalloc(&d, 4 * sizeof(float)), cudaSuccess);
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    cudaEvent_t done = nullptr;
    ASSERT_EQ(cudaEventCreate(&done), cudaSuccess);
    for (int i = 0; i < 4; ++i) pinned[i] = 1.0f;
    ASSERT_EQ(cudaMemcpyAsync(d, pinned, 4 * sizeof(float), cudaMemcpyHostToDevice, s), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(done, s), cudaSuccess);
    for (int i = 0; i < 4; ++i) pinned[i] = 2.0f;  // the bug: no cudaEventSynchronize(done) first
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(host_copy(d, 4), std::vector<float>(4, 2.0f)) << "the copy ran when waited for, after the rewrite";
    // With the wait, the copy has its bytes.
    for (int i = 0; i < 4; ++i) pinned[i] = 3.0f;
    ASSERT_EQ(cudaMemcpyAsync(d, pinned, 4 * sizeof(float), cudaMemcpyHostToDevice, s), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(done, s), cudaSuccess);
    ASSERT_EQ(cudaEventSynchronize(done), cudaSuccess);
    for (int i = 0; i < 4; ++i) pinned[i] = 4.0f;
    EXPECT_EQ(host_copy(d, 4), std::vector<float>(4, 3.0f));
    cudaEventDestroy(done);
    cudaStreamDestroy(s);
    cudaFree(d);
    cudaFreeHost(pinned);
}

// Work on a blocking stream and on the legacy default stream runs in the
// order it was queued; a non-blocking stream orders only through events.
TEST(CudaEmulator, StreamsOrderAsCudaSays) {
    constexpr int kN = 1000;
    float* d = nullptr;
    ASSERT_EQ(cudaMalloc(&d, kN * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMemset(d, 0, kN * sizeof(float)), cudaSuccess);
    cudaStream_t blocking = nullptr, free_running = nullptr;
    ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&free_running, cudaStreamNonBlocking), cudaSuccess);
    add_one LAUNCH((kN + 255) / 256, 256, 0, blocking)(d, kN);
    add_one LAUNCH((kN + 255) / 256, 256)(d, kN);  // legacy: after the blocking stream's
    cudaEvent_t e = nullptr;
    ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(e, nullptr), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(free_running, e), cudaSuccess);
    add_one LAUNCH((kN + 255) / 256, 256, 0, free_running)(d, kN);
    ASSERT_EQ(cudaStreamSynchronize(free_running), cudaSuccess);
    EXPECT_EQ(host_copy(d, kN), std::vector<float>(kN, 3.0f));
    cudaEvent_t a = nullptr, b = nullptr;
    ASSERT_EQ(cudaEventCreate(&a), cudaSuccess);
    ASSERT_EQ(cudaEventCreate(&b), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(a), cudaSuccess);
    add_one LAUNCH((kN + 255) / 256, 256)(d, kN);
    ASSERT_EQ(cudaEventRecord(b), cudaSuccess);
    EXPECT_EQ(cudaEventQuery(b), cudaErrorNotReady) << "deferred until waited for";
    ASSERT_EQ(cudaEventSynchronize(b), cudaSuccess);
    float ms = -1.0f;
    ASSERT_EQ(cudaEventElapsedTime(&ms, a, b), cudaSuccess);
    EXPECT_GE(ms, 0.0f);
    for (cudaEvent_t x : {e, a, b}) cudaEventDestroy(x);
    cudaStreamDestroy(blocking);
    cudaStreamDestroy(free_running);
    cudaFree(d);
}

// cublasGemmEx with cuBLAS's column-major semantics, every transpose pair
// and leading dimensions past the minimum, against a double reference.
TEST(CudaEmulator, CublasGemmFollowsColumnMajorSemantics) {
    constexpr int m = 5, n = 3, k = 7, pad = 2;
    cublasHandle_t h = nullptr;
    ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (const bool ta : {false, true}) {
        for (const bool tb : {false, true}) {
            SCOPED_TRACE(std::string(ta ? "T" : "N") + (tb ? "T" : "N"));
            const int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
            const int lda = a_rows + pad, ldb = b_rows + pad, ldc = m + pad;
            std::vector<float> a(static_cast<size_t>(lda * a_cols)), b(static_cast<size_t>(ldb * b_cols)),
                c(static_cast<size_t>(ldc * n), 5.0f);
            for (auto& v : a) v = dist(rng);
            for (auto& v : b) v = dist(rng);
            float *da = device_copy(a), *db = device_copy(b), *dc = device_copy(c);
            const float alpha = 2.0f, beta = 0.5f;
            ASSERT_EQ(cublasGemmEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha,
                                   da, CUDA_R_32F, lda, db, CUDA_R_32F, ldb, &beta, dc, CUDA_R_32F, ldc,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                      CUBLAS_STATUS_SUCCESS);
            const auto got = host_copy(dc, c.size());
            for (int j = 0; j < n; ++j) {
                for (int i = 0; i < m; ++i) {
                    double acc = 0;
                    for (int p = 0; p < k; ++p) {
                        const float av = ta ? a[static_cast<size_t>(p + i * lda)] : a[static_cast<size_t>(i + p * lda)];
                        const float bv = tb ? b[static_cast<size_t>(j + p * ldb)] : b[static_cast<size_t>(p + j * ldb)];
                        acc += static_cast<double>(av) * bv;
                    }
                    EXPECT_NEAR(got[static_cast<size_t>(i + j * ldc)], alpha * acc + beta * 5.0, 1e-5) << i << "," << j;
                }
                for (int i = m; i < ldc; ++i) EXPECT_EQ(got[static_cast<size_t>(i + j * ldc)], 5.0f) << "padding kept";
            }
            cudaFree(da);
            cudaFree(db);
            cudaFree(dc);
        }
    }
    const float one = 1.0f, zero = 0.0f;
    float* d = nullptr;
    ASSERT_EQ(cudaMalloc(&d, 64 * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 2, 3, &one, d, CUDA_R_32F, 3, d, CUDA_R_32F, 3, &zero, d,
                           CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_INVALID_VALUE)
        << "lda below the rows of A";
    cudaFree(d);
    EXPECT_EQ(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
}

TEST(CudaEmulator, CublasOperandPastItsAllocationIsAnError) {
    ForgetErrors forget;
    cublasHandle_t h = nullptr;
    ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    float *a = nullptr, *c = nullptr;
    ASSERT_EQ(cudaMalloc(&a, 16 * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&c, 16 * sizeof(float)), cudaSuccess);
    const float one = 1.0f, zero = 0.0f;
    // 4x4 with a leading dimension of 8 reaches element 27 of a 16-float A.
    ASSERT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a, CUDA_R_32F, 8, a, CUDA_R_32F, 4, &zero, c,
                           CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
    const std::string msg = tandem::emu::last_error_message();
    EXPECT_NE(msg.find("operand A"), std::string::npos) << msg;
    cublasDestroy(h);
}

#else

TEST(CudaEmulator, OnlyInTheEmulatedBuild) { GTEST_SKIP() << "built without TANDEM_CUDA_EMULATE"; }

#endif
