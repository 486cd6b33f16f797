// minimum, maximum, exclusiveMinimum, exclusiveMaximum and multipleOf in
// the JSON Schema converter (runtime/grammar/number_range.h): the grammar
// takes exactly the numbers within the bounds (checked one by one against
// an exact comparison), random texts it makes lie within them, and what
// cannot be held exactly is refused.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/grammar/json_schema.h"
#include "tests/grammar_sample.h"

namespace tandem::grammar {
namespace {

using ojson = nlohmann::ordered_json;
using testing::grammar_takes;

// -1, 0 or 1 as the number `text` (digits, an optional fraction, no
// exponent) is below, at or above the integer b; exact.
int compare(const std::string& text, int64_t b) {
    const bool neg = text[0] == '-';
    const size_t dot = text.find('.');
    const std::string whole = text.substr(neg, dot == std::string::npos ? std::string::npos : dot - neg);
    const bool frac = dot != std::string::npos && text.find_first_not_of('0', dot + 1) != std::string::npos;
    const __int128 i = static_cast<__int128>(std::stoull(whole));
    // |v| = i + f against |b| on v's side.
    const __int128 target = neg ? -static_cast<__int128>(b) : b;
    const int c = i != target ? (i > target ? 1 : -1) : (frac ? 1 : 0);
    return neg ? -c : c;
}

std::shared_ptr<const Grammar> compile(const ojson& schema) { return compile_json_schema(schema); }

std::string refusal(const ojson& schema) {
    try {
        json_schema_to_gbnf(schema);
    } catch (const SchemaError& e) {
        return e.what();
    }
    return "";
}

TEST(NumberRange, IntegerRangesTakeExactlyTheirIntegers) {
    const std::pair<int64_t, int64_t> ranges[] = {{0, 0},   {-5, 5},      {1, 100},  {-123, -7}, {7, 1234}, {99, 101},
                                                  {-1000, -999}, {10, 19}, {0, 9},    {-1, 0},    {-250, 1}};
    for (const auto& [lo, hi] : ranges) {
        const auto g = compile({{"type", "integer"}, {"minimum", lo}, {"maximum", hi}});
        for (int64_t i = lo - 150; i <= hi + 150; ++i) {
            EXPECT_EQ(grammar_takes(g, std::to_string(i)), lo <= i && i <= hi) << lo << ".." << hi << ": " << i;
        }
        EXPECT_FALSE(grammar_takes(g, "-0")) << lo << ".." << hi;
        EXPECT_FALSE(grammar_takes(g, "01")) << lo << ".." << hi;
        EXPECT_FALSE(grammar_takes(g, std::to_string(lo) + ".0")) << lo << ".." << hi;
    }
    // One side only: the other reaches 16 digits.
    const auto above = compile({{"type", "integer"}, {"minimum", 5}});
    for (const char* t : {"5", "6", "1000000", "9999999999999999"}) EXPECT_TRUE(grammar_takes(above, t)) << t;
    for (const char* t : {"4", "0", "-6", "99999999999999999"}) EXPECT_FALSE(grammar_takes(above, t)) << t;
    const auto below = compile({{"type", "integer"}, {"maximum", -3}});
    for (const char* t : {"-3", "-4", "-9999999999999999"}) EXPECT_TRUE(grammar_takes(below, t)) << t;
    for (const char* t : {"-2", "0", "3"}) EXPECT_FALSE(grammar_takes(below, t)) << t;
    const auto big = compile({{"type", "integer"}, {"minimum", 100000000000000000}});  // 18 digits
    EXPECT_TRUE(grammar_takes(big, "100000000000000000"));
    EXPECT_TRUE(grammar_takes(big, "999999999999999999"));
    EXPECT_FALSE(grammar_takes(big, "99999999999999999"));
}

TEST(NumberRange, IntegerBoundsRoundInward) {
    const auto g = compile({{"type", "integer"}, {"exclusiveMinimum", 2.5}, {"maximum", 9.9}, {"exclusiveMaximum", 9}});
    for (int i = -5; i <= 15; ++i) EXPECT_EQ(grammar_takes(g, std::to_string(i)), i >= 3 && i <= 8) << i;
    const auto h = compile({{"type", "integer"}, {"minimum", -0.5}, {"exclusiveMinimum", -3}, {"exclusiveMaximum", 0.5}});
    for (int i = -5; i <= 5; ++i) EXPECT_EQ(grammar_takes(h, std::to_string(i)), i == 0) << i;
    // Type lists and no type: the bounds hold the numbers.
    const auto either = compile({{"type", {"integer", "null"}}, {"minimum", 1}, {"maximum", 2}});
    EXPECT_TRUE(grammar_takes(either, "null"));
    EXPECT_TRUE(grammar_takes(either, "2"));
    EXPECT_FALSE(grammar_takes(either, "3"));
    const auto untyped = compile({{"maximum", 0}});
    EXPECT_TRUE(grammar_takes(untyped, "-1.5"));
    EXPECT_FALSE(grammar_takes(untyped, "1"));
    EXPECT_FALSE(grammar_takes(untyped, "\"a\""));
    // multipleOf 1: whole numbers.
    const auto whole = compile({{"type", "number"}, {"multipleOf", 1}, {"minimum", 0}});
    EXPECT_TRUE(grammar_takes(whole, "3"));
    EXPECT_FALSE(grammar_takes(whole, "3.5"));
    EXPECT_FALSE(grammar_takes(whole, "-3"));
}

TEST(NumberRange, NumberRangesTakeExactlyTheirNumbers) {
    std::vector<std::string> texts;
    for (const std::string whole : {"0", "1", "2", "3", "4", "10", "123"}) {
        for (const std::string frac : {"", ".0", ".000", ".5", ".05", ".999", ".0001", ".1234567890123456"}) {
            texts.push_back(whole + frac);
            texts.push_back("-" + whole + frac);
        }
    }
    const std::optional<int64_t> los[] = {std::nullopt, -2, 0, 1};
    const std::optional<int64_t> his[] = {std::nullopt, 0, 3};
    int ranges = 0;
    for (const auto& lo : los) {
        for (const auto& hi : his) {
            for (const bool lo_ex : {false, true}) {
                for (const bool hi_ex : {false, true}) {
                    if ((!lo && lo_ex) || (!hi && hi_ex) || (!lo && !hi)) continue;
                    ojson schema = {{"type", "number"}};
                    if (lo) schema[lo_ex ? "exclusiveMinimum" : "minimum"] = *lo;
                    if (hi) schema[hi_ex ? "exclusiveMaximum" : "maximum"] = *hi;
                    const bool empty = lo && hi && (*lo > *hi || (*lo == *hi && (lo_ex || hi_ex)));
                    if (empty) {
                        EXPECT_NE(refusal(schema).find("no number lies within the bounds"), std::string::npos) << schema.dump();
                        continue;
                    }
                    ++ranges;
                    const auto g = compile(schema);
                    for (const std::string& t : texts) {
                        const int c_lo = lo ? compare(t, *lo) : 1, c_hi = hi ? compare(t, *hi) : -1;
                        const bool inside = (lo_ex ? c_lo > 0 : c_lo >= 0) && (hi_ex ? c_hi < 0 : c_hi <= 0);
                        // "-0", "-0.0": zero is written "0".
                        const bool negative_zero = t[0] == '-' && t.find_first_not_of("-0.") == std::string::npos;
                        EXPECT_EQ(grammar_takes(g, t), inside && !negative_zero) << schema.dump() << ": " << t;
                    }
                    EXPECT_FALSE(grammar_takes(g, "1e0")) << schema.dump();
                }
            }
        }
    }
    EXPECT_EQ(ranges, 27);  // the loop above ran every non-empty combination
}

TEST(NumberRange, RandomTextsLieWithinTheBounds) {
    struct Case {
        ojson schema;
        std::optional<int64_t> lo, hi;
        bool lo_ex, hi_ex;
    };
    const Case cases[] = {
        {{{"type", "integer"}, {"minimum", -1000000000000000000}, {"maximum", 1000000000000000000}},
         -1000000000000000000, 1000000000000000000, false, false},
        {{{"type", "integer"}, {"minimum", 123456789012}}, 123456789012, std::nullopt, false, false},
        {{{"type", "integer"}, {"minimum", -77}, {"maximum", 1234567}}, -77, 1234567, false, false},
        {{{"type", "number"}, {"exclusiveMinimum", -40}, {"maximum", 7}}, -40, 7, true, false},
        {{{"type", "number"}, {"minimum", 0}, {"exclusiveMaximum", 1}}, 0, 1, false, true},
        {{{"type", "number"}, {"exclusiveMaximum", -3}}, std::nullopt, -3, false, true},
    };
    std::mt19937 rng(7);
    for (const Case& c : cases) {
        const auto g = compile(c.schema);
        for (int i = 0; i < 300; ++i) {
            const auto text = testing::random_text(*g, rng);
            ASSERT_TRUE(text.has_value());
            // Without the whitespace the rule allows after a value.
            const std::string t = text->substr(0, text->find_first_of(" \n"));
            ASSERT_TRUE(ojson::parse(t, nullptr, false).is_number()) << t;
            if (c.lo) {
                EXPECT_TRUE(c.lo_ex ? compare(t, *c.lo) > 0 : compare(t, *c.lo) >= 0) << c.schema.dump() << ": " << t;
            }
            if (c.hi) {
                EXPECT_TRUE(c.hi_ex ? compare(t, *c.hi) < 0 : compare(t, *c.hi) <= 0) << c.schema.dump() << ": " << t;
            }
        }
    }
}

TEST(NumberRange, WhatCannotBeHeldExactlyIsRefused) {
    EXPECT_NE(refusal({{"type", "number"}, {"minimum", 0.5}}).find("a number's bounds must be whole numbers"),
              std::string::npos);
    EXPECT_NE(refusal({{"type", "integer"}, {"multipleOf", 2}}).find("only multipleOf 1"), std::string::npos);
    EXPECT_NE(refusal({{"type", "number"}, {"multipleOf", 0.01}}).find("only multipleOf 1"), std::string::npos);
    EXPECT_NE(refusal({{"type", "integer"}, {"minimum", 0}, {"exclusiveMinimum", true}}).find("draft 4"), std::string::npos);
    EXPECT_NE(refusal({{"type", "integer"}, {"maximum", 1e19}}).find("beyond +-1e18"), std::string::npos);
    EXPECT_NE(refusal({{"type", "integer"}, {"maximum", "3"}}).find("expected a number"), std::string::npos);
    EXPECT_NE(refusal({{"type", "integer"}, {"minimum", 5}, {"maximum", 4}}).find("no integer lies within"),
              std::string::npos);
    EXPECT_NE(refusal({{"type", "integer"}, {"exclusiveMinimum", 1}, {"exclusiveMaximum", 2}}).find("no integer"),
              std::string::npos);
    std::string path;
    try {
        json_schema_to_gbnf(ojson{{"type", "object"}, {"properties", {{"n", {{"type", "number"}, {"maximum", 2.5}}}}}});
    } catch (const SchemaError& e) {
        path = e.path();
    }
    EXPECT_EQ(path, "properties.n.maximum");
}

}  // namespace
}  // namespace tandem::grammar
