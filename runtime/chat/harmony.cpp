#include "runtime/chat/harmony.h"

#include <algorithm>
#include <array>

namespace tandem::chat {
namespace {

// What ends a body: the message's end, or the next header's start.
constexpr std::array<std::string_view, 5> kBodyMarkers = {"<|end|>", "<|return|>", "<|call|>", "<|start|>",
                                                          "<|channel|>"};
constexpr std::string_view kMessage = "<|message|>";
// A header that runs this long without <|message|> is not one: shown as text.
constexpr size_t kMaxHeader = 1024;

bool is_header_start(std::string_view m) { return m == "<|start|>" || m == "<|channel|>"; }

// The first body marker in s: its position and text (npos when none).
std::pair<size_t, std::string_view> first_marker(std::string_view s) {
    std::pair<size_t, std::string_view> best{std::string_view::npos, {}};
    for (const std::string_view m : kBodyMarkers) {
        const size_t at = s.find(m);
        if (at < best.first) best = {at, m};
    }
    return best;
}

// Where the longest suffix of s that could still grow into marker m begins.
size_t held_back(std::string_view s, std::string_view m) {
    for (size_t n = std::min(s.size(), m.size() - 1); n > 0; --n) {
        if (m.substr(0, n) == s.substr(s.size() - n)) return s.size() - n;
    }
    return s.size();
}

size_t held_back_body(std::string_view s) {
    size_t keep = s.size();
    for (const std::string_view m : kBodyMarkers) keep = std::min(keep, held_back(s, m));
    return keep;
}

// The word after `key` in the header, up to a space or the next marker.
std::string word_after(std::string_view header, std::string_view key) {
    const size_t at = header.find(key);
    if (at == std::string_view::npos) return {};
    const size_t begin = at + key.size();
    size_t end = begin;
    while (end < header.size() && header[end] != ' ' && header[end] != '<') ++end;
    return std::string(header.substr(begin, end - begin));
}

}  // namespace

HarmonyParser::Delta HarmonyParser::push(std::string_view text, bool last) {
    pending_.append(text);
    Delta out;
    while (!pending_.empty()) {
        if (part_ == Part::Header) {
            const size_t at = pending_.find(kMessage);
            if (at == std::string::npos) {
                if (pending_.size() + header_.size() <= kMaxHeader) break;  // wait for the rest
                // Not a header after all: its text is shown.
                part_ = Part::Body;
                sink_ = Sink::Content;
                emit(header_, out);
                header_.clear();
                continue;
            }
            header_.append(pending_, 0, at);
            pending_.erase(0, at + kMessage.size());
            open_body();
            continue;
        }
        const auto [at, marker] = first_marker(pending_);
        if (at == std::string::npos) {
            const size_t keep = held_back_body(pending_);
            emit(std::string_view(pending_).substr(0, keep), out);
            pending_.erase(0, keep);
            break;
        }
        emit(std::string_view(pending_).substr(0, at), out);
        if (is_header_start(marker)) {
            part_ = Part::Header;
            header_ = std::string(marker);
            pending_.erase(0, at + marker.size());
        } else {
            // The message ends; what follows before another header is content.
            sink_ = Sink::Content;
            pending_.erase(0, at + marker.size());
        }
    }
    if (last) {
        if (part_ == Part::Body) emit(pending_, out);  // an unfinished header is dropped
        pending_.clear();
        header_.clear();
    }
    return out;
}

void HarmonyParser::open_body() {
    part_ = Part::Body;
    const std::string channel = word_after(header_, "<|channel|>");
    const std::string to = word_after(header_, "to=");
    constexpr std::string_view kFunctions = "functions.";
    if (to.rfind(kFunctions, 0) == 0) {
        sink_ = Sink::Call;
        calls_.push_back({to.substr(kFunctions.size()), {}, {}});
    } else {
        sink_ = channel == "analysis" ? Sink::Reasoning : Sink::Content;
    }
    header_.clear();
}

void HarmonyParser::emit(std::string_view text, Delta& out) {
    if (text.empty()) return;
    switch (sink_) {
        case Sink::Reasoning:
            reasoning_.append(text);
            out.reasoning.append(text);
            break;
        case Sink::Content:
            content_.append(text);
            out.content.append(text);
            break;
        case Sink::Call: calls_.back().arguments.append(text); break;
    }
}

}  // namespace tandem::chat
