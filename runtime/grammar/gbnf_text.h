// Small pieces of GBNF text shared by the converters that write grammars
// (json_schema.cpp, regex_gbnf.cpp, number_range.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tandem::grammar {

// A GBNF string literal of `text` (UTF-8 kept; quotes, backslashes and
// control characters escaped).
std::string gbnf_literal(const std::string& text);

// A GBNF character class of code point ranges (sorted, inclusive): ASCII
// letters and digits as they are, every other character as an escape, so
// that none can end the class or form a range by accident.
std::string gbnf_class(const std::vector<std::pair<uint32_t, uint32_t>>& ranges);

// `item` repeated lo..hi times (hi < 0: no bound), in GBNF's notation;
// `item` must be one term (a name, a class, a literal or a group).
std::string gbnf_times(const std::string& item, int64_t lo, int64_t hi);

// The UTF-8 bytes of code point `cp`.
std::string utf8(uint32_t cp);

}  // namespace tandem::grammar
