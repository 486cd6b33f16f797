#include "runtime/chat/jinja_text.h"

#include <algorithm>

#include "runtime/chat/jinja_value.h"

namespace tandem::chat::jinja::text {
namespace {

bool is_ws(std::string_view c) {
    return c.size() == 1 && (c[0] == ' ' || c[0] == '\t' || c[0] == '\n' || c[0] == '\r' || c[0] == '\f' || c[0] == '\v' ||
                             (c[0] >= 0x1c && c[0] <= 0x1f));
}
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char up(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c; }
char down(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

}  // namespace

std::string strip(std::string_view s, const std::optional<std::string>& chars, Side side) {
    const auto cs = utf8_chars(s);
    const auto set = chars ? utf8_chars(*chars) : std::vector<std::string_view>{};
    const auto strippable = [&](std::string_view c) {
        return chars ? std::find(set.begin(), set.end(), c) != set.end() : is_ws(c);
    };
    size_t lo = 0, hi = cs.size();
    if (side != Side::Right)
        while (lo < hi && strippable(cs[lo])) ++lo;
    if (side != Side::Left)
        while (hi > lo && strippable(cs[hi - 1])) --hi;
    if (lo == hi) return {};
    const char* b = cs[lo].data();
    const char* e = cs[hi - 1].data() + cs[hi - 1].size();
    return std::string(b, e);
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
    std::vector<std::string> out;
    if (sep) {
        size_t pos = 0;
        while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
            const size_t f = s.find(*sep, pos);
            if (f == std::string_view::npos) break;
            out.emplace_back(s.substr(pos, f - pos));
            pos = f + sep->size();
        }
        out.emplace_back(s.substr(pos));
        return out;
    }
    const auto cs = utf8_chars(s);
    size_t i = 0;
    while (i < cs.size()) {
        while (i < cs.size() && is_ws(cs[i])) ++i;
        if (i == cs.size()) break;
        if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
            // The rest, with trailing whitespace kept as Python does.
            out.emplace_back(s.substr(static_cast<size_t>(cs[i].data() - s.data())));
            break;
        }
        const size_t start = i;
        while (i < cs.size() && !is_ws(cs[i])) ++i;
        out.emplace_back(cs[start].data(), static_cast<size_t>(cs[i - 1].data() + cs[i - 1].size() - cs[start].data()));
    }
    return out;
}

std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
    std::string out;
    if (from.empty()) {
        // Python inserts `to` before every character and at the end.
        int64_t done = 0;
        for (auto c : utf8_chars(s)) {
            if (count < 0 || done < count) {
                out += to;
                ++done;
            }
            out += c;
        }
        if (count < 0 || done < count) out += to;
        return out;
    }
    size_t pos = 0;
    int64_t done = 0;
    while (count < 0 || done < count) {
        const size_t f = s.find(from, pos);
        if (f == std::string_view::npos) break;
        out += s.substr(pos, f - pos);
        out += to;
        pos = f + from.size();
        ++done;
    }
    out += s.substr(pos);
    return out;
}

std::string upper(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = up(c);
    return out;
}

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = down(c);
    return out;
}

std::string capitalize(std::string_view s) {
    std::string out = lower(s);
    if (!out.empty()) out[0] = up(out[0]);
    return out;
}

std::string py_title(std::string_view s) {
    std::string out(s);
    bool prev_cased = false;
    for (char& c : out) {
        const bool cased = is_alpha(c);
        if (cased) c = prev_cased ? down(c) : up(c);
        prev_cased = cased;
    }
    return out;
}

std::string jinja_title(std::string_view s) {
    // Words start after '-', whitespace, or one of ({[<.
    std::string out(s);
    bool word_start = true;
    for (char& c : out) {
        const bool sep = c == '-' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' ||
                         c == '(' || c == '{' || c == '[' || c == '<';
        if (sep) {
            word_start = true;
            continue;
        }
        c = word_start ? up(c) : down(c);
        word_start = false;
    }
    return out;
}

std::string html_escape(std::string_view s) {
    std::string out;
    for (char c : s) {
        switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&#34;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
        }
    }
    return out;
}

}  // namespace tandem::chat::jinja::text
