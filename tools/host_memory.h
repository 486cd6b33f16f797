// The host's RAM, for plans that check the CPU share of a model against it
// when the user did not say (--host-ram). Read by the tools, not the
// planner, which stays a pure function of its inputs.
#pragma once

#include <cstdint>
#include <optional>

namespace tandem::tools {

// MemTotal of /proc/meminfo in bytes; nullopt where it cannot be read.
std::optional<uint64_t> detect_host_ram();

}  // namespace tandem::tools
