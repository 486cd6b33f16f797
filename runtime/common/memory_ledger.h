// The one place that records memory: every allocation the runtime makes on
// a device (the host included) is reserved here by category first, so
// `--verbose` can print where the bytes went and the planner can be checked
// against what really happened. A device with a capacity refuses a
// reservation that would exceed it, with the same error a CUDA
// out-of-memory becomes.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/common/error.h"

namespace tandem {

enum class MemoryCategory : int {
    Weights,
    KvCache,
    Compute,   // activations and scratch of one micro-batch
    Staging,   // pinned host buffers for uploads
    Overhead,  // contexts, libraries, bookkeeping
    Count,
};
inline constexpr int kMemoryCategoryCount = static_cast<int>(MemoryCategory::Count);
std::string_view memory_category_name(MemoryCategory c);  // "weights", "kv", ...

// Raised when a device cannot hold a reservation. Names the device, the
// purpose, the bytes asked and the bytes still available.
class OutOfDeviceMemory : public Error {
public:
    using Error::Error;
};

class MemoryLedger {
public:
    // capacity: nullopt for "whatever the OS gives" (the host).
    MemoryLedger(std::string device, std::optional<uint64_t> capacity);

    // Throws OutOfDeviceMemory when capacity would be exceeded.
    void reserve(MemoryCategory c, uint64_t bytes, std::string_view what);
    void release(MemoryCategory c, uint64_t bytes);

    const std::string& device() const { return device_; }
    std::optional<uint64_t> capacity() const { return capacity_; }
    uint64_t used(MemoryCategory c) const { return used_[static_cast<size_t>(c)]; }
    uint64_t total() const;
    uint64_t peak() const { return peak_; }
    // "cpu2: weights 12.3 MiB, kv 1.0 MiB, ... total 13.4 MiB of 16.0 MiB"
    std::string summary() const;

private:
    std::string device_;
    std::optional<uint64_t> capacity_;
    std::array<uint64_t, kMemoryCategoryCount> used_{};
    uint64_t peak_ = 0;
};

// A reservation released when it goes out of scope.
class LedgerReservation {
public:
    LedgerReservation() = default;
    LedgerReservation(MemoryLedger& ledger, MemoryCategory c, uint64_t bytes, std::string_view what);
    LedgerReservation(LedgerReservation&& o) noexcept;
    LedgerReservation& operator=(LedgerReservation&& o) noexcept;
    LedgerReservation(const LedgerReservation&) = delete;
    LedgerReservation& operator=(const LedgerReservation&) = delete;
    ~LedgerReservation();

private:
    MemoryLedger* ledger_ = nullptr;
    MemoryCategory category_ = MemoryCategory::Overhead;
    uint64_t bytes_ = 0;
};

// "8GiB", "512MiB", "1.5GB", "4096" (bytes). Throws tandem::Error naming
// the text when it is not a size.
uint64_t parse_size(std::string_view text);
std::string format_bytes(uint64_t bytes);  // "12.3 MiB"

}  // namespace tandem
