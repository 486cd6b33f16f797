// Tokenizer metadata for synthetic models: either a SentencePiece-style
// ("llama") vocabulary made up on the spot, or the tokenizer.* keys of an
// existing GGUF (a vocab-only file or a real model) copied as they are.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/gguf/gguf_file.h"
#include "runtime/gguf/gguf_value.h"

namespace tandem::model {

// Smallest synthetic vocabulary: <unk>, <s>, </s> and the 256 byte tokens,
// so that byte fallback can spell any text.
inline constexpr int64_t kMinSyntheticVocab = 3 + 256;

// tokenizer.ggml.* keys of an SPM vocabulary with n_vocab tokens: <unk> (0),
// <s> (1, BOS), </s> (2, EOS), <0x00>..<0xFF> (token type 6, byte), then
// letter pieces with and without the "▁" word-start mark, scored by rank as
// SentencePiece does. Throws tandem::Error below kMinSyntheticVocab.
std::vector<gguf::KeyValue> synthetic_llama_vocab(int64_t n_vocab);

struct CopiedVocab {
    std::vector<gguf::KeyValue> keys;  // every tokenizer.* key, in file order
    int64_t n_vocab = 0;               // length of tokenizer.ggml.tokens
};

// Throws tandem::Error when the file has no tokenizer.ggml.tokens array.
CopiedVocab copy_vocab(const gguf::File& file);

}  // namespace tandem::model
