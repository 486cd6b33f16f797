#include "runtime/chat/reply_parser.h"

namespace tandem::chat {

ReplyParser::ReplyParser(bool harmony, ToolFormat calls) {
    if (harmony) {
        harmony_.emplace();
        harmony_calls_ = calls != ToolFormat::None;
    } else if (calls != ToolFormat::None && calls != ToolFormat::Harmony) calls_.emplace(calls);
}

ReplyParser::Delta ReplyParser::push(std::string_view text, bool last) {
    Delta out;
    if (harmony_) {
        HarmonyParser::Delta d = harmony_->push(text, last);
        out.reasoning = std::move(d.reasoning);
        out.content = std::move(d.content);
        // A harmony call's arguments are its message's whole body: the
        // calls are complete when the reply is (it ends at <|call|>).
        if (last && harmony_calls_) out.calls = harmony_->tool_calls();
    } else if (calls_) {
        ToolCallParser::Delta d = calls_->push(text, last);
        out.content = std::move(d.content);
        out.calls = std::move(d.calls);
    } else {
        plain_.append(text);
        out.content.assign(text);
    }
    return out;
}

const std::string& ReplyParser::reasoning() const {
    static const std::string kNone;
    return harmony_ ? harmony_->reasoning() : kNone;
}

const std::string& ReplyParser::content() const {
    if (harmony_) return harmony_->content();
    if (calls_) return calls_->content();
    return plain_;
}

const std::vector<ToolCall>& ReplyParser::tool_calls() const {
    static const std::vector<ToolCall> kNone;
    if (harmony_) return harmony_calls_ ? harmony_->tool_calls() : kNone;
    if (calls_) return calls_->tool_calls();
    return kNone;
}

}  // namespace tandem::chat
