// The CUDA emulator: what kernels_cuda/*.cu and the CUDA device need of
// CUDA, for host C++ (TANDEM_CUDA_EMULATE=ON). The sources compile
// unchanged against include/cuda_runtime.h and include/cublas_v2.h; only
// the launch syntax `k<<<g, b, s, st>>>(args)` is rewritten at build time to
// `k % ::tandem::emu::launch(g, b, s, st)(args)` (rewrite_launch.cmake).
//
// Execution model, stated once:
// - A block's threads are fibers on one OS thread (fiber.h). A fiber runs
//   until it waits at a barrier (__syncthreads, __syncwarp) or a warp
//   collective (shuffle, vote), or ends; the block's scheduler then runs the
//   next ready fiber, in order of thread index.
// - __syncthreads completes when every thread of the block has arrived at
//   the same call; a thread that ends while others wait, or threads waiting
//   at different calls, are launch errors (checks.md: what a hardware tool
//   reports). A warp collective completes when every lane of its mask has
//   arrived at the same call with the same mask; a calling lane outside its
//   mask, a mask lane that ends or waits elsewhere, or a source lane outside
//   the mask is a launch error.
// - A launch error is sticky for the process, as on a GPU: it is printed
//   once, and every later runtime call returns cudaErrorLaunchFailure.
// - Each stream is a worker thread that runs its work in order. Work is
//   deferred: a stream runs only when something waits for it (a synchronize,
//   an event wait, a blocking copy, another stream's dependency), so a
//   missing synchronisation gives a wrong result every time, not by luck.
//   TANDEM_CUDA_EMULATE_EAGER=1 runs work as soon as it is queued.
// - Device memory is one heap allocation per cudaMalloc (AddressSanitizer
//   sees every out-of-bounds access), counted against the device's
//   capacity: TANDEM_CUDA_EMULATE_VRAM (bytes, or with KiB/MiB/GiB),
//   default 8 GiB, or set_capacity (the plugin passes --vram).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace tandem::emu {

struct uint3 {
    unsigned x = 0, y = 0, z = 0;
};

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

using StreamHandle = struct Stream*;

// ---- what a running thread sees
struct ThreadState;
struct BlockState;
// Each GPU thread runs on a fiber stack of kFiberStackBytes aligned to its
// size, whose first bytes hold a StackHeader: the running thread finds its
// indices and block from its stack pointer, with no thread-local lookup
// (every threadIdx, every shuffle).
#if defined(__SANITIZE_ADDRESS__) || defined(TANDEM_CUDA_EMULATE_ASAN)
#define TANDEM_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TANDEM_EMU_ASAN 1
#endif
#endif
#ifdef TANDEM_EMU_ASAN
inline constexpr size_t kFiberStackBytes = size_t{512} << 10;  // AddressSanitizer's redzones
#else
inline constexpr size_t kFiberStackBytes = size_t{64} << 10;
#endif
inline constexpr uint64_t kStackMagic = 0x54616e64656d4755ull;

struct StackHeader {
    uint64_t magic = 0;
    ThreadState* thread = nullptr;
    BlockState* block = nullptr;
    const uint3* thread_idx = nullptr;
    const uint3* block_idx = nullptr;
    const dim3* block_dim = nullptr;
    const dim3* grid_dim = nullptr;
};

namespace detail {
[[noreturn]] void outside_kernel(const char* what);
// The header of the stack the caller runs on (valid only on a fiber: check
// the magic).
inline StackHeader& here() {
    uintptr_t sp;
    asm volatile("mov %%rsp, %0" : "=r"(sp));
    return *reinterpret_cast<StackHeader*>(sp & ~static_cast<uintptr_t>(kFiberStackBytes - 1));
}
inline StackHeader& in_kernel(const char* what) {
    StackHeader& h = here();
    if (h.magic != kStackMagic) outside_kernel(what);
    return h;
}
inline const uint3& thread_idx() { return *in_kernel("threadIdx").thread_idx; }
inline const uint3& block_idx() { return *in_kernel("blockIdx").block_idx; }
inline const dim3& block_dim() { return *in_kernel("blockDim").block_dim; }
inline const dim3& grid_dim() { return *in_kernel("gridDim").grid_dim; }
}  // namespace detail

// ---- launching
// The type-erased kernel call of one launch: `invoke` runs the kernel for
// the current thread (its indices are set by the scheduler).
struct KernelCall {
    virtual ~KernelCall() = default;
    virtual void invoke() = 0;
    // Pointer arguments (for the check that they point into device memory).
    virtual int pointer_count() const = 0;
    virtual const void* pointer(int i) const = 0;
};

struct Config {
    dim3 grid, block;
    size_t shared = 0;
    StreamHandle stream = nullptr;
    const char* file = "";  // the launch site
    int line = 0;
};

// Queues `call` on the config's stream (deferred) after checking the
// configuration and the pointer arguments; a bad configuration is the
// launch's error (cudaGetLastError), nothing runs.
void submit(const Config& c, KernelCall* call);

template <class... A>
struct Pending {
    Config config;
    std::tuple<A...> args;
};

struct LaunchConfig {
    Config config;
    template <class... A>
    Pending<std::decay_t<A>...> operator()(A&&... a) const {
        return {config, std::tuple<std::decay_t<A>...>(std::forward<A>(a)...)};
    }
};

template <class G, class B>
LaunchConfig launch(const char* file, int line, G grid, B block, size_t shared = 0, void* stream = nullptr) {
    return {Config{dim3(grid), dim3(block), shared, static_cast<StreamHandle>(stream), file, line}};
}

template <class... P>
class Call final : public KernelCall {
public:
    template <class... A>
    Call(void (*k)(P...), std::tuple<A...>&& a)
        : kernel_(k), args_(std::apply([](auto&&... v) { return std::tuple<P...>(std::move(v)...); }, a)) {
        collect(std::index_sequence_for<P...>{});
    }
    void invoke() override { std::apply(kernel_, args_); }
    int pointer_count() const override { return n_ptr_; }
    const void* pointer(int i) const override { return ptrs_[i]; }

private:
    template <size_t... I>
    void collect(std::index_sequence<I...>) {
        (add_pointer(std::get<I>(args_)), ...);
    }
    template <class T>
    void add_pointer(const T& v) {
        if constexpr (std::is_pointer_v<T>) {
            if (n_ptr_ < kMaxPtr) ptrs_[n_ptr_++] = static_cast<const void*>(v);
        }
    }
    static constexpr int kMaxPtr = 16;
    void (*kernel_)(P...);
    std::tuple<P...> args_;
    const void* ptrs_[kMaxPtr] = {};
    int n_ptr_ = 0;
};

template <class... P, class... A>
void operator%(void (*kernel)(P...), Pending<A...>&& p) {
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
    submit(p.config, new Call<P...>(kernel, std::move(p.args)));
}

// ---- inside a kernel
void syncthreads(const char* file, int line);
void syncwarp(unsigned mask, const char* file, int line);
// A warp collective: every lane of `mask` contributes `value`; lane `lane`
// receives the value of lane src_of(lane) (shuffles) or a ballot.
enum class WarpOp : uint8_t { Shfl, ShflUp, ShflDown, ShflXor, Ballot, All, Any, Sync, MmaS8 };
unsigned active_mask();
uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file, int line);

// mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32, D = A B + C, as one warp
// collective of all 32 lanes (PTX's fragments: lane = 4 g + t; a[0] holds
// A[g][4t..4t+3], a[1] A[g+8][4t..4t+3], b B[4t..4t+3][g] as signed bytes;
// c[0], c[1] are C[g][2t], C[g][2t+1] and c[2], c[3] rows g+8). Each lane
// passes its fragments' address; the last to arrive computes every lane's.
struct MmaS8Fragments {
    int32_t* c;
    uint32_t a[2];
    uint32_t b;
};
void mma_s8_m16n8k16(MmaS8Fragments& f, const char* file, int line);

template <class T>
uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move values of up to 8 bytes");
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T>
T from_bits(uint64_t b) {
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}

// ---- the emulator's own controls (tests, the plugin)
// Device count (TANDEM_CUDA_EMULATE_DEVICES, default 1) and capacity
// (TANDEM_CUDA_EMULATE_VRAM, default 8 GiB, until set_capacity).
int device_count();
size_t default_capacity();
void set_capacity(int device, size_t bytes);
size_t capacity(int device);
// Bytes allocated on `device` now, and at most since the process started.
size_t used_bytes(int device);
size_t peak_bytes(int device);
void reset_peak(int device);  // the peak starts again from the bytes held now
// Calls so far that make the host wait for the device, or copy through
// pageable host memory (which CUDA stages or waits for): cudaMemcpy,
// cudaMemcpyAsync with a pageable side, cudaDeviceSynchronize,
// cudaStreamSynchronize, cudaEventSynchronize. Tests count a decode step's.
uint64_t host_waits();
void host_waited();  // the cudart subset counts a wait
// The sticky launch error's description ("" when none); clear_error forgets
// it (for the emulator's own tests of its checks).
std::string last_error_message();
void clear_error();

}  // namespace tandem::emu
