#include "runtime/grammar/rule_checks.h"

#include <fmt/format.h>

namespace tandem::grammar {

namespace {

using Rules = std::vector<std::vector<std::vector<Element>>>;

// Rules that can match the empty text (a fixed point).
std::vector<bool> nullable_rules(const Rules& rules) {
    std::vector<bool> nullable(rules.size(), false);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < rules.size(); ++r) {
            if (nullable[r]) continue;
            for (const auto& alt : rules[r]) {
                bool empty = true;
                for (const Element& e : alt) {
                    if (e.op != Op::Rule || !nullable[static_cast<size_t>(e.value)]) {
                        empty = false;
                        break;
                    }
                }
                if (empty) {
                    nullable[r] = true;
                    changed = true;
                    break;
                }
            }
        }
    }
    return nullable;
}

}  // namespace

void check_no_left_recursion(const Rules& rules, const std::vector<std::string>& names) {
    const std::vector<bool> nullable = nullable_rules(rules);
    // r -> s when s can be the first thing r expands to: it stands after
    // only nullable rules in one of r's alternatives.
    std::vector<std::vector<int32_t>> first(rules.size());
    for (size_t r = 0; r < rules.size(); ++r) {
        for (const auto& alt : rules[r]) {
            for (const Element& e : alt) {
                if (e.op != Op::Rule) break;
                first[r].push_back(e.value);
                if (!nullable[static_cast<size_t>(e.value)]) break;
            }
        }
    }
    // Depth-first search for a cycle, iteratively (a long chain of rules
    // must not exhaust the call stack); the path names it.
    enum : uint8_t { White, Grey, Black };
    std::vector<uint8_t> color(rules.size(), White);
    for (size_t start = 0; start < rules.size(); ++start) {
        if (color[start] != White) continue;
        std::vector<std::pair<int32_t, size_t>> path{{static_cast<int32_t>(start), 0}};
        color[start] = Grey;
        while (!path.empty()) {
            auto& [r, next] = path.back();
            const auto& out = first[static_cast<size_t>(r)];
            if (next == out.size()) {
                color[static_cast<size_t>(r)] = Black;
                path.pop_back();
                continue;
            }
            const int32_t s = out[next++];
            if (color[static_cast<size_t>(s)] == Grey) {
                std::string cycle;
                bool on = false;
                for (const auto& [p, unused] : path) {
                    on = on || p == s;
                    if (on) cycle += names[static_cast<size_t>(p)] + " -> ";
                }
                throw GrammarError(fmt::format(
                    "grammar: rule '{}' can reach itself without consuming a character ({}{}): left recursion, or a "
                    "repetition of something that can be empty; rewrite it right-recursive",
                    names[static_cast<size_t>(s)], cycle, names[static_cast<size_t>(s)]));
            }
            if (color[static_cast<size_t>(s)] == White) {
                color[static_cast<size_t>(s)] = Grey;
                path.emplace_back(s, 0);
            }
        }
    }
}

}  // namespace tandem::grammar
