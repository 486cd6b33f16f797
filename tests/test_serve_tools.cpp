// Tool calls in /v1/chat/completions requests and answers
// (tools/serve/tool_api.h): each bad field named with a 400, the history's
// tool fields taken, what cannot be served refused, and the calls of a
// reply numbered and given ids as OpenAI's clients expect.
#include <algorithm>
#include <cctype>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/grammar/matcher.h"
#include "tests/chat_messages.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"
#include "tools/serve/grammar_request.h"
#include "tools/serve/openai_api.h"
#include "tools/serve/tool_api.h"

namespace {

using nlohmann::json;
using tandem::serve::ApiError;
using tandem::serve::ToolChoice;
using tandem::serve::ToolRequest;

const json kMessages = tandem::testing::user_turn();

json weather_tool() {
    return json::parse(R"({"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})");
}

ToolRequest parse(const json& body) {
    const json full = [&] {
        json b = body;
        b["messages"] = kMessages;
        return b;
    }();
    tandem::serve::parse_chat_request(full, 1);
    return tandem::serve::parse_tool_request(full, full.dump());
}

// "param: message" of the ApiError parsing `body` throws, or "<accepted>".
std::string error_of(const json& body) {
    try {
        parse(body);
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status, 400);
        return e.param + ": " + e.what();
    }
    return "<accepted>";
}

TEST(ServeTools, EachBadFieldIsNamed) {
    const json tools = json::array({weather_tool()});
    EXPECT_EQ(error_of({{"tools", tools}, {"tool_choice", "auto"}, {"parallel_tool_calls", false}}), "<accepted>");
    json no_type = weather_tool();
    no_type.erase("type");
    json bad_name = weather_tool();
    bad_name["function"]["name"] = "get weather";
    json bad_params = weather_tool();
    bad_params["function"]["parameters"] = "a string";
    json not_object = weather_tool();
    not_object["function"]["parameters"]["type"] = "string";
    json no_function = weather_tool();
    no_function.erase("function");
    struct Case {
        json body;
        std::string param;
    };
    const std::vector<Case> cases = {
        {{{"tools", "get_weather"}}, "tools"},
        {{{"tools", json::array({"x"})}}, "tools[0]"},
        {{{"tools", json::array({no_type})}}, "tools[0].type"},
        {{{"tools", json::array({no_function})}}, "tools[0].function"},
        {{{"tools", json::array({bad_name})}}, "tools[0].function.name"},
        {{{"tools", json::array({weather_tool(), weather_tool()})}}, "tools[1].function.name"},
        {{{"tools", json::array({bad_params})}}, "tools[0].function.parameters"},
        {{{"tools", json::array({not_object})}}, "tools[0].function.parameters.type"},
        {{{"tools", tools}, {"tool_choice", "sometimes"}}, "tool_choice"},
        {{{"tools", tools}, {"tool_choice", 3}}, "tool_choice"},
        {{{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}, "tool_choice.function.name"},
        {{{"tools", tools}, {"tool_choice", {{"type", "tool"}}}}, "tool_choice.type"},
        {{{"tool_choice", "required"}}, "tool_choice"},
        {{{"tools", tools}, {"parallel_tool_calls", "yes"}}, "parallel_tool_calls"},
    };
    for (const Case& c : cases) {
        const std::string e = error_of(c.body);
        EXPECT_EQ(e.rfind(c.param + ": ", 0), 0u) << c.body.dump() << " -> " << e;
    }
}

TEST(ServeTools, ChoicesAndToolsAreTakenInTheClientsKeyOrder) {
    const ToolRequest named = parse({{"tools", json::array({weather_tool()})},
                                     {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}});
    EXPECT_EQ(named.choice, ToolChoice::Named);
    EXPECT_EQ(named.named, "get_weather");
    EXPECT_TRUE(named.active());
    EXPECT_EQ(parse({{"tools", json::array({weather_tool()})}, {"tool_choice", "none"}}).active(), false);
    EXPECT_EQ(parse({{"tools", json::array()}}).active(), false);  // an empty list is no tools
    EXPECT_TRUE(parse({}).tools.is_null());
    // The template prints the tools: their keys keep the client's order
    // (nlohmann::json alone would sort them).
    const std::string raw = R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": )"
                            R"({"name": "f", "parameters": {"type": "object", "properties": {"zeta": {}, "alpha": {}}}}}]})";
    const ToolRequest r = tandem::serve::parse_tool_request(json::parse(raw), raw);
    EXPECT_EQ(r.tools[0]["function"]["parameters"]["properties"].begin().key(), "zeta");
}

TEST(ServeTools, HistoryToolFieldsAreRead) {
    const json body = {
        {"messages",
         json::array({{{"role", "user"}, {"content", "Weather?"}},
                      {{"role", "assistant"},
                       {"content", nullptr},
                       {"tool_calls", json::array({{{"id", "call_1"}, {"type", "function"},
                                                    {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Oslo\"}"}}}},
                                                   {{"id", "call_2"}, {"type", "function"},
                                                    {"function", {{"name", "get_time"}, {"arguments", {{"city", "Oslo"}}}}}}})}},
                      {{"role", "tool"}, {"content", "4 C"}, {"tool_call_id", "call_1"}, {"name", "get_weather"}}})}};
    const auto r = tandem::serve::parse_chat_request(body, 1);
    ASSERT_EQ(r.messages.size(), 3u);
    ASSERT_EQ(r.messages[1].tool_calls.size(), 2u);
    EXPECT_EQ(r.messages[1].content, "");
    EXPECT_EQ(r.messages[1].tool_calls[0].id, "call_1");
    EXPECT_EQ(r.messages[1].tool_calls[0].arguments, "{\"city\": \"Oslo\"}");
    EXPECT_EQ(json::parse(r.messages[1].tool_calls[1].arguments), (json{{"city", "Oslo"}}));  // an object, as its JSON
    EXPECT_EQ(r.messages[2].tool_call_id, "call_1");
    EXPECT_EQ(r.messages[2].name, "get_weather");

    const auto bad = [](const json& message) -> std::string {
        try {
            tandem::serve::parse_chat_request({{"messages", json::array({message})}}, 1);
        } catch (const ApiError& e) {
            return e.param;
        }
        return "<accepted>";
    };
    EXPECT_EQ(bad({{"role", "user"}, {"content", "x"}, {"tool_calls", json::array()}}), "messages[0].tool_calls");
    EXPECT_EQ(bad({{"role", "assistant"}, {"tool_calls", json::array({{{"function", {{"arguments", "{}"}}}}})}}),
              "messages[0].tool_calls[0].function.name");
    EXPECT_EQ(bad({{"role", "assistant"}, {"tool_calls", json::array({{{"function", {{"name", "f"}, {"arguments", 3}}}}})}}),
              "messages[0].tool_calls[0].function.arguments");
    EXPECT_EQ(bad({{"role", "tool"}, {"content", "x"}, {"tool_call_id", 7}}), "messages[0].tool_call_id");
}

TEST(ServeTools, WhatCannotBeServedIsRefused) {
    const auto refused = [](const ToolRequest& r, tandem::chat::ToolFormat f) -> std::string {
        try {
            tandem::serve::check_tool_support(r, f);
        } catch (const ApiError& e) {
            return e.param;
        }
        return "<accepted>";
    };
    const json tools = json::array({weather_tool()});
    EXPECT_EQ(refused(parse({{"tools", tools}}), tandem::chat::ToolFormat::Hermes), "<accepted>");
    EXPECT_EQ(refused(parse({{"tools", tools}}), tandem::chat::ToolFormat::None), "tools");
    EXPECT_EQ(refused(parse({{"tools", tools}, {"tool_choice", "none"}}), tandem::chat::ToolFormat::None), "<accepted>");
    // Served: a grammar holds the reply to a call (completions.cpp); without a call format, refused.
    EXPECT_EQ(refused(parse({{"tools", tools}, {"tool_choice", "required"}}), tandem::chat::ToolFormat::Hermes), "<accepted>");
    EXPECT_EQ(refused(parse({{"tools", tools}, {"tool_choice", "required"}}), tandem::chat::ToolFormat::None), "tools");
}

TEST(ServeTools, CallsGetIdsAndIndexesAndParallelFalseKeepsTheFirst) {
    const std::vector<tandem::chat::ToolCall> calls = {{"a", "{}"}, {"b", "{}", "given"}, {"c", "{}"}};
    tandem::serve::CallTaker all(true, tandem::chat::ToolFormat::Hermes, 42);
    const auto first = all.take(std::span(calls).subspan(0, 2));
    const auto rest = all.take(std::span(calls).subspan(2));
    ASSERT_EQ(first.size(), 2u);
    ASSERT_EQ(rest.size(), 1u);
    EXPECT_EQ(all.taken(), 3u);
    EXPECT_EQ(first[0].id.rfind("call_", 0), 0u);
    EXPECT_EQ(first[0].id.size(), 29u);
    EXPECT_EQ(first[1].id, "given");  // the model's own id is kept
    EXPECT_NE(rest[0].id, first[0].id);

    tandem::serve::CallTaker mistral(true, tandem::chat::ToolFormat::Mistral, 42);
    const auto m = mistral.take(std::span(calls).subspan(0, 1));
    ASSERT_EQ(m.size(), 1u);
    EXPECT_EQ(m[0].id.size(), 9u);  // Mistral's templates refuse other ids
    EXPECT_TRUE(std::all_of(m[0].id.begin(), m[0].id.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); }));

    tandem::serve::CallTaker one(false, tandem::chat::ToolFormat::Hermes, 42);
    EXPECT_EQ(one.take(calls).size(), 1u);
    EXPECT_TRUE(one.take(calls).empty());

    // OpenAI's streaming shape: index, id, type, function {name, arguments}.
    const auto chunk = tandem::serve::tool_calls_chunk({"chatcmpl-1", "m", 0}, rest, 2);
    const json& tc = chunk["choices"][0]["delta"]["tool_calls"][0];
    EXPECT_EQ(tc["index"], 2);
    EXPECT_EQ(tc["id"], rest[0].id);
    EXPECT_EQ(tc["type"], "function");
    EXPECT_EQ(tc["function"], (json{{"name", "c"}, {"arguments", "{}"}}));
}

// tool_choice "required" or a named function: the arguments follow each
// tool's parameters; a schema the converter refuses is a 400 naming where
// with "strict": true, and any JSON object for that tool without.
TEST(ServeTools, RequiredCallsFollowTheParametersOrSayWhyNot) {
    const auto tmpl = tandem::chat::ChatTemplate::parse(
        tandem::testing::slurp(tandem::testing::test_data("chat_templates/qwen2_5.jinja")));
    auto tools = nlohmann::ordered_json::parse(R"J([
        {"type": "function", "function": {"name": "count", "parameters": {"type": "object",
            "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 3}}, "required": ["n"]}}},
        {"type": "function", "function": {"name": "find", "parameters": {"type": "object",
            "properties": {"q": {"type": "string", "pattern": "^(?=a)"}}, "required": ["q"]}}}])J");
    const auto call = [](const std::string& name, const std::string& args) {
        return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n</tool_call>";
    };
    const auto takes = [](const std::shared_ptr<const tandem::grammar::Grammar>& g, const std::string& text) {
        tandem::grammar::Matcher m(g);
        return m.accept(text) && m.can_end();
    };
    // Not strict: "find" takes any object, "count" keeps its bounds.
    const auto g = tandem::serve::tool_choice_grammar(tmpl, tools, "", false);
    EXPECT_TRUE(takes(g, call("count", R"({"n": 2})")));
    EXPECT_FALSE(takes(g, call("count", R"({"n": 4})")));
    EXPECT_TRUE(takes(g, call("find", R"({"anything": [1, 2]})")));
    // Named: only that tool, its schema held.
    const auto named = tandem::serve::tool_choice_grammar(tmpl, tools, "count", false);
    EXPECT_TRUE(takes(named, call("count", R"({"n": 3})")));
    EXPECT_FALSE(takes(named, call("find", R"({"q": "a"})")));
    // Strict: a 400 naming the keyword and where it stands.
    tools[1]["function"]["strict"] = true;
    try {
        tandem::serve::tool_choice_grammar(tmpl, tools, "", false);
        ADD_FAILURE() << "a strict tool with a refused schema is accepted";
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status, 400);
        EXPECT_EQ(e.param, "tools[1].function.parameters.properties.q.pattern");
        EXPECT_NE(std::string(e.what()).find("lookahead"), std::string::npos) << e.what();
    }
    // A strict tool that is not the named one does not matter.
    EXPECT_TRUE(takes(tandem::serve::tool_choice_grammar(tmpl, tools, "count", false), call("count", R"({"n": 1})")));
    // The arguments are an object even where the schema would take more.
    const auto loose = nlohmann::ordered_json::parse(R"([
        {"type": "function", "function": {"name": "any", "parameters": {}}},
        {"type": "function", "function": {"name": "either", "parameters": {"anyOf": [{"type": "integer"}, {"type": "object"}]}}}])");
    const auto l = tandem::serve::tool_choice_grammar(tmpl, loose, "", false);
    EXPECT_TRUE(takes(l, call("any", "{}")));  // an object with no properties (no other keys: as llama.cpp)
    EXPECT_FALSE(takes(l, call("any", "3")));
    EXPECT_TRUE(takes(l, call("either", R"({"k": 1})")));
    EXPECT_FALSE(takes(l, call("either", "3")));
}

}  // namespace
