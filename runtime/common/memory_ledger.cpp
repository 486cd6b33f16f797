#include "runtime/common/memory_ledger.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <utility>

#include <fmt/format.h>

namespace tandem {

std::string_view memory_category_name(MemoryCategory c) {
    constexpr std::array<std::string_view, kMemoryCategoryCount> kNames = {"weights", "kv", "compute", "staging",
                                                                           "overhead"};
    return kNames.at(static_cast<size_t>(c));
}

MemoryLedger::MemoryLedger(std::string device, std::optional<uint64_t> capacity)
    : device_(std::move(device)), capacity_(capacity) {}

uint64_t MemoryLedger::total() const {
    uint64_t t = 0;
    for (uint64_t u : used_) t += u;
    return t;
}

void MemoryLedger::reserve(MemoryCategory c, uint64_t bytes, std::string_view what) {
    const uint64_t now = total();
    if (capacity_ && (bytes > *capacity_ || now > *capacity_ - bytes)) {
        const uint64_t available = *capacity_ > now ? *capacity_ - now : 0;
        throw OutOfDeviceMemory(fmt::format("out of memory on {}: {} needs {} ({} bytes) for {}, {} ({} bytes) of {} "
                                            "available",
                                            device_, what, format_bytes(bytes), bytes, memory_category_name(c),
                                            format_bytes(available), available, format_bytes(*capacity_)));
    }
    used_[static_cast<size_t>(c)] += bytes;
    peak_ = std::max(peak_, now + bytes);
}

void MemoryLedger::release(MemoryCategory c, uint64_t bytes) {
    uint64_t& u = used_[static_cast<size_t>(c)];
    TANDEM_CHECK(bytes <= u, "ledger release of more than was reserved");
    u -= bytes;
}

std::string MemoryLedger::summary() const {
    std::string s = device_ + ":";
    for (int i = 0; i < kMemoryCategoryCount; ++i) {
        const auto c = static_cast<MemoryCategory>(i);
        s += fmt::format(" {} {}", memory_category_name(c), format_bytes(used(c)));
    }
    s += fmt::format(", total {}", format_bytes(total()));
    if (capacity_) s += fmt::format(" of {}", format_bytes(*capacity_));
    return s;
}

LedgerReservation::LedgerReservation(MemoryLedger& ledger, MemoryCategory c, uint64_t bytes, std::string_view what)
    : ledger_(&ledger), category_(c), bytes_(bytes) {
    ledger.reserve(c, bytes, what);
}

LedgerReservation::LedgerReservation(LedgerReservation&& o) noexcept
    : ledger_(std::exchange(o.ledger_, nullptr)), category_(o.category_), bytes_(std::exchange(o.bytes_, 0)) {}

LedgerReservation& LedgerReservation::operator=(LedgerReservation&& o) noexcept {
    if (this != &o) {
        if (ledger_) ledger_->release(category_, bytes_);
        ledger_ = std::exchange(o.ledger_, nullptr);
        category_ = o.category_;
        bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
}

LedgerReservation::~LedgerReservation() {
    if (ledger_) ledger_->release(category_, bytes_);
}

uint64_t parse_size(std::string_view text) {
    std::string_view s = text;
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    size_t i = 0;
    while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
    const std::string number(s.substr(0, i));
    std::string unit(s.substr(i));
    while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
    for (auto& ch : unit) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    double value = 0.0;
    const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
    if (number.empty() || ec != std::errc() || ptr != number.data() + number.size() || !(value >= 0.0)) {
        throw Error(fmt::format("expected a size such as 8GiB, 512MiB or 4096, found '{}'", text));
    }
    struct Unit {
        std::string_view name;
        double factor;
    };
    constexpr Unit kUnits[] = {{"", 1.0},       {"b", 1.0},           {"k", 1024.0},        {"kib", 1024.0},
                               {"kb", 1e3},     {"m", 1048576.0},     {"mib", 1048576.0},   {"mb", 1e6},
                               {"g", 1073741824.0}, {"gib", 1073741824.0}, {"gb", 1e9},     {"t", 1099511627776.0},
                               {"tib", 1099511627776.0}, {"tb", 1e12}};
    for (const auto& u : kUnits) {
        if (unit == u.name) {
            const double bytes = std::floor(value * u.factor);
            if (bytes > 1.8e19) throw Error(fmt::format("size '{}' is too large", text));
            return static_cast<uint64_t>(bytes);
        }
    }
    throw Error(fmt::format("size '{}': unknown unit '{}' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", text, unit));
}

std::string format_bytes(uint64_t bytes) {
    const double b = static_cast<double>(bytes);
    if (b >= 1073741824.0) return fmt::format("{:.2f} GiB", b / 1073741824.0);
    if (b >= 1048576.0) return fmt::format("{:.1f} MiB", b / 1048576.0);
    if (b >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
    return fmt::format("{} B", bytes);
}

}  // namespace tandem
