#include "runtime/grammar/number_range.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

namespace tandem::grammar {

namespace {

// Magnitudes are uint64: 10^19 - 1, the most a side can reach, fits.
using u64 = uint64_t;

constexpr u64 kDefaultCap = 9999999999999999;  // 16 digits, as the plain integer rule

size_t digits(u64 v) { return fmt::format("{}", v).size(); }

u64 all_nines(size_t n) {
    u64 v = 0;
    for (size_t i = 0; i < n; ++i) v = v * 10 + 9;
    return v;
}

std::string join_alts(const std::vector<std::string>& alts) {
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
}

std::string digit_class(char lo, char hi) {
    if (lo == hi) return fmt::format("\"{}\"", lo);
    return fmt::format("[{}-{}]", lo, hi);
}

std::string cat(const std::string& a, const std::string& b) { return a.empty() ? b : b.empty() ? a : a + " " + b; }

// The digit strings of one length from x to y (x <= y, same length):
// x's first digit then the rest from x's rest up, the digits between with
// anything after, y's first digit then up to y's rest.
std::string same_length(const std::string& x, const std::string& y) {
    if (x.empty()) return "";
    if (x[0] == y[0]) return cat(digit_class(x[0], x[0]), same_length(x.substr(1), y.substr(1)));
    const size_t rest = x.size() - 1;
    const bool x_low = x.find_first_not_of('0', 1) == std::string::npos;
    const bool y_high = y.find_first_not_of('9', 1) == std::string::npos;
    const std::string any_rest = rest ? fmt::format("[0-9]{{{}}}", rest) : "";
    std::vector<std::string> alts;
    if (!x_low) alts.push_back(cat(digit_class(x[0], x[0]), same_length(x.substr(1), std::string(rest, '9'))));
    const char mid_lo = x_low ? x[0] : static_cast<char>(x[0] + 1);
    const char mid_hi = y_high ? y[0] : static_cast<char>(y[0] - 1);
    if (mid_lo <= mid_hi) alts.push_back(cat(digit_class(mid_lo, mid_hi), any_rest));
    if (!y_high) alts.push_back(cat(digit_class(y[0], y[0]), same_length(std::string(rest, '0'), y.substr(1))));
    return join_alts(alts);
}

// The naturals a..b in decimal, no leading zeros ("" when a > b).
std::string naturals(u64 a, u64 b) {
    if (a > b) return "";
    std::vector<std::string> alts;
    for (size_t d = digits(a); d <= digits(b); ++d) {
        const u64 lo_d = d == 1 ? 0 : all_nines(d - 1) + 1;
        const u64 x = std::max(a, lo_d), y = std::min(b, all_nines(d));
        alts.push_back(same_length(fmt::format("{}", x), fmt::format("{}", y)));
    }
    return join_alts(alts);
}

// How far an unbounded side reaches: 16 digits, or as many as `other`.
u64 cap_beside(u64 other) { return std::max(kDefaultCap, all_nines(digits(other))); }

const char* kAnyFraction = R"(("." [0-9]{1,16})?)";
const char* kNonzeroFraction = R"("." "0"{0,15} [1-9] [0-9]{0,15})";
const char* kZeroFraction = R"(("." "0"{1,16})?)";

// Magnitudes u (an integer part and a fraction) from lo to hi, each bound
// inclusive or exclusive: the integer parts strictly between take any
// fraction; lo itself with a nonzero fraction when lo is exclusive; hi
// itself with a zero fraction (or none) when hi is inclusive.
std::vector<std::string> magnitudes(u64 lo, bool lo_excl, std::optional<u64> hi, bool hi_excl) {
    std::vector<std::string> alts;
    const u64 first = lo_excl ? lo + 1 : lo;
    const u64 last_any = hi ? (*hi == 0 ? 0 : *hi - 1) : cap_beside(lo);
    const bool any_ok = hi ? *hi > 0 && first <= *hi - 1 : true;
    if (any_ok && first <= last_any) alts.push_back(naturals(first, last_any) + " " + kAnyFraction);
    if (lo_excl && (!hi || lo + 1 <= *hi)) alts.push_back(naturals(lo, lo) + " " + kNonzeroFraction);
    if (hi && !hi_excl && *hi >= first) alts.push_back(naturals(*hi, *hi) + " " + kZeroFraction);
    return alts;
}

u64 magnitude(int64_t v) { return static_cast<u64>(v < 0 ? -v : v); }

}  // namespace

std::string integer_range_gbnf(std::optional<int64_t> lo, std::optional<int64_t> hi) {
    if (lo && hi && *lo > *hi) return "";
    std::vector<std::string> alts;
    // Negative: magnitudes from max(1, -hi) to -lo.
    if (!lo || *lo < 0) {
        const u64 from = hi && *hi < 0 ? magnitude(*hi) : 1;
        const u64 to = lo ? magnitude(*lo) : cap_beside(from);
        if (from <= to) alts.push_back("\"-\" " + naturals(from, to));
    }
    // Zero and up: from max(0, lo) to hi.
    if (!hi || *hi >= 0) {
        const u64 from = lo && *lo > 0 ? magnitude(*lo) : 0;
        const u64 to = hi ? magnitude(*hi) : cap_beside(from);
        if (from <= to) alts.push_back(naturals(from, to));
    }
    return alts.empty() ? "" : join_alts(alts);
}

std::string number_range_gbnf(std::optional<NumberBound> lo, std::optional<NumberBound> hi) {
    std::vector<std::string> alts;
    // Negative (v = -u, u > 0): u from max(-hi, 0) to -lo.
    if (!lo || lo->value < 0) {
        const bool below_zero = hi && hi->value <= 0;
        const u64 from = below_zero ? magnitude(hi->value) : 0;
        const bool from_excl = below_zero && hi->value < 0 ? hi->exclusive : true;  // u = 0 would be "-0"
        std::optional<u64> to;
        if (lo) to = magnitude(lo->value);
        for (const auto& m : magnitudes(from, from_excl, to, lo && lo->exclusive)) alts.push_back("\"-\" " + m);
    }
    // Zero and up: u = v from max(lo, 0) to hi.
    if (!hi || hi->value > 0 || (hi->value == 0 && !hi->exclusive)) {
        const bool above_zero = lo && lo->value >= 0;
        const u64 from = above_zero ? magnitude(lo->value) : 0;
        std::optional<u64> to;
        if (hi) to = magnitude(hi->value);
        for (const auto& m : magnitudes(from, above_zero && lo->exclusive, to, hi && hi->exclusive)) alts.push_back(m);
    }
    return alts.empty() ? "" : join_alts(alts);
}

}  // namespace tandem::grammar
