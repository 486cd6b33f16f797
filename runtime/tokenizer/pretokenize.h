// Pre-tokenizers of byte-level BPE vocabularies: the regex that cuts text
// into words before merges run (merges never cross a word boundary).
// tokenizer.ggml.pre names the regex; the reference implementation matches
// the common ones with hand-written code instead of a regex engine, and so
// does this file, over code points classified by unicode.h.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace tandem::tokenizer_detail {

enum class PreTokenizer {
    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
    Gpt2,
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
    //  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
    Llama3,
    // Llama3 with \p{N} (one digit per word) in place of \p{N}{1,3}.
    Qwen2,
    // StarCoder and others: \p{N} (each digit alone), then the GPT-2 regex.
    Starcoder,
    // Falcon: [\p{P}\$\+<=>\^~\|`]+ , the GPT-2 regex, [0-9][0-9][0-9]
    Falcon,
    // "default" (or no tokenizer.ggml.pre): four regexes applied in turn,
    // each splitting the pieces of the one before, text between matches
    // kept as pieces of its own:
    //   [\p{P}\$\+<=>\^~\|]+ , the GPT-2 regex, \p{N}+ , [0-9][0-9][0-9]
    Default,
};

// The pre-tokenizer for a tokenizer.ggml.pre value; nullopt for names this
// runtime does not implement. An empty name means "default".
std::optional<PreTokenizer> pre_tokenizer_for(std::string_view name);

// Cuts `text` into words, in order; concatenated they give `text` back
// exactly (invalid UTF-8 bytes included, each a character of its own).
std::vector<std::string_view> pre_tokenize(std::string_view text, PreTokenizer kind);

}  // namespace tandem::tokenizer_detail
