// Anthropic's Messages API without HTTP (tools/serve/anthropic_api.h): the
// request checks, what a request becomes, stop reasons, and the answer and
// error shapes; tests/serve/test_n_messages.py runs the route end to end.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/chat_messages.h"
#include "tests/test_paths.h"
#include "tools/serve/anthropic_api.h"

namespace {

using nlohmann::json;
using tandem::serve::ApiError;
using tandem::serve::parse_messages_request;

const json kHi = tandem::testing::user_turn();

// "param: message" of the 400 a body gets, or "<accepted>".
std::string refused(const json& body) {
    try {
        parse_messages_request(body, 1);
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status, 400);
        return e.param + ": " + e.what();
    }
    return "<accepted>";
}

TEST(ServeAnthropic, EachBadFieldIsNamed) {
    EXPECT_EQ(refused({{"messages", kHi}, {"max_tokens", 8}}), "<accepted>");
    struct Case {
        json body;
        std::string param;
    };
    const json image = json::array({{{"role", "user"},
                                     {"content", json::array({{{"type", "text"}, {"text", "look"}},
                                                              {{"type", "image"}, {"source", json::object()}}})}}});
    const std::vector<Case> cases = {
        {{{"messages", kHi}}, "max_tokens"},
        {{{"messages", kHi}, {"max_tokens", 0}}, "max_tokens"},
        {{{"messages", kHi}, {"max_tokens", "8"}}, "max_tokens"},
        {{{"max_tokens", 8}}, "messages"},
        {{{"messages", json::array()}, {"max_tokens", 8}}, "messages"},
        {{{"messages", json::array({{{"role", "system"}, {"content", "x"}}})}, {"max_tokens", 8}}, "messages[0].role"},
        {{{"messages", json::array({{{"role", "user"}}})}, {"max_tokens", 8}}, "messages[0].content"},
        {{{"messages", json::array({{{"role", "user"}, {"content", 5}}})}, {"max_tokens", 8}}, "messages[0].content"},
        {{{"messages", image}, {"max_tokens", 8}}, "messages[0].content[1].type"},
        {{{"messages", kHi}, {"max_tokens", 8}, {"system", json::array({{{"type", "text"}}})}}, "system[0].text"},
        {{{"messages", kHi}, {"max_tokens", 8}, {"temperature", 1.5}}, "temperature"},
        {{{"messages", kHi}, {"max_tokens", 8}, {"top_p", 0}}, "top_p"},
        {{{"messages", kHi}, {"max_tokens", 8}, {"top_k", -1}}, "top_k"},
        {{{"messages", kHi}, {"max_tokens", 8}, {"stop_sequences", "x"}}, "stop_sequences"},
        {{{"messages", kHi}, {"max_tokens", 8}, {"stop_sequences", json::array({"a", 1})}}, "stop_sequences[1]"},
        {{{"messages", kHi}, {"max_tokens", 8}, {"stream", "yes"}}, "stream"},
        {{{"messages", kHi}, {"max_tokens", 8}, {"tools", json::array({{{"name", "f"}}})}}, "tools[0].input_schema"},
        {{{"messages", kHi}, {"max_tokens", 8}, {"tool_choice", {{"type", "any"}}}}, "tool_choice"},
        {{{"messages", kHi}, {"max_tokens", 8}, {"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}}}, "thinking"},
        {{{"messages", json::array({{{"role", "assistant"}, {"content", "x"}}})}, {"max_tokens", 8}}, "messages"},
    };
    for (const Case& c : cases) {
        const std::string e = refused(c.body);
        EXPECT_EQ(e.rfind(c.param + ": ", 0), 0u) << c.body.dump() << " -> " << e;
    }
    EXPECT_EQ(refused({{"messages", kHi}, {"max_tokens", 8}, {"tools", json::array({1})}}),
              "tools[0]: 'tools[0]': expected an object {name, description, input_schema}, found an integer");
}

TEST(ServeAnthropic, ValuesAreTaken) {
    const json body = {
        {"model", "claude-whatever"},
        {"system", json::array({{{"type", "text"}, {"text", "Be "}}, {{"type", "text"}, {"text", "brief."}}})},
        {"messages", json::array({{{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "Hi"}}})}},
                                  {{"role", "assistant"}, {"content", "Hello."}},
                                  {{"role", "user"}, {"content", "Name a colour."}},
                                  {{"role", "assistant"}, {"content", "The colour is"}}})},
        {"max_tokens", 7},
        {"temperature", 0},
        {"top_k", 3},
        {"stop_sequences", json::array({"\n"})},
        {"stream", true},
        {"metadata", {{"user_id", "u"}}},
        {"thinking", {{"type", "disabled"}}}};
    const auto r = parse_messages_request(body, 99);
    ASSERT_EQ(r.conversation.messages.size(), 4u);
    EXPECT_EQ(r.conversation.messages[0].role, "system");
    EXPECT_EQ(r.conversation.messages[0].content, "Be brief.");
    EXPECT_EQ(r.conversation.messages[1].content, "Hi");
    EXPECT_EQ(r.conversation.messages[3].role, "user");
    EXPECT_EQ(r.conversation.prefill, "The colour is");  // the last assistant turn goes on
    EXPECT_EQ(r.params.max_tokens, 7);
    EXPECT_EQ(r.params.sampling.temperature, 0.0f);
    EXPECT_EQ(r.params.sampling.top_k, 3);
    EXPECT_EQ(r.params.sampling.seed, 99u);
    EXPECT_EQ(r.params.stop, std::vector<std::string>{"\n"});
    EXPECT_TRUE(r.params.stream);
    // Anthropic's default temperature is 1.
    EXPECT_EQ(parse_messages_request({{"messages", kHi}, {"max_tokens", 1}}, 1).params.sampling.temperature, 1.0f);
}

TEST(ServeAnthropic, StopReasonsSayWhyTheMessageEnded) {
    tandem::serve::Event e;
    e.done = true;
    e.finish_reason = "length";
    EXPECT_EQ(tandem::serve::stop_reason(e, {"x"}).reason, "max_tokens");
    e.finish_reason = "stop";
    EXPECT_EQ(tandem::serve::stop_reason(e, {"x"}).reason, "end_turn");
    // The template's end-of-turn marker is a stop string too, but not the client's.
    e.stop_string = "<|im_end|>";
    EXPECT_EQ(tandem::serve::stop_reason(e, {"x"}).reason, "end_turn");
    e.stop_string = "x";
    const auto s = tandem::serve::stop_reason(e, {"x"});
    EXPECT_EQ(s.reason, "stop_sequence");
    EXPECT_EQ(s.sequence, "x");
}

TEST(ServeAnthropic, AnswerAndErrorShapes) {
    tandem::serve::Usage u;
    u.prompt_tokens = 12;
    u.completion_tokens = 5;
    const json m = tandem::serve::message_response("msg_1", "m.gguf", "Paris.", {"end_turn", nullptr}, u);
    EXPECT_EQ(m["type"], "message");
    EXPECT_EQ(m["role"], "assistant");
    EXPECT_EQ(m["content"], json::array({{{"type", "text"}, {"text", "Paris."}}}));
    EXPECT_EQ(m["stop_reason"], "end_turn");
    EXPECT_TRUE(m["stop_sequence"].is_null());
    EXPECT_EQ(m["usage"], json({{"input_tokens", 12}, {"output_tokens", 5}}));
    const json e = tandem::serve::anthropic_error(400, "bad");
    EXPECT_EQ(e, json({{"type", "error"}, {"error", {{"type", "invalid_request_error"}, {"message", "bad"}}}}));
    EXPECT_EQ(tandem::serve::anthropic_error(401, "x")["error"]["type"], "authentication_error");
    EXPECT_EQ(tandem::serve::anthropic_error(404, "x")["error"]["type"], "not_found_error");
    EXPECT_EQ(tandem::serve::anthropic_error(503, "x")["error"]["type"], "overloaded_error");
    EXPECT_EQ(tandem::serve::anthropic_error(500, "x")["error"]["type"], "api_error");
    EXPECT_EQ(tandem::serve::anthropic_event({{"type", "ping"}}), "event: ping\ndata: {\"type\":\"ping\"}\n\n");
}

}  // namespace
