#include "runtime/engine/host_weight_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "runtime/common/error.h"

namespace tandem {

std::optional<uint64_t> available_ram() {
    std::ifstream in("/proc/meminfo");
    std::string key, unit;
    uint64_t kib = 0;
    while (in >> key >> kib) {
        std::getline(in, unit);
        if (key == "MemAvailable:") return kib * 1024;
    }
    return std::nullopt;
}

HostWeightArena::~HostWeightArena() {
    for (const Chunk& c : chunks_) ::munmap(c.base, c.size);
}

const uint8_t* HostWeightArena::copy(std::span<const uint8_t> bytes, cpu::ThreadPool* pool) {
    uint8_t* dst = allocate(bytes.size());
    const auto piece = [&](int64_t begin, int64_t end) {
        std::memcpy(dst + begin, bytes.data() + begin, static_cast<size_t>(end - begin));
    };
    if (pool != nullptr) {
        pool->parallel_for(static_cast<int64_t>(bytes.size()), static_cast<int64_t>(kHugePage), piece);
    } else {
        piece(0, static_cast<int64_t>(bytes.size()));
    }
    copied_ += bytes.size();
    return dst;
}

uint8_t* HostWeightArena::allocate(size_t bytes) {
    constexpr size_t kAlign = 64;
    const size_t need = (bytes + kAlign - 1) / kAlign * kAlign;
    if (chunks_.empty() || chunks_.back().size - chunks_.back().used < need) {
        const size_t size = (std::max(need, kChunkBytes) + kHugePage - 1) / kHugePage * kHugePage;
        // Mapped one huge page larger, then trimmed to a 2 MiB boundary: a
        // huge page can only back an aligned 2 MiB range.
        void* raw = ::mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw == MAP_FAILED) {
            throw Error(fmt::format("cannot allocate {} bytes for the CPU layers' weights: {} (--no-host-copy "
                                    "multiplies them from the mapped file instead)",
                                    size, std::strerror(errno)));
        }
        auto* start = static_cast<uint8_t*>(raw);
        const auto addr = reinterpret_cast<uintptr_t>(start);
        const size_t head = (kHugePage - addr % kHugePage) % kHugePage;
        if (head > 0) ::munmap(start, head);
        if (kHugePage - head > 0) ::munmap(start + head + size, kHugePage - head);
        auto* base = start + head;
        // Advice only: a kernel without transparent huge pages, or with them
        // off, leaves 4 KiB pages, which still work.
#if defined(MADV_HUGEPAGE)
        (void)::madvise(base, size, MADV_HUGEPAGE);
#endif
        chunks_.push_back({base, size, 0});
    }
    Chunk& c = chunks_.back();
    uint8_t* dst = c.base + c.used;
    c.used += need;
    return dst;
}

}  // namespace tandem
