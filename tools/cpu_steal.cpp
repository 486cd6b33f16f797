#include "tools/cpu_steal.h"

#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

namespace tandem::tools {

std::optional<CpuTimes> parse_cpu_times(std::string_view text) {
    // The first line that starts with "cpu " (the per-CPU lines are "cpu0"...).
    size_t at = 0;
    while (at < text.size()) {
        const size_t end = std::min(text.find('\n', at), text.size());
        std::string_view line = text.substr(at, end - at);
        at = end + 1;
        if (line.substr(0, 4) != "cpu ") continue;
        line.remove_prefix(4);
        uint64_t fields[8] = {};
        for (uint64_t& f : fields) {
            while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
            const auto [next, ec] = std::from_chars(line.data(), line.data() + line.size(), f);
            if (ec != std::errc() || next == line.data()) return std::nullopt;
            line.remove_prefix(static_cast<size_t>(next - line.data()));
        }
        CpuTimes t;
        for (uint64_t f : fields) t.total += f;
        t.steal = fields[7];
        return t;
    }
    return std::nullopt;
}

std::optional<CpuTimes> read_cpu_times() {
    std::ifstream in("/proc/stat");
    if (!in) return std::nullopt;
    std::ostringstream text;
    text << in.rdbuf();
    return parse_cpu_times(text.str());
}

std::optional<double> steal_percent(const CpuTimes& before, const CpuTimes& after) {
    if (after.total <= before.total || after.steal < before.steal) return std::nullopt;
    return 100.0 * static_cast<double>(after.steal - before.steal) / static_cast<double>(after.total - before.total);
}

}  // namespace tandem::tools
