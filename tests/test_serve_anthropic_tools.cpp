// Tools on Anthropic's Messages API without HTTP (tools/serve/anthropic_content.h):
// tools, tool_choice, tool_use and tool_result blocks read into what the
// OpenAI chat route takes (the prompt Qwen 2.5's template makes of them is
// the OpenAI route's), each bad field named, and the answer's blocks,
// whole and as streamed events. tests/serve/test_tools.py runs the route
// end to end.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/chat/chat_template.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"
#include "tools/serve/anthropic_api.h"
#include "tools/serve/anthropic_content.h"
#include "tools/serve/openai_api.h"
#include "tools/serve/tool_api.h"

namespace {

using nlohmann::json;
using tandem::chat::ToolCall;
using tandem::chat::ToolFormat;
using tandem::serve::ApiError;
using tandem::serve::ToolChoice;
namespace serve = tandem::serve;

// Key order matters (the template prints the schema as given): "required"
// before "properties", "type" last.
const std::string kWeather =
    R"({"name": "get_weather", "description": "Weather in a city", "input_schema": {"required": ["city"], )"
    R"("properties": {"unit": {"type": "string"}, "city": {"type": "string"}}, "type": "object"}})";

const std::string kHistory = R"([
  {"role": "user", "content": "Weather in Paris?"},
  {"role": "assistant", "content": [{"type": "text", "text": "Let me look."},
     {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"unit": "C", "city": "Paris"}}]},
  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C"},
     {"type": "text", "text": "And tomorrow?"}]}])";

json body_of(const std::string& text) { return json::parse(text); }

std::string with_tools(const std::string& messages, const std::string& extra = "") {
    return R"({"max_tokens": 8, "tools": [)" + kWeather + R"(], "messages": )" + messages + extra + "}";
}

// "param: message" of the 400 the body's text gets, or "<accepted>".
std::string refused(const std::string& text) {
    try {
        serve::parse_conversation(body_of(text), text);
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status, 400);
        return e.param + ": " + e.what();
    }
    return "<accepted>";
}

TEST(ServeAnthropicTools, ToolsBecomeOpenAIFunctionsInTheClientsKeyOrder) {
    const std::string text = with_tools(R"([{"role": "user", "content": "hi"}])");
    const serve::Conversation c = serve::parse_conversation(body_of(text), text);
    ASSERT_EQ(c.tools.tools.size(), 1u);
    EXPECT_EQ(c.tools.tools[0].dump(),
              R"({"type":"function","function":{"name":"get_weather","description":"Weather in a city",)"
              R"("parameters":{"required":["city"],"properties":{"unit":{"type":"string"},"city":{"type":"string"}},)"
              R"("type":"object"}}})");
    EXPECT_EQ(c.tools.names, std::vector<std::string>{"get_weather"});
    EXPECT_EQ(c.tools.choice, ToolChoice::Auto);
    EXPECT_TRUE(c.tools.parallel);
    EXPECT_TRUE(c.tools.active());
    // No text: the body's own order. An empty list: no tools.
    EXPECT_EQ(serve::parse_conversation(body_of(text)).tools.tools[0]["function"]["parameters"].begin().key(),
              "properties");
    EXPECT_TRUE(serve::parse_conversation(
                    {{"tools", json::array()}, {"messages", json::array({{{"role", "user"}, {"content", "x"}}})}})
                    .tools.tools.is_null());
}

TEST(ServeAnthropicTools, ToolChoiceMapsOntoOpenAIs) {
    const auto choice = [](const std::string& c) {
        const std::string text = with_tools(R"([{"role": "user", "content": "hi"}])", R"(, "tool_choice": )" + c);
        return serve::parse_conversation(body_of(text), text).tools;
    };
    EXPECT_EQ(choice(R"({"type": "auto"})").choice, ToolChoice::Auto);
    EXPECT_EQ(choice(R"({"type": "any"})").choice, ToolChoice::Required);
    EXPECT_EQ(choice(R"({"type": "none"})").choice, ToolChoice::None);
    EXPECT_FALSE(choice(R"({"type": "none"})").active());
    const auto named = choice(R"({"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true})");
    EXPECT_EQ(named.choice, ToolChoice::Named);
    EXPECT_EQ(named.named, "get_weather");
    EXPECT_FALSE(named.parallel);
    EXPECT_TRUE(choice(R"({"type": "any", "disable_parallel_tool_use": false})").parallel);
}

TEST(ServeAnthropicTools, ToolUseAndToolResultBecomeCallsAndToolMessages) {
    const std::string text = with_tools(kHistory);
    const serve::Conversation c = serve::parse_conversation(body_of(text), text);
    ASSERT_EQ(c.messages.size(), 4u);
    EXPECT_EQ(c.messages[0].role, "user");
    const auto& a = c.messages[1];
    EXPECT_EQ(a.role, "assistant");
    EXPECT_EQ(a.content, "Let me look.");
    ASSERT_EQ(a.tool_calls.size(), 1u);
    EXPECT_EQ(a.tool_calls[0].id, "toolu_1");
    EXPECT_EQ(a.tool_calls[0].name, "get_weather");
    EXPECT_EQ(a.tool_calls[0].arguments, R"({"unit":"C","city":"Paris"})");  // the client's order
    EXPECT_EQ(c.messages[2].role, "tool");
    EXPECT_EQ(c.messages[2].tool_call_id, "toolu_1");
    EXPECT_EQ(c.messages[2].name, "get_weather");
    EXPECT_EQ(c.messages[2].content, "18 C");
    EXPECT_EQ(c.messages[3].role, "user");
    EXPECT_EQ(c.messages[3].content, "And tomorrow?");
    EXPECT_TRUE(c.prefill.empty());

    // Text blocks as a result's content; is_error tells the model; a turn of results alone has no user text.
    const std::string err = with_tools(R"([{"role": "user", "content": "x"}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "a", "name": "get_weather", "input": {}}]}, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "a", "is_error": true, "content": [{"type": "text", "text": "no "},
         {"type": "text", "text": "service"}]}]}])");
    const serve::Conversation e = serve::parse_conversation(body_of(err), err);
    ASSERT_EQ(e.messages.size(), 3u);
    EXPECT_EQ(e.messages[2].role, "tool");
    EXPECT_EQ(e.messages[2].content, "Error: no service");
    EXPECT_EQ(e.messages[1].tool_calls[0].arguments, "{}");
}

// The prompt Qwen 2.5's template makes of the Anthropic request is the one
// it makes of the same conversation sent to /v1/chat/completions.
TEST(ServeAnthropicTools, TheTemplateGetsWhatTheOpenAIRouteGives) {
    const std::string text = with_tools(kHistory, R"(, "system": "Be brief.")");
    const serve::Conversation c = serve::parse_conversation(body_of(text), text);
    const std::string openai = R"({"messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "Let me look.", "tool_calls": [{"id": "toolu_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"unit\":\"C\",\"city\":\"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "toolu_1", "name": "get_weather", "content": "18 C"},
      {"role": "user", "content": "And tomorrow?"}],
      "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
        "parameters": {"required": ["city"], "properties": {"unit": {"type": "string"}, "city": {"type": "string"}},
        "type": "object"}}}]})";
    const json ob = json::parse(openai);
    const auto messages = serve::parse_messages(ob);
    const auto tools = serve::parse_tool_request(ob, openai);
    const auto t = tandem::chat::ChatTemplate::parse(
        tandem::testing::slurp(tandem::testing::test_data("chat_templates/qwen2_5.jinja")));
    tandem::chat::TemplateInputs in;
    in.tools = c.tools.tools;
    const std::string got = t.render(c.messages, in);
    in.tools = tools.tools;
    EXPECT_EQ(got, t.render(messages, in));
    EXPECT_NE(got.find(R"("properties": {"unit": {"type": "string"}, "city")"), std::string::npos) << got;
    EXPECT_NE(got.find("<tool_response>\n18 C\n</tool_response>"), std::string::npos) << got;
}

// A body of these tools (JSON text of an array's items) and a "hi" turn.
std::string tools_body(const std::string& tools) {
    return R"({"tools": [)" + tools + R"(], "messages": [{"role": "user", "content": "hi"}]})";
}

// A user turn, an assistant turn of `call` blocks, and then `after` (JSON
// text of the turns that follow).
std::string after_call(const std::string& call, const std::string& after) {
    return with_tools(R"([{"role": "user", "content": "x"}, {"role": "assistant", "content": [)" + call + "]}" +
                      (after.empty() ? "" : ", " + after) + "]");
}

const std::string kCall = R"({"type": "tool_use", "id": "a", "name": "get_weather", "input": {}})";

std::string results(const std::string& blocks) { return R"({"role": "user", "content": [)" + blocks + "]}"; }

TEST(ServeAnthropicTools, EachBadFieldIsNamed) {
    const std::string hi = R"([{"role": "user", "content": "hi"}])";
    const std::string object = R"("input_schema": {"type": "object"})";
    EXPECT_EQ(refused(with_tools(kHistory)), "<accepted>");
    EXPECT_EQ(refused(after_call(kCall, results(R"({"type": "tool_result", "tool_use_id": "a"})"))), "<accepted>");
    struct Case {
        std::string body, param;
    };
    const std::vector<Case> cases = {
        {R"({"tools": {"name": "f"}, "messages": [{"role": "user", "content": "hi"}]})", "tools"},
        {tools_body("{" + object + "}"), "tools[0].name"},
        {tools_body(R"({"name": "a b", )" + object + "}"), "tools[0].name"},
        {tools_body(R"({"name": "f", )" + object + R"(}, {"name": "f", )" + object + "}"), "tools[1].name"},
        {tools_body(R"({"name": "f", "input_schema": {"type": "array"}})"), "tools[0].input_schema.type"},
        {tools_body(R"({"name": "f", "input_schema": "x"})"), "tools[0].input_schema"},
        {tools_body(R"({"name": "f", "description": 3, )" + object + "}"), "tools[0].description"},
        {tools_body(R"({"type": "web_search_20250305", "name": "web_search"})"), "tools[0].type"},
        {with_tools(hi, R"(, "tool_choice": "any")"), "tool_choice"},
        {with_tools(hi, R"(, "tool_choice": {"type": "required"})"), "tool_choice.type"},
        {with_tools(hi, R"(, "tool_choice": {"type": "tool"})"), "tool_choice.name"},
        {with_tools(hi, R"(, "tool_choice": {"type": "tool", "name": "other"})"), "tool_choice.name"},
        {with_tools(hi, R"(, "tool_choice": {"type": "any", "disable_parallel_tool_use": "yes"})"),
         "tool_choice.disable_parallel_tool_use"},
        {R"({"tool_choice": {"type": "tool", "name": "f"}, "messages": [{"role": "user", "content": "hi"}]})",
         "tool_choice"},
        {with_tools("[" + results(kCall) + "]"), "messages[0].content[0].type"},
        {after_call(R"({"type": "tool_result", "tool_use_id": "a"})", R"({"role": "user", "content": "y"})"),
         "messages[1].content[0].type"},
        {with_tools("[" + results(R"({"type": "tool_result", "tool_use_id": "nope", "content": "x"})") + "]"),
         "messages[0].content[0].tool_use_id"},
        {with_tools("[" + results(R"({"type": "tool_result", "content": "x"})") + "]"),
         "messages[0].content[0].tool_use_id"},
        {after_call(R"({"type": "tool_use", "name": "get_weather", "input": {}})",
                    R"({"role": "user", "content": "y"})"),
         "messages[1].content[0].id"},
        {after_call(R"({"type": "tool_use", "id": "a", "name": "get_weather", "input": "{}"})",
                    R"({"role": "user", "content": "y"})"),
         "messages[1].content[0].input"},
        {after_call(kCall + ", " + kCall, R"({"role": "user", "content": "y"})"), "messages[1].content[1].id"},
        {after_call(kCall, results(R"({"type": "tool_result", "tool_use_id": "a", "content": [{"type": "image"}]})")),
         "messages[2].content[0].content[0].type"},
        {after_call(kCall, results(R"({"type": "tool_result", "tool_use_id": "a", "is_error": 1})")),
         "messages[2].content[0].is_error"},
        // A last assistant turn is a prefill; one with calls has no reply to continue.
        {after_call(kCall, ""), "messages"},
        {with_tools("[" + results(R"({"type": "thinking", "thinking": "hm"})") + "]"), "messages[0].content[0].type"},
    };
    for (const Case& c : cases) {
        const std::string e = refused(c.body);
        EXPECT_EQ(e.rfind(c.param + ": ", 0), 0u) << c.body << " -> " << e;
    }
    EXPECT_TRUE(tandem::testing::contains(refused(cases[7].body), "only custom tools"));
    EXPECT_TRUE(tandem::testing::contains(refused(cases[16].body), "answers no tool_use block"));
}

TEST(ServeAnthropicTools, TheAnswersBlocks) {
    const std::vector<ToolCall> calls = {{"get_weather", R"({"city": "Paris"})", "toolu_x"}};
    EXPECT_EQ(serve::content_blocks("", calls),
              json::parse(R"([{"type": "tool_use", "id": "toolu_x", "name": "get_weather", "input": {"city": "Paris"}}])"));
    EXPECT_EQ(serve::content_blocks("Sure.", calls)[0], json({{"type", "text"}, {"text", "Sure."}}));
    EXPECT_EQ(serve::content_blocks("", {}), json::parse(R"([{"type": "text", "text": ""}])"));
    // Arguments that are no object are kept whole.
    EXPECT_EQ(serve::tool_input("[1, 2]"), json({{"arguments", "[1, 2]"}}));
    EXPECT_EQ(serve::tool_input("Paris"), json({{"arguments", "Paris"}}));
    serve::Usage u;
    const json m = serve::message_response("msg_1", "m", "", {"tool_use", nullptr}, u, calls);
    EXPECT_EQ(m["content"].size(), 1u);
    EXPECT_EQ(m["stop_reason"], "tool_use");

    serve::Event e;
    e.done = true;
    e.finish_reason = "stop";
    EXPECT_EQ(serve::stop_reason(e, {}, true).reason, "tool_use");
    e.finish_reason = "length";  // a call cut short is no call to make
    EXPECT_EQ(serve::stop_reason(e, {}, true).reason, "max_tokens");
}

// The events' (type, index, what) in order.
std::vector<std::string> events_of(const std::string& stream) {
    std::vector<std::string> out;
    size_t pos = 0;
    while ((pos = stream.find("data: ", pos)) != std::string::npos) {
        const size_t end = stream.find('\n', pos);
        const json d = json::parse(stream.substr(pos + 6, end - pos - 6));
        std::string s = d["type"].get<std::string>() + " " + std::to_string(d.value("index", -1));
        if (d.contains("content_block")) s += " " + d["content_block"].dump();
        if (d.contains("delta")) s += " " + d["delta"].dump();
        out.push_back(s);
        pos = end;
    }
    return out;
}

TEST(ServeAnthropicTools, StreamedBlocksAreNumberedInOrder) {
    serve::BlockEvents b(serve::CallTaker(true, ToolFormat::Hermes, 7, "toolu_"));
    std::string s = b.text("Let me ");
    s += b.text("");
    s += b.text("look.");
    s += b.calls(std::vector<ToolCall>{{"get_weather", R"({"city": "Paris"})"}});
    s += b.calls(std::vector<ToolCall>{{"get_time", "{}"}});
    EXPECT_TRUE(b.called());
    s += b.finish();
    const auto ev = events_of(s);
    ASSERT_EQ(ev.size(), 10u) << s;
    EXPECT_EQ(ev[0], R"(content_block_start 0 {"text":"","type":"text"})");
    EXPECT_EQ(ev[1], R"(content_block_delta 0 {"text":"Let me ","type":"text_delta"})");
    EXPECT_EQ(ev[3], "content_block_stop 0");
    EXPECT_EQ(ev[4].rfind(R"(content_block_start 1 {"id":"toolu_)", 0), 0u) << ev[4];
    EXPECT_NE(ev[4].find(R"("input":{},"name":"get_weather","type":"tool_use"})"), std::string::npos) << ev[4];
    EXPECT_EQ(ev[5], R"(content_block_delta 1 {"partial_json":"{\"city\":\"Paris\"}","type":"input_json_delta"})");
    EXPECT_EQ(ev[6], "content_block_stop 1");
    EXPECT_EQ(ev[7].rfind("content_block_start 2", 0), 0u);
    EXPECT_EQ(ev[9], "content_block_stop 2");

    // One call only when parallel calls are off; a reply of nothing is an empty text block.
    serve::BlockEvents one(serve::CallTaker(false, ToolFormat::Hermes, 7, "toolu_"));
    std::string first = one.calls(std::vector<ToolCall>{{"a", "{}"}, {"b", "{}"}});
    const auto two = events_of(first + one.finish());
    EXPECT_EQ(two.size(), 3u);
    serve::BlockEvents none(serve::CallTaker(true, ToolFormat::Hermes, 7, "toolu_"));
    EXPECT_EQ(events_of(none.finish()),
              (std::vector<std::string>{R"(content_block_start 0 {"text":"","type":"text"})", "content_block_stop 0"}));
    EXPECT_FALSE(none.called());
}

}  // namespace
