// gpt-oss's harmony replies split into reasoning, content and tool calls
// (runtime/chat/harmony.h), whole and streamed in every split.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/chat/harmony.h"
#include "tools/serve/openai_api.h"
#include "tools/serve/tool_api.h"

namespace {

using tandem::chat::HarmonyParser;

// A reply as gpt-oss writes it after "<|start|>assistant": its thinking,
// then the answer (special tokens rendered as their text).
constexpr std::string_view kReply =
    "<|channel|>analysis<|message|>User asks 2+2. Easy: 4.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.";

TEST(Harmony, SplitsThinkingFromTheAnswer) {
    HarmonyParser p;
    const auto d = p.push(kReply);
    const auto rest = p.push({}, true);
    EXPECT_EQ(d.reasoning, "User asks 2+2. Easy: 4.");
    EXPECT_EQ(d.content + rest.content, "2 + 2 = 4.");
    EXPECT_EQ(p.reasoning(), "User asks 2+2. Easy: 4.");
    EXPECT_EQ(p.content(), "2 + 2 = 4.");
    EXPECT_TRUE(p.tool_calls().empty());
}

// Every way of cutting the reply into two pieces, and one byte at a time:
// the same texts, and no marker text ever shown.
TEST(Harmony, StreamedInAnyPiecesGivesTheSameSplit) {
    for (size_t cut = 0; cut <= kReply.size(); ++cut) {
        HarmonyParser p;
        std::string reasoning, content;
        for (const std::string_view piece : {kReply.substr(0, cut), kReply.substr(cut)}) {
            const auto d = p.push(piece);
            reasoning += d.reasoning;
            content += d.content;
        }
        content += p.push({}, true).content;
        ASSERT_EQ(reasoning, "User asks 2+2. Easy: 4.") << "cut " << cut;
        ASSERT_EQ(content, "2 + 2 = 4.") << "cut " << cut;
    }
    HarmonyParser p;
    std::string shown;
    for (const char c : kReply) {
        const auto d = p.push(std::string_view(&c, 1));
        shown += d.reasoning + d.content;
    }
    shown += p.push({}, true).content;
    EXPECT_EQ(shown, "User asks 2+2. Easy: 4.2 + 2 = 4.");
}

TEST(Harmony, ToolCallsCarryTheirNameAndArguments) {
    HarmonyParser p;
    const auto d = p.push(
        "<|channel|>analysis<|message|>Need weather.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        "{\"location\":\"Paris\"}<|call|>");
    p.push({}, true);
    EXPECT_EQ(d.reasoning, "Need weather.");
    EXPECT_EQ(d.content, "");
    ASSERT_EQ(p.tool_calls().size(), 1u);
    EXPECT_EQ(p.tool_calls()[0].name, "get_weather");
    EXPECT_EQ(p.tool_calls()[0].arguments, "{\"location\":\"Paris\"}");
    // The recipient may come before the channel too.
    HarmonyParser q;
    q.push("<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{}<|call|>");
    ASSERT_EQ(q.tool_calls().size(), 1u);
    EXPECT_EQ(q.tool_calls()[0].name, "lookup");
    EXPECT_EQ(q.tool_calls()[0].arguments, "{}");
}

// Commentary to nobody is for the user; text with no header at all (a
// model that skips the format) is content; so is a would-be marker that
// never completes.
TEST(Harmony, TextOutsideTheChannelsIsContent) {
    HarmonyParser p;
    const auto d = p.push("<|channel|>commentary<|message|>Checking...<|end|>");
    EXPECT_EQ(d.content, "Checking...");
    HarmonyParser plain;
    std::string content = plain.push("Just text, a < sign and <|en").content;
    content += plain.push({}, true).content;
    EXPECT_EQ(content, "Just text, a < sign and <|en");
    EXPECT_TRUE(plain.reasoning().empty());
}

TEST(Harmony, AHeaderThatNeverEndsIsShownAsText) {
    HarmonyParser p;
    const std::string junk(2000, 'x');
    const auto d = p.push("<|channel|>" + junk);
    EXPECT_EQ(d.content, "<|channel|>" + junk);
}

// What a chat answer says of a split reply: OpenAI's message shape with
// llama-server's reasoning_content, tool calls with string arguments and
// finish_reason tool_calls; a plain reply keeps the old shape.
TEST(Harmony, ChatAnswersCarryReasoningAndToolCalls) {
    using tandem::serve::ChatReply;
    const tandem::serve::ResponseIds ids{"chatcmpl-1", "m", 0};
    HarmonyParser p;
    p.push("<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
           "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}<|call|>");
    // The server gives each call its id as it takes it (tool_api.h).
    tandem::serve::CallTaker taker(true, tandem::chat::ToolFormat::Harmony, 1);
    const ChatReply reply{p.content(), p.reasoning(), taker.take(p.tool_calls())};
    const auto body = tandem::serve::chat_response(ids, reply, "stop", {});
    const auto& choice = body["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls");
    EXPECT_TRUE(choice["message"]["content"].is_null());
    EXPECT_EQ(choice["message"]["reasoning_content"], "Need weather.");
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
    EXPECT_EQ(choice["message"]["tool_calls"][0]["type"], "function");
    EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Oslo\"}");
    EXPECT_FALSE(choice["message"]["tool_calls"][0]["id"].get<std::string>().empty());

    const auto plain = tandem::serve::chat_response(ids, ChatReply{"Hi.", {}, {}}, "stop", {});
    EXPECT_EQ(plain["choices"][0]["message"], (nlohmann::json{{"role", "assistant"}, {"content", "Hi."}}));
    EXPECT_EQ(plain["choices"][0]["finish_reason"], "stop");
    const auto chunk = tandem::serve::chat_chunk(ids, std::nullopt, std::nullopt, std::nullopt, nullptr, "hmm");
    EXPECT_EQ(chunk["choices"][0]["delta"], (nlohmann::json{{"reasoning_content", "hmm"}}));
}

}  // namespace
