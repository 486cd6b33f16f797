#include "runtime/grammar/regex_gbnf.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "runtime/grammar/gbnf_text.h"
#include "runtime/grammar/grammar.h"
#include "runtime/grammar/matcher.h"

namespace tandem::grammar {

namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

constexpr uint32_t kLast = 0x10FFFF;
// Groups nest at most this deep (the parser and the emitter recurse).
constexpr int kMaxDepth = 64;

Ranges normalized(Ranges r) {
    std::sort(r.begin(), r.end());
    Ranges out;
    for (const auto& x : r) {
        if (!out.empty() && x.first <= out.back().second + 1) {
            out.back().second = std::max(out.back().second, x.second);
        } else {
            out.push_back(x);
        }
    }
    return out;
}

Ranges complement(const Ranges& r) {
    Ranges out;
    uint32_t next = 0;
    for (const auto& [lo, hi] : normalized(r)) {
        if (lo > next) out.emplace_back(next, lo - 1);
        next = hi + 1;
    }
    if (next <= kLast) out.emplace_back(next, kLast);
    return out;
}

Ranges unite(Ranges a, const Ranges& b) {
    a.insert(a.end(), b.begin(), b.end());
    return normalized(std::move(a));
}

Ranges intersect(const Ranges& a, const Ranges& b) { return complement(unite(complement(a), complement(b))); }

bool contains(const Ranges& r, uint32_t cp) {
    return std::any_of(r.begin(), r.end(), [cp](const auto& x) { return x.first <= cp && cp <= x.second; });
}

// \d \w \s and their negations: `small` is what both dialects match (used
// as it is), `large` what either matches (used inside [^...], so that the
// complement is small again). Python's are Unicode-wide; ECMAScript's \d
// and \w are ASCII.
struct Shorthand {
    Ranges small, large;
};

Shorthand shorthand(uint32_t c) {
    const Ranges digit = {{'0', '9'}};
    const Ranges word = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    const Ranges space_both = {{0x09, 0x0D}, {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
                               {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}};
    const Ranges space_either = unite(space_both, {{0x1C, 0x1F}, {0x85, 0x85}, {0xFEFF, 0xFEFF}});
    switch (c) {
    case 'd': return {digit, unite(digit, {{0x660, kLast}})};  // U+0660: the first non-ASCII digit
    case 'D': return {intersect(complement(digit), {{0, 0x65F}}), complement(digit)};
    case 'w': return {word, unite(word, {{0x80, kLast}})};
    case 'W': return {intersect(complement(word), {{0, 0x7F}}), complement(word)};
    case 's': return {space_both, space_either};
    default: return {complement(space_either), complement(space_both)};  // 'S'
    }
}

struct Node {
    enum class Kind { Set, Seq, Alt, Repeat };
    Kind kind = Kind::Seq;
    Ranges set;
    std::vector<Node> kids;
    int64_t lo = 1, hi = 1;
};

Node set_node(Ranges r) {
    Node n;
    n.kind = Node::Kind::Set;
    n.set = std::move(r);
    return n;
}

Node list_node(Node::Kind kind, std::vector<Node> kids) {
    Node n;
    n.kind = kind;
    n.kids = std::move(kids);
    return n;
}

Node repeat_node(Node kid, int64_t lo, int64_t hi) {
    Node n = list_node(Node::Kind::Repeat, {std::move(kid)});
    n.lo = lo;
    n.hi = hi;
    return n;
}

// One top-level alternative and its anchors.
struct Branch {
    bool start = false, end = false;
    Node body;
};

// A class item: a character, or a shorthand (\d ...).
struct ClassAtom {
    uint32_t cp = 0;
    uint32_t shorthand = 0;
};

class Parser {
public:
    explicit Parser(std::vector<uint32_t> cps) : cps_(std::move(cps)) {}

    std::vector<Branch> parse() {
        std::vector<Branch> out;
        while (true) {
            Branch b;
            b.body = sequence(&b, 0);
            out.push_back(std::move(b));
            if (at_end()) return out;
            ++pos_;  // '|'
        }
    }

private:
    [[noreturn]] void fail(const std::string& what) const {
        throw PatternError(fmt::format("pattern: {} (at character {})", what, std::min(pos_, cps_.size()) + 1));
    }

    bool at_end() const { return pos_ >= cps_.size(); }
    uint32_t peek(size_t ahead = 0) const { return pos_ + ahead < cps_.size() ? cps_[pos_ + ahead] : 0; }
    bool peek_is(uint32_t c, size_t ahead = 0) const { return pos_ + ahead < cps_.size() && cps_[pos_ + ahead] == c; }

    Node alternation(int depth) {
        std::vector<Node> alts{sequence(nullptr, depth)};
        while (peek_is('|')) {
            ++pos_;
            alts.push_back(sequence(nullptr, depth));
        }
        return alts.size() == 1 ? std::move(alts[0]) : list_node(Node::Kind::Alt, std::move(alts));
    }

    // A sequence up to '|', ')' or the end; `top`: a top-level alternative,
    // where ^ may open it and $ close it.
    Node sequence(Branch* top, int depth) {
        Node seq;
        if (top && peek_is('^')) {
            top->start = true;
            ++pos_;
        }
        while (!at_end() && !peek_is('|')) {
            const uint32_t c = peek();
            if (c == ')') {
                if (top) fail("a ')' that closes no group");
                break;
            }
            if (c == '$') {
                if (top && (pos_ + 1 == cps_.size() || peek_is('|', 1))) {
                    top->end = true;
                    ++pos_;
                    break;
                }
                fail("'$' is supported only at the end of the pattern or of a top-level alternative");
            }
            if (c == '^') fail("'^' is supported only at the start of the pattern or of a top-level alternative");
            Node atom = parse_atom(depth);
            seq.kids.push_back(quantified(std::move(atom)));
        }
        return seq;
    }

    Node parse_atom(int depth) {
        const uint32_t c = cps_[pos_++];
        switch (c) {
        case '(': return group(depth);
        case '[': return set_node(char_class());
        case '.': return set_node(complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
        case '\\': {
            const ClassAtom a = escape(false);
            return set_node(a.shorthand ? shorthand(a.shorthand).small : Ranges{{a.cp, a.cp}});
        }
        case '*': case '+': case '?': --pos_; fail(fmt::format("'{}' with nothing to repeat", static_cast<char>(c)));
        case '{': --pos_; fail("a '{' that starts no quantifier {n}, {n,} or {n,m} (write \\{ for the character)");
        default: return set_node({{c, c}});
        }
    }

    Node group(int depth) {
        if (depth + 1 > kMaxDepth) fail(fmt::format("groups nested deeper than {}", kMaxDepth));
        const size_t open = pos_ - 1;
        if (peek_is('?')) {
            if (peek_is(':', 1)) {
                pos_ += 2;
            } else if (peek_is('=', 1) || peek_is('!', 1)) {
                fail("lookahead (?= (?! is not supported");
            } else if (peek_is('<', 1) && (peek_is('=', 2) || peek_is('!', 2))) {
                fail("lookbehind (?<= (?<! is not supported");
            } else if (peek_is('<', 1) || peek_is('P', 1)) {
                fail("named groups are not supported (use ( ) or (?: ))");
            } else {
                fail("inline flags and other (? groups are not supported (only (?: ))");
            }
        }
        Node inner = alternation(depth + 1);
        if (!peek_is(')')) {
            pos_ = open;
            fail("a '(' that is never closed");
        }
        ++pos_;
        return inner;
    }

    // * + ? {n} {n,} {n,m} after an atom, a lazy '?' after that.
    Node quantified(Node atom) {
        int64_t lo = 0, hi = 0;
        if (!quantifier(lo, hi)) return atom;
        if (peek_is('?')) ++pos_;
        int64_t unused_lo = 0, unused_hi = 0;
        const size_t at = pos_;
        if (quantifier(unused_lo, unused_hi)) {
            pos_ = at;
            fail("a quantifier after a quantifier (put the first in a group)");
        }
        return repeat_node(std::move(atom), lo, hi);
    }

    bool quantifier(int64_t& lo, int64_t& hi) {
        const uint32_t c = peek();
        if (at_end()) return false;
        if (c == '*' || c == '+' || c == '?') {
            lo = c == '+' ? 1 : 0;
            hi = c == '?' ? 1 : -1;
            ++pos_;
            return true;
        }
        if (c != '{') return false;
        const size_t open = pos_++;
        const auto number = [&]() -> int64_t {
            const size_t from = pos_;
            int64_t v = 0;
            while (peek() >= '0' && peek() <= '9' && !at_end()) {
                v = v * 10 + (peek() - '0');
                if (v > kMaxRepeat) fail(fmt::format("a repetition count above {}", kMaxRepeat));
                ++pos_;
            }
            return pos_ == from ? -1 : v;
        };
        const auto not_quantifier = [&] {
            pos_ = open;
            fail("a '{' that starts no quantifier {n}, {n,} or {n,m} (write \\{ for the character)");
        };
        lo = number();
        if (lo < 0) not_quantifier();
        hi = lo;
        if (peek_is(',')) {
            ++pos_;
            hi = peek_is('}') ? -1 : number();
            if (hi < 0 && !peek_is('}')) not_quantifier();
        }
        if (!peek_is('}')) not_quantifier();
        ++pos_;
        if (hi >= 0 && hi < lo) {
            pos_ = open;
            fail(fmt::format("the quantifier {{{},{}}} has its maximum below its minimum", lo, hi));
        }
        return true;
    }

    uint32_t hex(int digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; ++i) {
            const uint32_t c = peek();
            const int d = at_end() ? -1
                          : c >= '0' && c <= '9' ? static_cast<int>(c - '0')
                          : c >= 'a' && c <= 'f' ? static_cast<int>(c - 'a' + 10)
                          : c >= 'A' && c <= 'F' ? static_cast<int>(c - 'A' + 10)
                                                 : -1;
            if (d < 0) fail(fmt::format("expected {} hex digits in the escape", digits));
            v = v * 16 + static_cast<uint32_t>(d);
            ++pos_;
        }
        return v;
    }

    // After a backslash, outside a class or in one.
    ClassAtom escape(bool in_class) {
        if (at_end()) fail("a pattern that ends in '\\'");
        const uint32_t c = cps_[pos_++];
        switch (c) {
        case 'd': case 'D': case 'w': case 'W': case 's': case 'S': return {0, c};
        case 't': return {'\t'};
        case 'n': return {'\n'};
        case 'r': return {'\r'};
        case 'f': return {'\f'};
        case 'v': return {'\v'};
        case 'x': return {hex(2)};
        case '0':
            if (peek() >= '0' && peek() <= '9' && !at_end()) fail("octal escapes are not supported");
            return {0};
        case 'u': {
            if (peek_is('{')) fail("\\u{...} escapes are not supported (use \\uXXXX)");
            const uint32_t v = hex(4);
            if (v >= 0xD800 && v <= 0xDFFF) fail("surrogate escapes (\\uD800-\\uDFFF) are not supported");
            return {v};
        }
        case 'b':
            if (in_class) return {'\b'};
            fail("\\b (a word boundary) is not supported");
        case 'B': fail("\\B (not a word boundary) is not supported");
        case 'k': fail("named backreferences (\\k<name>) are not supported");
        case 'p': case 'P': fail("Unicode property escapes (\\p{...}) are not supported");
        case 'c': fail("control escapes (\\cX) are not supported");
        default: break;
        }
        if (c >= '1' && c <= '9') fail("backreferences (\\1 ...) are not supported");
        const bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        if (alnum) fail(fmt::format("unknown escape '\\{}'", static_cast<char>(c)));
        return {c};  // an escaped punctuation or non-ASCII character stands for itself
    }

    ClassAtom class_atom() {
        const uint32_t c = cps_[pos_++];
        return c == '\\' ? escape(true) : ClassAtom{c};
    }

    // After '['.
    Ranges char_class() {
        const size_t open = pos_ - 1;
        const bool negated = peek_is('^');
        if (negated) ++pos_;
        // ECMAScript reads [] as matching nothing and [^] as anything;
        // Python takes the ']' as a character.
        if (peek_is(']')) fail("an empty class [] or [^] (write \\] for the character)");
        Ranges items;
        while (true) {
            if (at_end()) {
                pos_ = open;
                fail("a '[' that is never closed");
            }
            if (peek_is(']')) {
                ++pos_;
                break;
            }
            const ClassAtom a = class_atom();
            if (peek_is('-') && pos_ + 1 < cps_.size() && !peek_is(']', 1)) {
                ++pos_;
                const ClassAtom b = class_atom();
                if (a.shorthand || b.shorthand) fail("a range with \\d, \\w or \\s at one end");
                if (b.cp < a.cp) fail("a range that ends before it starts");
                items.emplace_back(a.cp, b.cp);
            } else if (a.shorthand) {
                items = unite(items, negated ? shorthand(a.shorthand).large : shorthand(a.shorthand).small);
            } else {
                items.emplace_back(a.cp, a.cp);
            }
        }
        return negated ? complement(items) : normalized(items);
    }

    std::vector<uint32_t> cps_;
    size_t pos_ = 0;
};

bool nullable(const Node& n) {
    switch (n.kind) {
    case Node::Kind::Set: return false;
    case Node::Kind::Seq: return std::all_of(n.kids.begin(), n.kids.end(), nullable);
    case Node::Kind::Alt: return std::any_of(n.kids.begin(), n.kids.end(), nullable);
    case Node::Kind::Repeat: return n.lo == 0 || nullable(n.kids[0]);
    }
    return false;
}

// n without the empty text (nothing when that is all it matches): what an
// unbounded repetition repeats, since GBNF refuses a repetition of
// something that can be empty (x* where x can be empty is (x minus empty)*).
int64_t node_size(const Node& n) {
    int64_t size = 1;
    for (const Node& k : n.kids) size += node_size(k);
    return size;
}

void spend(int64_t& budget, int64_t nodes) {
    budget -= nodes;
    if (budget < 0) throw PatternError("pattern: a repetition of too many optional parts to convert");
}

// `budget`: how many more nodes may be copied (each optional part of a
// sequence copies the parts after it: quadratic in their number).
std::optional<Node> without_empty(const Node& n, int64_t& budget) {
    if (!nullable(n)) return n;
    spend(budget, 1);
    switch (n.kind) {
    case Node::Kind::Set: return n;
    case Node::Kind::Alt: {
        std::vector<Node> alts;
        for (const Node& k : n.kids) {
            if (auto s = without_empty(k, budget)) alts.push_back(std::move(*s));
        }
        if (alts.empty()) return std::nullopt;
        return list_node(Node::Kind::Alt, std::move(alts));
    }
    case Node::Kind::Seq: {
        // Every part can be empty: the first that is not empty is part i.
        std::vector<int64_t> after(n.kids.size() + 1, 0);  // the nodes of the parts after each
        for (size_t i = n.kids.size(); i-- > 0;) after[i] = after[i + 1] + node_size(n.kids[i]);
        std::vector<Node> alts;
        for (size_t i = 0; i < n.kids.size(); ++i) {
            spend(budget, after[i + 1]);
            auto first = without_empty(n.kids[i], budget);
            if (!first) continue;
            std::vector<Node> seq{std::move(*first)};
            seq.insert(seq.end(), n.kids.begin() + static_cast<std::ptrdiff_t>(i) + 1, n.kids.end());
            alts.push_back(list_node(Node::Kind::Seq, std::move(seq)));
        }
        if (alts.empty()) return std::nullopt;
        return list_node(Node::Kind::Alt, std::move(alts));
    }
    case Node::Kind::Repeat: {
        if (n.hi == 0) return std::nullopt;
        auto kid = without_empty(n.kids[0], budget);
        if (!kid) return std::nullopt;
        return repeat_node(std::move(*kid), 1, n.hi);  // x{lo,hi} with x able to be empty is x'{0,hi}
    }
    }
    return std::nullopt;
}

// The JSON text of one character inside a string.
std::string json_text(uint32_t cp) {
    switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: break;
    }
    if (cp < 0x20 || cp == 0x7F) return fmt::format("\\u{:04x}", cp);
    return utf8(cp);
}

std::string cat(const std::string& a, const std::string& b) { return a.empty() ? b : b.empty() ? a : a + " " + b; }

std::string join_alts(const std::vector<std::string>& alts) {
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + (alts[i].empty() ? std::string("\"\"") : alts[i]);
    return out + ")";
}

class Emitter {
public:
    explicit Emitter(const RuleMaker& make_rule) : make_rule_(make_rule) {}

    // "" for the empty text.
    std::string node(const Node& n) {
        switch (n.kind) {
        case Node::Kind::Set: return single(n) ? gbnf_literal(json_text(n.set[0].first)) : set(n.set);
        case Node::Kind::Seq: {
            // Runs of single characters become one literal.
            std::string out, run;
            for (const Node& k : n.kids) {
                if (single(k)) {
                    run += json_text(k.set[0].first);
                    continue;
                }
                if (!run.empty()) out = cat(out, gbnf_literal(run));
                run.clear();
                out = cat(out, node(k));
            }
            return run.empty() ? out : cat(out, gbnf_literal(run));
        }
        case Node::Kind::Alt: {
            std::vector<std::string> alts;
            for (const Node& k : n.kids) alts.push_back(node(k));
            return join_alts(alts);
        }
        case Node::Kind::Repeat: return repeat(n);
        }
        return "";
    }

private:
    static bool single(const Node& n) {
        return n.kind == Node::Kind::Set && n.set.size() == 1 && n.set[0].first == n.set[0].second;
    }

    std::string repeat(const Node& n) {
        if (n.hi == 0) return "";
        int64_t lo = n.lo;
        std::optional<Node> stripped;
        const Node* kid = &n.kids[0];
        if (n.hi < 0 && nullable(*kid)) {
            stripped = without_empty(*kid, budget_);
            if (!stripped) return "";
            kid = &*stripped;
            lo = 0;
        }
        std::string item = node(*kid);
        if (item.empty()) return "";
        // A class (gbnf_class escapes all but letters and digits) or a rule name.
        const bool is_class = item.front() == '[' && item.back() == ']' && item.find(' ') == std::string::npos;
        const bool is_name = std::all_of(item.begin(), item.end(), [](char c) {
            return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
        });
        const bool one_term = is_class || is_name;
        if (!one_term) item = "(" + item + ")";
        return gbnf_times(item, lo, n.hi);
    }

    // The JSON text of one character of `r`: raw where JSON allows it, the
    // rest escaped.
    std::string set(const Ranges& r) {
        if (const auto it = sets_.find(r); it != sets_.end()) return it->second;
        static const Ranges raw_json = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x7E}, {0x80, kLast}};
        std::vector<std::string> alts;
        if (const Ranges raw = intersect(r, raw_json); !raw.empty()) alts.push_back(gbnf_class(raw));
        for (const uint32_t c : {uint32_t{'"'}, uint32_t{'\\'}}) {
            if (contains(r, c)) alts.push_back(gbnf_literal(json_text(c)));
        }
        if (intersect(r, {{0, 0x1F}}) == Ranges{{0, 0x1F}}) {
            alts.push_back(R"("\\" [bfnrt])");
            alts.push_back(R"("\\u00" [01] [0-9a-fA-F])");
        } else {
            for (uint32_t c = 0; c < 0x20; ++c) {
                if (contains(r, c)) alts.push_back(gbnf_literal(json_text(c)));
            }
        }
        if (contains(r, 0x7F)) alts.push_back(gbnf_literal(json_text(0x7F)));
        if (alts.empty()) throw PatternError("pattern: a class that matches no character");
        std::string body;
        for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
        const std::string out = alts.size() == 1 ? alts[0] : make_rule_(body);
        sets_.emplace(r, out);
        return out;
    }

    const RuleMaker& make_rule_;
    std::map<Ranges, std::string> sets_;
    int64_t budget_ = 100000;
};

}  // namespace

std::string pattern_to_gbnf(std::string_view pattern, const std::string& any_char, const RuleMaker& make_rule) {
    std::vector<uint32_t> cps;
    Utf8State state;
    if (!decode_utf8(pattern, state, cps) || state.remaining) throw PatternError("pattern: expected UTF-8 text");
    const std::vector<Branch> branches = Parser(std::move(cps)).parse();
    Emitter emit(make_rule);
    const std::string any = any_char + "*";
    std::vector<std::string> alts;
    for (const Branch& b : branches) {
        // An unanchored side with a body that can be empty: every string matches.
        if (nullable(b.body) && (!b.start || !b.end)) return any;
        alts.push_back(cat(cat(b.start ? "" : any, emit.node(b.body)), b.end ? "" : any));
    }
    const std::string out = join_alts(alts);
    return out.empty() ? "\"\"" : out;
}

}  // namespace tandem::grammar
