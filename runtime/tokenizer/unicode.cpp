#include "runtime/tokenizer/unicode.h"

#include <algorithm>

namespace tandem::tokenizer_detail {

CpClass classify(uint32_t cp) {
    // Last entry whose first code point is <= cp. Entry 0 starts at U+0000,
    // so one always exists for a valid code point.
    const uint32_t key = (cp << 4) | 0xF;
    const uint32_t* end = kCodepointRanges + kCodepointRangeCount;
    const uint32_t* it = std::upper_bound(kCodepointRanges, end, key);
    if (it == kCodepointRanges || cp > 0x10FFFF) return CpClass{};
    const uint32_t flags = *(it - 1) & 0xF;
    return CpClass{static_cast<CpCategory>(flags & 0x7), (flags & 0x8) != 0};
}

std::vector<Codepoint> decode_utf8(std::string_view text) {
    std::vector<Codepoint> out;
    out.reserve(text.size());
    const auto* s = reinterpret_cast<const uint8_t*>(text.data());
    const size_t n = text.size();
    size_t i = 0;
    while (i < n) {
        const uint8_t b = s[i];
        size_t len = 0;
        uint32_t cp = 0;
        if (b < 0x80) {
            len = 1;
            cp = b;
        } else if ((b & 0xE0) == 0xC0) {
            len = 2;
            cp = b & 0x1F;
        } else if ((b & 0xF0) == 0xE0) {
            len = 3;
            cp = b & 0x0F;
        } else if ((b & 0xF8) == 0xF0) {
            len = 4;
            cp = b & 0x07;
        }
        bool ok = len > 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; ++k) {
            if ((s[i + k] & 0xC0) != 0x80) ok = false;
            else cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (ok && cp > 0x10FFFF) ok = false;
        if (!ok) {
            out.push_back({kReplacementChar, static_cast<uint32_t>(i), 1});
            ++i;
            continue;
        }
        out.push_back({cp, static_cast<uint32_t>(i), static_cast<uint32_t>(len)});
        i += len;
    }
    return out;
}

}  // namespace tandem::tokenizer_detail
