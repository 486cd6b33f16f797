// Memory the process owns for the weight matrices the CPU multiplies,
// copied there byte for byte from the mapped file at load (same GGUF
// blocks: no second format). Why not multiply straight from the mapping: a
// decode step streams every CPU weight byte once, and on the project
// machine a 2-thread read of a 636 MB model file measured 20-27 GB/s from
// the mapping, 26-28 from an anonymous copy and 29-32 from a copy in 2 MiB
// pages (six alternating passes each): page-cache pages are scattered 4 KiB pages,
// each a TLB entry, while memory allocated here is asked for transparent
// huge pages (MADV_HUGEPAGE; where the kernel says no, it is still one
// contiguous allocation). llama.cpp's CPU backend ends up in the same
// place for its repacked types, which it copies into its own buffers.
//
// Chunks of at least kChunkBytes of address space, 2 MiB aligned; pages
// are only backed once written, so the unused tail of the last chunk costs
// no RAM beyond its last huge page.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kernels_cpu/thread_pool.h"

namespace tandem {

// MemAvailable of /proc/meminfo in bytes; nullopt where it cannot be read.
std::optional<uint64_t> available_ram();

class HostWeightArena {
public:
    static constexpr size_t kChunkBytes = size_t{256} << 20;
    static constexpr size_t kHugePage = size_t{2} << 20;

    HostWeightArena() = default;
    ~HostWeightArena();
    HostWeightArena(const HostWeightArena&) = delete;
    HostWeightArena& operator=(const HostWeightArena&) = delete;

    // A 64-byte aligned copy of `bytes`; valid for the arena's life. Throws
    // tandem::Error when the system refuses the memory. With a pool the
    // copy is split over its threads: most of its time is the kernel
    // faulting in and clearing fresh pages, which runs in parallel.
    const uint8_t* copy(std::span<const uint8_t> bytes, cpu::ThreadPool* pool = nullptr);
    // `bytes` of the same memory, uninitialized (zero until written): what
    // `bench --calibrate` reads, so the bandwidth it reports is that of the
    // memory the weights are in.
    uint8_t* allocate(size_t bytes);

    uint64_t bytes_copied() const { return copied_; }

private:
    struct Chunk {
        uint8_t* base = nullptr;
        size_t size = 0;
        size_t used = 0;
    };
    std::vector<Chunk> chunks_;
    uint64_t copied_ = 0;
};

}  // namespace tandem
