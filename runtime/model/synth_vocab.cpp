#include "runtime/model/synth_vocab.h"

#include <string>
#include <string_view>

#include <fmt/format.h>

#include "runtime/common/error.h"

namespace tandem::model {
namespace {

// llama.cpp's llama_token_type values, as stored in tokenizer.ggml.token_type.
enum TokenType : int32_t {
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kByte = 6,
};

constexpr std::string_view kWordStart = "\xe2\x96\x81";  // U+2581, SentencePiece's space mark
// Letters by English frequency, so short common-looking pieces rank first.
constexpr std::string_view kLetters = "etaoinshrdlucmfwypvbgkjqxz";

gguf::KeyValue kv(std::string key, gguf::Value value) {
    gguf::KeyValue out;
    out.key = std::move(key);
    out.value = std::move(value);
    return out;
}

// The index-th word over kLetters in length-then-lexicographic order: a
// bijection, so every piece is distinct without a set to check against.
std::string nth_word(uint64_t index) {
    const uint64_t base = kLetters.size();
    uint64_t len = 1;
    uint64_t count = base;
    while (index >= count) {
        index -= count;
        ++len;
        count *= base;
    }
    std::string w(len, ' ');
    for (uint64_t i = len; i-- > 0;) {
        w[i] = kLetters[index % base];
        index /= base;
    }
    return w;
}

}  // namespace

std::vector<gguf::KeyValue> synthetic_llama_vocab(int64_t n_vocab) {
    if (n_vocab < kMinSyntheticVocab) {
        throw Error(fmt::format("a synthetic vocabulary needs at least {} tokens (3 special + 256 bytes), asked for {}",
                                kMinSyntheticVocab, n_vocab));
    }
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<int32_t> types;
    tokens.reserve(static_cast<size_t>(n_vocab));
    scores.reserve(static_cast<size_t>(n_vocab));
    types.reserve(static_cast<size_t>(n_vocab));
    auto add = [&](std::string piece, float score, int32_t type) {
        tokens.push_back(std::move(piece));
        scores.push_back(score);
        types.push_back(type);
    };
    add("<unk>", 0.0f, kUnknown);
    add("<s>", 0.0f, kControl);
    add("</s>", 0.0f, kControl);
    for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), 0.0f, kByte);
    // Pieces alternate "▁w" and "w" so both word starts and word middles exist.
    for (uint64_t k = 0; static_cast<int64_t>(tokens.size()) < n_vocab; ++k) {
        const std::string w = nth_word(k / 2);
        add(k % 2 == 0 ? std::string(kWordStart) + w : w, -static_cast<float>(k), kNormal);
    }

    using gguf::Value;
    std::vector<gguf::KeyValue> out;
    out.push_back(kv("tokenizer.ggml.model", Value::str("llama")));
    out.push_back(kv("tokenizer.ggml.pre", Value::str("default")));
    out.push_back(kv("tokenizer.ggml.tokens", Value::string_array(tokens)));
    out.push_back(kv("tokenizer.ggml.scores", Value::f32_array(scores)));
    out.push_back(kv("tokenizer.ggml.token_type", Value::i32_array(types)));
    out.push_back(kv("tokenizer.ggml.bos_token_id", Value::u32(1)));
    out.push_back(kv("tokenizer.ggml.eos_token_id", Value::u32(2)));
    out.push_back(kv("tokenizer.ggml.unknown_token_id", Value::u32(0)));
    out.push_back(kv("tokenizer.ggml.add_bos_token", Value::boolean(true)));
    out.push_back(kv("tokenizer.ggml.add_eos_token", Value::boolean(false)));
    return out;
}

CopiedVocab copy_vocab(const gguf::File& file) {
    CopiedVocab out;
    constexpr std::string_view kPrefix = "tokenizer.";
    for (const auto& entry : file.metadata()) {
        if (std::string_view(entry.key).substr(0, kPrefix.size()) == kPrefix) out.keys.push_back(entry);
    }
    const gguf::Value* tokens = file.find("tokenizer.ggml.tokens");
    const gguf::Array* arr = tokens ? tokens->as_array() : nullptr;
    if (arr == nullptr || arr->elem_type != gguf::ValueType::STRING) {
        throw Error(fmt::format("{}: no tokenizer.ggml.tokens string array: not a vocabulary", file.name()));
    }
    out.n_vocab = static_cast<int64_t>(arr->items.size());
    return out;
}

}  // namespace tandem::model
