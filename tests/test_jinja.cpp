// The Jinja subset (runtime/chat/jinja.h): every snippet of
// tests/data/chat_templates/language_cases.json against what the real
// jinja2 rendered (expected.json, made by scripts/render_chat_templates.py),
// then errors and hostile templates, which must fail cleanly and quickly.
#include <chrono>
#include <ctime>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/chat/jinja.h"
#include "runtime/common/error.h"
#include "tests/test_paths.h"

namespace tandem::chat::jinja {
namespace {

using nlohmann::ordered_json;

ordered_json load_json(const std::string& name) {
    std::ifstream in(testing::test_data("chat_templates/" + name));
    EXPECT_TRUE(in.good()) << name;
    return ordered_json::parse(in);
}

std::string render(const std::string& source, const ordered_json& context = ordered_json::object(),
                   const RenderOptions& options = {}) {
    return Template::parse(source).render(context, options);
}

// The message of the tandem::Error that rendering throws, or "<no error>".
std::string render_error(const std::string& source, const RenderOptions& options = {}) {
    try {
        render(source, ordered_json::object(), options);
    } catch (const Error& e) {
        return e.what();
    }
    return "<no error>";
}

TEST(JinjaLanguage, MatchesJinja2OnEveryCase) {
    const ordered_json cases = load_json("language_cases.json");
    const ordered_json expected = load_json("expected.json");
    ASSERT_GT(cases["cases"].size(), 50u);
    for (const auto& c : cases["cases"]) {
        const std::string name = c["name"];
        SCOPED_TRACE(name + ": " + c["template"].get<std::string>());
        ASSERT_TRUE(expected["language"].contains(name)) << "run scripts/render_chat_templates.py";
        const auto& want = expected["language"][name];
        if (want.contains("output")) {
            try {
                EXPECT_EQ(render(c["template"], c["context"]), want["output"].get<std::string>());
            } catch (const Error& e) {
                ADD_FAILURE() << "threw: " << e.what();
            }
        } else {
            std::string message = "<no error>";
            try {
                render(c["template"], c["context"]);
            } catch (const Error& e) {
                message = e.what();
            }
            EXPECT_NE(message, "<no error>") << "jinja2 failed with: " << want["error"];
            if (want["raised"].get<bool>()) {
                EXPECT_NE(message.find(want["error"].get<std::string>()), std::string::npos) << message;
            }
        }
    }
}

TEST(JinjaLanguage, FloatsPrintLikePython) {
    EXPECT_EQ(float_repr(1.0), "1.0");
    EXPECT_EQ(float_repr(0.1), "0.1");
    EXPECT_EQ(float_repr(1e16), "1e+16");
    EXPECT_EQ(float_repr(1e15), "1000000000000000.0");
    EXPECT_EQ(float_repr(0.0001), "0.0001");
    EXPECT_EQ(float_repr(0.00001), "1e-05");
    EXPECT_EQ(float_repr(-2.5e-300), "-2.5e-300");
    EXPECT_EQ(float_repr(123.456), "123.456");
}

TEST(JinjaLanguage, GenerationBlocksRenderTheirBody) {
    // transformers' {% generation %} marks assistant text; here it renders as is.
    EXPECT_EQ(render("a{% generation %}b{{ 1 }}{% endgeneration %}c"), "ab1c");
}

TEST(JinjaLanguage, MacrosRecurseAndSeeTopLevel) {
    EXPECT_EQ(render("{% set sep = '-' %}{% macro r(n) %}{{ n }}{% if n > 0 %}{{ sep }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(3) }}"),
              "3-2-1-0");
}

TEST(JinjaLanguage, StrftimeNowCanBeFixed) {
    RenderOptions options;
    options.strftime_now = [](const std::string& fmt) {
        std::tm tm{};
        tm.tm_year = 2024 - 1900;
        tm.tm_mon = 6;
        tm.tm_mday = 26;
        char buf[64];
        return std::string(buf, std::strftime(buf, sizeof buf, fmt.c_str(), &tm));
    };
    EXPECT_EQ(render("{{ strftime_now('%d %b %Y') }}", ordered_json::object(), options), "26 Jul 2024");
    // Without an override it is today's date: some non-empty year.
    EXPECT_EQ(render("{{ strftime_now('%Y') | length }}"), "4");
}

TEST(JinjaErrors, SyntaxErrorsNameLineAndColumn) {
    const std::string e = render_error("line one\n{% if x %}\n  {% endfor %}");
    EXPECT_NE(e.find("line 3, column 6"), std::string::npos) << e;
    EXPECT_NE(e.find("endfor"), std::string::npos) << e;

    const std::string unclosed = render_error("a\n\n{% for x in y %}\nbody");
    EXPECT_NE(unclosed.find("expected 'endfor'"), std::string::npos) << unclosed;
    EXPECT_NE(unclosed.find("line 3, column 4"), std::string::npos) << unclosed;
    EXPECT_NE(unclosed.find("end of template"), std::string::npos) << unclosed;

    const std::string tag = render_error("{{ 1 + }}");
    EXPECT_NE(tag.find("expected an expression, found '}}'"), std::string::npos) << tag;
    EXPECT_NE(tag.find("line 1, column 8"), std::string::npos) << tag;

    EXPECT_NE(render_error("{{ 'abc }}").find("closing quote"), std::string::npos);
    EXPECT_NE(render_error("{# never closed").find("'#}'"), std::string::npos);
    EXPECT_NE(render_error("{{ x").find("'}}'"), std::string::npos);
    EXPECT_NE(render_error("{% include 'x' %}").find("not supported"), std::string::npos);
    EXPECT_NE(render_error("{% break %}").find("outside of a for loop"), std::string::npos);
    EXPECT_NE(render_error("{{ a ? b }}").find("unexpected character '?'"), std::string::npos);
    EXPECT_NE(render_error("{{ (1 ] }}").find("unexpected ']'"), std::string::npos);
}

TEST(JinjaErrors, RuntimeErrorsNamePosition) {
    const std::string e = render_error("ok\n  {{ messages.role.x }}");
    EXPECT_NE(e.find("line 2"), std::string::npos) << e;
    EXPECT_NE(e.find("'messages' is undefined"), std::string::npos) << e;
    const std::string r = render_error("{{ raise_exception('Conversation roles must alternate') }}");
    EXPECT_NE(r.find("Conversation roles must alternate"), std::string::npos) << r;
    EXPECT_NE(render_error("{{ 9223372036854775807 + 1 }}").find("overflow"), std::string::npos);
    EXPECT_NE(render_error("{{ 1 | nosuch }}").find("no filter named 'nosuch'"), std::string::npos);
    EXPECT_NE(render_error("{{ 1 is nosuch }}").find("no test named 'nosuch'"), std::string::npos);
}

// Hostile templates fail with a clear message, quickly, without crashing.
class JinjaHostile : public ::testing::Test {
protected:
    void expect_fails_fast(const std::string& source, const std::string& needle) {
        const auto t0 = std::chrono::steady_clock::now();
        const std::string e = render_error(source);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_NE(e.find(needle), std::string::npos) << e;
        EXPECT_LT(seconds, 20.0);
    }
};

TEST_F(JinjaHostile, DeepParentheses) {
    expect_fails_fast("{{ " + std::string(10000, '(') + "1" + std::string(10000, ')') + " }}", "levels of nesting");
}

TEST_F(JinjaHostile, DeepNotsAndUnaryMinus) {
    std::string nots;
    for (int i = 0; i < 10000; ++i) nots += "not ";
    expect_fails_fast("{{ " + nots + "1 }}", "levels of nesting");
    expect_fails_fast("{{ " + std::string(10000, '-') + "1 }}", "levels of nesting");
}

TEST_F(JinjaHostile, LongOperatorChainsAndFilterChains) {
    std::string sum = "{{ 1";
    for (int i = 0; i < 100000; ++i) sum += "+1";
    expect_fails_fast(sum + " }}", "operations deep");
    std::string filters = "{{ 'x'";
    for (int i = 0; i < 100000; ++i) filters += "|trim";
    expect_fails_fast(filters + " }}", "operations deep");
}

TEST_F(JinjaHostile, DeepBlocks) {
    std::string s;
    for (int i = 0; i < 5000; ++i) s += "{% if true %}";
    expect_fails_fast(s, "levels of nesting");
    std::string lists;
    for (int i = 0; i < 5000; ++i) lists += "[";
    expect_fails_fast("{{ " + lists + std::string(5000, ']') + " }}", "levels of nesting");
}

TEST_F(JinjaHostile, HugeRangeIsCapped) {
    expect_fails_fast("{% for i in range(100000000) %}{{ i }}{% endfor %}", "range() of 100000000 items passes the limit");
}

TEST_F(JinjaHostile, NestedLoopsAreCapped) {
    expect_fails_fast("{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}", "loop iterations");
}

TEST_F(JinjaHostile, OutputAndStringsAreCapped) {
    expect_fails_fast("{% for i in range(300000) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}", "output passes the limit");
    expect_fails_fast("{{ 'ab' * 100000000000 }}", "passes the limit");
    expect_fails_fast("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "passes the limit");
}

TEST_F(JinjaHostile, SelfReferencingNamespace) {
    expect_fails_fast("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", "nested deeper");
}

TEST_F(JinjaHostile, MacroRecursion) {
    expect_fails_fast("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "macro calls nested deeper");
}

TEST_F(JinjaHostile, GarbageDoesNotCrash) {
    // Every prefix of a real template: each either renders or throws tandem::Error.
    const std::string src = "{%- for m in messages if m.role != 'x' -%}{{ m['content'] | trim ~ '\\n' }}{% else %}{# c #}{% endfor %}";
    for (size_t n = 0; n <= src.size(); ++n) {
        try {
            render(src.substr(0, n), ordered_json{{"messages", ordered_json::array({{{"role", "user"}, {"content", "hi"}}})}});
        } catch (const Error&) {
        }
    }
}

}  // namespace
}  // namespace tandem::chat::jinja
