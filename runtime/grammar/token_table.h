// A vocabulary as the grammar sees it: each token's text (its bytes) and
// whether it is text, an end of generation, or never allowed under a
// grammar (unknown and unused tokens, empty pieces). Built once per model;
// immutable, shared by every constrained request.
//
// Which tokens a grammar state accepts is found by walking a trie of the
// tokens' code points beside the matcher's stacks: a branch is left as
// soon as no stack takes its next character, so where the grammar allows
// few characters (JSON's punctuation) the walk touches few nodes. Where it
// allows nearly all (inside a JSON string) the walk visits most of the
// trie, so the step from a set of stacks by a character is computed once
// per set and per "which stacks take it" (all characters a class holds
// lead to the same stacks), not once per node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/grammar/matcher.h"

namespace tandem::grammar {

class TokenTable {
public:
    enum class Kind : uint8_t { Text, End, Never };

    // pieces[id] and kinds[id] for every id of the vocabulary.
    TokenTable(std::vector<std::string> pieces, std::vector<Kind> kinds);

    int32_t size() const { return static_cast<int32_t>(pieces_.size()); }
    Kind kind(int32_t id) const { return kinds_[static_cast<size_t>(id)]; }
    const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }

    // Whether the matcher takes token `id` next (an end token: whether the
    // grammar can end here).
    bool allows(const Matcher& m, int32_t id) const;
    // out[id] = 1 for every token allows() accepts, 0 for the rest.
    void allowed(const Matcher& m, std::vector<uint8_t>& out) const;

private:
    struct Node {
        std::vector<std::pair<uint32_t, int32_t>> children;  // by code point
        std::vector<int32_t> tokens;                          // whose text ends here
        std::vector<std::pair<int32_t, Utf8State>> partial;   // ending here inside a character
    };
    struct Walk;
    void walk(Walk& w, int32_t node, int32_t state, std::vector<uint8_t>& out) const;

    std::vector<std::string> pieces_;
    std::vector<Kind> kinds_;
    std::vector<Node> nodes_;           // nodes_[0]: the root
    std::vector<int32_t> ends_;         // Kind::End tokens
    std::vector<int32_t> continuing_;  // text starting with a UTF-8 continuation byte
};

}  // namespace tandem::grammar
