// gpt-oss's replies in the harmony format, split as they stream.
//
// After the generation prompt "<|start|>assistant" the model writes one or
// more messages:
//
//   [<|start|>assistant] HEADER <|message|> BODY END
//
// HEADER holds "<|channel|>CHANNEL", optionally "to=RECIPIENT" (before or
// after the channel) and "<|constrain|>TYPE"; END is <|end|> (more
// messages follow), <|return|> (the reply is over) or <|call|> (a tool
// call waits for its result). The channels:
//   - analysis: the chain of thought (OpenAI's reasoning_content);
//   - final: the answer (content);
//   - commentary to=functions.NAME: a call of tool NAME, BODY its JSON
//     arguments; commentary to nobody: text for the user (content).
// A reply without any header is all content.
//
// The parser takes the text as it streams (a marker may arrive split over
// pieces: the bytes that may still become one are held back) and hands out
// what is safe to show now, reasoning and content apart.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/chat/chat_template.h"

namespace tandem::chat {

class HarmonyParser {
public:
    struct Delta {
        std::string reasoning;
        std::string content;
        bool empty() const { return reasoning.empty() && content.empty(); }
    };
    // name: NAME of to=functions.NAME; arguments: the message's body, as
    // the model wrote it.
    using ToolCall = chat::ToolCall;

    // Adds streamed text; returns what it completes. last: the reply ends
    // with it, and what was held back is shown as it is.
    Delta push(std::string_view text, bool last = false);

    const std::string& reasoning() const { return reasoning_; }
    const std::string& content() const { return content_; }
    const std::vector<ToolCall>& tool_calls() const { return calls_; }

private:
    enum class Part { Header, Body };
    enum class Sink { Reasoning, Content, Call };

    void open_body();
    void emit(std::string_view text, Delta& out);

    Part part_ = Part::Body;  // until a header marker shows, text is content
    Sink sink_ = Sink::Content;
    std::string header_;   // the current header's text so far
    std::string pending_;  // received, not yet placed (may start a marker)
    std::string reasoning_, content_;
    std::vector<ToolCall> calls_;
};

}  // namespace tandem::chat
