// Hand-written matchers for the pre-tokenizer regexes. Each splitter walks
// one segment [begin, end) of code points and records where every word
// ends. The alternatives are tried in the regex's order at each position,
// which reproduces the leftmost-first matching of the original regex (and
// of the reference implementation's own hand-written versions, including
// the way a lone space before a word is glued to that word while a run of
// spaces gives all but its last space to a word of its own).
#include "runtime/tokenizer/pretokenize.h"

#include <array>
#include <string_view>

#include "runtime/tokenizer/unicode.h"

namespace tandem::tokenizer_detail {
namespace {

// The decoded text with each code point's class computed once.
struct Text {
    std::vector<Codepoint> cps;
    std::vector<CpClass> cls;

    explicit Text(std::string_view s) : cps(decode_utf8(s)) {
        cls.reserve(cps.size());
        for (const auto& c : cps) cls.push_back(classify(c.cp));
    }
};

// A segment of the text being split, with accessors that treat positions
// outside [begin, end) as "no character": lookahead never crosses into the
// next segment, as each regex runs on each piece separately.
class Segment {
public:
    Segment(const Text& t, size_t begin, size_t end, std::vector<size_t>& ends)
        : t_(t), begin_(begin), end_(end), prev_end_(begin), ends_(ends) {}

    size_t begin() const { return begin_; }
    size_t end() const { return end_; }
    bool in(size_t p) const { return p >= begin_ && p < end_; }
    uint32_t cp(size_t p) const { return in(p) ? t_.cps[p].cp : kNone; }
    bool letter(size_t p) const { return in(p) && t_.cls[p].letter(); }
    bool number(size_t p) const { return in(p) && t_.cls[p].number(); }
    bool space(size_t p) const { return in(p) && t_.cls[p].whitespace; }
    bool punctuation(size_t p) const { return in(p) && t_.cls[p].punctuation(); }
    // [^\s\p{L}\p{N}]: any character that is none of the three.
    bool other(size_t p) const {
        return in(p) && !t_.cls[p].whitespace && !t_.cls[p].letter() && !t_.cls[p].number();
    }

    // Ends the current word at `end` (nothing when it would be empty).
    void emit(size_t end) {
        if (end > prev_end_) ends_.push_back(end);
        prev_end_ = end;
    }

    static constexpr uint32_t kNone = 0xFFFFFFFF;

private:
    const Text& t_;
    size_t begin_, end_, prev_end_;
    std::vector<size_t>& ends_;
};

uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// 's|'t|'re|'ve|'m|'ll|'d at `pos`: the match length, 0 for none. Llama 3
// matches them case-insensitively; only ASCII letters can fold onto these,
// so ASCII folding is exact.
size_t contraction_at(const Segment& s, size_t pos, bool fold_case) {
    if (s.cp(pos) != '\'' || !s.in(pos + 1)) return 0;
    auto at = [&](size_t p) { return fold_case ? ascii_lower(s.cp(p)) : s.cp(p); };
    const uint32_t a = at(pos + 1);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (!s.in(pos + 2)) return 0;
    const uint32_t b = at(pos + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

// \s+(?!\S)|\s+ at `pos` (a whitespace run of n characters): a run that is
// followed by a non-space gives its last space to the next word.
void emit_whitespace_run(Segment& s, size_t& pos, size_t n) {
    if (n > 1 && s.in(pos + n)) pos += n - 1;
    else pos += (n > 0 ? n : 1);  // n == 0: no alternative matched; one char alone
    s.emit(pos);
}

void split_gpt2(Segment& s) {
    size_t pos = s.begin();
    while (pos < s.end()) {
        if (const size_t n = contraction_at(s, pos, false)) {
            pos += n;
            s.emit(pos);
            continue;
        }
        // " ?X+": the optional space only counts when an X follows it.
        const size_t q = s.cp(pos) == ' ' ? pos + 1 : pos;
        if (s.letter(q)) {
            pos = q;
            while (s.letter(pos)) ++pos;
            s.emit(pos);
            continue;
        }
        if (s.number(q)) {
            pos = q;
            while (s.number(pos)) ++pos;
            s.emit(pos);
            continue;
        }
        if (s.other(q)) {
            pos = q;
            while (s.other(pos)) ++pos;
            s.emit(pos);
            continue;
        }
        size_t n = 0;
        while (s.space(pos + n)) ++n;
        emit_whitespace_run(s, pos, n);
    }
}

// Llama 3 and Qwen 2; they differ only in how many digits a number word
// may hold (3 and 1).
void split_llama3(Segment& s, size_t max_digits) {
    size_t pos = s.begin();
    while (pos < s.end()) {
        if (const size_t n = contraction_at(s, pos, true)) {
            pos += n;
            s.emit(pos);
            continue;
        }
        const uint32_t c = s.cp(pos);
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if (c != '\r' && c != '\n' && !s.number(pos) && (s.letter(pos) || s.letter(pos + 1))) {
            ++pos;
            while (s.letter(pos)) ++pos;
            s.emit(pos);
            continue;
        }
        // \p{N}{1,max_digits}
        if (s.number(pos)) {
            size_t start = pos;
            while (s.number(pos)) {
                ++pos;
                if (pos - start >= max_digits) {
                    s.emit(pos);
                    start = pos;
                }
            }
            s.emit(pos);
            continue;
        }
        // " ?[^\s\p{L}\p{N}]+[\r\n]*"
        const size_t q = c == ' ' ? pos + 1 : pos;
        if (s.other(q)) {
            pos = q;
            while (s.other(pos)) ++pos;
            while (s.cp(pos) == '\r' || s.cp(pos) == '\n') ++pos;
            s.emit(pos);
            continue;
        }
        // \s*[\r\n]+ takes the run up to its last line break; what follows
        // is \s+(?!\S)|\s+ as in GPT-2.
        size_t n = 0;
        size_t after_last_break = 0;
        while (s.space(pos + n)) {
            const uint32_t w = s.cp(pos + n);
            ++n;
            if (w == '\r' || w == '\n') after_last_break = pos + n;
        }
        if (after_last_break > 0) {
            pos = after_last_break;
            s.emit(pos);
            continue;
        }
        emit_whitespace_run(s, pos, n);
    }
}

// A regex of one repeated character class (or a fixed-length run), split
// the way a regex-iterator split does it: every match is a word and so is
// every stretch of text between matches.
template <typename MatchLength>
void split_by_matches(Segment& s, MatchLength match_length) {
    size_t pos = s.begin();
    while (pos < s.end()) {
        const size_t n = match_length(pos);
        if (n == 0) {
            ++pos;
            continue;
        }
        s.emit(pos);  // the text before the match, if any
        pos += n;
        s.emit(pos);
    }
    s.emit(s.end());
}

// X+ for a character class X.
template <typename InClass>
void split_runs(Segment& s, InClass in_class) {
    split_by_matches(s, [&](size_t p) {
        size_t q = p;
        while (in_class(s, q)) ++q;
        return q - p;
    });
}

// [\p{P}\$\+<=>\^~\|]+ of the default pre-tokenizer; Falcon adds the backtick.
bool is_default_punct(const Segment& s, size_t p) {
    if (s.punctuation(p)) return true;
    switch (s.cp(p)) {
        case '$': case '+': case '<': case '=': case '>': case '^': case '~': case '|': return true;
        default: return false;
    }
}

bool is_falcon_punct(const Segment& s, size_t p) { return is_default_punct(s, p) || s.cp(p) == '`'; }

bool is_ascii_digit(uint32_t c) { return c >= '0' && c <= '9'; }

// [0-9][0-9][0-9]
void split_ascii_digit_triples(Segment& s) {
    split_by_matches(s, [&](size_t p) -> size_t {
        return is_ascii_digit(s.cp(p)) && is_ascii_digit(s.cp(p + 1)) && is_ascii_digit(s.cp(p + 2)) ? 3 : 0;
    });
}

// \p{N}: every digit a word of its own.
void split_single_digits(Segment& s) {
    split_by_matches(s, [&](size_t p) -> size_t { return s.number(p) ? 1 : 0; });
}

using Splitter = void (*)(Segment&);

// Runs `split` over every current segment; `bounds` holds segment ends.
void apply(const Text& t, std::vector<size_t>& bounds, Splitter split) {
    std::vector<size_t> out;
    out.reserve(bounds.size() * 2);
    size_t begin = 0;
    for (const size_t end : bounds) {
        Segment s(t, begin, end, out);
        split(s);
        begin = end;
    }
    bounds.swap(out);
}

}  // namespace

std::optional<PreTokenizer> pre_tokenizer_for(std::string_view name) {
    static constexpr std::array<std::string_view, 14> kGpt2 = {
        "gpt2",       "gpt-2",      "phi-2",        "jina-es",     "jina-de", "gigachat", "jina-v1-en",
        "jina-v2-es", "jina-v2-de", "jina-v2-code", "roberta-bpe", "mpt",     "olmo",     "jais"};
    static constexpr std::array<std::string_view, 7> kStarcoder = {
        "starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"};
    static constexpr std::array<std::string_view, 6> kLlama3 = {"llama3",  "llama-v3", "llama-bpe",
                                                                "falcon3", "dbrx",     "smaug-bpe"};
    static constexpr std::array<std::string_view, 4> kQwen2 = {"qwen2", "stablelm2", "megrez", "deepseek-r1-qwen"};
    auto in = [&](const auto& names) {
        for (const auto n : names)
            if (n == name) return true;
        return false;
    };
    if (name.empty() || name == "default") return PreTokenizer::Default;
    if (in(kGpt2)) return PreTokenizer::Gpt2;
    if (in(kLlama3)) return PreTokenizer::Llama3;
    if (in(kQwen2)) return PreTokenizer::Qwen2;
    if (in(kStarcoder)) return PreTokenizer::Starcoder;
    if (name == "falcon") return PreTokenizer::Falcon;
    return std::nullopt;
}

std::vector<std::string_view> pre_tokenize(std::string_view text, PreTokenizer kind) {
    std::vector<std::string_view> words;
    if (text.empty()) return words;
    const Text t(text);
    std::vector<size_t> bounds{t.cps.size()};

    switch (kind) {
        case PreTokenizer::Gpt2:
            apply(t, bounds, split_gpt2);
            break;
        case PreTokenizer::Llama3:
            apply(t, bounds, [](Segment& s) { split_llama3(s, 3); });
            break;
        case PreTokenizer::Qwen2:
            apply(t, bounds, [](Segment& s) { split_llama3(s, 1); });
            break;
        case PreTokenizer::Starcoder:
            apply(t, bounds, split_single_digits);
            apply(t, bounds, split_gpt2);
            break;
        case PreTokenizer::Falcon:
            apply(t, bounds, [](Segment& s) { split_runs(s, is_falcon_punct); });
            apply(t, bounds, split_gpt2);
            apply(t, bounds, split_ascii_digit_triples);
            break;
        case PreTokenizer::Default:
            apply(t, bounds, [](Segment& s) { split_runs(s, is_default_punct); });
            apply(t, bounds, split_gpt2);
            apply(t, bounds, [](Segment& s) { split_runs(s, [](const Segment& g, size_t p) { return g.number(p); }); });
            apply(t, bounds, split_ascii_digit_triples);
            break;
    }

    words.reserve(bounds.size());
    size_t begin = 0;
    for (const size_t end : bounds) {
        const size_t b = begin < t.cps.size() ? t.cps[begin].offset : text.size();
        const size_t e = end < t.cps.size() ? t.cps[end].offset : text.size();
        words.push_back(text.substr(b, e - b));
        begin = end;
    }
    return words;
}

}  // namespace tandem::tokenizer_detail
