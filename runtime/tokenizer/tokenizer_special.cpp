// Finding special tokens in text before the text is tokenized.
//
// The reference takes special tokens one at a time, longest first, and
// cuts every remaining stretch of raw text at each occurrence. Searching the
// whole text once per special token is slow for vocabularies with thousands
// of them (Gemma has over 6000), so this collects every occurrence of every
// token in one pass over a trie and then replays the reference's order on
// that list: in order of (length descending, id, position), an occurrence
// is taken when none of its bytes were taken before. That is the same result,
// because an occurrence the reference finds is exactly one that lies inside
// a single remaining stretch of raw text.
#include <algorithm>
#include <unordered_map>

#include "runtime/tokenizer/tokenizer_vocab.h"

namespace tandem::tokenizer_detail {

void SpecialTrie::insert(std::string_view text, int32_t token) {
    int32_t node = 0;
    for (const char ch : text) {
        const auto b = static_cast<uint8_t>(ch);
        int32_t next = child(node, b);
        if (next < 0) {
            next = static_cast<int32_t>(nodes.size());
            nodes[static_cast<size_t>(node)].next.emplace_back(b, next);
            nodes.emplace_back();
        }
        node = next;
    }
    auto& end = nodes[static_cast<size_t>(node)].token;
    if (end < 0) end = token;
}

int32_t SpecialTrie::child(int32_t node, uint8_t byte) const {
    for (const auto& [b, n] : nodes[static_cast<size_t>(node)].next)
        if (b == byte) return n;
    return -1;
}

namespace {

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

struct Occurrence {
    size_t pos;
    int32_t token;
};

}  // namespace

std::vector<Fragment> split_special(const Vocab& v, std::string_view text, bool parse_special) {
    const size_t n = text.size();
    auto allowed = [&](int32_t id) {
        return parse_special || v.type[static_cast<size_t>(id)] == TokenType::UserDefined;
    };

    // Occurrences grouped by token; scanning positions in order leaves each
    // group sorted by position already, so only the groups need ordering
    // (a text of 100k spaces has millions of occurrences of Gemma's
    // space-run tokens; sorting them one by one would dominate).
    std::unordered_map<int32_t, std::vector<size_t>> by_token;
    for (size_t pos = 0; pos < n; ++pos) {
        int32_t node = 0;
        for (size_t k = pos; k < n; ++k) {
            node = v.special.child(node, static_cast<uint8_t>(text[k]));
            if (node < 0) break;
            const int32_t id = v.special.nodes[static_cast<size_t>(node)].token;
            if (id >= 0 && allowed(id)) by_token[id].push_back(pos);
        }
    }
    if (by_token.empty()) return {Fragment{-1, 0, n}};

    auto length = [&](int32_t id) { return v.text[static_cast<size_t>(id)].size(); };
    std::vector<int32_t> order;
    order.reserve(by_token.size());
    for (const auto& [id, positions] : by_token) order.push_back(id);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        const size_t la = length(a), lb = length(b);
        return la != lb ? la > lb : a < b;
    });

    // 0: raw text; 1: inside a taken token; 2: whitespace a token stripped.
    std::vector<uint8_t> used(n, 0);
    auto free_span = [&](size_t pos, size_t len) {
        // Any earlier token is at least as long, so one that overlaps covers
        // an end of the span: checking the ends rejects nearly every clash
        // at once; stripped whitespace can sit inside, hence the full scan.
        if (used[pos] != 0 || used[pos + len - 1] != 0) return false;
        return std::all_of(used.begin() + static_cast<ptrdiff_t>(pos),
                           used.begin() + static_cast<ptrdiff_t>(pos + len), [](uint8_t u) { return u == 0; });
    };
    std::vector<Occurrence> taken;
    for (const int32_t id : order) {
        const size_t len = length(id);
        const uint8_t strip = v.strip[static_cast<size_t>(id)];
        for (const size_t pos : by_token[id]) {
            if (!free_span(pos, len)) continue;
            std::fill(used.begin() + static_cast<ptrdiff_t>(pos), used.begin() + static_cast<ptrdiff_t>(pos + len), 1);
            taken.push_back({pos, id});
            if (strip & kStripRight) {
                for (size_t k = pos + len; k < n && used[k] == 0 && is_ascii_space(text[k]); ++k) used[k] = 2;
            }
            if (strip & kStripLeft) {
                for (size_t k = pos; k > 0 && used[k - 1] == 0 && is_ascii_space(text[k - 1]); --k) used[k - 1] = 2;
            }
        }
    }
    std::sort(taken.begin(), taken.end(), [](const Occurrence& a, const Occurrence& b) { return a.pos < b.pos; });

    std::vector<Fragment> out;
    size_t next = 0;  // next taken occurrence
    size_t i = 0;
    while (i < n) {
        if (next < taken.size() && taken[next].pos == i) {
            out.push_back({taken[next].token, i, length(taken[next].token)});
            i += length(taken[next].token);
            ++next;
        } else if (used[i] == 2) {
            ++i;
        } else {
            size_t j = i;
            while (j < n && used[j] == 0) ++j;
            out.push_back({-1, i, j - i});
            i = j;
        }
    }
    return out;
}

}  // namespace tandem::tokenizer_detail
