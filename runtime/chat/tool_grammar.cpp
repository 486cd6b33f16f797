#include "runtime/chat/tool_grammar.h"

#include <vector>

#include "runtime/common/error.h"

namespace tandem::chat {
namespace {

// Any JSON value (RFC 8259) that JSON parsers take (the reply parser's
// nlohmann included): whitespace bounded so that a model cannot pad forever
// inside a call, \u escapes of surrogates only in pairs, numbers of at most
// 16 digits before and after the point and 2 in the exponent (a double
// holds them).
constexpr std::string_view kJsonRules = R"(json-object ::= "{" ws ( json-string ws ":" ws json-value ( ws "," ws json-string ws ":" ws json-value )* )? ws "}"
json-array ::= "[" ws ( json-value ( ws "," ws json-value )* )? ws "]"
json-value ::= json-object | json-array | json-string | json-number | "true" | "false" | "null"
json-string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" json-unicode ) )* "\""
json-unicode ::= [0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} | [dD] [89abAB] [0-9a-fA-F]{2} "\\u" [dD] [c-fC-F] [0-9a-fA-F]{2}
json-number ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?
ws ::= [ \t\n]{0,20}
)";

// A GBNF string literal of s (function names are [a-zA-Z0-9_-], but the
// fixed texts hold quotes and newlines).
std::string literal(std::string_view s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        if (c == '\n') out += "\\n";
        else out += c;
    }
    return out + "\"";
}

struct CallShape {
    std::string before_name, between, after;  // a call is before_name NAME between ARGS after
    std::string open, separator, close;       // root ::= open call (separator call)* close
};

CallShape shape_of(const ChatTemplate& t, ToolFormat f) {
    switch (f) {
    case ToolFormat::Hermes:
        return {"{\"name\": \"", "\", \"arguments\": ", "}", "<tool_call>\n", "\n</tool_call>\n<tool_call>\n", "\n</tool_call>"};
    case ToolFormat::Llama3: return {"{\"name\": \"", "\", \"parameters\": ", "}", "", "; ", ""};
    case ToolFormat::Mistral:
        if (t.source().find("[ARGS]") != std::string::npos) return {"[TOOL_CALLS]", "[ARGS]", "", "", "", ""};
        return {"{\"name\": \"", "\", \"arguments\": ", "}", "[TOOL_CALLS][", ", ", "]"};
    case ToolFormat::Harmony:
        return {"<|channel|>commentary to=functions.", " <|constrain|>json<|message|>", "", "", "", ""};
    default: throw Error("tool_call_grammar: the template writes no tool calls");
    }
}

}  // namespace

std::string tool_call_grammar(const ChatTemplate& t, const nlohmann::ordered_json& tools, std::string_view only,
                              bool parallel, const SchemaRules& schema_rules) {
    const ToolFormat format = tool_format(t);
    const CallShape shape = shape_of(t, format);
    std::string rules, alternatives;
    size_t i = 0;
    for (const auto& tool : tools) {
        const std::string name = tool.at("function").at("name").get<std::string>();
        if (!only.empty() && name != only) continue;
        const std::string args = "args-" + std::to_string(i), call = "call-" + std::to_string(i);
        ++i;
        const auto& fn = tool.at("function");
        if (schema_rules && fn.contains("parameters")) rules += schema_rules(fn.at("parameters"), args);
        else rules += args + " ::= json-object\n";
        rules += call;
        rules += " ::= ";
        rules += literal(shape.before_name + name + shape.between);
        rules += " ";
        rules += args;
        if (!shape.after.empty()) {
            rules += " ";
            rules += literal(shape.after);
        }
        rules += "\n";
        if (!alternatives.empty()) alternatives += " | ";
        alternatives += call;
    }
    if (alternatives.empty()) throw Error("tool_call_grammar: no tool is named '" + std::string(only) + "'");
    const auto opt = [](const std::string& s) { return s.empty() ? std::string() : literal(s) + " "; };
    std::string root = "root ::= ";
    root += opt(shape.open);
    root += "call";
    if (parallel) {
        root += " ( ";
        root += opt(shape.separator);
        root += "call )*";
    }
    if (!shape.close.empty()) {
        root += " ";
        root += literal(shape.close);
    }
    root += "\n";
    return root + "call ::= " + alternatives + "\n" + rules + std::string(kJsonRules);
}

}  // namespace tandem::chat
