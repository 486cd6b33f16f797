// JSON Schema's `pattern` -> GBNF for the JSON text between a string's
// quotes: the texts whose decoded string the pattern matches.
//
// The pattern is read as ECMA-262 (JSON Schema's dialect) in the part where
// it and Python's `re` (what the `jsonschema` package runs) agree; where
// they differ the grammar keeps to what both accept, so whatever it allows
// is valid under either:
//  - literals; escapes \t \n \r \f \v \0 \xHH \uHHHH (no surrogates) and
//    any escaped punctuation (\. \\ \/ \- \( ...);
//  - `.` (any character but \n, \r, U+2028 and U+2029);
//  - \d [0-9], \w [A-Za-z0-9_], \s the white space both agree on; \D, \W,
//    \S the characters outside the other dialect's larger set too (\D
//    below U+0660, \W within ASCII); inside [^...] the larger sets;
//  - classes [a-z0-9_] and [^...] with ranges and escapes (\b in a class
//    is backspace);
//  - groups ( ) and (?: ), alternation |, quantifiers * + ? {n} {n,}
//    {n,m} up to kMaxRepeat, with a lazy `?` after them taken as greedy
//    (a grammar allows the same texts either way);
//  - `^` at the start and `$` at the end of the pattern or of one of its
//    top-level alternatives. A side without its anchor takes any JSON
//    string characters: a JSON Schema pattern is unanchored (matched as
//    re.search does; llama.cpp refuses such a pattern instead).
// Refused, saying what and where: backreferences (\1, \k<name>), lookahead
// and lookbehind ((?= (?! (?<= (?<!), named groups, inline flags (?i),
// \b and \B outside a class, \p{..}, \cX, \u{..}, anchors anywhere else,
// an unescaped `{` that does not start a quantifier, empty classes [] and
// [^], and unknown letter escapes.
//
// Characters that JSON escapes come out escaped: `"` as \", `\` as \\,
// control characters as \n \t \r \b \f or \u00XX, U+007F as \u007f.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "runtime/common/error.h"

namespace tandem::grammar {

// A pattern the converter refuses; the message says what and at which
// character.
class PatternError : public Error {
public:
    using Error::Error;
};

// Makes a rule of `body` and answers its name (the caller keeps the rules).
using RuleMaker = std::function<std::string(const std::string& body)>;

// A GBNF expression for the JSON text inside the quotes of the strings
// `pattern` matches; `any_char` names a rule for one JSON string character
// (the unanchored sides repeat it).
std::string pattern_to_gbnf(std::string_view pattern, const std::string& any_char, const RuleMaker& make_rule);

}  // namespace tandem::grammar
