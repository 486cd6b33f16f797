// Chat templates (runtime/chat/chat_template.h): every template in
// tests/data/chat_templates with every conversation of conversations.json,
// compared byte for byte with what the real jinja2 rendered
// (expected.json, from scripts/render_chat_templates.py).
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/chat/chat_template.h"
#include "runtime/chat/jinja.h"
#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace tandem::chat {
namespace {

using nlohmann::ordered_json;

ordered_json load_json(const std::string& name) {
    std::ifstream in(testing::test_data("chat_templates/" + name));
    EXPECT_TRUE(in.good()) << name;
    return ordered_json::parse(in);
}

std::string read_template(const std::string& name) {
    return testing::slurp(testing::test_data("chat_templates/" + name + ".jinja"));
}

std::string fixed_strftime(const std::string& fmt) {
    std::tm tm{};
    tm.tm_year = 2024 - 1900;
    tm.tm_mon = 6;
    tm.tm_mday = 26;
    char buf[128];
    return std::string(buf, std::strftime(buf, sizeof buf, fmt.c_str(), &tm));
}

// Conversations ChatTemplate::render can express: messages {role, content
// (a string)}, an assistant's tool_calls [{id, type: "function", function:
// {name, arguments}}] and a tool message's tool_call_id and name, the
// request's tools, no other variables. Arguments that are an object go in
// as their JSON text, as the server receives them.
bool as_messages(const ordered_json& c, std::vector<Message>* out) {
    if (c.contains("extra")) return false;
    for (const auto& m : c["messages"]) {
        if (!m.contains("role") || !m.contains("content") || !m["content"].is_string()) return false;
        Message msg{m["role"], m["content"]};
        for (const auto& [key, v] : m.items()) {
            if (key == "role" || key == "content") continue;
            if ((key == "tool_call_id" || key == "name") && v.is_string()) {
                (key == "name" ? msg.name : msg.tool_call_id) = v.get<std::string>();
                continue;
            }
            if (key != "tool_calls" || !v.is_array()) return false;
            for (const auto& call : v) {
                if (call.size() != 3 || call.value("type", "") != "function" || !call.contains("id") ||
                    !call.contains("function") || call["function"].size() != 2)
                    return false;
                const auto& args = call["function"]["arguments"];
                msg.tool_calls.push_back(ToolCall{call["function"]["name"], args.is_string() ? args.get<std::string>() : args.dump(),
                                                  call["id"]});
            }
        }
        out->push_back(std::move(msg));
    }
    return true;
}

TEST(ChatTemplate, EveryTemplateAndConversationMatchesJinja2) {
    const ordered_json conv = load_json("conversations.json");
    const ordered_json expected = load_json("expected.json");
    ASSERT_GE(expected["chat"].size(), 20u);
    jinja::RenderOptions options;
    options.strftime_now = fixed_strftime;
    int compared = 0, via_chat_api = 0;
    for (const auto& [name, entry] : expected["chat"].items()) {
        const std::string source = read_template(name);
        const ChatTemplate tmpl = ChatTemplate::parse(source);
        const jinja::Template jt = jinja::Template::parse(source);
        for (const auto& c : conv["conversations"]) {
            const std::string cname = c["name"];
            SCOPED_TRACE(name + " x " + cname);
            const auto& want = entry["results"][cname];
            ordered_json context = {{"messages", c["messages"]}, {"add_generation_prompt", c["add_generation_prompt"]}};
            for (const auto& [k, v] : entry["tokens"].items()) context[k] = v;
            if (c.contains("tools")) context["tools"] = c["tools"];
            if (c.contains("extra"))
                for (const auto& [k, v] : c["extra"].items()) context[k] = v;

            std::string got, error = "<no error>";
            try {
                got = jt.render(context, options);
            } catch (const Error& e) {
                error = e.what();
            }
            if (want.contains("output")) {
                EXPECT_EQ(error, "<no error>");
                EXPECT_EQ(got, want["output"].get<std::string>());
            } else {
                EXPECT_NE(error, "<no error>") << "jinja2 failed with: " << want["error"];
                if (want["raised"].get<bool>()) {
                EXPECT_NE(error.find(want["error"].get<std::string>()), std::string::npos) << error;
            }
            }
            ++compared;

            std::vector<Message> messages;
            if (!as_messages(c, &messages)) continue;
            TemplateInputs in;
            if (c.contains("tools")) in.tools = c["tools"];
            in.bos_token = entry["tokens"]["bos_token"];
            in.eos_token = entry["tokens"]["eos_token"];
            in.add_generation_prompt = c["add_generation_prompt"];
            in.strftime_now = fixed_strftime;
            if (want.contains("output")) {
                EXPECT_EQ(tmpl.render(messages, in), want["output"].get<std::string>());
            } else {
                EXPECT_THROW(tmpl.render(messages, in), Error);
            }
            ++via_chat_api;
        }
    }
    EXPECT_GE(compared, 20 * 26);
    // The tool conversations too: the server's way in renders as jinja2 does.
    EXPECT_GE(via_chat_api, 20 * 18);
}

TEST(ChatTemplate, JinjaTextInContentIsNotEvaluated) {
    const Message m{"user", "{{ 7 * 6 }} {% if true %}x{% endif %}"};
    TemplateInputs in;
    const std::string out = ChatTemplate::chatml().render(std::span(&m, 1), in);
    EXPECT_EQ(out, "<|im_start|>user\n{{ 7 * 6 }} {% if true %}x{% endif %}<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, RaisedMessagesReachTheCaller) {
    const ChatTemplate t = ChatTemplate::parse(read_template("mistral_v01"));
    const std::vector<Message> msgs = {{"user", "a"}, {"user", "b"}};
    const std::string e = testing::error_of([&] { t.render(msgs, TemplateInputs{}); });
    EXPECT_NE(e.find("Conversation roles must alternate user/assistant/user/assistant/..."), std::string::npos) << e;
    EXPECT_NE(e.find("line 1"), std::string::npos) << e;
}

TEST(ChatTemplate, FamiliesAndEndOfTurnMarkers) {
    struct Case {
        const char* file;
        const char* family;
        const char* marker;
    };
    const Case cases[] = {
        {"chatml", "chatml", "<|im_end|>"},     {"smollm2", "chatml", "<|im_end|>"},  {"qwen2_5", "chatml", "<|im_end|>"},
        {"qwen3", "chatml", "<|im_end|>"},      {"llama3", "llama3", "<|eot_id|>"},   {"llama3_1", "llama3", "<|eot_id|>"},
        {"gemma2", "gemma", "<end_of_turn>"},   {"gemma3", "gemma", "<end_of_turn>"}, {"phi3", "phi3", "<|end|>"},
        {"mistral_v01", "mistral", "</s>"},     {"mistral_v03", "mistral", "</s>"},   {"llama2", "llama2", "</s>"},
        {"gpt_oss", "harmony", "<|return|>"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.file);
        const ChatTemplate t = ChatTemplate::parse(read_template(c.file));
        EXPECT_EQ(t.family(), c.family);
        const auto markers = t.end_of_turn_markers();
        ASSERT_FALSE(markers.empty());
        EXPECT_EQ(markers.front(), c.marker);
    }
    const ChatTemplate custom = ChatTemplate::parse("{% for m in messages %}{{ m.content }}{% endfor %}");
    EXPECT_EQ(custom.family(), "custom");
    EXPECT_TRUE(custom.end_of_turn_markers().empty());
}

TEST(ChatTemplate, ChatMLFallbackIsTheChatMLFile) {
    const ChatTemplate fallback = ChatTemplate::chatml();
    EXPECT_EQ(fallback.family(), "chatml");
    const std::string file = read_template("chatml");
    EXPECT_EQ(fallback.source() + "\n", file);
    const std::vector<Message> msgs = {{"system", "s"}, {"user", "u"}};
    TemplateInputs in;
    EXPECT_EQ(fallback.render(msgs, in), ChatTemplate::parse(file).render(msgs, in));
    in.add_generation_prompt = false;
    EXPECT_EQ(fallback.render(msgs, in), "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nu<|im_end|>\n");
}

TEST(ChatTemplate, SyntaxErrorNamesLine) {
    const std::string e = testing::error_of([] { ChatTemplate::parse("{% for m in messages %}\n{{ m.content }\n{% endfor %}"); });
    EXPECT_NE(e.find("line 2"), std::string::npos) << e;
}

TEST(ChatTemplate, ModelWithoutTemplateGetsChatML) {
    const auto file = gguf::File::open(testing::test_data("tiny-llama-Q4_K_M.gguf"));
    bool fallback = false;
    const ChatTemplate t = template_from_gguf(file, &fallback);
    EXPECT_TRUE(fallback);
    EXPECT_EQ(t.family(), "chatml");
}

TEST(ChatTemplate, RealSmolLM2Template) {
    const char* path = std::getenv("TANDEM_SMOLLM2_GGUF");
    if (!path || !std::filesystem::exists(path)) GTEST_SKIP() << "set TANDEM_SMOLLM2_GGUF to SmolLM2-135M-Instruct's GGUF file";
    const auto file = gguf::File::open(path);
    bool fallback = true;
    const ChatTemplate t = template_from_gguf(file, &fallback);
    EXPECT_FALSE(fallback);
    EXPECT_EQ(t.family(), "chatml");
    // The file's template is the one in tests/data (less the trailing newline).
    EXPECT_EQ(t.source() + "\n", read_template("smollm2"));
    const Tokenizer tok = Tokenizer::from_gguf(file);
    TemplateInputs in;
    in.bos_token = bos_text(tok);
    in.eos_token = eos_text(tok);
    EXPECT_EQ(in.bos_token, "<|im_start|>");
    EXPECT_EQ(in.eos_token, "<|im_end|>");
    const std::vector<Message> msgs = {{"user", "What is the capital of France?"}};
    EXPECT_EQ(t.render(msgs, in),
              "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
              "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, ExpectedFileMatchesFreshJinja2Renders) {
    if (std::system("python3 -c 'import jinja2' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 with jinja2 is not installed";
    const std::string cmd = "python3 " + testing::shell_quote(std::string(TANDEM_SOURCE_DIR) + "/scripts/render_chat_templates.py") +
                            " --check 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[512];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    const int status = pclose(p);
    EXPECT_EQ(status, 0) << out;
}

}  // namespace
}  // namespace tandem::chat

namespace {

// A template that writes BOS itself, for a tokenizer that adds one: one BOS.
TEST(ChatTemplate, LeadingBosIsDroppedWhenTheTokenizerAddsOne) {
    const auto t = tandem::chat::ChatTemplate::parse("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}");
    const std::vector<tandem::chat::Message> msgs = {{"user", "hi"}};
    tandem::chat::TemplateInputs in;
    in.bos_token = "<s>";
    EXPECT_EQ(t.render(msgs, in), "<s>hi");
    in.tokenizer_adds_bos = true;
    EXPECT_EQ(t.render(msgs, in), "hi");
    // Only a leading one.
    const auto mid = tandem::chat::ChatTemplate::parse("x{{ bos_token }}");
    EXPECT_EQ(mid.render(msgs, in), "x<s>");
}

}  // namespace
