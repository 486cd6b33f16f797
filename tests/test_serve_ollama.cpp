// Ollama's request checks (tools/serve/ollama_api.h) and the CORS origin
// rules (tools/serve/cors.h), without HTTP; test_server.py runs both end
// to end.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "tests/chat_messages.h"
#include "tools/serve/completions.h"
#include "tools/serve/cors.h"
#include "tools/serve/ollama_api.h"

namespace {

using nlohmann::json;
using tandem::serve::ApiError;
using tandem::serve::parse_ollama_chat;
using tandem::serve::parse_ollama_generate;

const json kOllamaHi = tandem::testing::user_turn();

std::string refused(const json& body, bool chat) {
    try {
        if (chat) parse_ollama_chat(body, 1);
        else parse_ollama_generate(body, 1);
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status, 400);
        return e.param + ": " + e.what();
    }
    return "<accepted>";
}

TEST(ServeOllama, OptionsMapOntoTheSamplerAndUnknownOnesAreIgnored) {
    const json body = {{"model", "smollm2"},
                       {"messages", kOllamaHi},
                       {"options",
                        {{"temperature", 0},
                         {"top_k", 5},
                         {"top_p", 0.5},
                         {"min_p", 0.1},
                         {"seed", 7},
                         {"num_predict", 9},
                         {"stop", json::array({"a", "b"})},
                         {"repeat_penalty", 1.2},
                         {"repeat_last_n", 32},
                         {"presence_penalty", 0.5},
                         {"frequency_penalty", -1.5},
                         {"mirostat", 2},
                         {"num_ctx", 99},
                         {"num_gpu", 1}}}};
    const auto r = parse_ollama_chat(body, 1);
    EXPECT_TRUE(r.params.stream);  // Ollama's default
    EXPECT_FALSE(r.load_only);
    EXPECT_EQ(r.params.sampling.temperature, 0.0f);
    EXPECT_EQ(r.params.sampling.top_k, 5);
    EXPECT_FLOAT_EQ(r.params.sampling.top_p, 0.5f);
    EXPECT_FLOAT_EQ(r.params.sampling.min_p, 0.1f);
    EXPECT_EQ(r.params.sampling.seed, 7u);
    EXPECT_EQ(r.params.max_tokens, 9);
    EXPECT_EQ(r.params.stop, (std::vector<std::string>{"a", "b"}));
    EXPECT_FLOAT_EQ(r.params.sampling.repeat_penalty, 1.2f);
    EXPECT_EQ(r.params.sampling.repeat_last_n, 32);
    EXPECT_FLOAT_EQ(r.params.sampling.presence_penalty, 0.5f);
    EXPECT_FLOAT_EQ(r.params.sampling.frequency_penalty, -1.5f);
    ASSERT_EQ(r.messages.size(), 1u);
    EXPECT_EQ(r.messages[0].content, "hi");
    for (int n : {-1, -2}) {
        EXPECT_FALSE(parse_ollama_chat({{"messages", kOllamaHi}, {"options", {{"num_predict", n}}}}, 1).params.max_tokens);
    }
    EXPECT_FALSE(parse_ollama_chat({{"messages", kOllamaHi}, {"stream", false}}, 1).params.stream);
    EXPECT_EQ(parse_ollama_chat({{"messages", kOllamaHi}}, 3).params.sampling.seed, 3u);  // the server's draw
}

TEST(ServeOllama, GenerateIsAChatOfSystemAndPromptUnlessRaw) {
    const auto r = parse_ollama_generate({{"prompt", "Why?"}, {"system", "Be brief."}}, 1);
    ASSERT_EQ(r.messages.size(), 2u);
    EXPECT_EQ(r.messages[0].role, "system");
    EXPECT_EQ(r.messages[0].content, "Be brief.");
    EXPECT_EQ(r.messages[1].role, "user");
    EXPECT_EQ(r.messages[1].content, "Why?");
    EXPECT_FALSE(r.raw);
    const auto raw = parse_ollama_generate({{"prompt", "<|im_start|>user\nx"}, {"raw", true}}, 1);
    EXPECT_TRUE(raw.raw);
    EXPECT_EQ(raw.raw_prompt, "<|im_start|>user\nx");
    EXPECT_TRUE(raw.messages.empty());
}

TEST(ServeOllama, NoMessagesOrNoPromptIsALoadRequest) {
    EXPECT_TRUE(parse_ollama_chat({{"model", "m"}}, 1).load_only);
    EXPECT_TRUE(parse_ollama_chat({{"model", "m"}, {"messages", json::array()}}, 1).load_only);
    EXPECT_TRUE(parse_ollama_generate({{"model", "m"}}, 1).load_only);
    EXPECT_TRUE(parse_ollama_generate({{"model", "m"}, {"prompt", ""}}, 1).load_only);
}

TEST(ServeOllama, EachBadOrUnsupportedFieldIsNamed) {
    struct Case {
        json body;
        bool chat;
        std::string param;
    };
    const std::vector<Case> cases = {
        {{{"messages", "hi"}}, true, "messages"},
        {{{"messages", json::array({{{"role", "wizard"}, {"content", "x"}}})}}, true, "messages[0].role"},
        {{{"messages", json::array({{{"role", "user"}, {"content", "x"}, {"images", json::array({"iVBOR"})}}})}},
         true, "messages[0].images"},
        {{{"messages", kOllamaHi}, {"tools", json::array({json::object()})}}, true, "tools"},
        {{{"messages", kOllamaHi}, {"format", "json"}}, true, "format"},
        {{{"messages", kOllamaHi}, {"format", {{"type", "object"}}}}, true, "format"},
        {{{"messages", kOllamaHi}, {"stream", "yes"}}, true, "stream"},
        {{{"messages", kOllamaHi}, {"model", 3}}, true, "model"},
        {{{"messages", kOllamaHi}, {"options", "hot"}}, true, "options"},
        {{{"messages", kOllamaHi}, {"options", {{"temperature", "hot"}}}}, true, "options.temperature"},
        {{{"messages", kOllamaHi}, {"options", {{"num_predict", 0}}}}, true, "options.num_predict"},
        {{{"messages", kOllamaHi}, {"options", {{"num_predict", 1.5}}}}, true, "options.num_predict"},
        {{{"messages", kOllamaHi}, {"options", {{"top_p", 0}}}}, true, "options.top_p"},
        {{{"messages", kOllamaHi}, {"options", {{"presence_penalty", 2.5}}}}, true, "options.presence_penalty"},
        {{{"messages", kOllamaHi}, {"options", {{"frequency_penalty", "lots"}}}}, true, "options.frequency_penalty"},
        {{{"messages", kOllamaHi}, {"options", {{"stop", json::array({"a", 1})}}}}, true, "options.stop[1]"},
        {{{"prompt", 5}}, false, "prompt"},
        {{{"prompt", "x"}, {"template", "{{ .Prompt }}"}}, false, "template"},
        {{{"prompt", "x"}, {"raw", true}, {"system", "s"}}, false, "system"},
        {{{"prompt", "x"}, {"suffix", "y"}}, false, "suffix"},
        {{{"prompt", "x"}, {"context", json::array({1, 2})}}, false, "context"},
        {{{"prompt", "x"}, {"images", json::array({"iVBOR"})}}, false, "images"},
        {{{"prompt", "x"}, {"raw", "yes"}}, false, "raw"},
    };
    for (const Case& c : cases) {
        const std::string e = refused(c.body, c.chat);
        EXPECT_EQ(e.rfind(c.param + ": ", 0), 0u) << c.body.dump() << " -> " << e;
    }
    // Empty values of the refused fields are no request for them.
    EXPECT_EQ(refused({{"messages", kOllamaHi}, {"format", ""}, {"tools", json::array()}}, true), "<accepted>");
    EXPECT_EQ(refused({{"prompt", "x"}, {"context", json::array()}, {"images", nullptr}, {"template", ""}}, false),
              "<accepted>");
}

// A harmony model's reply: the final text as the content (or response),
// the reasoning as `thinking`, tool calls not shown; other replies as
// they are.
TEST(ServeOllama, HarmonyRepliesPutTheReasoningInThinking) {
    tandem::serve::LoadedModel m;
    m.harmony = true;
    const std::string text =
        "<|channel|>analysis<|message|>Think first.<|end|><|start|>assistant<|channel|>final<|message|>Paris.";
    const auto reply = tandem::serve::chat_reply(m, text);
    const json chat = tandem::serve::ollama_answer("m", true, reply.content, reply.reasoning);
    EXPECT_EQ(chat["message"], (json{{"role", "assistant"}, {"content", "Paris."}, {"thinking", "Think first."}}));
    const json gen = tandem::serve::ollama_answer("m", false, reply.content, reply.reasoning);
    EXPECT_EQ(gen["response"], "Paris.");
    EXPECT_EQ(gen["thinking"], "Think first.");
    EXPECT_FALSE(gen.contains("message"));

    m.harmony = false;
    const auto plain = tandem::serve::chat_reply(m, "Paris.");
    const json p = tandem::serve::ollama_answer("m", true, plain.content, plain.reasoning);
    EXPECT_EQ(p["message"], (json{{"role", "assistant"}, {"content", "Paris."}}));
    EXPECT_EQ(p["model"], "m");
}

TEST(ServeOllama, TimesAreRfc3339InUtc) {
    using namespace std::chrono;
    EXPECT_EQ(tandem::serve::rfc3339(system_clock::time_point(seconds(0))), "1970-01-01T00:00:00.000000000Z");
    const auto t = system_clock::time_point(duration_cast<system_clock::duration>(seconds(1700000000) + nanoseconds(1500)));
    EXPECT_EQ(tandem::serve::rfc3339(t), "2023-11-14T22:13:20.000001500Z");
}

TEST(ServeCors, OriginsAreListsOfSchemeHostPort) {
    using tandem::serve::allowed_origin;
    const auto o = tandem::serve::parse_cors_origins({"http://localhost:3000, https://App.Example", "null://x"});
    EXPECT_EQ(o, (std::vector<std::string>{"http://localhost:3000", "https://app.example", "null://x"}));
    EXPECT_EQ(allowed_origin(o, "http://localhost:3000"), "http://localhost:3000");
    EXPECT_EQ(allowed_origin(o, "https://app.example"), "https://app.example");
    EXPECT_EQ(allowed_origin(o, "http://localhost:3001"), "");
    EXPECT_EQ(allowed_origin(o, "http://evil.example"), "");
    EXPECT_EQ(allowed_origin(o, ""), "");
    EXPECT_EQ(allowed_origin({}, "http://localhost:3000"), "");
    const auto any = tandem::serve::parse_cors_origins({"*"});
    EXPECT_EQ(allowed_origin(any, "http://anything.example"), "*");
    EXPECT_EQ(allowed_origin(any, ""), "");
    for (const char* bad : {"http://localhost:3000/", "localhost:3000", "http://", "http://a/b", "://a"}) {
        EXPECT_THROW(tandem::serve::parse_cors_origins({bad}), tandem::Error) << bad;
    }
}

}  // namespace
