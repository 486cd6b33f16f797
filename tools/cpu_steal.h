// Time the hypervisor took from this VM's CPUs ("steal", /proc/stat): on a
// shared host it makes runs slow and noisy, so `tandem bench` reports it
// beside each test's speed.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tandem::tools {

// The aggregate "cpu" line's counters (clock ticks since boot): all time,
// the sum of its first eight fields (guest time is inside user), and steal.
struct CpuTimes {
    uint64_t total = 0;
    uint64_t steal = 0;
};

// From /proc/stat's text; nullopt when it has no "cpu" line with at least
// eight numbers (a kernel without steal accounting).
std::optional<CpuTimes> parse_cpu_times(std::string_view proc_stat);
// This machine's, from /proc/stat; nullopt off Linux or when unreadable.
std::optional<CpuTimes> read_cpu_times();
// Steal between two readings as a percentage of all CPU time between them
// (every CPU's); nullopt when no time passed or a counter went backwards.
std::optional<double> steal_percent(const CpuTimes& before, const CpuTimes& after);

}  // namespace tandem::tools
