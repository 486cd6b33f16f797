// Lexing the Jinja subset with jinja2's whitespace rules as transformers
// configures them (trim_blocks, lstrip_blocks, keep_trailing_newline off):
// text comes out already trimmed, comments are dropped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::chat::jinja {

struct SourcePos {
    int line = 1;
    int col = 1;
};

// "line 3, column 7"
std::string describe(SourcePos pos);
// Throws tandem::Error "jinja syntax error at line L, column C: MSG".
[[noreturn]] void syntax_error(SourcePos pos, const std::string& msg);

enum class TokenKind : uint8_t {
    Text,        // template text between tags
    VarBegin,    // {{
    VarEnd,      // }}
    BlockBegin,  // {%
    BlockEnd,    // %}
    Name,
    String,      // text holds the decoded value
    Int,
    Float,
    Op,          // operators and punctuation: text holds it
    Eof,
};

struct Token {
    TokenKind kind = TokenKind::Eof;
    std::string text;
    int64_t int_value = 0;
    double float_value = 0;
    SourcePos pos;
};

// What jinja2 does to a source before lexing: line ends (\r\n, \r and the
// other separators of Python's str.splitlines) become \n and one trailing
// newline is dropped.
std::string normalize_source(std::string_view source);

// Tokens of a normalized source, ending with Eof. Throws tandem::Error
// naming line and column for an unterminated tag, comment or string, or a
// character that starts no token.
std::vector<Token> lex(std::string_view source);

// A token as a message shows it: "'endfor'", "end of template", "'%}'".
std::string describe(const Token& t);

}  // namespace tandem::chat::jinja
