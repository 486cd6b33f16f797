// Exact GBNF for the JSON numbers in an interval (JSON Schema's minimum,
// maximum, exclusiveMinimum, exclusiveMaximum), digit by digit: every text
// the expression matches is a number inside the bounds, written without
// leading zeros, without an exponent and never as "-0".
//
// Integers: the integers lo..hi (both inclusive; the converter rounds
// fractional and exclusive bounds to them). Numbers: integer-valued bounds,
// each inclusive or exclusive, and an optional fraction of up to 16 digits.
// A side without a bound reaches 16 digits (the unbounded `integer` rule's
// limit) or the other bound's digits if that is more.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tandem::grammar {

// Bounds must lie within +-kMaxBound: the digits then fit an int64.
inline constexpr int64_t kMaxBound = 1000000000000000000;  // 1e18

struct NumberBound {
    int64_t value = 0;
    bool exclusive = false;
};

// The integers in [lo, hi] ("" when there is none).
std::string integer_range_gbnf(std::optional<int64_t> lo, std::optional<int64_t> hi);

// The numbers between lo and hi ("" when there is none).
std::string number_range_gbnf(std::optional<NumberBound> lo, std::optional<NumberBound> hi);

}  // namespace tandem::grammar
