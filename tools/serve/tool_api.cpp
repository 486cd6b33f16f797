#include "tools/serve/tool_api.h"

#include <algorithm>
#include <random>

#include <fmt/format.h>

#include "tools/serve/openai_api.h"

namespace tandem::serve {

using nlohmann::json;
using nlohmann::ordered_json;

bool valid_function_name(const std::string& s) {
    return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
               return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
           });
}

namespace {

// More tools than OpenAI takes (128) is refused: each is printed into the prompt.
constexpr size_t kMaxTools = 128;

std::string function_name(const Fields& top, const json& v, const std::string& field) {
    if (!v.is_string()) top.bad(field, "a function name (1 to 64 of a-z, A-Z, 0-9, _ and -)", v);
    const std::string name = v.get<std::string>();
    if (!valid_function_name(name)) {
        throw ApiError(400, fmt::format("'{}': expected a function name (1 to 64 of a-z, A-Z, 0-9, _ and -), found \"{}\"",
                                        field, name.substr(0, 80)),
                       field);
    }
    return name;
}

// One entry of `tools`: {type: "function", function: {name, description?, parameters?, strict?}}.
std::string read_tool(const Fields& top, const json& t, const std::string& field) {
    if (!t.is_object()) top.bad(field, "an object {type: \"function\", function: {...}}", t);
    const auto type = t.find("type");
    if (type == t.end() || *type != "function") {
        throw ApiError(400, fmt::format("'{}.type': expected \"function\", found {}", field,
                                        type == t.end() ? "nothing" : type->dump()),
                       field + ".type");
    }
    const auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) top.bad(field + ".function", "an object {name, description, parameters}", fn == t.end() ? json() : *fn);
    const auto name = fn->find("name");
    const std::string name_s = function_name(top, name == fn->end() ? json() : *name, field + ".function.name");
    const Fields f(*fn, field + ".function.");
    f.string("description");
    f.boolean("strict", false);
    if (const json* p = f.find("parameters")) {
        // A JSON Schema of the arguments: an object schema (OpenAI's rule).
        if (!p->is_object()) f.bad("parameters", "a JSON Schema object", *p);
        const auto pt = p->find("type");
        if (pt != p->end() && *pt != "object") {
            throw ApiError(400, fmt::format("'{}.function.parameters.type': expected \"object\" (the arguments are an object), found {}",
                                            field, pt->dump()),
                           field + ".function.parameters.type");
        }
    }
    return name_s;
}

void read_tool_choice(const Fields& top, const json& v, ToolRequest& r) {
    const char* expected = "\"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}";
    if (v.is_string()) {
        const std::string s = v.get<std::string>();
        if (s == "auto") r.choice = ToolChoice::Auto;
        else if (s == "none") r.choice = ToolChoice::None;
        else if (s == "required") r.choice = ToolChoice::Required;
        else throw ApiError(400, fmt::format("'tool_choice': expected {}, found \"{}\"", expected, s.substr(0, 80)), "tool_choice");
    } else if (v.is_object()) {
        const auto type = v.find("type");
        if (type == v.end() || *type != "function") {
            throw ApiError(400, fmt::format("'tool_choice.type': expected \"function\", found {}", type == v.end() ? "nothing" : type->dump()),
                           "tool_choice.type");
        }
        const auto fn = v.find("function");
        if (fn == v.end() || !fn->is_object()) top.bad("tool_choice.function", "an object {name}", fn == v.end() ? json() : *fn);
        const auto name = fn->find("name");
        r.named = function_name(top, name == fn->end() ? json() : *name, "tool_choice.function.name");
        r.choice = ToolChoice::Named;
    } else {
        top.bad("tool_choice", expected, v);
    }
}

}  // namespace

ToolRequest parse_tool_request(const json& body, const std::string& raw_body) {
    ToolRequest r;
    const Fields top(body);
    if (const json* tools = top.find("tools")) {
        if (!tools->is_array()) top.bad("tools", "an array of {type: \"function\", function: {...}} objects", *tools);
        if (tools->size() > kMaxTools) {
            throw ApiError(400, fmt::format("'tools': expected at most {} tools, found {}", kMaxTools, tools->size()), "tools");
        }
        for (size_t i = 0; i < tools->size(); ++i) {
            const std::string field = fmt::format("tools[{}]", i);
            std::string name = read_tool(top, (*tools)[i], field);
            if (std::find(r.names.begin(), r.names.end(), name) != r.names.end()) {
                throw ApiError(400, fmt::format("'{}.function.name': \"{}\" names an earlier tool too", field, name),
                               field + ".function.name");
            }
            r.names.push_back(std::move(name));
        }
        // An empty list is no tools (as llama-server takes it).
        if (!tools->empty()) r.tools = ordered_json::parse(raw_body)["tools"];
    }
    r.parallel = top.boolean("parallel_tool_calls", true);
    if (const json* choice = top.find("tool_choice")) read_tool_choice(top, *choice, r);
    if (r.tools.is_null() && (r.choice == ToolChoice::Required || r.choice == ToolChoice::Named)) {
        throw ApiError(400, "'tool_choice': a required or named function call needs 'tools'", "tool_choice");
    }
    if (r.choice == ToolChoice::Named && std::find(r.names.begin(), r.names.end(), r.named) == r.names.end()) {
        throw ApiError(400, fmt::format("'tool_choice.function.name': \"{}\" is not one of the tools", r.named),
                       "tool_choice.function.name");
    }
    return r;
}

void read_message_tools(const json& m, const std::string& field, chat::Message& out) {
    const Fields f(m, field + ".");
    if (const json* calls = f.find("tool_calls")) {
        if (out.role != "assistant") {
            throw ApiError(400, fmt::format("'{}.tool_calls': only assistant messages make tool calls", field),
                           field + ".tool_calls");
        }
        if (!calls->is_array()) f.bad("tool_calls", "an array of {id, type, function: {name, arguments}} objects", *calls);
        for (size_t i = 0; i < calls->size(); ++i) {
            const json& c = (*calls)[i];
            const std::string key = fmt::format("tool_calls[{}]", i);
            if (!c.is_object()) f.bad(key, "an object {id, type: \"function\", function: {name, arguments}}", c);
            const Fields cf(c, f.name(key) + ".");
            if (const auto type = cf.string("type"); type && *type != "function") {
                throw ApiError(400, fmt::format("'{}': expected \"function\", found \"{}\"", cf.name("type"), *type), cf.name("type"));
            }
            chat::ToolCall call;
            call.id = cf.string("id").value_or("");
            const json* fn = cf.find("function");
            if (!fn || !fn->is_object()) cf.bad("function", "an object {name, arguments}", fn ? *fn : json());
            const Fields ff(*fn, cf.name("function") + ".");
            const auto name = ff.string("name");
            if (!name || name->empty()) ff.bad("name", "the function's name", ff.find("name") ? *ff.find("name") : json());
            call.name = *name;
            // OpenAI's arguments are JSON text; an object (as some clients
            // send) is taken as its JSON.
            if (const json* a = ff.find("arguments")) {
                if (a->is_string()) call.arguments = a->get<std::string>();
                else if (a->is_object()) call.arguments = a->dump();
                else ff.bad("arguments", "JSON text (a string) or an object", *a);
            } else {
                call.arguments = "{}";
            }
            out.tool_calls.push_back(std::move(call));
        }
    }
    if (auto id = f.string("tool_call_id")) out.tool_call_id = std::move(*id);
    if (auto name = f.string("name")) out.name = std::move(*name);
}

void check_tool_support(const ToolRequest& r, chat::ToolFormat format, std::string_view none_choice) {
    if (!r.active()) return;
    if (format == chat::ToolFormat::None) {
        throw ApiError(400,
                       fmt::format("'tools': the model's chat template writes no tool calls Tandem can read "
                                   "(Hermes/Qwen <tool_call>, Llama 3.x JSON, Mistral [TOOL_CALLS] or gpt-oss "
                                   "harmony); start the server with --chat-template FILE of a template with tools, "
                                   "or send {}",
                                   none_choice),
                       "tools");
    }
}

std::string call_id(uint64_t seed, size_t index, size_t length) {
    static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::mt19937_64 rng(seed ^ (0x9e3779b97f4a7c15ull * (index + 1)));
    std::string s;
    for (size_t i = 0; i < length; ++i) s += kAlnum[rng() % (sizeof kAlnum - 1)];
    return s;
}

std::vector<chat::ToolCall> CallTaker::take(std::span<const chat::ToolCall> calls) {
    std::vector<chat::ToolCall> out;
    for (const chat::ToolCall& c : calls) {
        const size_t index = seen_++;
        if (index > 0 && !parallel_) continue;
        chat::ToolCall taken = c;
        if (taken.id.empty()) {
            taken.id = format_ == chat::ToolFormat::Mistral ? call_id(seed_, index, 9) : prefix_ + call_id(seed_, index, 24);
        }
        out.push_back(std::move(taken));
        ++taken_;
    }
    return out;
}

json tool_calls_chunk(const ResponseIds& ids, std::span<const chat::ToolCall> calls, size_t first_index) {
    json chunk = chat_chunk(ids, std::nullopt, std::nullopt, std::nullopt);
    chunk["choices"][0]["delta"]["tool_calls"] = tool_calls_delta(calls, first_index);
    return chunk;
}

}  // namespace tandem::serve
