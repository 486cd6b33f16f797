// ASCII-only text helpers for names the user types (type names, presets):
// no locale, so "IQ4_xs" and "iq4_XS" compare equal on every system.
#pragma once

#include <algorithm>
#include <string_view>

namespace tandem {

inline char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

inline bool iequals_ascii(std::string_view a, std::string_view b) {
    return a.size() == b.size() &&
           std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return ascii_lower(x) == ascii_lower(y); });
}

}  // namespace tandem
