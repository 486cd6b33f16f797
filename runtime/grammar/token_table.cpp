#include "runtime/grammar/token_table.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include <fmt/format.h>

namespace tandem::grammar {

TokenTable::TokenTable(std::vector<std::string> pieces, std::vector<Kind> kinds)
    : pieces_(std::move(pieces)), kinds_(std::move(kinds)) {
    if (pieces_.size() != kinds_.size()) {
        throw InternalError(fmt::format("TokenTable: {} pieces but {} kinds", pieces_.size(), kinds_.size()));
    }
    // Each text token's code points (from no pending character), then the
    // trie built in their sorted order: a new child is always the last.
    std::vector<std::vector<uint32_t>> cps(pieces_.size());
    std::vector<Utf8State> tail(pieces_.size());
    std::vector<int32_t> order;
    for (size_t id = 0; id < pieces_.size(); ++id) {
        if (kinds_[id] == Kind::End) ends_.push_back(static_cast<int32_t>(id));
        if (kinds_[id] != Kind::Text) continue;
        const std::string& p = pieces_[id];
        if (p.empty()) {
            kinds_[id] = Kind::Never;  // adds nothing: it could repeat for ever
            continue;
        }
        if ((static_cast<unsigned char>(p[0]) & 0xC0) == 0x80) {
            continuing_.push_back(static_cast<int32_t>(id));  // only after an unfinished character
            continue;
        }
        if (!decode_utf8(p, tail[id], cps[id])) {
            kinds_[id] = Kind::Never;
            continue;
        }
        order.push_back(static_cast<int32_t>(id));
    }
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return cps[static_cast<size_t>(a)] < cps[static_cast<size_t>(b)]; });
    nodes_.emplace_back();
    for (const int32_t id : order) {
        int32_t node = 0;
        for (const uint32_t cp : cps[static_cast<size_t>(id)]) {
            auto& children = nodes_[static_cast<size_t>(node)].children;
            if (children.empty() || children.back().first != cp) {
                children.emplace_back(cp, static_cast<int32_t>(nodes_.size()));
                node = static_cast<int32_t>(nodes_.size());
                nodes_.emplace_back();
            } else {
                node = children.back().second;
            }
        }
        const Utf8State t = tail[static_cast<size_t>(id)];
        if (t.remaining > 0) nodes_[static_cast<size_t>(node)].partial.emplace_back(id, t);
        else nodes_[static_cast<size_t>(node)].tokens.push_back(id);
    }
}

bool TokenTable::allows(const Matcher& m, int32_t id) const {
    if (id < 0 || id >= size()) return false;
    switch (kinds_[static_cast<size_t>(id)]) {
        case Kind::End: return m.can_end();
        case Kind::Never: return false;
        case Kind::Text: break;
    }
    return m.accepts(pieces_[static_cast<size_t>(id)]);
}

// The walk's memory: the stack sets met (interned), and the step from a
// set by a character, keyed by the set and by which of its stacks the
// character matches (the step depends on nothing else).
struct TokenTable::Walk {
    explicit Walk(const Grammar& grammar) : g(grammar) {}
    const Grammar& g;
    std::vector<std::vector<Stack>> states;
    std::map<std::vector<Stack>, int32_t> ids;
    std::unordered_map<uint64_t, int32_t> steps;  // (state, mask) -> state; -1: none

    int32_t intern(std::vector<Stack> stacks) {
        const auto [it, added] = ids.emplace(std::move(stacks), static_cast<int32_t>(states.size()));
        if (added) states.push_back(it->first);
        return it->second;
    }

    // The set after `cp` from `state`: -1 when no stack takes it.
    int32_t step(int32_t state, uint32_t cp) {
        const std::vector<Stack>& from = states[static_cast<size_t>(state)];
        uint64_t mask = 0;
        for (size_t i = 0; i < from.size(); ++i) {
            const Stack& s = from[i];
            if (!s.empty() && g.classes[static_cast<size_t>(g.elements[static_cast<size_t>(s.back())].value)].matches(cp)) {
                mask |= uint64_t{1} << (i & 63);
            }
        }
        if (mask == 0) return -1;
        // The key holds the state in 8 bits and the mask in 56: larger
        // sets, and states past the 256th, are not memoised.
        const bool memo = from.size() <= 56 && states.size() <= (size_t{1} << 8);
        const uint64_t key = (static_cast<uint64_t>(state) << 56) | mask;
        if (memo) {
            if (const auto it = steps.find(key); it != steps.end()) return it->second;
        }
        std::vector<Stack> next;
        advance(g, from, cp, next);
        const int32_t to = next.empty() ? -1 : intern(std::move(next));
        if (memo) steps.emplace(key, to);
        return to;
    }
};

void TokenTable::walk(Walk& w, int32_t node, int32_t state, std::vector<uint8_t>& out) const {
    const Node& n = nodes_[static_cast<size_t>(node)];
    for (const int32_t t : n.tokens) out[static_cast<size_t>(t)] = 1;
    for (const auto& [t, pending] : n.partial) {
        if (partial_possible(w.g, w.states[static_cast<size_t>(state)], pending)) out[static_cast<size_t>(t)] = 1;
    }
    for (const auto& [cp, child] : n.children) {
        const int32_t next = w.step(state, cp);
        if (next >= 0) walk(w, child, next, out);
    }
}

void TokenTable::allowed(const Matcher& m, std::vector<uint8_t>& out) const {
    out.assign(pieces_.size(), 0);
    const bool end = m.can_end();
    for (const int32_t t : ends_) out[static_cast<size_t>(t)] = end ? 1 : 0;
    if (m.pending().remaining > 0) {
        // Inside a character: only text that goes on with it can follow.
        for (const int32_t t : continuing_) out[static_cast<size_t>(t)] = m.accepts(pieces_[static_cast<size_t>(t)]) ? 1 : 0;
        return;
    }
    Walk w(m.grammar());
    walk(w, 0, w.intern(m.stacks()), out);
}

}  // namespace tandem::grammar
