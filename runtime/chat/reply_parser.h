// A model's reply as the chat routes show it: reasoning, content and tool
// calls, split as the text streams. gpt-oss's harmony replies are split by
// HarmonyParser; with tools offered, the calls of the template's family
// by ToolCallParser; otherwise the reply is all content.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/chat/harmony.h"
#include "runtime/chat/tool_calls.h"

namespace tandem::chat {

class ReplyParser {
public:
    // harmony: the reply is in gpt-oss's format. calls: whose calls to look
    // for in other replies (None: none, the text is all content; with
    // harmony, a call message is still taken out of the content, but none
    // is reported: tool_choice "none" or no tools).
    ReplyParser(bool harmony, ToolFormat calls);

    struct Delta {
        std::string reasoning;
        std::string content;
        std::vector<ToolCall> calls;  // completed by this text
        bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
    };
    // last: the reply ends with this text.
    Delta push(std::string_view text, bool last = false);

    const std::string& reasoning() const;
    const std::string& content() const;
    const std::vector<ToolCall>& tool_calls() const;

private:
    std::optional<HarmonyParser> harmony_;
    bool harmony_calls_ = false;  // harmony_'s calls are reported
    std::optional<ToolCallParser> calls_;
    std::string plain_;
};

}  // namespace tandem::chat
