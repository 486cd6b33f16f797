#include "runtime/grammar/matcher.h"

#include <algorithm>

namespace tandem::grammar {

namespace {

// Replaces references on top of `s` by each alternative of the rule they
// name (popping finished sequences), until every stack has a character
// class on top or is empty; those go to `out`. Iterative: a long chain of
// rules must not exhaust the call stack. Terminates because
// compile_grammar refused left recursion.
void expand(const Grammar& g, Stack s, std::vector<Stack>& out) {
    std::vector<Stack> todo;
    todo.push_back(std::move(s));
    while (!todo.empty()) {
        Stack cur = std::move(todo.back());
        todo.pop_back();
        if (cur.empty() || g.elements[static_cast<size_t>(cur.back())].op == Op::Char) {
            out.push_back(std::move(cur));
            continue;
        }
        const int32_t pos = cur.back();
        const int32_t rule = g.elements[static_cast<size_t>(pos)].value;
        cur.pop_back();
        if (!g.closes(pos + 1)) cur.push_back(pos + 1);
        for (int32_t a = g.rule_start[static_cast<size_t>(rule)];;) {
            Stack next = cur;
            if (!g.closes(a)) next.push_back(a);
            todo.push_back(std::move(next));
            while (!g.closes(a)) ++a;
            if (g.elements[static_cast<size_t>(a)].op == Op::End) break;
            ++a;
        }
    }
}

void dedupe(std::vector<Stack>& stacks) {
    std::sort(stacks.begin(), stacks.end());
    stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
}

}  // namespace

bool decode_utf8(std::string_view bytes, Utf8State& state, std::vector<uint32_t>& out) {
    for (const char ch : bytes) {
        const auto b = static_cast<unsigned char>(ch);
        if (state.remaining > 0) {
            if ((b & 0xC0) != 0x80) return false;
            state.value = (state.value << 6) | (b & 0x3Fu);
            if (--state.remaining == 0) {
                const uint32_t cp = state.value;
                if (cp > 0x10FFFF || cp < state.min || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
                out.push_back(cp);
                state = {};
            }
            continue;
        }
        if (b < 0x80) {
            out.push_back(b);
        } else if ((b & 0xE0) == 0xC0) {
            state = {b & 0x1Fu, 1, 0x80};
        } else if ((b & 0xF0) == 0xE0) {
            state = {b & 0x0Fu, 2, 0x800};
        } else if ((b & 0xF8) == 0xF0) {
            state = {b & 0x07u, 3, 0x10000};
        } else {
            return false;
        }
    }
    return true;
}

void advance(const Grammar& g, const std::vector<Stack>& stacks, uint32_t cp, std::vector<Stack>& out) {
    out.clear();
    for (const Stack& s : stacks) {
        if (s.empty()) continue;
        const Element& e = g.elements[static_cast<size_t>(s.back())];
        if (!g.classes[static_cast<size_t>(e.value)].matches(cp)) continue;
        Stack next(s.begin(), s.end() - 1);
        const int32_t after = s.back() + 1;
        if (!g.closes(after)) next.push_back(after);
        expand(g, std::move(next), out);
        if (out.size() > kMaxStacks * 4) break;
    }
    dedupe(out);
    if (out.size() > kMaxStacks) out.clear();
}

bool partial_possible(const Grammar& g, const std::vector<Stack>& stacks, Utf8State pending) {
    if (pending.remaining == 0) return true;
    const unsigned shift = 6u * pending.remaining;
    const uint32_t lo = std::max(pending.value << shift, pending.min);
    const uint32_t hi = std::min<uint32_t>((pending.value << shift) | ((1u << shift) - 1), 0x10FFFF);
    if (lo > hi) return false;
    for (const Stack& s : stacks) {
        if (s.empty()) continue;
        const Element& e = g.elements[static_cast<size_t>(s.back())];
        if (g.classes[static_cast<size_t>(e.value)].matches_any(lo, hi)) return true;
    }
    return false;
}

Matcher::Matcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
    // The start: each alternative of root, expanded.
    const int32_t root_start = g_->rule_start[static_cast<size_t>(g_->root)];
    for (int32_t a = root_start;;) {
        expand(*g_, g_->closes(a) ? Stack{} : Stack{a}, stacks_);
        while (!g_->closes(a)) ++a;
        if (g_->elements[static_cast<size_t>(a)].op == Op::End) break;
        ++a;
    }
    dedupe(stacks_);
}

bool Matcher::feed(std::string_view bytes, std::vector<Stack>& stacks, Utf8State& pending) const {
    std::vector<uint32_t> cps;
    if (!decode_utf8(bytes, pending, cps)) return false;
    std::vector<Stack> next;
    for (const uint32_t cp : cps) {
        advance(*g_, stacks, cp, next);
        if (next.empty()) return false;
        stacks.swap(next);
    }
    return partial_possible(*g_, stacks, pending);
}

bool Matcher::accept(std::string_view bytes) {
    std::vector<Stack> stacks = stacks_;
    Utf8State pending = pending_;
    if (!feed(bytes, stacks, pending)) return false;
    stacks_ = std::move(stacks);
    pending_ = pending;
    return true;
}

bool Matcher::accepts(std::string_view bytes) const {
    std::vector<Stack> stacks = stacks_;
    Utf8State pending = pending_;
    return feed(bytes, stacks, pending);
}

bool Matcher::can_end() const {
    return pending_.remaining == 0 && std::any_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

bool Matcher::finished() const {
    return can_end() && std::all_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

}  // namespace tandem::grammar
