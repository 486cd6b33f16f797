#include "runtime/chat/jinja_lexer.h"

#include "runtime/common/utf8.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "runtime/common/error.h"

namespace tandem::chat::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

class Lexer {
public:
    explicit Lexer(std::string_view src) : src_(src) {
        line_starts_.push_back(0);
        for (size_t i = 0; i < src.size(); ++i)
            if (src[i] == '\n') line_starts_.push_back(i + 1);
    }

    std::vector<Token> run() {
        size_t pos = 0;
        bool line_starting = true;  // the previous match ended a line (lstrip_blocks applies)
        while (pos < src_.size()) {
            size_t p = pos;
            while ((p = src_.find('{', p)) != std::string_view::npos) {
                if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) break;
                ++p;
            }
            if (p == std::string_view::npos) {
                emit_text(src_.substr(pos), pos);
                break;
            }
            const char kind = src_[p + 1];
            size_t after = p + 2;
            char sign = 0;
            if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];

            std::string_view text = src_.substr(pos, p - pos);
            if (sign == '-') {
                while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
            } else if (sign != '+' && kind != '{') {
                const size_t nl = text.rfind('\n');
                const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
                if (l_pos > 0 || line_starting) {
                    const std::string_view tail = text.substr(l_pos);
                    if (!tail.empty() && std::all_of(tail.begin(), tail.end(), is_space)) text = text.substr(0, l_pos);
                }
            }
            emit_text(text, pos);

            if (kind == '#') pos = skip_comment(p, after, line_starting);
            else if (kind == '%' && is_raw_begin(after)) pos = lex_raw(p, after, line_starting);
            else pos = lex_tag(p, after, kind == '{', line_starting);
        }
        tokens_.push_back(Token{TokenKind::Eof, "", 0, 0, at(src_.size())});
        return std::move(tokens_);
    }

private:
    SourcePos at(size_t offset) const {
        const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) - 1;
        return SourcePos{static_cast<int>(it - line_starts_.begin()) + 1, static_cast<int>(offset - *it) + 1};
    }

    void emit_text(std::string_view text, size_t offset) {
        if (!text.empty()) tokens_.push_back(Token{TokenKind::Text, std::string(text), 0, 0, at(offset)});
    }

    // After a "-%}" style end: skip all whitespace. Returns the new position
    // and sets line_starting from the last character consumed.
    size_t skip_ws_after(size_t pos, bool& line_starting) const {
        size_t q = pos;
        while (q < src_.size() && is_space(src_[q])) ++q;
        line_starting = q > pos && src_[q - 1] == '\n';
        return q;
    }

    size_t skip_comment(size_t open, size_t content, bool& line_starting) {
        const size_t close = src_.find("#}", content);
        if (close == std::string_view::npos) syntax_error(at(open), "expected '#}' closing the comment opened here, found end of template");
        const char before = close > content ? src_[close - 1] : 0;
        size_t pos = close + 2;
        line_starting = false;
        if (before == '-') return skip_ws_after(pos, line_starting);
        if (before != '+' && pos < src_.size() && src_[pos] == '\n') {
            line_starting = true;
            ++pos;
        }
        return pos;
    }

    bool is_raw_begin(size_t p) const {
        while (p < src_.size() && is_space(src_[p])) ++p;
        if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && is_name_char(src_[p + 3]))) return false;
        p += 3;
        while (p < src_.size() && is_space(src_[p])) ++p;
        if (p < src_.size() && src_[p] == '-') ++p;
        return src_.compare(p, 2, "%}") == 0;
    }

    // {% raw %}...{% endraw %}: the content is text, as is.
    size_t lex_raw(size_t open, size_t p, bool& line_starting) {
        p = src_.find("%}", p);
        size_t content = p + 2;
        if (src_[p - 1] == '-') content = skip_ws_after(content, line_starting);
        for (size_t q = content; (q = src_.find("{%", q)) != std::string_view::npos; q += 2) {
            size_t r = q + 2;
            const char sign = r < src_.size() && (src_[r] == '-' || src_[r] == '+') ? src_[r++] : 0;
            while (r < src_.size() && is_space(src_[r])) ++r;
            if (src_.compare(r, 6, "endraw") != 0) continue;
            r += 6;
            while (r < src_.size() && is_space(src_[r])) ++r;
            const bool strip_after = r < src_.size() && src_[r] == '-';
            if (strip_after) ++r;
            if (src_.compare(r, 2, "%}") != 0) continue;
            std::string_view text = src_.substr(content, q - content);
            if (sign == '-')
                while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
            emit_text(text, content);
            r += 2;
            line_starting = false;
            if (strip_after) return skip_ws_after(r, line_starting);
            if (r < src_.size() && src_[r] == '\n') {
                line_starting = true;
                ++r;
            }
            return r;
        }
        syntax_error(at(open), "expected '{% endraw %}' closing the raw block opened here, found end of template");
    }

    size_t lex_tag(size_t open, size_t pos, bool is_var, bool& line_starting) {
        tokens_.push_back(Token{is_var ? TokenKind::VarBegin : TokenKind::BlockBegin, is_var ? "{{" : "{%", 0, 0, at(open)});
        std::vector<char> brackets;
        const char end_char = is_var ? '}' : '%';
        while (true) {
            while (pos < src_.size() && is_space(src_[pos])) ++pos;
            if (pos >= src_.size())
                syntax_error(at(open), std::string("expected '") + (is_var ? "}}" : "%}") +
                                           "' closing the tag opened here, found end of template");
            if (brackets.empty()) {
                const bool minus = src_[pos] == '-' && src_.compare(pos + 1, 1, std::string(1, end_char)) == 0 &&
                                   src_.compare(pos + 2, 1, "}") == 0;
                const bool plus = !is_var && src_[pos] == '+' && src_.compare(pos + 1, 2, "%}") == 0;
                const bool plain = src_[pos] == end_char && src_.compare(pos + 1, 1, "}") == 0;
                if (minus || plus || plain) {
                    const size_t end_pos = pos;
                    pos += (minus || plus) ? 3 : 2;
                    tokens_.push_back(Token{is_var ? TokenKind::VarEnd : TokenKind::BlockEnd, is_var ? "}}" : "%}", 0, 0, at(end_pos)});
                    line_starting = false;
                    if (minus) return skip_ws_after(pos, line_starting);
                    if (!is_var && !plus && pos < src_.size() && src_[pos] == '\n') {
                        line_starting = true;
                        ++pos;
                    }
                    return pos;
                }
            }
            pos = lex_expr_token(pos, brackets);
        }
    }

    size_t lex_expr_token(size_t pos, std::vector<char>& brackets) {
        const size_t start = pos;
        const char c = src_[pos];
        if (is_name_start(c)) {
            while (pos < src_.size() && is_name_char(src_[pos])) ++pos;
            tokens_.push_back(Token{TokenKind::Name, std::string(src_.substr(start, pos - start)), 0, 0, at(start)});
            return pos;
        }
        if (is_digit(c)) return lex_number(pos);
        if (c == '\'' || c == '"') return lex_string(pos);
        static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
        for (auto op : kTwo) {
            if (src_.compare(pos, 2, op) == 0) {
                tokens_.push_back(Token{TokenKind::Op, std::string(op), 0, 0, at(start)});
                return pos + 2;
            }
        }
        static constexpr std::string_view kOne = "+-/*%~[](){}<>=.:|,;";
        if (kOne.find(c) == std::string_view::npos)
            syntax_error(at(start), std::string("expected an expression token, found unexpected character '") + c + "'");
        if (c == '(' || c == '[' || c == '{') brackets.push_back(c);
        if (c == ')' || c == ']' || c == '}') {
            const char want = c == ')' ? '(' : c == ']' ? '[' : '{';
            if (brackets.empty() || brackets.back() != want)
                syntax_error(at(start), std::string("unexpected '") + c + "'" +
                                            (brackets.empty() ? "" : std::string(", expected the closing bracket of '") + brackets.back() + "'"));
            brackets.pop_back();
        }
        tokens_.push_back(Token{TokenKind::Op, std::string(1, c), 0, 0, at(start)});
        return pos + 1;
    }

    size_t lex_number(size_t pos) {
        const size_t start = pos;
        while (pos < src_.size() && (is_digit(src_[pos]) || src_[pos] == '_')) ++pos;
        const bool after_dot = start > 0 && src_[start - 1] == '.';  // x.0.1 is item 0, then item 1
        bool is_float = false;
        if (!after_dot && pos + 1 < src_.size() && src_[pos] == '.' && is_digit(src_[pos + 1])) {
            is_float = true;
            ++pos;
            while (pos < src_.size() && (is_digit(src_[pos]) || src_[pos] == '_')) ++pos;
        }
        if (!after_dot && pos < src_.size() && (src_[pos] == 'e' || src_[pos] == 'E')) {
            size_t q = pos + 1;
            if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
            if (q < src_.size() && is_digit(src_[q])) {
                is_float = true;
                pos = q;
                while (pos < src_.size() && is_digit(src_[pos])) ++pos;
            }
        }
        std::string digits;
        for (char ch : src_.substr(start, pos - start))
            if (ch != '_') digits += ch;
        Token t{is_float ? TokenKind::Float : TokenKind::Int, digits, 0, 0, at(start)};
        if (is_float) t.float_value = std::strtod(digits.c_str(), nullptr);
        else {
            errno = 0;
            const unsigned long long v = std::strtoull(digits.c_str(), nullptr, 10);
            if (errno != 0 || v > static_cast<unsigned long long>(INT64_MAX))
                syntax_error(at(start), "integer literal " + digits + " does not fit in 64 bits");
            t.int_value = static_cast<int64_t>(v);
        }
        tokens_.push_back(std::move(t));
        return pos;
    }

    // Python's unicode-escape rules for the body of a string literal.
    size_t lex_string(size_t pos) {
        const size_t start = pos;
        const char quote = src_[pos++];
        std::string out;
        while (true) {
            if (pos >= src_.size()) syntax_error(at(start), "expected the closing quote of the string that starts here, found end of template");
            const char c = src_[pos++];
            if (c == quote) break;
            if (c != '\\') {
                out += c;
                continue;
            }
            if (pos >= src_.size()) continue;
            const char e = src_[pos++];
            switch (e) {
            case '\n': break;
            case '\\': out += '\\'; break;
            case '\'': out += '\''; break;
            case '"': out += '"'; break;
            case 'a': out += '\a'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'n': out += '\n'; break;
            case 'r': out += '\r'; break;
            case 't': out += '\t'; break;
            case 'v': out += '\v'; break;
            case 'x':
            case 'u':
            case 'U': {
                const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                uint32_t cp = 0;
                for (size_t k = 0; k < n; ++k) {
                    const char h = pos + k < src_.size() ? src_[pos + k] : 0;
                    const int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
                    if (d < 0) syntax_error(at(pos - 2), std::string("expected ") + std::to_string(n) + " hex digits after '\\" + e + "' in a string");
                    cp = cp * 16 + static_cast<uint32_t>(d);
                }
                if (cp > 0x10ffff) syntax_error(at(pos - 2), "escape names a code point past U+10FFFF");
                pos += n;
                append_utf8(out, cp);
                break;
            }
            default:
                if (e >= '0' && e <= '7') {
                    uint32_t cp = static_cast<uint32_t>(e - '0');
                    for (int k = 0; k < 2 && pos < src_.size() && src_[pos] >= '0' && src_[pos] <= '7'; ++k)
                        cp = cp * 8 + static_cast<uint32_t>(src_[pos++] - '0');
                    append_utf8(out, cp);
                } else {
                    out += '\\';
                    out += e;
                }
            }
        }
        tokens_.push_back(Token{TokenKind::String, std::move(out), 0, 0, at(start)});
        return pos;
    }

    std::string_view src_;
    std::vector<size_t> line_starts_;
    std::vector<Token> tokens_;
};

}  // namespace

std::string describe(SourcePos pos) { return "line " + std::to_string(pos.line) + ", column " + std::to_string(pos.col); }

void syntax_error(SourcePos pos, const std::string& msg) {
    throw Error("jinja syntax error at " + describe(pos) + ": " + msg);
}

std::string normalize_source(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c == '\r') {
            if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
            out += '\n';
        } else if (c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) {
            out += '\n';
        } else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) {
            out += '\n';  // U+0085
            ++i;
        } else if (c == 0xe2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
                   (static_cast<unsigned char>(s[i + 2]) == 0xa8 || static_cast<unsigned char>(s[i + 2]) == 0xa9)) {
            out += '\n';  // U+2028, U+2029
            i += 2;
        } else {
            out += static_cast<char>(c);
        }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

std::vector<Token> lex(std::string_view source) { return Lexer(source).run(); }

std::string describe(const Token& t) {
    switch (t.kind) {
    case TokenKind::Eof: return "end of template";
    case TokenKind::Text: return "template text";
    case TokenKind::String: return "string '" + t.text + "'";
    default: return "'" + t.text + "'";
    }
}

}  // namespace tandem::chat::jinja
