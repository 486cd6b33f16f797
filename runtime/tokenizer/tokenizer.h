// Text <-> token ids, built from the tokenizer.* keys of a GGUF file:
// SentencePiece-style ("llama", used by Llama 2 and Gemma) and byte-level
// BPE ("gpt2", used by Llama 3, GPT-2 and most newer models) with the
// pre-tokenizer named by tokenizer.ggml.pre.
//
// The reference is llama.cpp's tokenizer: same merges, same byte fallback,
// same special-token splitting, so the ids match its output (and its
// published test vectors) exactly. Deliberate differences:
//  - invalid UTF-8 in BPE input is encoded byte for byte (the reference
//    first replaces each bad byte with U+FFFD);
//  - decode() does not apply the reference's BPE "clean up spaces" pass
//    (" ." -> "."), so that decode(encode(s)) == s;
//  - encode() never appends EOS, even when tokenizer.ggml.add_eos_token
//    says so: callers that want it append eos() themselves.
// A Tokenizer is immutable after loading: every method may be called from
// several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::gguf {
class File;
}

namespace tandem {

// tokenizer.ggml.token_type values. Other stored values read as Undefined.
enum class TokenType : uint8_t {
    Undefined = 0,
    Normal = 1,
    Unknown = 2,      // <unk>
    Control = 3,      // <s>, </s>, <start_of_turn>...: matched in text only with parse_special
    UserDefined = 4,  // added tokens: always matched as whole tokens in text
    Unused = 5,
    Byte = 6,         // <0x00>..<0xFF>: SentencePiece byte fallback
};

class Tokenizer {
public:
    // Throws tandem::Error when the keys are missing or inconsistent
    // (naming the key), or the model type is not supported.
    static Tokenizer from_gguf(const gguf::File& file);

    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

    // add_bos: prepend BOS (callers pass add_bos_by_default() unless told
    // otherwise; throws tandem::Error when the vocabulary has no BOS).
    // parse_special: text like "<start_of_turn>" becomes the control token
    // instead of being split as plain text. User-defined tokens are matched
    // either way, as in the reference.
    //
    // SentencePiece vocabularies with add_space_prefix (Llama 2, Phi-3; not
    // Gemma) put a space before the text and after every special token
    // found in it: "Hello" is encoded as " Hello".
    std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special = false) const;

    // The bytes token `id` stands for (byte tokens <0x0A> give one raw byte,
    // "▁" becomes a space). Concatenating pieces may split a UTF-8 character
    // across tokens; streaming printers buffer incomplete sequences.
    // Control and unknown tokens give their text ("<s>"), or nothing when
    // render_special is false; unused tokens give nothing. Throws
    // tandem::Error for an id outside [0, n_vocab).
    std::string token_to_piece(int32_t id) const;
    std::string token_to_piece(int32_t id, bool render_special) const;

    // The pieces concatenated, less the one space that encode() put in
    // front of the text: with add_space_prefix, a leading space is dropped
    // from the first token after an optional leading BOS. So
    // decode(encode(s, bos, false), false) == s for every valid UTF-8 s
    // that contains no user-defined token's text (those make encode() add
    // a space after them, which decode() keeps).
    std::string decode(std::span<const int32_t> ids) const;
    std::string decode(std::span<const int32_t> ids, bool render_special) const;

    int32_t n_vocab() const;
    int32_t bos() const;  // -1 when the model has none
    int32_t eos() const;
    int32_t eot() const;  // end of turn (<end_of_turn>, <|eot_id|>...); -1 when none
    int32_t unk() const;
    bool add_bos_by_default() const;
    bool add_eos_by_default() const;  // tokenizer.ggml.add_eos_token; encode() ignores it
    bool add_space_prefix() const;
    // End of generation: EOS, EOT, or another token the metadata marks so.
    bool is_end_of_generation(int32_t id) const;
    std::span<const int32_t> end_of_generation_ids() const;  // sorted
    std::string_view model_name() const;  // "llama", "gpt2"
    std::string_view pre_tokenizer_name() const;  // tokenizer.ggml.pre as stored ("" when absent)

    // The vocabulary entry as stored (SentencePiece "▁Hello", byte-level
    // "ĠHello"), its type, and the reverse look-up (-1 when no token has
    // exactly this text). Throw tandem::Error for an id out of range.
    std::string_view token_text(int32_t id) const;
    TokenType token_type(int32_t id) const;
    int32_t find_token(std::string_view text) const;

private:
    struct Impl;
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
