// Internal to the tokenizer: UTF-8 decoding that never fails and the
// Unicode classes (\p{L}, \p{N}, \p{P}, \s...) that pre-tokenizer regexes
// are written against. std::regex knows none of these classes, so the
// pre-tokenizers in pretokenize.cpp match them by hand with classify().
#pragma once

#include "runtime/common/utf8.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::tokenizer_detail {

// Major Unicode general category (first letter of unicodedata.category).
// Keep in sync with CATEGORY in scripts/gen_unicode_tables.py.
enum class CpCategory : uint8_t {
    Other = 0,  // C*: controls, formats, private use, surrogates, unassigned
    Letter = 1,
    Mark = 2,
    Number = 3,
    Punctuation = 4,
    Symbol = 5,
    Separator = 6,
};

struct CpClass {
    CpCategory category = CpCategory::Other;
    bool whitespace = false;  // the White_Space property: what \s matches

    bool letter() const { return category == CpCategory::Letter; }
    bool number() const { return category == CpCategory::Number; }
    bool punctuation() const { return category == CpCategory::Punctuation; }
};

// Generated table (unicode_tables.cpp): entries (first code point << 4) |
// flags, sorted; flags bits 0-2 are the CpCategory, bit 3 White_Space.
extern const uint32_t kCodepointRanges[];
extern const size_t kCodepointRangeCount;

CpClass classify(uint32_t cp);

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// One decoded character and where its bytes are in the source text.
struct Codepoint {
    uint32_t cp = 0;
    uint32_t offset = 0;  // byte offset in the decoded text
    uint32_t size = 0;    // bytes it occupies (1..4)
};

// Decodes UTF-8. A byte that does not start a valid sequence becomes one
// U+FFFD of size 1, so every byte of the input belongs to exactly one
// Codepoint and byte spans can be recovered exactly (the tokenizers then
// encode the original bytes, not the replacement character).
std::vector<Codepoint> decode_utf8(std::string_view text);

// Bytes of the character that starts with `lead`, as SentencePiece and the
// reference tokenizer count them: 1 for ASCII and for stray continuation
// bytes, 2/3/4 from the lead byte's high bits. Callers clamp to the bytes
// left.
inline size_t utf8_sequence_length(uint8_t lead) {
    static constexpr uint8_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return kLengths[lead >> 4];
}

using tandem::append_utf8;  // runtime/common/utf8.h

}  // namespace tandem::tokenizer_detail
