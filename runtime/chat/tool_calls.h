// Function calls in a model's reply, by each template family's convention,
// found as the reply streams:
//
//   hermes   (Qwen 2.5/3, Hermes 2/3, SmolLM):  <tool_call>{"name": N, "arguments": {...}}</tool_call>
//            (one per block; a JSON array of such objects in one block is
//            taken too)
//   llama3   (Llama 3.1-3.3): the reply is {"name": N, "parameters": {...}}
//            (after an optional <|python_tag|>; several joined by ';')
//   mistral  [TOOL_CALLS][{"name": N, "arguments": {...}, "id": I}, ...]   (Nemo, v0.3)
//            [TOOL_CALLS]N[ARGS]{...}   or  [TOOL_CALLS]N[CALL_ID]I[ARGS]{...}  (Small 3.2, Devstral)
//   harmony  (gpt-oss): runtime/chat/harmony.h
//
// A call's arguments are handed out as JSON text (OpenAI's `arguments`).
// Text that is not a call is content; a call that does not parse (bad
// JSON, no name) is shown as the content text it was.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/chat/chat_template.h"

namespace tandem::chat {

enum class ToolFormat { None, Hermes, Llama3, Mistral, Harmony };

// The convention of the template's family, recognised from its source
// (ChatTemplate::family() reads the same markers): None for a template
// that writes no tool calls (SmolLM2's, Gemma's...).
ToolFormat tool_format(const ChatTemplate& t);
ToolFormat tool_format_of_source(std::string_view source);
// "none", "hermes", "llama3", "mistral", "harmony".
std::string_view tool_format_name(ToolFormat f);

// Finds the calls in a reply of a Hermes, Llama 3 or Mistral model as it
// streams: push() hands out the content that is safe to show now (text
// that may be the start of a call is held back) and the calls completed.
class ToolCallParser {
public:
    explicit ToolCallParser(ToolFormat format);

    struct Delta {
        std::string content;
        std::vector<ToolCall> calls;
        bool empty() const { return content.empty() && calls.empty(); }
    };
    // last: the reply ends with this text; what was held back is placed.
    Delta push(std::string_view text, bool last = false);

    const std::string& content() const { return content_; }
    const std::vector<ToolCall>& tool_calls() const { return calls_; }

private:
    enum class Mode { Content, Call, Plain };
    void scan_content(Delta& out, bool last);
    bool scan_call(Delta& out, bool last);  // false: wait for more text
    void show(std::string_view text, Delta& out);

    ToolFormat format_;
    Mode mode_ = Mode::Content;
    std::string pending_;   // received, not yet placed
    std::string spaces_;    // whitespace after shown content: shown only when more content follows
    std::string content_;
    std::vector<ToolCall> calls_;
};

// The calls at the start of `text` (which begins with an opener of the
// format, or '{' for Llama 3), for tests and for the parser: nullopt when
// more text is needed (and `last` is false), an empty list when it is not
// a call. `used` is set to the bytes the calls took.
struct ScannedCalls {
    std::vector<ToolCall> calls;
    size_t used = 0;
};
std::optional<ScannedCalls> scan_calls(ToolFormat format, std::string_view text, bool last);

}  // namespace tandem::chat
