// GBNF parsing, its errors, and the matcher (runtime/grammar/).
#include <gtest/gtest.h>

#include <string>

#include "runtime/grammar/grammar.h"
#include "runtime/grammar/matcher.h"

namespace tandem::grammar {
namespace {

// Whether `text` is a whole match of the grammar.
bool matches(const std::string& gbnf, const std::string& text) {
    Matcher m(compile_grammar(gbnf));
    return m.accept(text) && m.can_end();
}

// Whether `text` can start a match (accepted, maybe unfinished).
bool prefix_ok(const std::string& gbnf, const std::string& text) {
    Matcher m(compile_grammar(gbnf));
    return m.accept(text);
}

std::string error_of(const std::string& gbnf) {
    try {
        compile_grammar(gbnf);
    } catch (const GrammarError& e) {
        return e.what();
    }
    return "";
}

TEST(Grammar, LiteralsSequencesAndAlternatives) {
    const std::string g = R"(root ::= "yes" | "no" | "maybe" " " "later")";
    EXPECT_TRUE(matches(g, "yes"));
    EXPECT_TRUE(matches(g, "no"));
    EXPECT_TRUE(matches(g, "maybe later"));
    EXPECT_FALSE(matches(g, "ye"));
    EXPECT_TRUE(prefix_ok(g, "ye"));
    EXPECT_FALSE(prefix_ok(g, "yes "));
    EXPECT_FALSE(matches(g, "maybe"));
}

TEST(Grammar, RulesGroupsAndComments) {
    const std::string g = R"(
# a greeting, then a name
root ::= greeting ", " name   # trailing comment
greeting ::= ("hello" | "hi")
name ::= [A-Z] [a-z]+
)";
    EXPECT_TRUE(matches(g, "hello, Ann"));
    EXPECT_TRUE(matches(g, "hi, Bo"));
    EXPECT_FALSE(matches(g, "hi, bo"));
    EXPECT_FALSE(matches(g, "hi, B"));
}

TEST(Grammar, MultiLineRules) {
    // llama.cpp's layouts: a rule body on the following lines, alternatives
    // after a trailing '|' or inside a group over several lines.
    const std::string g = "root ::=\n  \"a\" |\n  \"b\"\nother ::= (\n  \"x\"\n  | \"y\"\n)\n";
    EXPECT_TRUE(matches(g, "a"));
    EXPECT_TRUE(matches(g, "b"));
    EXPECT_FALSE(matches(g, "x"));
}

TEST(Grammar, Repetitions) {
    EXPECT_TRUE(matches(R"(root ::= "a"*)", ""));
    EXPECT_TRUE(matches(R"(root ::= "a"*)", "aaaa"));
    EXPECT_FALSE(matches(R"(root ::= "a"+)", ""));
    EXPECT_TRUE(matches(R"(root ::= "a"+)", "aaa"));
    EXPECT_TRUE(matches(R"(root ::= "a"? "b")", "b"));
    EXPECT_TRUE(matches(R"(root ::= "a"? "b")", "ab"));
    EXPECT_FALSE(matches(R"(root ::= "a"? "b")", "aab"));
    const std::string g3 = R"(root ::= "ab"{3})";  // the whole literal repeats
    EXPECT_TRUE(matches(g3, "ababab"));
    EXPECT_FALSE(matches(g3, "abab"));
    EXPECT_FALSE(prefix_ok(g3, "abababa"));
    const std::string range = R"(root ::= [0-9]{2,4})";
    EXPECT_FALSE(matches(range, "1"));
    EXPECT_TRUE(matches(range, "12"));
    EXPECT_TRUE(matches(range, "1234"));
    EXPECT_FALSE(prefix_ok(range, "12345"));
    const std::string open = R"(root ::= "x"{2,} "y")";
    EXPECT_FALSE(matches(open, "xy"));
    EXPECT_TRUE(matches(open, "xxxxxxy"));
}

TEST(Grammar, CharacterClassesAndAny) {
    EXPECT_TRUE(matches(R"(root ::= [^"\\]+)", "plain text"));
    EXPECT_FALSE(prefix_ok(R"(root ::= [^"\\]+)", "quote\""));
    EXPECT_TRUE(matches(R"(root ::= [a-cx-z_]+)", "abz_y"));
    EXPECT_FALSE(prefix_ok(R"(root ::= [a-cx-z_]+)", "d"));
    EXPECT_TRUE(matches(R"(root ::= [-a])", "-"));   // a leading '-' is literal
    EXPECT_TRUE(matches(R"(root ::= [a-])", "-"));   // so is a trailing one
    EXPECT_TRUE(matches(R"(root ::= . . .)", "a\xC3\xA9\xE2\x82\xAC"));  // a, é, €: three characters
    EXPECT_FALSE(matches(R"(root ::= . .)", "a\xC3\xA9\xE2\x82\xAC"));
}

TEST(Grammar, Escapes) {
    EXPECT_TRUE(matches(R"(root ::= "\n\t\\\"" [\x41] "\u00e9" "\U0001F600")", "\n\t\\\"A\xC3\xA9\xF0\x9F\x98\x80"));
    EXPECT_TRUE(matches(R"(root ::= [\]\[]+)", "]["));
    EXPECT_TRUE(matches(R"(root ::= [\u00e0-\u00ff])", "\xC3\xA9"));
}

TEST(Grammar, RecursionThatConsumesIsFine) {
    const std::string g = R"g(root ::= "(" root ")" | "x")g";
    EXPECT_TRUE(matches(g, "((x))"));
    EXPECT_FALSE(matches(g, "((x)"));
}

TEST(Grammar, ErrorsSayWhatAndWhere) {
    EXPECT_NE(error_of("root ::= \"abc").find("line 1, column 10: unterminated string literal"), std::string::npos)
        << error_of("root ::= \"abc");
    EXPECT_NE(error_of("root ::= foo").find("rule 'foo' is used but never defined"), std::string::npos);
    EXPECT_NE(error_of("start ::= \"a\"").find("no rule named 'root'"), std::string::npos);
    EXPECT_NE(error_of("root ::= (\"a\"").find("expected ')'"), std::string::npos);
    EXPECT_NE(error_of("root ::= [a-").find("unterminated character class"), std::string::npos);
    EXPECT_NE(error_of("root ::= [z-a]").find("ends before it starts"), std::string::npos);
    EXPECT_NE(error_of("root ::= \"a\"{3,1}").find("maximum below its minimum"), std::string::npos);
    EXPECT_NE(error_of("root ::= \"\\q\"").find("unknown escape '\\q'"), std::string::npos);
    EXPECT_NE(error_of("root ::= \"a\"\nroot ::= \"b\"").find("line 2, column 1: rule 'root' is defined twice"),
              std::string::npos);
    EXPECT_NE(error_of("root ::= \"a\" x ::= \"b\"").find("must start on its own line"), std::string::npos);
    EXPECT_NE(error_of("root = \"a\"").find("expected '::=' after 'root'"), std::string::npos);
    EXPECT_NE(error_of("").find("empty grammar"), std::string::npos);
    EXPECT_NE(error_of("root ::= \"a\"{99999}").find("repetition count above"), std::string::npos);
    EXPECT_NE(error_of("root ::= \"a\" ** ").find("cannot follow another"), std::string::npos);
    EXPECT_NE(error_of("root ::= @").find("line 1, column 10: expected a string"), std::string::npos);
}

TEST(Grammar, LeftRecursionIsRefused) {
    EXPECT_NE(error_of(R"(root ::= root "a" | "b")").find("rule 'root' can reach itself"), std::string::npos);
    // Through another rule and an empty prefix.
    const std::string indirect = "root ::= e x\ne ::= \"\" | \"q\"\nx ::= root \"a\" | \"b\"";
    EXPECT_NE(error_of(indirect).find("can reach itself"), std::string::npos) << error_of(indirect);
    // A repetition of something that can be empty.
    EXPECT_NE(error_of(R"(root ::= ("a"?)*)").find("can reach itself"), std::string::npos);
}

TEST(Matcher, EndOnlyWhenTheGrammarCan) {
    Matcher m(compile_grammar(R"(root ::= "ab" "c"?)"));
    EXPECT_FALSE(m.can_end());
    ASSERT_TRUE(m.accept("ab"));
    EXPECT_TRUE(m.can_end());
    EXPECT_FALSE(m.finished());  // "c" may still come
    ASSERT_TRUE(m.accept("c"));
    EXPECT_TRUE(m.finished());
    EXPECT_FALSE(m.accepts("c"));
}

TEST(Matcher, RefusedTextLeavesTheStateAlone) {
    Matcher m(compile_grammar(R"(root ::= "abc")"));
    EXPECT_FALSE(m.accept("abx"));
    EXPECT_TRUE(m.accept("abc"));
}

TEST(Matcher, Utf8SplitAcrossTokens) {
    // "é" is C3 A9, "€" E2 82 AC: pieces may end inside a character.
    Matcher m(compile_grammar(R"(root ::= "é€")"));
    ASSERT_TRUE(m.accept("\xC3"));
    EXPECT_FALSE(m.can_end());  // a character is pending
    ASSERT_TRUE(m.accept("\xA9\xE2"));
    ASSERT_TRUE(m.accept("\x82"));
    EXPECT_FALSE(m.accepts("\x81"));  // E2 82 81 is another character
    ASSERT_TRUE(m.accept("\xAC"));
    EXPECT_TRUE(m.can_end());
}

TEST(Matcher, PartialCharacterMustBeAbleToMatch) {
    // Only ASCII letters: no lead byte of a multi-byte character can start one.
    Matcher ascii(compile_grammar(R"(root ::= [a-z]+)"));
    EXPECT_FALSE(ascii.accepts("\xC3"));
    // A class of 3-byte characters: E2 may lead into it, C3 may not.
    Matcher euro(compile_grammar(R"(root ::= [\u20AC])"));
    EXPECT_TRUE(euro.accepts("\xE2"));
    EXPECT_TRUE(euro.accepts("\xE2\x82"));
    EXPECT_FALSE(euro.accepts("\xE2\x81"));
    EXPECT_FALSE(euro.accepts("\xC3"));
    // A negated class: anything but a quote, so any lead byte may start.
    Matcher neg(compile_grammar(R"(root ::= [^"]*)"));
    EXPECT_TRUE(neg.accepts("\xF0\x9F"));
}

TEST(Matcher, BadUtf8IsRefused) {
    Matcher m(compile_grammar(R"(root ::= .*)"));
    EXPECT_FALSE(m.accepts("\x80"));       // a stray continuation byte
    EXPECT_FALSE(m.accepts("\xFF"));       // never in UTF-8
    EXPECT_FALSE(m.accepts("\xC3\x41"));   // a lead byte without its continuation
    EXPECT_TRUE(m.accepts("\xC3\xA9"));
    EXPECT_FALSE(m.accepts("\xED\xA0\x80"));  // a surrogate
}

TEST(Matcher, OverlongFormsAreRefused) {
    // F0 80 81 B9 and C1 B9 decode to 'y' by the bits, but UTF-8 forbids
    // them: a lead byte must not stand for an ASCII character.
    Matcher m(compile_grammar(R"(root ::= "y")"));
    EXPECT_FALSE(m.accepts("\xF0"));
    EXPECT_FALSE(m.accepts("\xF0\x80\x81\xB9"));
    EXPECT_FALSE(m.accepts("\xC1"));
    EXPECT_FALSE(m.accepts("\xC1\xB9"));
    EXPECT_FALSE(m.accepts("\xE0\x81\xB9"));
    EXPECT_TRUE(m.accepts("y"));
}

TEST(Matcher, AmbiguityIsTracked) {
    // Both alternatives start alike; only the end tells them apart.
    const std::string g = R"(root ::= "a"+ "b" | "a"+ "c")";
    EXPECT_TRUE(matches(g, "aaab"));
    EXPECT_TRUE(matches(g, "aaac"));
    EXPECT_FALSE(matches(g, "aaa"));
}

TEST(Matcher, LongRepetitionsKeepStacksSmall) {
    // Tail recursion: the stacks do not grow with the count.
    Matcher m(compile_grammar(R"(root ::= [a-z]* "." )"));
    for (int i = 0; i < 5000; ++i) ASSERT_TRUE(m.accept("x"));
    for (const Stack& s : m.stacks()) EXPECT_LE(s.size(), 3u);
    ASSERT_TRUE(m.accept("."));
    EXPECT_TRUE(m.can_end());
}

}  // namespace
}  // namespace tandem::grammar
