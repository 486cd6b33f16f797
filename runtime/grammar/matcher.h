// Matching text against a Grammar, one code point at a time, as a
// pushdown automaton that keeps every parse still possible: a stack is the
// list of element positions left to match (the top, at the back, always a
// character class), and the matcher holds the set of such stacks. A stack
// that is empty has matched the whole of `root`.
//
// Text arrives as bytes (a token's piece can end inside a UTF-8
// character): the bytes of an unfinished character are held over, and are
// accepted only while some stack can take a character that starts with them.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "runtime/grammar/grammar.h"

namespace tandem::grammar {

using Stack = std::vector<int32_t>;

// An unfinished UTF-8 character: the bits read so far, how many
// continuation bytes are still to come (0: none pending), and the
// smallest code point its length may encode (a shorter one would be an
// overlong form, which UTF-8 forbids: F0 80 81 B9 is not "y").
struct Utf8State {
    uint32_t value = 0;
    uint8_t remaining = 0;
    uint32_t min = 0;
};

// Decodes `bytes` after `state`, appending each finished code point to
// `out`; false for bytes that are not UTF-8 (a stray continuation byte, a
// bad lead byte, an overlong form, a surrogate, a character past U+10FFFF).
bool decode_utf8(std::string_view bytes, Utf8State& state, std::vector<uint32_t>& out);

// More stacks than this after one character make the text refused: a
// grammar so ambiguous would cost each token too much.
inline constexpr size_t kMaxStacks = 4096;

// The stacks after `cp` (out: sorted, without repeats; empty when no stack
// takes it or kMaxStacks is passed).
void advance(const Grammar& g, const std::vector<Stack>& stacks, uint32_t cp, std::vector<Stack>& out);

// Whether some stack takes a character that starts as `pending` does.
bool partial_possible(const Grammar& g, const std::vector<Stack>& stacks, Utf8State pending);

class Matcher {
public:
    explicit Matcher(std::shared_ptr<const Grammar> g);

    // Feeds text; false (and nothing changed) when the grammar refuses it.
    bool accept(std::string_view bytes);
    // Whether accept(bytes) would succeed.
    bool accepts(std::string_view bytes) const;
    // Whether the text so far is a whole match of root (the end of
    // generation is allowed).
    bool can_end() const;
    // Whether nothing but the end can follow.
    bool finished() const;

    const Grammar& grammar() const { return *g_; }
    const std::vector<Stack>& stacks() const { return stacks_; }
    Utf8State pending() const { return pending_; }

private:
    bool feed(std::string_view bytes, std::vector<Stack>& stacks, Utf8State& pending) const;

    std::shared_ptr<const Grammar> g_;
    std::vector<Stack> stacks_;
    Utf8State pending_;
};

}  // namespace tandem::grammar
