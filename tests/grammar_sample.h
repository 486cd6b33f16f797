// Random texts a grammar accepts, for soundness tests: every text a
// converter's grammar takes must be valid under what it was made from.
#pragma once

#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "runtime/grammar/gbnf_text.h"
#include "runtime/grammar/grammar.h"
#include "runtime/grammar/matcher.h"

namespace tandem::testing {

// The characters a walk tries: ASCII digits, letters, JSON's and regexes'
// punctuation, a two-byte and a three-byte character.
inline std::vector<uint32_t> sample_alphabet() {
    std::vector<uint32_t> out;
    for (const char c : std::string("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-._:@/\\\" +,{}[]#$"))
        out.push_back(static_cast<unsigned char>(c));
    out.push_back(0xE9);    // é
    out.push_back(0x4E2D);  // 中
    return out;
}

// A random derivation of `g`'s root: each rule's alternative drawn
// uniformly (a repetition goes on with probability 1/2), each character
// from its class, preferring the characters of `alphabet` that the class
// takes. Nothing when the text passes max_bytes.
inline std::optional<std::string> random_text(const grammar::Grammar& g, std::mt19937& rng, size_t max_bytes = 600,
                                              const std::vector<uint32_t>& alphabet = sample_alphabet()) {
    std::vector<int32_t> stack;  // element positions left to match, the next at the back
    const auto push_alternative = [&](int32_t rule) {
        std::vector<int32_t> starts;
        for (int32_t a = g.rule_start[static_cast<size_t>(rule)];;) {
            starts.push_back(a);
            while (!g.closes(a)) ++a;
            if (g.elements[static_cast<size_t>(a)].op == grammar::Op::End) break;
            ++a;
        }
        const int32_t a = starts[std::uniform_int_distribution<size_t>(0, starts.size() - 1)(rng)];
        if (!g.closes(a)) stack.push_back(a);
    };
    const auto pick = [&](const grammar::CharClass& cls) -> uint32_t {
        std::vector<uint32_t> fits;
        for (const uint32_t cp : alphabet) {
            if (cls.matches(cp)) fits.push_back(cp);
        }
        if (!fits.empty() && std::uniform_int_distribution<int>(0, 9)(rng) < 8) {
            return fits[std::uniform_int_distribution<size_t>(0, fits.size() - 1)(rng)];
        }
        for (int tries = 0; tries < 1000; ++tries) {  // any code point of the class but a surrogate
            uint32_t cp = 0;
            if (cls.negated || cls.ranges.empty()) {
                cp = std::uniform_int_distribution<uint32_t>(0, std::uniform_int_distribution<int>(0, 1)(rng) ? 0x7F : 0x10FFFF)(rng);
            } else {
                const auto& [lo, hi] = cls.ranges[std::uniform_int_distribution<size_t>(0, cls.ranges.size() - 1)(rng)];
                cp = std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
            }
            if (cls.matches(cp) && (cp < 0xD800 || cp > 0xDFFF)) return cp;
        }
        return fits.empty() ? 0 : fits[0];
    };
    std::string text;
    push_alternative(g.root);
    while (!stack.empty()) {
        const int32_t pos = stack.back();
        stack.pop_back();
        if (!g.closes(pos + 1)) stack.push_back(pos + 1);
        const grammar::Element& e = g.elements[static_cast<size_t>(pos)];
        if (e.op == grammar::Op::Char) {
            text += grammar::utf8(pick(g.classes[static_cast<size_t>(e.value)]));
            if (text.size() > max_bytes) return std::nullopt;
        } else {
            push_alternative(e.value);
        }
        if (stack.size() > 100000) return std::nullopt;
    }
    return text;
}

// Whether `g` takes the whole of `text`.
inline bool grammar_takes(const std::shared_ptr<const grammar::Grammar>& g, const std::string& text) {
    grammar::Matcher m(g);
    return m.accept(text) && m.can_end();
}

}  // namespace tandem::testing
