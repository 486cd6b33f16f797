#include "runtime/grammar/gbnf_text.h"

#include "runtime/common/utf8.h"

#include <fmt/format.h>

namespace tandem::grammar {

std::string gbnf_literal(const std::string& text) {
    std::string out = "\"";
    for (const char c : text) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (u < 0x20 || u == 0x7F) {
            out += fmt::format("\\x{:02X}", u);
        } else {
            out += c;
        }
    }
    out += '"';
    return out;
}

namespace {

std::string class_char(uint32_t cp) {
    const bool alnum = (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    if (alnum) return std::string(1, static_cast<char>(cp));
    if (cp <= 0xFF) return fmt::format("\\x{:02X}", cp);
    if (cp <= 0xFFFF) return fmt::format("\\u{:04X}", cp);
    return fmt::format("\\U{:08X}", cp);
}

}  // namespace

std::string gbnf_class(const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
    std::string out = "[";
    for (const auto& [lo, hi] : ranges) {
        out += class_char(lo);
        if (hi > lo) {
            out += '-';
            out += class_char(hi);
        }
    }
    out += ']';
    return out;
}

std::string gbnf_times(const std::string& item, int64_t lo, int64_t hi) {
    if (hi < 0) return lo == 0 ? item + "*" : lo == 1 ? item + "+" : fmt::format("{}{{{},}}", item, lo);
    if (lo == hi) return lo == 1 ? item : fmt::format("{}{{{}}}", item, lo);
    if (lo == 0 && hi == 1) return item + "?";
    return fmt::format("{}{{{},{}}}", item, lo, hi);
}

std::string utf8(uint32_t cp) {
    std::string out;
    append_utf8(out, cp);
    return out;
}

}  // namespace tandem::grammar
