// One block of a launch, run on the calling OS thread: its threads as
// fibers, its barrier, its warps' collectives, and the checks a hardware
// tool would make (emu.h states the rules). Internal to the emulator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels_cuda/emulator/emu.h"
#include "kernels_cuda/emulator/fiber.h"

namespace tandem::emu {

enum class RunState : uint8_t { Ready, AtBarrier, AtWarp, Done };

struct ThreadState {
    uint3 idx;
    int linear = 0;
    RunState state = RunState::Ready;
    bool started = false;
    Fiber fiber;
    uint64_t result = 0;  // a completed warp collective's value for this lane
    const char* wait_file = "";
    int wait_line = 0;
};

// A warp collective in progress: the lanes that arrived and their values.
struct WarpWait {
    bool open = false;
    WarpOp op = WarpOp::Shfl;
    unsigned mask = 0;
    unsigned arrived = 0;
    int width = 32;
    const char* file = "";
    int line = 0;
    uint64_t value[32] = {};
    int arg[32] = {};
    unsigned gen = 0;
    char token[2] = {};  // ThreadSanitizer's order of a __syncwarp, by generation
};

struct BlockState {
    uint3 block_idx;
    dim3 block_dim, grid_dim;
    KernelCall* call = nullptr;
    ThreadState* threads = nullptr;  // n of them
    int n = 0;
    WarpWait* warps = nullptr;
    int done = 0;
    int at_barrier = 0;
    unsigned barrier_gen = 0;
    const char* barrier_file = nullptr;
    int barrier_line = 0;
    std::string error;  // the first check that failed; the block stops there
    ThreadState* finished = nullptr;  // the thread that just ended, if any
    StackPool* stacks = nullptr;      // the OS thread's
    Fiber scheduler;
    // Addresses ThreadSanitizer orders threads on: the block's start and end,
    // __syncthreads by generation.
    char sync_token[4] = {};
};

// Runs block `b` of the launch to the end or to its first error (returned,
// "" when none). Thread-safe across OS threads: each has its own stacks.
std::string run_block(KernelCall* call, const dim3& grid, const dim3& block, const uint3& block_idx);

// Describes a launch site for error messages.
std::string site(const char* file, int line);

// runtime.cpp: the sticky error (printed once), and whether [p, p + bytes)
// lies in one device allocation.
void set_failure(const std::string& msg);
bool is_device_range(const void* p, size_t bytes);

}  // namespace tandem::emu
