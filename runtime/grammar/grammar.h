// Grammars for constrained generation, written in llama.cpp's GBNF: rules
// `name ::= alternatives`, the start rule `root`, alternation `|`,
// sequences, groups `( )`, repetition `* + ? {m} {m,} {m,n}`, string
// literals with escapes, character classes `[a-z]` / `[^"\\]`, `.` (any
// character) and `#` comments. compile_grammar() turns the text into the
// flat form the matcher (matcher.h) walks.
//
// The flat form: each rule is its alternatives one after the other, each
// closed by Alt (another follows) or End (the rule's last); an alternative
// is a sequence of Char (a character class) and Rule (a reference) elements.
// Repetitions and groups become rules of their own, so the matcher only
// knows characters, references and alternatives.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/common/error.h"

namespace tandem::grammar {

// Code point ranges (inclusive, sorted, not overlapping). A negated class
// matches the code points in none of them; `.` is the negated empty class.
struct CharClass {
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    bool negated = false;
    bool matches(uint32_t cp) const;
    // Whether some code point in [lo, hi] matches: a partial UTF-8
    // sequence can still complete to an accepted character.
    bool matches_any(uint32_t lo, uint32_t hi) const;
};

enum class Op : uint8_t {
    End,   // closes a rule's last alternative
    Alt,   // closes an alternative; the next one follows
    Rule,  // a reference: value is the rule's id
    Char,  // one character of class `value`
};

struct Element {
    Op op = Op::End;
    int32_t value = 0;
};

struct Grammar {
    std::vector<Element> elements;
    std::vector<int32_t> rule_start;      // rule id -> its first element
    std::vector<std::string> rule_names;  // for messages; groups and repetitions say where they stand
    std::vector<CharClass> classes;
    int32_t root = 0;
    bool closes(int32_t pos) const {
        const Op op = elements[static_cast<size_t>(pos)].op;
        return op == Op::End || op == Op::Alt;
    }
};

// Bad grammar text, with where: "line 3, column 7: expected ...".
class GrammarError : public Error {
public:
    using Error::Error;
};

// The most a repetition's count may be ({m,n} with larger numbers is
// refused): bounds the flat grammar a request can make.
inline constexpr int64_t kMaxRepeat = 10000;

// Parses and checks GBNF text: every referenced rule defined, `root`
// present, no rule able to reach itself before consuming a character (left
// recursion, or a repetition of something that can be empty: the matcher
// would expand it forever). Throws GrammarError saying what and where.
std::shared_ptr<const Grammar> compile_grammar(std::string_view text);

}  // namespace tandem::grammar
