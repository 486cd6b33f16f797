#include "runtime/chat/tool_calls.h"

#include <algorithm>
#include <array>

#include <nlohmann/json.hpp>

namespace tandem::chat {
namespace {

using nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";
// A Mistral function name longer than this before [ARGS] is not one.
constexpr size_t kMaxName = 256;

// The texts that start a call in each format (Llama 3's bare '{' at the
// start of a reply is handled apart).
std::vector<std::string_view> openers(ToolFormat f) {
    switch (f) {
    case ToolFormat::Hermes: return {kHermesOpen};
    case ToolFormat::Llama3: return {kPythonTag};
    case ToolFormat::Mistral: return {kMistralCalls};
    default: return {};
    }
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

size_t skip_spaces(std::string_view s, size_t pos) {
    while (pos < s.size() && is_space(s[pos])) ++pos;
    return pos;
}

// Where the longest suffix of s that could still grow into m begins.
size_t held_back(std::string_view s, std::string_view m) {
    for (size_t n = std::min(s.size(), m.size() - 1); n > 0; --n)
        if (m.substr(0, n) == s.substr(s.size() - n)) return s.size() - n;
    return s.size();
}

// The end (one past the closing bracket) of the JSON object or array that
// starts at s[pos], found by counting brackets outside strings; npos when
// the text ends first. The text between is checked by the JSON parser.
size_t json_end(std::string_view s, size_t pos) {
    int depth = 0;
    bool in_string = false;
    for (size_t i = pos; i < s.size(); ++i) {
        const char c = s[i];
        if (in_string) {
            if (c == '\\') ++i;
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == '"') in_string = true;
        else if (c == '{' || c == '[') ++depth;
        else if ((c == '}' || c == ']') && --depth == 0) return i + 1;
    }
    return std::string_view::npos;
}

// A call object {"name": N, ARGS_KEY: {...}}: its arguments become JSON
// text (an object is written compactly; a string, which some models
// write, is taken as the text it holds). nullopt when it is not a call.
std::optional<ToolCall> call_of(const ordered_json& j, std::initializer_list<const char*> args_keys) {
    if (!j.is_object()) return std::nullopt;
    const auto name = j.find("name");
    if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
    ToolCall c;
    c.name = name->get<std::string>();
    c.arguments = "{}";
    for (const char* key : args_keys) {
        const auto a = j.find(key);
        if (a == j.end()) continue;
        if (a->is_object()) c.arguments = a->dump(-1, ' ', false, ordered_json::error_handler_t::replace);
        else if (a->is_string()) c.arguments = a->get<std::string>();
        else return std::nullopt;
        break;
    }
    const auto id = j.find("id");
    if (id != j.end() && id->is_string()) c.id = id->get<std::string>();
    return c;
}

ordered_json parse_json(std::string_view text) { return ordered_json::parse(text.begin(), text.end(), nullptr, false); }

// An object that is a call, or an array of them.
std::vector<ToolCall> calls_of(const ordered_json& j, std::initializer_list<const char*> args_keys) {
    std::vector<ToolCall> out;
    if (j.is_array()) {
        for (const auto& x : j) {
            auto c = call_of(x, args_keys);
            if (!c) return {};
            out.push_back(std::move(*c));
        }
    } else if (auto c = call_of(j, args_keys)) {
        out.push_back(std::move(*c));
    }
    return out;
}

// Not a call: the opener is shown as text, and the scan goes on after it.
ScannedCalls not_a_call(size_t opener_size) { return ScannedCalls{{}, opener_size}; }

std::optional<ScannedCalls> scan_hermes(std::string_view text, bool last) {
    const size_t close = text.find(kHermesClose, kHermesOpen.size());
    if (close == std::string_view::npos && !last) return std::nullopt;
    // A reply cut at its end (a stop string, the token limit) may lack the
    // closing tag: the rest is the call if it parses as one.
    const size_t body_end = close == std::string_view::npos ? text.size() : close;
    const auto calls = calls_of(parse_json(text.substr(kHermesOpen.size(), body_end - kHermesOpen.size())),
                                {"arguments", "parameters"});
    if (calls.empty()) return not_a_call(kHermesOpen.size());
    return ScannedCalls{calls, close == std::string_view::npos ? text.size() : close + kHermesClose.size()};
}

std::optional<ScannedCalls> scan_llama3(std::string_view text, bool last) {
    const size_t opener = text.substr(0, kPythonTag.size()) == kPythonTag ? kPythonTag.size() : 1;
    size_t pos = opener == 1 ? 0 : skip_spaces(text, opener);
    ScannedCalls out;
    while (true) {
        if (pos == text.size() && !last) return std::nullopt;  // another call may follow
        if (pos == text.size() || text[pos] != '{') break;
        const size_t end = json_end(text, pos);
        if (end == std::string_view::npos) {
            if (!last) return std::nullopt;
            break;
        }
        auto c = call_of(parse_json(text.substr(pos, end - pos)), {"parameters", "arguments"});
        if (!c) break;
        out.calls.push_back(std::move(*c));
        // Separators after a call (';' between calls, as Llama 3.2 writes them).
        pos = end;
        while (pos < text.size() && (is_space(text[pos]) || text[pos] == ';')) ++pos;
        out.used = pos;
    }
    if (out.calls.empty()) return not_a_call(opener);
    return out;
}

std::optional<ScannedCalls> scan_mistral(std::string_view text, bool last) {
    const size_t pos = skip_spaces(text, kMistralCalls.size());
    if (pos == text.size()) return last ? std::optional(not_a_call(kMistralCalls.size())) : std::nullopt;
    if (text[pos] == '[') {
        const size_t end = json_end(text, pos);
        if (end == std::string_view::npos) return last ? std::optional(not_a_call(kMistralCalls.size())) : std::nullopt;
        const ordered_json j = parse_json(text.substr(pos, end - pos));
        auto calls = j.is_array() && !j.empty() ? calls_of(j, {"arguments"}) : std::vector<ToolCall>{};
        if (calls.empty()) return not_a_call(kMistralCalls.size());
        return ScannedCalls{std::move(calls), end};
    }
    // NAME[ARGS]{...} or NAME[CALL_ID]ID[ARGS]{...}
    const size_t args = text.find(kMistralArgs, pos);
    if (args == std::string_view::npos) {
        if (!last && text.size() - pos <= kMaxName + kMistralCallId.size() + 64) return std::nullopt;
        return not_a_call(kMistralCalls.size());
    }
    ToolCall c;
    std::string_view head = text.substr(pos, args - pos);
    if (const size_t id_at = head.find(kMistralCallId); id_at != std::string_view::npos) {
        c.id = std::string(head.substr(id_at + kMistralCallId.size()));
        head = head.substr(0, id_at);
    }
    c.name = std::string(head);
    const bool name_ok = !c.name.empty() && c.name.size() <= kMaxName &&
                         std::none_of(c.name.begin(), c.name.end(), [](char ch) { return is_space(ch) || ch == '[' || ch == '{'; });
    const size_t obj = skip_spaces(text, args + kMistralArgs.size());
    if (!name_ok) return not_a_call(kMistralCalls.size());
    if (obj == text.size()) return last ? std::optional(not_a_call(kMistralCalls.size())) : std::nullopt;
    if (text[obj] != '{') return not_a_call(kMistralCalls.size());
    const size_t end = json_end(text, obj);
    if (end == std::string_view::npos) return last ? std::optional(not_a_call(kMistralCalls.size())) : std::nullopt;
    const ordered_json j = parse_json(text.substr(obj, end - obj));
    if (!j.is_object()) return not_a_call(kMistralCalls.size());
    c.arguments = j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
    return ScannedCalls{{std::move(c)}, end};
}

}  // namespace

ToolFormat tool_format_of_source(std::string_view source) {
    const auto has = [&](std::string_view m) { return source.find(m) != std::string_view::npos; };
    // Checked in order: harmony's templates are recognised by their own
    // marker; Hermes-style templates built on Llama 3 (Hermes 2 Pro) write
    // <tool_call>, so it comes before Llama 3's headers.
    if (has("<|channel|>")) return ToolFormat::Harmony;
    if (has("[TOOL_CALLS]")) return ToolFormat::Mistral;
    if (has("<tool_call>")) return ToolFormat::Hermes;
    if (has("<|start_header_id|>") && has("tools")) return ToolFormat::Llama3;
    return ToolFormat::None;
}

ToolFormat tool_format(const ChatTemplate& t) { return tool_format_of_source(t.source()); }

std::string_view tool_format_name(ToolFormat f) {
    static constexpr std::array<std::string_view, 5> kNames = {"none", "hermes", "llama3", "mistral", "harmony"};
    return kNames[static_cast<size_t>(f)];
}

std::optional<ScannedCalls> scan_calls(ToolFormat format, std::string_view text, bool last) {
    switch (format) {
    case ToolFormat::Hermes: return scan_hermes(text, last);
    case ToolFormat::Llama3: return scan_llama3(text, last);
    case ToolFormat::Mistral: return scan_mistral(text, last);
    default: return not_a_call(text.size());
    }
}

ToolCallParser::ToolCallParser(ToolFormat format) : format_(format) {
    if (openers(format).empty()) mode_ = Mode::Plain;
}

ToolCallParser::Delta ToolCallParser::push(std::string_view text, bool last) {
    pending_.append(text);
    Delta out;
    while (true) {
        if (mode_ == Mode::Call) {
            if (!scan_call(out, last)) break;
            continue;
        }
        if (mode_ == Mode::Plain) {
            show(pending_, out);
            pending_.clear();
            break;
        }
        const size_t before = pending_.size();
        scan_content(out, last);
        if (mode_ != Mode::Call && pending_.size() == before) break;
    }
    if (last) {
        // Whitespace that ended the reply is its own only when no call
        // followed it (then the reply is the text as the model wrote it).
        if (calls_.empty()) {
            out.content += spaces_;
            content_ += spaces_;
        }
        spaces_.clear();
    }
    return out;
}

void ToolCallParser::scan_content(Delta& out, bool last) {
    size_t at = std::string::npos;
    for (const std::string_view m : openers(format_)) at = std::min(at, pending_.find(m));
    // Llama 3 writes a call as the whole reply: a '{' before any content.
    if (format_ == ToolFormat::Llama3 && content_.empty()) {
        const size_t first = skip_spaces(pending_, 0);
        if (first < pending_.size() && pending_[first] == '{' && first < at) at = first;
        else if (first == pending_.size() && !last) return;  // only whitespace yet: a call may follow
    }
    if (at == std::string::npos) {
        size_t keep = pending_.size();
        if (!last)
            for (const std::string_view m : openers(format_)) keep = std::min(keep, held_back(pending_, m));
        show(std::string_view(pending_).substr(0, keep), out);
        pending_.erase(0, keep);
        return;
    }
    show(std::string_view(pending_).substr(0, at), out);
    pending_.erase(0, at);
    mode_ = Mode::Call;
}

bool ToolCallParser::scan_call(Delta& out, bool last) {
    const auto scanned = scan_calls(format_, pending_, last);
    if (!scanned) return false;
    mode_ = Mode::Content;
    if (scanned->calls.empty()) {
        // Not a call after all: its opener is text, and the scan goes on after it.
        show(std::string_view(pending_).substr(0, scanned->used), out);
        pending_.erase(0, scanned->used);
        return true;
    }
    spaces_.clear();  // whitespace between text and a call is neither's
    for (const ToolCall& c : scanned->calls) {
        calls_.push_back(c);
        out.calls.push_back(c);
    }
    pending_.erase(0, scanned->used);
    return true;
}

void ToolCallParser::show(std::string_view text, Delta& out) {
    if (text.empty()) return;
    size_t end = text.size();
    while (end > 0 && is_space(text[end - 1])) --end;
    if (end == 0) {
        spaces_.append(text);
        return;
    }
    // Leading whitespace of a reply's first content after calls is dropped as well.
    std::string shown = spaces_;
    if (content_.empty() && !calls_.empty()) shown.clear();
    shown.append(text.substr(0, end));
    if (content_.empty() && !calls_.empty()) {
        const size_t first = skip_spaces(shown, 0);
        shown.erase(0, first);
    }
    spaces_.assign(text.substr(end));
    out.content += shown;
    content_ += shown;
}

}  // namespace tandem::chat
