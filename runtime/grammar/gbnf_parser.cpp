// GBNF text -> Grammar. A hand-written recursive-descent parser: GBNF is
// llama.cpp's own notation and no Debian library reads it.
//
// Layout rules (a superset of llama.cpp's): whitespace, newlines and `#`
// comments may stand between any two symbols; a rule ends where the next
// `name ::=` starts, which must be on a new line.
#include "runtime/grammar/grammar.h"

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

#include "runtime/grammar/rule_checks.h"

namespace tandem::grammar {

bool CharClass::matches(uint32_t cp) const {
    bool in = false;
    for (const auto& [lo, hi] : ranges) {
        if (cp < lo) break;
        if (cp <= hi) {
            in = true;
            break;
        }
    }
    return in != negated;
}

bool CharClass::matches_any(uint32_t lo, uint32_t hi) const {
    if (!negated) {
        for (const auto& [a, b] : ranges) {
            if (a <= hi && b >= lo) return true;
        }
        return false;
    }
    // Negated: some code point of [lo, hi] lies outside every range.
    uint32_t cur = lo;
    for (const auto& [a, b] : ranges) {
        if (a > cur) return true;
        if (b >= cur) {
            if (b >= hi) return false;
            cur = b + 1;
        }
    }
    return cur <= hi;
}

namespace {

using Seq = std::vector<Element>;

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
// Bounds what one request's grammar may cost (repetitions make rules).
constexpr size_t kMaxRules = 100000;

class Parser {
public:
    explicit Parser(std::string_view text) : src_(text) {}

    std::shared_ptr<const Grammar> parse() {
        skip_space();
        if (at_end()) fail(pos_, "expected a rule (name ::= ...), found an empty grammar");
        while (!at_end()) {
            parse_rule();
            skip_space();
        }
        for (size_t id = 0; id < rules_.size(); ++id) {
            if (!defined_[id]) fail(first_use_[id], fmt::format("rule '{}' is used but never defined", names_[id]));
        }
        const auto root = ids_.find("root");
        if (root == ids_.end()) fail(src_.size(), "no rule named 'root' (the grammar's start)");
        check_no_left_recursion(rules_, names_);
        return flatten(root->second);
    }

private:
    [[noreturn]] void fail(size_t at, const std::string& what) const {
        throw GrammarError(fmt::format("grammar {}: {}", where(at), what));
    }

    std::string where(size_t at) const {
        size_t line = 1, col = 1;
        for (size_t i = 0; i < at && i < src_.size(); ++i) {
            if (src_[i] == '\n') {
                ++line;
                col = 1;
            } else if ((static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80) {
                ++col;
            }
        }
        return fmt::format("line {}, column {}", line, col);
    }

    std::string found(size_t at) const {
        if (at >= src_.size()) return "the end of the text";
        const char c = src_[at];
        if (c == '\n') return "a line break";
        return fmt::format("'{}'", src_.substr(at, 1));
    }

    bool at_end() const { return pos_ >= src_.size(); }
    char peek(size_t ahead = 0) const { return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0'; }

    // Spaces, tabs, line breaks and comments; says whether a line break was passed.
    bool skip_space() {
        bool newline = false;
        while (!at_end()) {
            const char c = peek();
            if (c == '#') {
                while (!at_end() && peek() != '\n') ++pos_;
            } else if (c == '\n' || c == '\r') {
                newline = true;
                ++pos_;
            } else if (c == ' ' || c == '\t') {
                ++pos_;
            } else {
                break;
            }
        }
        return newline;
    }

    static bool name_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    }

    size_t name_end(size_t from) const {
        size_t e = from;
        while (e < src_.size() && name_char(src_[e])) ++e;
        return e;
    }

    // Whether `name ::=` starts here (a rule definition).
    bool definition_ahead() const {
        size_t e = name_end(pos_);
        if (e == pos_) return false;
        while (e < src_.size() && (src_[e] == ' ' || src_[e] == '\t')) ++e;
        return src_.substr(e, 3) == "::=";
    }

    int32_t rule_id(const std::string& name, size_t used_at) {
        const auto [it, added] = ids_.emplace(name, static_cast<int32_t>(rules_.size()));
        if (added) new_rule(name, used_at);
        return it->second;
    }

    int32_t new_rule(std::string name, size_t at) {
        if (rules_.size() >= kMaxRules) fail(at, fmt::format("the grammar needs more than {} rules", kMaxRules));
        rules_.emplace_back();
        names_.push_back(std::move(name));
        defined_.push_back(false);
        first_use_.push_back(at);
        return static_cast<int32_t>(rules_.size() - 1);
    }

    int32_t anonymous_rule(const char* what, size_t at, std::vector<Seq> alts) {
        const int32_t id = new_rule(fmt::format("({} at {})", what, where(at)), at);
        rules_[static_cast<size_t>(id)] = std::move(alts);
        defined_[static_cast<size_t>(id)] = true;
        return id;
    }

    void parse_rule() {
        const size_t start = pos_;
        const size_t e = name_end(pos_);
        if (e == pos_) fail(pos_, fmt::format("expected a rule name (letters, digits, '-', '_'), found {}", found(pos_)));
        const std::string name(src_.substr(pos_, e - pos_));
        pos_ = e;
        while (peek() == ' ' || peek() == '\t') ++pos_;
        if (src_.substr(pos_, 3) != "::=") fail(pos_, fmt::format("expected '::=' after '{}', found {}", name, found(pos_)));
        pos_ += 3;
        const int32_t id = rule_id(name, start);
        if (defined_[static_cast<size_t>(id)]) fail(start, fmt::format("rule '{}' is defined twice", name));
        defined_[static_cast<size_t>(id)] = true;
        rules_[static_cast<size_t>(id)] = parse_alternatives(false);
    }

    std::vector<Seq> parse_alternatives(bool nested) {
        std::vector<Seq> alts;
        alts.push_back(parse_sequence(nested));
        while (peek() == '|') {
            ++pos_;
            alts.push_back(parse_sequence(nested));
        }
        return alts;
    }

    Seq parse_sequence(bool nested) {
        Seq seq;
        while (true) {
            const bool newline = skip_space();
            if (at_end() || peek() == '|' || (nested && peek() == ')')) break;
            if (definition_ahead()) {
                if (nested) fail(pos_, "expected ')' before the next rule");
                if (!newline) fail(pos_, "a new rule (name ::=) must start on its own line");
                break;
            }
            const size_t term_at = pos_;
            Seq unit = parse_term();
            skip_repetition(term_at, unit);
            seq.insert(seq.end(), unit.begin(), unit.end());
        }
        return seq;
    }

    Seq parse_term() {
        const char c = peek();
        if (c == '"') return parse_literal();
        if (c == '[') return {Element{Op::Char, parse_class()}};
        if (c == '.') {
            ++pos_;
            return {Element{Op::Char, add_class(CharClass{{}, true})}};
        }
        if (c == '(') {
            const size_t at = pos_++;
            std::vector<Seq> alts = parse_alternatives(true);
            if (peek() != ')') fail(pos_, fmt::format("expected ')' to close the group opened at {}, found {}", where(at),
                                                      found(pos_)));
            ++pos_;
            return {Element{Op::Rule, anonymous_rule("group", at, std::move(alts))}};
        }
        const size_t e = name_end(pos_);
        if (e == pos_) {
            fail(pos_, fmt::format("expected a string, a character class, '.', '(' or a rule name, found {}", found(pos_)));
        }
        const std::string name(src_.substr(pos_, e - pos_));
        const size_t at = pos_;
        pos_ = e;
        return {Element{Op::Rule, rule_id(name, at)}};
    }

    // One UTF-8 character of the grammar text.
    uint32_t next_code_point() {
        const auto b0 = static_cast<unsigned char>(peek());
        const int n = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
        if (n == 0 || pos_ + static_cast<size_t>(n) > src_.size()) fail(pos_, "expected UTF-8 text, found a bad byte");
        uint32_t cp = n == 1 ? b0 : b0 & (0xFFu >> (n + 1));
        for (int i = 1; i < n; ++i) {
            const auto b = static_cast<unsigned char>(src_[pos_ + static_cast<size_t>(i)]);
            if ((b & 0xC0) != 0x80) fail(pos_, "expected UTF-8 text, found a bad byte");
            cp = (cp << 6) | (b & 0x3F);
        }
        pos_ += static_cast<size_t>(n);
        return cp;
    }

    uint32_t hex_escape(int digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; ++i) {
            const char c = peek();
            const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0) fail(pos_, fmt::format("expected {} hex digits in the escape, found {}", digits, found(pos_)));
            v = v * 16 + static_cast<uint32_t>(d);
            ++pos_;
        }
        if (v > kMaxCodePoint) fail(pos_, fmt::format("the escape gives U+{:X}, past U+10FFFF", v));
        return v;
    }

    // A character of a literal or class, escapes decoded.
    uint32_t parse_char() {
        if (at_end()) fail(pos_, "expected a character, found the end of the text");
        if (peek() != '\\') return next_code_point();
        const size_t at = pos_++;
        const char c = peek();
        ++pos_;
        switch (c) {
            case 'n': return '\n';
            case 'r': return '\r';
            case 't': return '\t';
            case 'x': return hex_escape(2);
            case 'u': return hex_escape(4);
            case 'U': return hex_escape(8);
            case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '.': case '(': case ')':
                return static_cast<uint32_t>(c);
            default: break;
        }
        fail(at, fmt::format("unknown escape '\\{}' (known: \\n \\r \\t \\xHH \\uHHHH \\UHHHHHHHH \\\\ \\\" \\[ \\] \\- \\^)",
                             c == '\0' ? std::string("end") : std::string(1, c)));
    }

    Seq parse_literal() {
        const size_t at = pos_++;
        Seq seq;
        while (peek() != '"') {
            if (at_end() || peek() == '\n') fail(at, "unterminated string literal");
            const uint32_t cp = parse_char();
            seq.push_back(Element{Op::Char, add_class(CharClass{{{cp, cp}}, false})});
        }
        ++pos_;
        return seq;
    }

    int32_t parse_class() {
        const size_t at = pos_++;
        CharClass cls;
        if (peek() == '^') {
            cls.negated = true;
            ++pos_;
        }
        while (peek() != ']') {
            if (at_end()) fail(at, "unterminated character class (expected ']')");
            const uint32_t lo = parse_char();
            uint32_t hi = lo;
            if (peek() == '-' && peek(1) != ']' && pos_ + 1 < src_.size()) {
                ++pos_;
                const size_t hi_at = pos_;
                hi = parse_char();
                if (hi < lo) fail(hi_at, fmt::format("the range U+{:X}-U+{:X} ends before it starts", lo, hi));
            }
            cls.ranges.emplace_back(lo, hi);
        }
        ++pos_;
        return add_class(std::move(cls));
    }

    int32_t add_class(CharClass cls) {
        std::sort(cls.ranges.begin(), cls.ranges.end());
        std::vector<std::pair<uint32_t, uint32_t>> merged;
        for (const auto& r : cls.ranges) {
            if (!merged.empty() && r.first <= merged.back().second + 1) {
                merged.back().second = std::max(merged.back().second, r.second);
            } else {
                merged.push_back(r);
            }
        }
        cls.ranges = std::move(merged);
        classes_.push_back(std::move(cls));
        return static_cast<int32_t>(classes_.size() - 1);
    }

    int64_t parse_count() {
        const size_t at = pos_;
        int64_t v = 0;
        while (peek() >= '0' && peek() <= '9') {
            v = v * 10 + (peek() - '0');
            if (v > kMaxRepeat) fail(at, fmt::format("a repetition count above {} ", kMaxRepeat));
            ++pos_;
        }
        if (pos_ == at) fail(at, fmt::format("expected a number in the repetition, found {}", found(at)));
        return v;
    }

    void skip_inline_space() {
        while (peek() == ' ' || peek() == '\t') ++pos_;
    }

    // `unit` followed by * + ? {m} {m,} {m,n}: rewritten into plain rules.
    void skip_repetition(size_t term_at, Seq& unit) {
        int64_t lo = 1, hi = 1;
        const size_t before = pos_;
        skip_inline_space();  // llama.cpp allows "x *"
        const size_t at = pos_;
        const char c = peek();
        if (c == '*') {
            lo = 0, hi = -1;
        } else if (c == '+') {
            lo = 1, hi = -1;
        } else if (c == '?') {
            lo = 0, hi = 1;
        } else if (c == '{') {
            ++pos_;
            skip_inline_space();
            lo = parse_count();
            skip_inline_space();
            hi = lo;
            if (peek() == ',') {
                ++pos_;
                skip_inline_space();
                hi = peek() == '}' ? -1 : parse_count();
                skip_inline_space();
            }
            if (peek() != '}') fail(pos_, fmt::format("expected '}}' to close the repetition, found {}", found(pos_)));
            if (hi >= 0 && hi < lo) fail(at, fmt::format("the repetition {{{},{}}} has its maximum below its minimum", lo, hi));
        } else {
            pos_ = before;
            return;
        }
        ++pos_;
        unit = repeat(term_at, std::move(unit), lo, hi);
        // A repetition of a repetition ("a**") is refused, as in llama.cpp.
        skip_inline_space();
        const char n = peek();
        if (n == '*' || n == '+' || n == '?' || n == '{') fail(pos_, "a repetition cannot follow another; use a group");
    }

    Seq repeat(size_t at, Seq unit, int64_t lo, int64_t hi) {
        if (unit.size() != 1) unit = {Element{Op::Rule, anonymous_rule("group", at, {unit})}};
        Seq out;
        for (int64_t i = 0; i < lo; ++i) out.push_back(unit[0]);
        if (hi < 0) {
            // r ::= unit r | (empty): tail recursion, so the matcher's
            // stack does not grow with the count.
            const int32_t r = anonymous_rule("repetition", at, {});
            rules_[static_cast<size_t>(r)] = {Seq{unit[0], Element{Op::Rule, r}}, Seq{}};
            out.push_back(Element{Op::Rule, r});
        } else if (hi > lo) {
            // opt_k ::= unit opt_{k-1} | (empty), k = hi - lo optional copies.
            int32_t prev = anonymous_rule("repetition", at, {Seq{unit[0]}, Seq{}});
            for (int64_t k = 1; k < hi - lo; ++k) {
                prev = anonymous_rule("repetition", at, {Seq{unit[0], Element{Op::Rule, prev}}, Seq{}});
            }
            out.push_back(Element{Op::Rule, prev});
        }
        return out;
    }

    std::shared_ptr<const Grammar> flatten(int32_t root) {
        auto g = std::make_shared<Grammar>();
        g->root = root;
        g->rule_names = names_;
        g->classes = std::move(classes_);
        for (const auto& alts : rules_) {
            g->rule_start.push_back(static_cast<int32_t>(g->elements.size()));
            for (size_t a = 0; a < alts.size(); ++a) {
                g->elements.insert(g->elements.end(), alts[a].begin(), alts[a].end());
                g->elements.push_back(Element{a + 1 < alts.size() ? Op::Alt : Op::End, 0});
            }
        }
        return g;
    }

    std::string_view src_;
    size_t pos_ = 0;
    std::vector<std::vector<Seq>> rules_;
    std::vector<std::string> names_;
    std::vector<bool> defined_;
    std::vector<size_t> first_use_;
    std::unordered_map<std::string, int32_t> ids_;
    std::vector<CharClass> classes_;
};

}  // namespace

std::shared_ptr<const Grammar> compile_grammar(std::string_view text) { return Parser(text).parse(); }

}  // namespace tandem::grammar
