// Internal to the tokenizer: the vocabulary as loaded from GGUF and the
// pieces of encoding that the Tokenizer class puts together. Split out so
// the SentencePiece and BPE algorithms live in files of their own.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/tokenizer/pretokenize.h"
#include "runtime/tokenizer/tokenizer.h"

namespace tandem::gguf {
class File;
}

namespace tandem::tokenizer_detail {

enum class VocabKind { Spm, Bpe };

// Per-token whitespace stripping around special tokens found in text (the
// reference sets these by model name for Phi-3 and some Jina models).
inline constexpr uint8_t kStripLeft = 1;
inline constexpr uint8_t kStripRight = 2;

// The special tokens that are searched for in text, as a byte trie.
struct SpecialTrie {
    struct Node {
        std::vector<std::pair<uint8_t, int32_t>> next;  // byte -> child node
        int32_t token = -1;                             // token ending here
    };
    std::vector<Node> nodes = std::vector<Node>(1);  // nodes[0] is the root

    void insert(std::string_view text, int32_t token);
    int32_t child(int32_t node, uint8_t byte) const;
};

// A merge of two adjacent BPE symbols. Symbols are named by "part ids": a
// token id when the text is a token, else an id past the vocabulary for a
// merge half that is not one (see Vocab::extra_parts).
struct BpeMerge {
    int32_t rank = 0;    // position in tokenizer.ggml.merges: lower merges first
    int32_t result = 0;  // part id of the concatenation
};

struct Vocab {
    VocabKind kind = VocabKind::Spm;
    std::string model_name;  // tokenizer.ggml.model
    std::string pre_name;    // tokenizer.ggml.pre ("" when absent)
    PreTokenizer pre = PreTokenizer::Default;

    std::vector<std::string> text;
    std::vector<float> score;
    std::vector<TokenType> type;
    std::vector<uint8_t> strip;  // kStripLeft | kStripRight
    // Views into `text`, which is never resized after loading. Duplicate
    // texts map to the highest id, as in the reference.
    std::unordered_map<std::string_view, int32_t> token_to_id;

    int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1;
    std::vector<int32_t> end_of_generation;  // sorted
    bool add_bos = false;
    bool add_eos = false;
    bool add_space_prefix = false;
    bool ignore_merges = false;  // BPE: a word that is a token is taken whole

    SpecialTrie special;

    // SentencePiece byte fallback: the token for each byte value, -1 none.
    std::array<int32_t, 256> byte_token{};

    // Byte-level BPE.
    std::unordered_map<std::string, int32_t> extra_parts;  // id = n_vocab + index
    std::unordered_map<uint64_t, BpeMerge> merges;         // key: left part << 32 | right part
    std::array<int32_t, 256> byte_part{};  // part id of each byte's stand-in character, -1 none

    int32_t n_vocab() const { return static_cast<int32_t>(text.size()); }
    int32_t find(std::string_view s) const {
        const auto it = token_to_id.find(s);
        return it == token_to_id.end() ? -1 : it->second;
    }
    int32_t find_part(std::string_view s) const;
};

// Reads and checks every tokenizer.* key. Throws tandem::Error naming the
// key at fault.
Vocab load_vocab(const gguf::File& file);

// A run of input text, or one special token found in it.
struct Fragment {
    int32_t token = -1;  // -1: raw text [offset, offset + length)
    size_t offset = 0;
    size_t length = 0;
};

// Splits text around special tokens as the reference does: longer tokens
// claim their occurrences first (ties: lower id), each token takes its
// non-overlapping occurrences left to right, and text matched by an earlier
// token is not searched again. Control and unknown tokens take part only
// with parse_special; user-defined tokens always.
std::vector<Fragment> split_special(const Vocab& v, std::string_view text, bool parse_special);

// SentencePiece on text whose spaces are already escaped as U+2581.
void spm_encode(const Vocab& v, std::string_view text, std::vector<int32_t>& out);

// Byte-level BPE: pre-tokenize, map bytes to their stand-in characters,
// merge by rank.
void bpe_encode(const Vocab& v, std::string_view text, std::vector<int32_t>& out);

// GPT-2's byte <-> character table: printable Latin-1 bytes stand for
// themselves, the rest are moved to U+0100 upwards.
uint32_t bpe_byte_to_codepoint(uint8_t byte);
int bpe_codepoint_to_byte(uint32_t cp);  // -1 when cp stands for no byte

}  // namespace tandem::tokenizer_detail
