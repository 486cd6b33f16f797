#include "runtime/chat/chat_template.h"

#include <string_view>

#include "runtime/chat/jinja.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/tokenizer/tokenizer.h"

namespace tandem::chat {
namespace {

constexpr std::string_view kChatML =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

struct Family {
    std::string_view name;
    std::vector<std::string_view> markers;       // any of these in the source picks the family
    std::vector<std::string> end_of_turn;
};

// Checked in order: Llama 3 templates may mention other families' markers
// less often than the reverse, and ChatML is the most common.
const std::vector<Family>& families() {
    static const std::vector<Family> kFamilies = {
        {"chatml", {"<|im_start|>"}, {"<|im_end|>"}},
        {"llama3", {"<|start_header_id|>"}, {"<|eot_id|>", "<|eom_id|>"}},
        {"gemma", {"<start_of_turn>"}, {"<end_of_turn>"}},
        // gpt-oss's harmony format ends every message with <|end|>, so it
        // comes before phi3: a reply's analysis message ends with <|end|>
        // and its final message follows; the turn ends at <|return|>, or at
        // <|call|> for a tool call.
        {"harmony", {"<|channel|>"}, {"<|return|>", "<|call|>"}},
        {"phi3", {"<|user|>", "<|end|>"}, {"<|end|>", "<|endoftext|>"}},
        {"llama2", {"<<SYS>>"}, {"</s>"}},
        {"mistral", {"[INST]"}, {"</s>"}},
    };
    return kFamilies;
}

const Family* find_family(const std::string& source) {
    for (const auto& f : families())
        for (auto m : f.markers)
            if (source.find(m) != std::string::npos) return &f;
    return nullptr;
}

// A call's arguments as templates take them: Hugging Face's convention is
// an object (templates print it with tojson), so JSON text that is one
// becomes one; anything else stays the text it is.
jinja::Value arguments_value(const std::string& text) {
    const auto j = nlohmann::ordered_json::parse(text, nullptr, false);
    if (!j.is_discarded() && j.is_object()) return jinja::from_json(j);
    return jinja::Value(text);
}

jinja::Value message_value(const Message& m) {
    jinja::Dict d;
    d.set("role", jinja::Value(m.role));
    d.set("content", jinja::Value(m.content));
    if (!m.tool_calls.empty()) {
        jinja::List calls;
        for (const ToolCall& c : m.tool_calls) {
            jinja::Dict fn;
            fn.set("name", jinja::Value(c.name));
            fn.set("arguments", arguments_value(c.arguments));
            jinja::Dict call;
            if (!c.id.empty()) call.set("id", jinja::Value(c.id));
            call.set("type", jinja::Value("function"));
            call.set("function", jinja::Value(std::move(fn)));
            calls.emplace_back(std::move(call));
        }
        d.set("tool_calls", jinja::Value(std::move(calls)));
    }
    if (!m.tool_call_id.empty()) d.set("tool_call_id", jinja::Value(m.tool_call_id));
    if (!m.name.empty()) d.set("name", jinja::Value(m.name));
    return jinja::Value(std::move(d));
}

std::string token_text_or_empty(const Tokenizer& t, int32_t id) {
    if (id < 0 || id >= t.n_vocab()) return {};
    return std::string(t.token_text(id));
}

}  // namespace

ChatTemplate ChatTemplate::parse(std::string source) {
    ChatTemplate t;
    t.template_ = std::make_shared<const jinja::Template>(jinja::Template::parse(std::move(source)));
    return t;
}

ChatTemplate ChatTemplate::chatml() { return parse(std::string(kChatML)); }

std::string ChatTemplate::render(std::span<const Message> messages, const TemplateInputs& in) const {
    jinja::List list;
    list.reserve(messages.size());
    for (const auto& m : messages) list.push_back(message_value(m));
    jinja::Dict context;
    context.set("messages", jinja::Value(std::move(list)));
    context.set("add_generation_prompt", jinja::Value(in.add_generation_prompt));
    context.set("bos_token", jinja::Value(in.bos_token));
    context.set("eos_token", jinja::Value(in.eos_token));
    if (!in.tools.is_null()) context.set("tools", jinja::from_json(in.tools));
    jinja::RenderOptions options;
    options.strftime_now = in.strftime_now;
    std::string text = template_->render(context, options);
    if (in.tokenizer_adds_bos && !in.bos_token.empty() && text.rfind(in.bos_token, 0) == 0) {
        text.erase(0, in.bos_token.size());
    }
    return text;
}

const std::string& ChatTemplate::source() const { return template_->source(); }

std::string ChatTemplate::family() const {
    const Family* f = find_family(source());
    return f ? std::string(f->name) : "custom";
}

std::vector<std::string> ChatTemplate::end_of_turn_markers() const {
    const Family* f = find_family(source());
    return f ? f->end_of_turn : std::vector<std::string>{};
}

ChatTemplate template_from_gguf(const gguf::File& file, bool* is_fallback) {
    auto source = file.find_string("tokenizer.chat_template");
    if (is_fallback) *is_fallback = !source || source->empty();
    if (!source || source->empty()) return ChatTemplate::chatml();
    return ChatTemplate::parse(std::move(*source));
}

std::string bos_text(const Tokenizer& tokenizer) { return token_text_or_empty(tokenizer, tokenizer.bos()); }
std::string eos_text(const Tokenizer& tokenizer) { return token_text_or_empty(tokenizer, tokenizer.eos()); }

}  // namespace tandem::chat
