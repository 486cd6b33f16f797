// Chat templates: turning a conversation into the prompt text a model was
// trained on, by rendering the Jinja template the GGUF file carries
// (tokenizer.chat_template) as transformers' apply_chat_template would.
// Models without one get ChatML.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem {
class Tokenizer;
namespace gguf {
class File;
}
}  // namespace tandem

namespace tandem::chat {

namespace jinja {
class Template;
}

// A function call an assistant made: OpenAI's {id, type: "function",
// function: {name, arguments}}, arguments being JSON text.
struct ToolCall {
    std::string name;
    std::string arguments;
    std::string id = {};  // "" when the model or the client gave none
};

struct Message {
    std::string role;
    std::string content;
    // An assistant's calls; a "tool" message's answer to one (tool_call_id,
    // and the function's name when the client gave it).
    // (Default initializers: {role, content} stays a complete aggregate.)
    std::vector<ToolCall> tool_calls = {};
    std::string tool_call_id = {};
    std::string name = {};
};

struct TemplateInputs {
    std::string bos_token, eos_token;  // the vocabulary's BOS/EOS text ("" when none)
    bool add_generation_prompt = true;
    // The tokenizer adds BOS itself: a bos_token the template writes first
    // is then dropped from the text, so the prompt holds one BOS (as
    // llama.cpp does).
    bool tokenizer_adds_bos = false;
    // strftime_now(format) for templates that print today's date (Llama
    // 3.x); when empty, the current local time. Tests fix the date here.
    std::function<std::string(const std::string& format)> strftime_now;
    // The request's tools as OpenAI gives them ([{type: "function",
    // function: {name, description, parameters}}]), keys in the client's
    // order; null leaves `tools` undefined in the template.
    nlohmann::ordered_json tools;
};

class ChatTemplate {
public:
    // Parses the Jinja source; throws tandem::Error naming line/column on a syntax error.
    static ChatTemplate parse(std::string source);
    // The template a model without tokenizer.chat_template gets: ChatML.
    static ChatTemplate chatml();

    // Renders messages with the context {messages, add_generation_prompt,
    // bos_token, eos_token, tools (when given)}. A message is {role,
    // content}, and as Hugging Face's templates expect it, an assistant's
    // calls {tool_calls: [{id, type: "function", function: {name,
    // arguments}}]} (arguments an object when their JSON text is one) and
    // a tool message's {tool_call_id, name} when set.
    // Throws tandem::Error when the template raises (the message given to
    // raise_exception is included) or fails.
    std::string render(std::span<const Message> messages, const TemplateInputs& in) const;

    const std::string& source() const;
    // "chatml", "llama3", "llama2", "gemma", "harmony" (gpt-oss), "phi3",
    // "mistral", or "custom", recognised from markers in the source text.
    std::string family() const;
    // The end-of-turn markers of this family whose text a generation
    // should stop at ("<|im_end|>", "<|eot_id|>", ...); may be empty.
    std::vector<std::string> end_of_turn_markers() const;

private:
    std::shared_ptr<const jinja::Template> template_;
};

// The file's tokenizer.chat_template, or ChatML when it has none
// (*is_fallback tells which; it may be null). Throws tandem::Error when the
// key has the wrong type or the template does not parse.
ChatTemplate template_from_gguf(const gguf::File& file, bool* is_fallback);

// The text of the vocabulary's BOS/EOS token as templates expect it
// (bos_token/eos_token), or "" when the vocabulary has none.
std::string bos_text(const Tokenizer& tokenizer);
std::string eos_text(const Tokenizer& tokenizer);

}  // namespace tandem::chat
