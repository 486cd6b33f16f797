// Anthropic's content blocks and tools (anthropic_content.h) read into the
// chat messages and ToolRequest of the OpenAI routes, and an answer's text
// and calls written back as blocks.
#include "tools/serve/anthropic_content.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "tools/serve/anthropic_api.h"
#include "tools/serve/openai_api.h"

namespace tandem::serve {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// As the OpenAI route: each tool is printed into the prompt.
constexpr size_t kMaxTools = 128;

// The body with its keys in the client's order, parsed from its text when
// first needed (the tools' schemas and the calls' inputs are printed by
// the template in that order).
class OrderedBody {
public:
    OrderedBody(const json& body, std::string_view raw) : body_(body), raw_(raw) {}
    const ordered_json& get() const {
        if (!parsed_) parsed_ = raw_.empty() ? ordered_json(body_) : ordered_json::parse(raw_);
        return *parsed_;
    }

private:
    const json& body_;
    std::string_view raw_;
    mutable std::optional<ordered_json> parsed_;
};

[[noreturn]] void refuse(const std::string& field, const std::string& message) {
    throw ApiError(400, fmt::format("'{}': {}", field, message), field);
}

std::string required_string(const Fields& f, const char* key, const std::string& expected) {
    const std::optional<std::string> s = f.string(key);
    if (!s) refuse(f.name(key), "missing; expected " + expected);
    return *s;
}

// Block `field` of a content array: an object with a string type.
std::string block_type(const Fields& top, const json& block, const std::string& field) {
    if (!block.is_object()) top.bad(field, "a content block object", block);
    return required_string(Fields(block, field + "."), "type", "a block type such as \"text\"");
}

[[noreturn]] void wrong_block(const std::string& field, const std::string& type, const std::string& expected) {
    refuse(field + ".type", fmt::format("expected {}, found \"{}\"", expected, type));
}

// Text blocks' texts joined: `v` must be a string or an array of
// {"type": "text", "text": ...}.
std::string block_text(const Fields& top, const json& v, const std::string& field) {
    if (v.is_string()) return v.get<std::string>();
    if (!v.is_array()) top.bad(field, "a string or an array of text blocks", v);
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string b = fmt::format("{}[{}]", field, i);
        const std::string type = block_type(top, v[i], b);
        if (type != "text") refuse(b + ".type", fmt::format("only \"text\" blocks are supported, found \"{}\"", type));
        out += required_string(Fields(v[i], b + "."), "text", "a string");
    }
    return out;
}

// The ids of the tool_use blocks so far, with their tools' names.
using CallNames = std::map<std::string, std::string>;

chat::ToolCall tool_use(const Fields& bf, const ordered_json& input, CallNames& calls) {
    chat::ToolCall c;
    c.id = required_string(bf, "id", "the call's id (a string)");
    c.name = required_string(bf, "name", "the tool's name");
    const json* in = bf.find("input");
    if (!in || !in->is_object()) bf.bad("input", "the call's input (an object)", in ? *in : json());
    c.arguments = input.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
    if (!calls.emplace(c.id, c.name).second) {
        refuse(bf.name("id"), fmt::format("\"{}\" is the id of an earlier tool_use block too", c.id.substr(0, 80)));
    }
    return c;
}

chat::Message tool_result(const Fields& top, const Fields& bf, const CallNames& calls) {
    chat::Message m{"tool", ""};
    m.tool_call_id = required_string(bf, "tool_use_id", "the id of the tool_use block it answers");
    const auto call = calls.find(m.tool_call_id);
    if (call == calls.end()) {
        refuse(bf.name("tool_use_id"), fmt::format("\"{}\" answers no tool_use block of an earlier assistant turn",
                                                   m.tool_call_id.substr(0, 80)));
    }
    m.name = call->second;
    if (const json* content = bf.find("content")) m.content = block_text(top, *content, bf.name("content"));
    // The template has no place for Anthropic's flag: the model reads it.
    if (bf.boolean("is_error", false)) m.content = "Error: " + m.content;
    return m;
}

// A user turn: its text, and a "tool" message for each tool_result (in
// the blocks' order; Anthropic puts the results first).
void user_turn(const Fields& top, const json& content, const std::string& field, const CallNames& calls,
               std::vector<chat::Message>& out) {
    if (content.is_string()) return out.push_back({"user", content.get<std::string>()});
    if (!content.is_array()) top.bad(field, "a string or an array of content blocks", content);
    std::string text;
    bool results = false;
    for (size_t i = 0; i < content.size(); ++i) {
        const std::string b = fmt::format("{}[{}]", field, i);
        const std::string type = block_type(top, content[i], b);
        const Fields bf(content[i], b + ".");
        if (type == "text") {
            text += required_string(bf, "text", "a string");
            continue;
        }
        if (type != "tool_result") wrong_block(b, type, "\"text\" or \"tool_result\" in a user turn");
        if (!text.empty()) out.push_back({"user", std::exchange(text, {})});
        out.push_back(tool_result(top, bf, calls));
        results = true;
    }
    if (!results || !text.empty()) out.push_back({"user", std::move(text)});
}

// An assistant turn: its text, and a call for each tool_use block.
chat::Message assistant_turn(const Fields& top, const json& content, const std::string& field,
                             const OrderedBody& ordered, size_t index, CallNames& calls) {
    chat::Message m{"assistant", ""};
    if (content.is_string()) {
        m.content = content.get<std::string>();
        return m;
    }
    if (!content.is_array()) top.bad(field, "a string or an array of content blocks", content);
    for (size_t i = 0; i < content.size(); ++i) {
        const std::string b = fmt::format("{}[{}]", field, i);
        const std::string type = block_type(top, content[i], b);
        const Fields bf(content[i], b + ".");
        if (type == "text") {
            m.content += required_string(bf, "text", "a string");
        } else if (type == "tool_use") {
            const json* in = bf.find("input");
            const ordered_json none;
            const ordered_json& input =
                in && in->is_object() ? ordered.get().at("messages").at(index).at("content").at(i).at("input") : none;
            m.tool_calls.push_back(tool_use(bf, input, calls));
        } else {
            wrong_block(b, type, "\"text\" or \"tool_use\" in an assistant turn");
        }
    }
    return m;
}

std::string tool_name(const Fields& f, const char* key) {
    const std::string name = required_string(f, key, "a name (1 to 64 of a-z, A-Z, 0-9, _ and -)");
    if (!valid_function_name(name)) {
        refuse(f.name(key), fmt::format("expected a name (1 to 64 of a-z, A-Z, 0-9, _ and -), found \"{}\"",
                                        name.substr(0, 80)));
    }
    return name;
}

// `tools` as OpenAI's function tools.
void read_tools(const Fields& top, const json& tools, const OrderedBody& ordered, ToolRequest& r) {
    if (!tools.is_array()) top.bad("tools", "an array of {name, description, input_schema} objects", tools);
    if (tools.size() > kMaxTools) {
        refuse("tools", fmt::format("expected at most {} tools, found {}", kMaxTools, tools.size()));
    }
    ordered_json out = ordered_json::array();
    for (size_t i = 0; i < tools.size(); ++i) {
        const std::string field = fmt::format("tools[{}]", i);
        if (!tools[i].is_object()) top.bad(field, "an object {name, description, input_schema}", tools[i]);
        const Fields f(tools[i], field + ".");
        // Anthropic's own tools (web search, bash...) run on its servers.
        if (const auto type = f.string("type"); type && *type != "custom") {
            refuse(f.name("type"), fmt::format("only custom tools {{name, description, input_schema}} are served, "
                                               "found \"{}\"",
                                               type->substr(0, 80)));
        }
        std::string name = tool_name(f, "name");
        if (std::find(r.names.begin(), r.names.end(), name) != r.names.end()) {
            refuse(f.name("name"), fmt::format("\"{}\" names an earlier tool too", name));
        }
        const std::optional<std::string> description = f.string("description");
        const json* schema = f.find("input_schema");
        if (!schema || !schema->is_object()) {
            f.bad("input_schema", "a JSON Schema object of the tool's input", schema ? *schema : json());
        }
        if (const auto t = schema->find("type"); t == schema->end() || *t != "object") {
            refuse(f.name("input_schema.type"), fmt::format("expected \"object\" (the input is an object), found {}",
                                                            t == schema->end() ? "nothing" : t->dump()));
        }
        ordered_json fn = ordered_json::object();
        fn["name"] = name;
        if (description) fn["description"] = *description;
        fn["parameters"] = ordered.get().at("tools").at(i).at("input_schema");
        out.push_back(ordered_json{{"type", "function"}, {"function", std::move(fn)}});
        r.names.push_back(std::move(name));
    }
    // An empty list is no tools (as on the OpenAI route).
    if (!out.empty()) r.tools = std::move(out);
}

void read_tool_choice(const Fields& top, const json& v, ToolRequest& r) {
    const char* expected = "{\"type\": \"auto\"}, {\"type\": \"any\"}, {\"type\": \"tool\", \"name\": ...} or "
                           "{\"type\": \"none\"}";
    if (!v.is_object()) top.bad("tool_choice", expected, v);
    const Fields f(v, "tool_choice.");
    const std::string type = required_string(f, "type", std::string(expected));
    if (type == "auto") r.choice = ToolChoice::Auto;
    else if (type == "any") r.choice = ToolChoice::Required;
    else if (type == "none") r.choice = ToolChoice::None;
    else if (type == "tool") r.choice = ToolChoice::Named;
    else refuse("tool_choice.type",
                fmt::format(R"(expected "auto", "any", "tool" or "none", found "{}")", type.substr(0, 80)));
    if (r.choice == ToolChoice::Named) r.named = tool_name(f, "name");
    r.parallel = !f.boolean("disable_parallel_tool_use", false);
    if (r.tools.is_null() && (r.choice == ToolChoice::Required || r.choice == ToolChoice::Named)) {
        refuse("tool_choice", fmt::format("{{\"type\": \"{}\"}} forces a tool call; it needs 'tools'", type));
    }
    if (r.choice == ToolChoice::Named && std::find(r.names.begin(), r.names.end(), r.named) == r.names.end()) {
        refuse("tool_choice.name", fmt::format("\"{}\" is not one of the tools", r.named));
    }
}

}  // namespace

Conversation parse_conversation(const json& body, std::string_view raw_body) {
    const Fields f(body);
    const OrderedBody ordered(body, raw_body);
    Conversation c;
    if (const json* tools = f.find("tools")) read_tools(f, *tools, ordered, c.tools);
    if (const json* choice = f.find("tool_choice")) read_tool_choice(f, *choice, c.tools);

    if (const json* system = f.find("system")) {
        std::string text = block_text(f, *system, "system");
        if (!text.empty()) c.messages.push_back({"system", std::move(text)});
    }
    const json* messages = f.find("messages");
    if (!messages) refuse("messages", "missing; expected an array of {role, content} objects");
    if (!messages->is_array()) f.bad("messages", "an array of {role, content} objects", *messages);
    if (messages->empty()) refuse("messages", "expected at least one message, found an empty array");
    CallNames calls;
    bool last_assistant = false;
    for (size_t i = 0; i < messages->size(); ++i) {
        const json& m = (*messages)[i];
        const std::string field = fmt::format("messages[{}]", i);
        if (!m.is_object()) f.bad(field, "an object with role and content", m);
        const Fields mf(m, field + ".");
        const std::string role = required_string(mf, "role", "\"user\" or \"assistant\"");
        if (role != "user" && role != "assistant") {
            refuse(field + ".role",
                   fmt::format(R"(expected "user" or "assistant" (the system text goes in 'system'), found "{}")", role));
        }
        const json* content = mf.find("content");
        if (!content) refuse(field + ".content", "missing");
        last_assistant = role == "assistant";
        if (last_assistant) c.messages.push_back(assistant_turn(f, *content, field + ".content", ordered, i, calls));
        else user_turn(f, *content, field + ".content", calls, c.messages);
    }
    // A last assistant turn is the start of the reply (Anthropic's prefill):
    // it goes after the template's generation prompt.
    if (last_assistant) {
        if (!c.messages.back().tool_calls.empty()) {
            refuse("messages", "the last assistant turn has tool_use blocks; send their tool_result blocks in a user "
                               "turn after it");
        }
        c.prefill = std::move(c.messages.back().content);
        c.messages.pop_back();
        if (c.messages.empty() || c.messages.back().role == "system") {
            refuse("messages", "expected a user turn before the last assistant turn");
        }
    }
    return c;
}

json tool_input(const std::string& arguments) {
    json j = json::parse(arguments, nullptr, false);
    if (j.is_object()) return j;
    return json{{"arguments", arguments}};
}

json tool_use_block(const chat::ToolCall& call) {
    return json{{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", tool_input(call.arguments)}};
}

json content_blocks(const std::string& text, std::span<const chat::ToolCall> calls) {
    json out = json::array();
    if (!text.empty() || calls.empty()) out.push_back({{"type", "text"}, {"text", text}});
    for (const chat::ToolCall& c : calls) out.push_back(tool_use_block(c));
    return out;
}

std::string BlockEvents::open_text() {
    text_open_ = true;
    return anthropic_event(
        {{"type", "content_block_start"}, {"index", next_}, {"content_block", {{"type", "text"}, {"text", ""}}}});
}

std::string BlockEvents::text(const std::string& delta) {
    if (delta.empty()) return {};
    std::string out = text_open_ ? std::string() : open_text();
    return out + anthropic_event({{"type", "content_block_delta"},
                                  {"index", next_},
                                  {"delta", {{"type", "text_delta"}, {"text", delta}}}});
}

std::string BlockEvents::close_text() {
    if (!text_open_) return {};
    text_open_ = false;
    return anthropic_event({{"type", "content_block_stop"}, {"index", next_++}});
}

std::string BlockEvents::calls(std::span<const chat::ToolCall> calls) {
    std::string out;
    for (const chat::ToolCall& c : taker_.take(calls)) {
        out += close_text();
        json block = tool_use_block(c);
        const std::string input = block["input"].dump(-1, ' ', false, json::error_handler_t::replace);
        block["input"] = json::object();  // Anthropic's start: the input comes in the deltas
        out += anthropic_event({{"type", "content_block_start"}, {"index", next_}, {"content_block", block}});
        out += anthropic_event({{"type", "content_block_delta"},
                                {"index", next_},
                                {"delta", {{"type", "input_json_delta"}, {"partial_json", input}}}});
        out += anthropic_event({{"type", "content_block_stop"}, {"index", next_++}});
    }
    return out;
}

std::string BlockEvents::finish() {
    std::string out;
    if (next_ == 0 && !text_open_) out = open_text();
    return out + close_text();
}

}  // namespace tandem::serve
