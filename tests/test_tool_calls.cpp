// Tool calls in replies (runtime/chat/tool_calls.h): each family's
// convention as its models write it, whole and streamed in any pieces, the
// fallback to content for what does not parse, and the family each real
// template in tests/data/chat_templates is given.
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/chat/reply_parser.h"
#include "runtime/chat/tool_calls.h"
#include "runtime/chat/tool_grammar.h"
#include "runtime/common/error.h"
#include "runtime/grammar/json_schema.h"
#include "runtime/grammar/matcher.h"
#include "tests/grammar_sample.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace tandem::chat {
namespace {

struct Parsed {
    std::string content;
    std::vector<ToolCall> calls;
};

Parsed whole(ToolFormat f, const std::string& text) {
    ToolCallParser p(f);
    const auto d = p.push(text, true);
    EXPECT_EQ(d.content, p.content());
    return {p.content(), p.tool_calls()};
}

// The text in pieces of `step` bytes: what the deltas add up to.
Parsed streamed(ToolFormat f, const std::string& text, size_t step) {
    ToolCallParser p(f);
    Parsed out;
    for (size_t i = 0; i < text.size(); i += step) {
        const auto d = p.push(text.substr(i, step), i + step >= text.size());
        out.content += d.content;
        out.calls.insert(out.calls.end(), d.calls.begin(), d.calls.end());
    }
    return out;
}

// The arguments as JSON, so that spacing does not matter.
nlohmann::json args(const ToolCall& c) { return nlohmann::json::parse(c.arguments); }

void expect_same_streamed(ToolFormat f, const std::string& text) {
    const Parsed w = whole(f, text);
    for (size_t step : {1, 2, 3, 7, 64}) {
        SCOPED_TRACE("pieces of " + std::to_string(step) + " bytes");
        const Parsed s = streamed(f, text, step);
        EXPECT_EQ(s.content, w.content);
        ASSERT_EQ(s.calls.size(), w.calls.size());
        for (size_t i = 0; i < s.calls.size(); ++i) {
            EXPECT_EQ(s.calls[i].name, w.calls[i].name);
            EXPECT_EQ(s.calls[i].arguments, w.calls[i].arguments);
            EXPECT_EQ(s.calls[i].id, w.calls[i].id);
        }
    }
}

TEST(ToolCalls, HermesCallsAfterText) {
    const std::string text =
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    const Parsed p = whole(ToolFormat::Hermes, text);
    EXPECT_EQ(p.content, "Let me check.");
    ASSERT_EQ(p.calls.size(), 2u);
    EXPECT_EQ(p.calls[0].name, "get_weather");
    EXPECT_EQ(args(p.calls[0]), (nlohmann::json{{"city", "Paris"}, {"days", 2}}));
    EXPECT_EQ(p.calls[1].name, "get_time");
    EXPECT_TRUE(p.calls[0].id.empty());
    expect_same_streamed(ToolFormat::Hermes, text);
}

TEST(ToolCalls, HermesListInOneBlockAndUnclosedLastCall) {
    // SmolLM2's convention: a JSON list of calls in one block.
    const Parsed list = whole(ToolFormat::Hermes,
                              "<tool_call>[{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {\"x\": [1, 2]}}]</tool_call>");
    ASSERT_EQ(list.calls.size(), 2u);
    EXPECT_EQ(list.calls[1].name, "b");
    EXPECT_EQ(args(list.calls[1]), (nlohmann::json{{"x", {1, 2}}}));
    EXPECT_EQ(list.content, "");
    // A reply cut before its closing tag (a stop string) still gives the call.
    const Parsed cut = whole(ToolFormat::Hermes, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"q\": \"}\"}}\n");
    ASSERT_EQ(cut.calls.size(), 1u);
    EXPECT_EQ(args(cut.calls[0]), (nlohmann::json{{"q", "}"}}));
}

TEST(ToolCalls, WhatDoesNotParseIsContent) {
    for (const std::string text : {"<tool_call>{\"name\": \"a\", \"arguments\": {</tool_call> then text",
                                   "<tool_call>{\"arguments\": {}}</tool_call>", "I use <tool_call> tags", "<tool_call>"}) {
        SCOPED_TRACE(text);
        const Parsed p = whole(ToolFormat::Hermes, text);
        EXPECT_TRUE(p.calls.empty());
        EXPECT_EQ(p.content, text);
        expect_same_streamed(ToolFormat::Hermes, text);
    }
    // A bad block does not hide a good one after it.
    const Parsed p = whole(ToolFormat::Hermes, "<tool_call>oops</tool_call> <tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>");
    ASSERT_EQ(p.calls.size(), 1u);
    EXPECT_EQ(p.calls[0].name, "b");
    EXPECT_EQ(p.content, "<tool_call>oops</tool_call>");
}

TEST(ToolCalls, PlainRepliesAreUnchangedByteForByte) {
    const std::string text = "  Paris is the capital of France.\n\n Tags like <tool and [TOOL or {braces} stay.  \n";
    for (ToolFormat f : {ToolFormat::Hermes, ToolFormat::Mistral, ToolFormat::None}) {
        EXPECT_EQ(whole(f, text).content, text);
        expect_same_streamed(f, text);
    }
    EXPECT_EQ(whole(ToolFormat::Llama3, text).content, text);
    expect_same_streamed(ToolFormat::Llama3, text);
}

TEST(ToolCalls, AMarkerSplitAcrossPiecesIsNeverShown) {
    ToolCallParser p(ToolFormat::Hermes);
    EXPECT_EQ(p.push("Sure <tool").content, "Sure");
    const auto d = p.push("_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>");
    EXPECT_EQ(d.content, "");
    ASSERT_EQ(d.calls.size(), 1u);
    EXPECT_EQ(d.calls[0].name, "f");
    EXPECT_TRUE(p.push("", true).empty());
    EXPECT_EQ(p.content(), "Sure");
}

TEST(ToolCalls, Llama3JsonReplies) {
    const std::string one = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}";
    const Parsed p = whole(ToolFormat::Llama3, one);
    ASSERT_EQ(p.calls.size(), 1u);
    EXPECT_EQ(p.calls[0].name, "get_weather");
    EXPECT_EQ(args(p.calls[0]), (nlohmann::json{{"city", "Oslo"}}));
    EXPECT_EQ(p.content, "");
    expect_same_streamed(ToolFormat::Llama3, one);

    const std::string tagged = "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"n\": 1}}";
    const Parsed two = whole(ToolFormat::Llama3, tagged);
    ASSERT_EQ(two.calls.size(), 2u);
    EXPECT_EQ(two.calls[1].name, "b");
    expect_same_streamed(ToolFormat::Llama3, tagged);

    // JSON that is not a call, or comes after text, is content.
    for (const std::string& text : {std::string("{\"city\": \"Oslo\"}"), "The call is " + one}) {
        SCOPED_TRACE(text);
        const Parsed c = whole(ToolFormat::Llama3, text);
        EXPECT_TRUE(c.calls.empty());
        EXPECT_EQ(c.content, text);
        expect_same_streamed(ToolFormat::Llama3, text);
    }
}

TEST(ToolCalls, MistralBothStyles) {
    const std::string list = "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}, \"id\": \"Ab3dE5gH9\"}, "
                             "{\"name\": \"get_time\", \"arguments\": {}}]";
    const Parsed a = whole(ToolFormat::Mistral, list);
    ASSERT_EQ(a.calls.size(), 2u);
    EXPECT_EQ(a.calls[0].id, "Ab3dE5gH9");
    EXPECT_EQ(args(a.calls[0]), (nlohmann::json{{"city", "Rome"}}));
    EXPECT_EQ(a.calls[1].name, "get_time");
    expect_same_streamed(ToolFormat::Mistral, list);

    const std::string named = "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}[TOOL_CALLS]get_time[CALL_ID]q1w2e3r4t[ARGS]{}";
    const Parsed b = whole(ToolFormat::Mistral, named);
    ASSERT_EQ(b.calls.size(), 2u);
    EXPECT_EQ(b.calls[0].name, "get_weather");
    EXPECT_EQ(args(b.calls[0]), (nlohmann::json{{"city", "Rome"}}));
    EXPECT_EQ(b.calls[1].name, "get_time");
    EXPECT_EQ(b.calls[1].id, "q1w2e3r4t");
    EXPECT_EQ(b.content, "");
    expect_same_streamed(ToolFormat::Mistral, named);

    const std::string bad = "[TOOL_CALLS] not a call";
    EXPECT_EQ(whole(ToolFormat::Mistral, bad).content, bad);
    expect_same_streamed(ToolFormat::Mistral, bad);
}

TEST(ToolCalls, ReplyParserSplitsHarmonyOrCallsOrNothing) {
    const std::string hermes = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
    ReplyParser none(false, ToolFormat::None);
    EXPECT_EQ(none.push(hermes, true).content, hermes);
    EXPECT_TRUE(none.tool_calls().empty());
    ReplyParser calls(false, ToolFormat::Hermes);
    EXPECT_EQ(calls.push(hermes, true).calls.size(), 1u);
    ReplyParser harmony(true, ToolFormat::Harmony);
    const auto d = harmony.push("<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":1}<|call|>", true);
    ASSERT_EQ(d.calls.size(), 1u);
    EXPECT_EQ(d.calls[0].name, "f");
    EXPECT_EQ(d.calls[0].arguments, "{\"a\":1}");
    // tool_choice "none" (or no tools): a harmony call is not reported.
    ReplyParser harmony_none(true, ToolFormat::None);
    const auto n = harmony_none.push("<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":1}<|call|>",
                                     true);
    EXPECT_TRUE(n.calls.empty());
    EXPECT_TRUE(harmony_none.tool_calls().empty());
}

TEST(ToolCalls, EachRealTemplateGetsItsFamilysFormat) {
    const std::vector<std::pair<std::string, ToolFormat>> cases = {
        {"qwen2_5", ToolFormat::Hermes},      {"qwen3", ToolFormat::Hermes},          {"qwen3_0_6b", ToolFormat::Hermes},
        {"hermes3_tool_use", ToolFormat::Hermes}, {"llama3_1", ToolFormat::Llama3},   {"llama3_2", ToolFormat::Llama3},
        {"llama3_3", ToolFormat::Llama3},     {"mistral_v03", ToolFormat::Mistral},  {"mistral_nemo", ToolFormat::Mistral},
        {"mistral_small_3_2", ToolFormat::Mistral}, {"gpt_oss", ToolFormat::Harmony}, {"smollm2", ToolFormat::None},
        {"chatml", ToolFormat::None},         {"llama3", ToolFormat::None},           {"gemma3", ToolFormat::None},
        {"mistral_v01", ToolFormat::None},    {"phi3", ToolFormat::None},
    };
    for (const auto& [name, format] : cases) {
        const auto t = ChatTemplate::parse(testing::slurp(testing::test_data("chat_templates/" + name + ".jinja")));
        EXPECT_EQ(tool_format_name(tool_format(t)), tool_format_name(format)) << name;
    }
}

// The GBNF tandem serve holds a required or named call to.
TEST(ToolGrammar, OnlyTheChosenFunctionInEachFamilysFormat) {
    const auto tools = nlohmann::ordered_json::parse(
        R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "get_time"}}])");
    const auto tmpl = [](const std::string& name) {
        return ChatTemplate::parse(testing::slurp(testing::test_data("chat_templates/" + name + ".jinja")));
    };
    const std::string named = tool_call_grammar(tmpl("qwen2_5"), tools, "get_time", false);
    EXPECT_NE(named.find("get_time"), std::string::npos);
    EXPECT_EQ(named.find("get_weather"), std::string::npos);
    EXPECT_EQ(named.rfind("root ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"\n", 0), 0u) << named;
    const std::string any = tool_call_grammar(tmpl("mistral_small_3_2"), tools, "", true);
    EXPECT_NE(any.find("\"[TOOL_CALLS]get_weather[ARGS]\" args-0"), std::string::npos) << any;
    EXPECT_NE(any.find("( call )*"), std::string::npos) << any;
    // A converter's rules stand for the arguments of tools with a schema.
    std::vector<std::string> asked;
    const std::string schema = tool_call_grammar(tmpl("llama3_1"), tools, "", false, [&](const auto& s, const std::string& rule) {
        asked.push_back(rule + " " + s.dump());
        return rule + " ::= \"{}\"\n";
    });
    EXPECT_EQ(asked, std::vector<std::string>{"args-0 {\"type\":\"object\"}"});
    EXPECT_NE(schema.find("args-1 ::= json-object"), std::string::npos);
    EXPECT_THROW(tool_call_grammar(tmpl("smollm2"), tools, "", false), Error);
    EXPECT_THROW(tool_call_grammar(tmpl("qwen2_5"), tools, "nope", false), Error);
}

// With json_schema_rules as the converter, each call's arguments follow
// its tool's parameters: random texts of the grammar parse, in each
// family's format, into calls whose arguments keep the schema.
TEST(ToolGrammar, ArgumentsFollowEachToolsSchema) {
    const auto tools = nlohmann::ordered_json::parse(R"([
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
            "properties": {"city": {"type": "string", "pattern": "^[A-Z][a-z]{1,12}$"},
                           "days": {"type": "integer", "minimum": 1, "maximum": 7},
                           "unit": {"enum": ["c", "f"]}},
            "required": ["city", "days", "unit"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "get_time"}}])");
    const auto tmpl = [](const std::string& name) {
        return ChatTemplate::parse(testing::slurp(testing::test_data("chat_templates/" + name + ".jinja")));
    };
    const std::regex city("[A-Z][a-z]{1,12}");
    std::mt19937 rng(11);
    for (const char* name : {"qwen2_5", "llama3_1", "mistral_v03", "mistral_small_3_2"}) {
        const ChatTemplate t = tmpl(name);
        const auto g = grammar::compile_grammar(tool_call_grammar(t, tools, "", true, grammar::json_schema_rules));
        const auto format = tool_format(t);
        int weather = 0;
        for (int i = 0; i < 200; ++i) {
            const auto text = testing::random_text(*g, rng, 4000);
            if (!text) continue;
            ReplyParser p(false, format);
            p.push(*text, true);
            ASSERT_FALSE(p.tool_calls().empty()) << name << ": " << *text;
            EXPECT_EQ(p.content(), "") << name << ": " << *text;
            for (const ToolCall& c : p.tool_calls()) {
                const auto args = nlohmann::json::parse(c.arguments, nullptr, false);
                ASSERT_TRUE(args.is_object()) << name << ": " << c.arguments;
                if (c.name != "get_weather") continue;
                ++weather;
                EXPECT_EQ(args.size(), 3u) << c.arguments;
                EXPECT_TRUE(std::regex_match(args.value("city", ""), city)) << c.arguments;
                const int64_t days = args.value("days", int64_t{0});
                EXPECT_TRUE(days >= 1 && days <= 7) << c.arguments;
                EXPECT_TRUE(args.value("unit", "") == "c" || args.value("unit", "") == "f") << c.arguments;
            }
        }
        EXPECT_GT(weather, 20) << name;
        const auto takes = [&](const std::string& s) {
            grammar::Matcher m(g);
            return m.accept(s) && m.can_end();
        };
        if (format == ToolFormat::Hermes) {
            const std::string head = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ";
            const std::string tail = "}\n</tool_call>";
            EXPECT_TRUE(takes(head + R"({"city": "Paris", "days": 3, "unit": "c"})" + tail));
            EXPECT_FALSE(takes(head + R"({"city": "Paris", "days": 8, "unit": "c"})" + tail));
            EXPECT_FALSE(takes(head + R"({"city": "paris", "days": 3, "unit": "c"})" + tail));
            EXPECT_FALSE(takes(head + R"({"city": "Paris", "days": 3, "unit": "k"})" + tail));
            EXPECT_FALSE(takes(head + R"({"city": "Paris", "days": 3})" + tail));
            EXPECT_TRUE(takes("<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": [1]}}\n</tool_call>"));
        }
    }
}

}  // namespace
}  // namespace tandem::chat
