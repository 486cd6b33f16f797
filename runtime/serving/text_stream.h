// Generated text on its way to a client: pieces of tokens come in, and what
// goes out never ends inside a UTF-8 character or inside what may still
// become a stop string. The text before the first stop string is all a
// client ever sees of a stopped generation (OpenAI's `stop`).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::serve {

// Length of the longest prefix of s that ends on a UTF-8 character
// boundary (a token may carry only the first bytes of a character).
size_t complete_utf8_prefix(std::string_view s);

class TextStream {
public:
    explicit TextStream(std::vector<std::string> stop = {});

    // Adds a token's bytes; returns the text now safe to send (may be empty).
    std::string push(std::string_view piece);
    // Whether a stop string has appeared; push() then returns nothing more.
    bool stopped() const { return stopped_; }
    // The stop string that stopped it ("" while not stopped).
    const std::string& stop_string() const { return stop_string_; }
    // The rest at the end of a generation (held-back bytes that never
    // became a stop string; an incomplete character is sent as it is).
    std::string finish();
    // Everything sent so far.
    const std::string& sent() const { return sent_; }

private:
    std::vector<std::string> stop_;
    std::string pending_;  // received, not yet sent
    std::string sent_;
    bool stopped_ = false;
    std::string stop_string_;
};

}  // namespace tandem::serve
