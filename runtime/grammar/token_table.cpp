#include "runtime/grammar/token_table.h"

#include <algorithm>
#include <numeric>

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

void TokenTable::walk(const Grammar& g, int32_t node, const std::vector<Stack>& stacks, size_t depth,
                      std::vector<std::vector<Stack>>& scratch, std::vector<uint8_t>& out) const {
    const Node& n = nodes_[static_cast<size_t>(node)];
    for (const int32_t t : n.tokens) out[static_cast<size_t>(t)] = 1;
    for (const auto& [t, pending] : n.partial) {
        if (partial_possible(g, stacks, pending)) out[static_cast<size_t>(t)] = 1;
    }
    if (n.children.empty()) return;
    if (scratch.size() <= depth) scratch.resize(depth + 1);
    for (const auto& [cp, child] : n.children) {
        // A cheap look first: most characters match no stack's top.
        const bool any = std::any_of(stacks.begin(), stacks.end(), [&](const Stack& s) {
            return !s.empty() && g.classes[static_cast<size_t>(g.elements[static_cast<size_t>(s.back())].value)].matches(cp);
        });
        if (!any) continue;
        advance(g, stacks, cp, scratch[depth]);
        if (scratch[depth].empty()) continue;
        // The next level may reuse scratch[depth + 1...]; this level's
        // stacks move out so a deeper resize cannot invalidate them.
        std::vector<Stack> here = std::move(scratch[depth]);
        walk(g, child, here, depth + 1, scratch, out);
        scratch[depth] = std::move(here);
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
    std::vector<std::vector<Stack>> scratch;
    walk(m.grammar(), 0, m.stacks(), 0, scratch, out);
}

}  // namespace tandem::grammar
