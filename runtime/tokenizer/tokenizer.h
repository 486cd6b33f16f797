// Text <-> token ids, built from the tokenizer.* keys of a GGUF file:
// SentencePiece-style ("llama", used by Llama 2 and Gemma) and byte-level
// BPE ("gpt2", used by Llama 3, GPT-2 and most newer models) with the
// pre-tokenizer named by tokenizer.ggml.pre.
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

class Tokenizer {
public:
    // Throws tandem::Error when the keys are missing or inconsistent
    // (naming the key), or the model type is not supported.
    static Tokenizer from_gguf(const gguf::File& file);

    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

    // add_bos: prepend BOS (callers pass add_bos_by_default() unless told
    // otherwise). parse_special: text like "<start_of_turn>" becomes the
    // control token instead of being split as plain text.
    std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special = false) const;

    // The bytes token `id` stands for (byte tokens <0x0A> give one raw byte,
    // "▁" becomes a space). Concatenating pieces may split a UTF-8 character
    // across tokens; streaming printers buffer incomplete sequences.
    std::string token_to_piece(int32_t id) const;
    std::string decode(std::span<const int32_t> ids) const;

    int32_t n_vocab() const;
    int32_t bos() const;  // -1 when the model has none
    int32_t eos() const;
    bool add_bos_by_default() const;
    // End of generation: EOS, EOT, or another token the metadata marks so.
    bool is_end_of_generation(int32_t id) const;
    std::string_view model_name() const;  // "llama", "gpt2"

private:
    struct Impl;
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
