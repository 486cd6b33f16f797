#include "tools/host_memory.h"

#include <fstream>
#include <sstream>
#include <string>

namespace tandem::tools {

std::optional<uint64_t> detect_host_ram() {
    std::ifstream in("/proc/meminfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("MemTotal:", 0) != 0) continue;
        std::istringstream ls(line.substr(9));
        uint64_t kib = 0;
        std::string unit;
        if (ls >> kib >> unit && unit == "kB" && kib > 0) return kib * 1024;
        return std::nullopt;
    }
    return std::nullopt;
}

}  // namespace tandem::tools
