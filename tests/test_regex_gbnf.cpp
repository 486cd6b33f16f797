// JSON Schema's `pattern` as GBNF (runtime/grammar/regex_gbnf.h), through
// the schema converter so that the JSON string's quotes and escapes are in
// play: which strings the grammar takes, that every random text it takes
// matches the pattern (std::wregex, ECMAScript), and which patterns are
// refused.
#include <gtest/gtest.h>

#include <random>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/grammar/json_schema.h"
#include "runtime/grammar/matcher.h"
#include "tests/grammar_sample.h"

namespace tandem::grammar {
namespace {

using ojson = nlohmann::ordered_json;

std::shared_ptr<const Grammar> pattern_grammar(const std::string& pattern) {
    return compile_json_schema(ojson{{"type", "string"}, {"pattern", pattern}});
}

using testing::grammar_takes;

class Pattern {
public:
    explicit Pattern(const std::string& pattern) : g_(pattern_grammar(pattern)) {}
    // `s` as a JSON string (nlohmann's escapes: \n, \" , \\, \u001f).
    bool takes(const std::string& s) const { return grammar_takes(g_, ojson(s).dump()); }
    bool takes_json(const std::string& text) const { return grammar_takes(g_, text); }

private:
    std::shared_ptr<const Grammar> g_;
};

std::string refusal(const std::string& pattern, std::string* path = nullptr) {
    try {
        json_schema_to_gbnf(ojson{{"type", "object"}, {"properties", {{"code", {{"type", "string"}, {"pattern", pattern}}}}}});
    } catch (const SchemaError& e) {
        if (path) *path = e.path();
        return e.what();
    }
    return "";
}

std::string times(const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
}

std::wstring wide(const std::string& utf8_text) {
    std::vector<uint32_t> cps;
    Utf8State st;
    EXPECT_TRUE(decode_utf8(utf8_text, st, cps));
    return std::wstring(cps.begin(), cps.end());
}

// `pattern` with \s and \S spelled out as ECMAScript defines them:
// std::wregex's "C" locale leaves out U+00A0 and the other Unicode spaces.
std::wstring ecma_spaces(const std::wstring& pattern) {
    const std::wstring space = L"\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff";
    std::wstring out;
    bool in_class = false;
    for (size_t i = 0; i < pattern.size(); ++i) {
        const wchar_t c = pattern[i];
        if (c == L'\\' && i + 1 < pattern.size()) {
            const wchar_t n = pattern[++i];
            if (n == L's') {
                out += in_class ? space : L"[" + space + L"]";
            } else if (n == L'S' && !in_class) {
                out += L"[^" + space + L"]";
            } else {
                out += c;
                out += n;
            }
            continue;
        }
        if (c == L'[') in_class = true;
        if (c == L']') in_class = false;
        out += c;
    }
    return out;
}

TEST(RegexGbnf, AnchoredLiteralsClassesAndQuantifiers) {
    const Pattern p("^[a-z]{2,3}-\\d{2}$");
    EXPECT_TRUE(p.takes("ab-12"));
    EXPECT_TRUE(p.takes("abc-99"));
    EXPECT_FALSE(p.takes("a-12"));
    EXPECT_FALSE(p.takes("abcd-12"));
    EXPECT_FALSE(p.takes("ab-1"));
    EXPECT_FALSE(p.takes("abcd-12"));
    EXPECT_FALSE(p.takes("1ab-12"));
    EXPECT_FALSE(p.takes("ab-12 "));
    const Pattern alt("^(?:cat|dog)s?$");
    for (const char* s : {"cat", "cats", "dog", "dogs"}) EXPECT_TRUE(alt.takes(s)) << s;
    for (const char* s : {"", "cow", "catss", "ca"}) EXPECT_FALSE(alt.takes(s)) << s;
    const Pattern lazy("^a+?b*?c??$");  // lazy quantifiers match the same texts
    EXPECT_TRUE(lazy.takes("aaab"));
    EXPECT_TRUE(lazy.takes("ac"));
    EXPECT_FALSE(lazy.takes("b"));
    const Pattern counts("^x{3}y{2,}z{0,1}$");
    EXPECT_TRUE(counts.takes("xxxyy"));
    EXPECT_TRUE(counts.takes("xxxyyyyz"));
    EXPECT_FALSE(counts.takes("xxyy"));
    EXPECT_FALSE(counts.takes("xxxy"));
    const Pattern neg("^[^a-c0-9]+$");
    EXPECT_TRUE(neg.takes("xyz-_"));
    EXPECT_FALSE(neg.takes("xa"));
    EXPECT_FALSE(neg.takes("x1"));
}

TEST(RegexGbnf, UnanchoredSidesTakeAnyCharacters) {
    const Pattern both("\\d{3}");
    EXPECT_TRUE(both.takes("123"));
    EXPECT_TRUE(both.takes("call 555-1234 now"));
    EXPECT_FALSE(both.takes("12-34"));
    const Pattern start("^ab");
    EXPECT_TRUE(start.takes("abc \"quoted\""));
    EXPECT_FALSE(start.takes("cab"));
    const Pattern end("ab$");
    EXPECT_TRUE(end.takes("crab"));
    EXPECT_FALSE(end.takes("abc"));
    // Each top-level alternative has its own anchors.
    const Pattern branches("^x|y$");
    EXPECT_TRUE(branches.takes("x..."));
    EXPECT_TRUE(branches.takes("...y"));
    EXPECT_FALSE(branches.takes("...x"));
    // A body that can be empty on an unanchored side: every string.
    const Pattern any("^a*");
    EXPECT_TRUE(any.takes("zzz"));
    EXPECT_TRUE(any.takes(""));
}

TEST(RegexGbnf, EscapesAndJsonEscaping) {
    const Pattern dot("^a\\.b\\/c\\\\d\\-$");  // a.b/c\d-
    EXPECT_TRUE(dot.takes("a.b/c\\d-"));
    EXPECT_FALSE(dot.takes("aXb/c\\d-"));
    const Pattern quote("^say \"(hi|bye)\"$");
    EXPECT_TRUE(quote.takes_json(R"("say \"hi\"")"));
    EXPECT_FALSE(quote.takes_json(R"("say "hi"")"));  // a raw quote ends the JSON string
    const Pattern controls("^a\\tb\\nc$");
    EXPECT_TRUE(controls.takes_json(R"("a\tb\nc")"));
    EXPECT_FALSE(controls.takes_json("\"a\tb\nc\""));  // raw control characters are not JSON
    const Pattern unicode("^\\u00e9\\x41[\\u4e00-\\u9fff]$");
    EXPECT_TRUE(unicode.takes("\xC3\xA9" "A\xE4\xB8\xAD"));  // éA中
    EXPECT_FALSE(unicode.takes("eAx"));
    const Pattern cls("^[\\d\\s.]+$");
    EXPECT_TRUE(cls.takes("1 2.3"));
    EXPECT_TRUE(cls.takes_json(R"("1\t2")"));
    EXPECT_FALSE(cls.takes("1a"));
    // A negated class takes '"' and '\' escaped, and control characters
    // as JSON escapes.
    const Pattern notx("^[^x]+$");
    EXPECT_TRUE(notx.takes_json(R"("\"\\\n\u0001")"));
    EXPECT_FALSE(notx.takes("axb"));
    const Pattern dotall("^.+$");  // '.' takes no line break
    EXPECT_TRUE(dotall.takes("a b"));
    EXPECT_FALSE(dotall.takes("a\nb"));
    const Pattern backspace("^[\\b]$");  // \b in a class is U+0008
    EXPECT_TRUE(backspace.takes_json(R"("\b")"));
}

TEST(RegexGbnf, RepetitionsOfWhatCanBeEmpty) {
    const Pattern p("^(a?)*b$");
    EXPECT_TRUE(p.takes("b"));
    EXPECT_TRUE(p.takes("aaab"));
    EXPECT_FALSE(p.takes("aa"));
    const Pattern q("^(?:x*y*|)+z$");
    EXPECT_TRUE(q.takes("z"));
    EXPECT_TRUE(q.takes("xxyyxz"));
    EXPECT_FALSE(q.takes("xzy"));
    const Pattern nested("^(.*)*x(a+)+(?:\\d+){2}$");  // repetitions of repetitions
    EXPECT_TRUE(nested.takes("..xaa12"));
    EXPECT_FALSE(nested.takes("..xaa"));
    const Pattern r("^(()|a{0})*$");  // only the empty string
    EXPECT_TRUE(r.takes(""));
    EXPECT_FALSE(r.takes("a"));
}

TEST(RegexGbnf, WhatTheGrammarTakesMatchesThePattern) {
    const char* patterns[] = {
        "^[a-z]{2,4}-\\d{3}$", "ab+c",  "^(foo|bar)+$", "^\\w+@\\w+\\.com$", "colou?r", "^[^\\s\"]{1,8}$",
        "^(?:[0-9]{1,3}\\.){3}[0-9]{1,3}$", "^(a?)*b$", "x|^y|z$", "^\\d*\\.?\\d*$", "^[A-Z][a-z]*( [A-Z][a-z]*)*$",
        "\\\\\"", "^.{3}$", "^[\\-+]?\\d+(\\.\\d+)?$", "^[^a-z]+$", "^\\S+ \\S+$", "^[\\W_]+$", "^\\D{2}\\s?$", "(.*)*x", "^(\\w+\\s?)*$", "(a+)+b{2}",
    };
    std::mt19937 rng(52);
    for (const char* p : patterns) {
        const auto g = pattern_grammar(p);
        const std::wregex re(ecma_spaces(wide(p)), std::regex::ECMAScript);
        int made = 0;
        for (int i = 0; i < 60; ++i) {
            const auto text = testing::random_text(*g, rng);
            if (!text) continue;
            ++made;
            EXPECT_TRUE(grammar_takes(g, *text)) << p << ": " << *text;
            const ojson value = ojson::parse(*text, nullptr, false);
            ASSERT_TRUE(value.is_string()) << p << ": " << *text;
            EXPECT_TRUE(std::regex_search(wide(value.get<std::string>()), re)) << p << ": " << *text;
        }
        EXPECT_GE(made, 30) << p;
    }
}

TEST(RegexGbnf, UnsupportedFeaturesAreRefusedByName) {
    const std::pair<std::string, std::string> cases[] = {
        {"(a)\\1", "backreferences"},
        {"(?<n>a)\\k<n>", "named groups"},
        {"\\k<n>", "named backreferences"},
        {"(?=a)", "lookahead"},
        {"(?!a)", "lookahead"},
        {"(?<=a)b", "lookbehind"},
        {"(?i)a", "inline flags"},
        {"\\bword", "word boundary"},
        {"\\Bx", "\\B"},
        {"a^b", "'^' is supported only at the start"},
        {"a$b", "'$' is supported only at the end"},
        {"(^a)", "'^' is supported only at the start"},
        {"\\p{L}", "Unicode property"},
        {"\\cA", "control escapes"},
        {"\\u{1F600}", "\\u{...}"},
        {"\\ud83d\\ude00", "surrogate"},
        {"a{2", "'{' that starts no quantifier"},
        {"{", "'{' that starts no quantifier"},
        {"a{,3}", "'{' that starts no quantifier"},
        {"a**", "a quantifier after a quantifier"},
        {"a+*", "a quantifier after a quantifier"},
        {"*a", "nothing to repeat"},
        {"[]", "empty class"},
        {"[^]", "empty class"},
        {"[abc", "'[' that is never closed"},
        {"(a", "'(' that is never closed"},
        {"a)", "')' that closes no group"},
        {"[z-a]", "ends before it starts"},
        {"[\\d-z]", "a range with \\d"},
        {"\\q", "unknown escape '\\q'"},
        {"\\01", "octal"},
        {"a{5,2}", "maximum below its minimum"},
        {"a{20000}", "above 10000"},
        {"[^\\s\\S]", "matches no character"},
        {std::string(100, '(') + std::string(100, ')'), "nested deeper than 64"},
        {"^(" + times("a?", 1000) + ")*$", "too many optional parts"},
    };
    for (const auto& [pattern, words] : cases) {
        std::string path;
        const std::string why = refusal(pattern, &path);
        EXPECT_NE(why.find(words), std::string::npos) << pattern << ": " << why;
        EXPECT_EQ(path, "properties.code.pattern") << pattern;
    }
    EXPECT_EQ(refusal("^[a-z]+(?:-[a-z]+)*$"), "");
    EXPECT_EQ(refusal("^(" + times("a?", 50) + ")*$"), "");
    EXPECT_NE(refusal("\\").find("ends in '\\'"), std::string::npos);
}

}  // namespace
}  // namespace tandem::grammar
