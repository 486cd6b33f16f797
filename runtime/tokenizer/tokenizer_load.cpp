// Building a Vocab from the tokenizer.* keys of a GGUF file. Everything is
// checked here, once, so the encoders can index without further checks:
// array lengths agree, special ids are inside the vocabulary, merges name
// their halves.
#include <algorithm>
#include <cctype>
#include <limits>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/gguf/gguf_value.h"
#include "runtime/tokenizer/tokenizer_vocab.h"

namespace tandem::tokenizer_detail {
namespace {

constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";
constexpr std::string_view kScoresKey = "tokenizer.ggml.scores";
constexpr std::string_view kTypesKey = "tokenizer.ggml.token_type";
constexpr std::string_view kMergesKey = "tokenizer.ggml.merges";

[[noreturn]] void fail_key(const gguf::File& f, std::string_view key, std::string_view what) {
    throw Error(fmt::format("{}: {}: {}", f.name(), key, what));
}

// An array key: nullptr when absent; Error when present with another type
// or a length other than `expected_len` (when given).
const gguf::Array* find_array(const gguf::File& f, std::string_view key, std::optional<size_t> expected_len) {
    const gguf::Value* v = f.find(key);
    if (!v) return nullptr;
    const gguf::Array* a = v->as_array();
    if (!a) fail_key(f, key, fmt::format("expected an array, found {}", gguf::value_type_name(v->type)));
    if (expected_len && a->items.size() != *expected_len) {
        fail_key(f, key,
                 fmt::format("expected {} entries (one per token in {}), found {}", *expected_len, kTokensKey,
                             a->items.size()));
    }
    return a;
}

const std::string& array_string(const gguf::File& f, std::string_view key, const gguf::Array& a, size_t i) {
    const std::string* s = a.items[i].as_string();
    if (!s) {
        fail_key(f, key, fmt::format("entry {}: expected a string, found {}", i, gguf::value_type_name(a.items[i].type)));
    }
    return *s;
}

// A token id key. Absent or negative (some converters write -1 for "none"):
// `fallback`, kept only when it lies inside the vocabulary.
int32_t read_token_id(const gguf::File& f, std::string_view key, int32_t n_vocab, int32_t fallback) {
    const gguf::Value* v = f.find(key);
    if (!v) return (fallback >= 0 && fallback < n_vocab) ? fallback : -1;
    const std::optional<int64_t> id = v->as_int();
    if (!id) fail_key(f, key, fmt::format("expected an integer token id, found {}", gguf::to_display_string(*v)));
    if (*id < 0) return -1;
    if (*id >= n_vocab) fail_key(f, key, fmt::format("token id {} is outside the vocabulary of {} tokens", *id, n_vocab));
    return static_cast<int32_t>(*id);
}

bool read_bool(const gguf::File& f, std::string_view key, bool fallback) {
    const gguf::Value* v = f.find(key);
    if (!v) return fallback;
    const std::optional<bool> b = v->as_bool();
    if (!b) fail_key(f, key, fmt::format("expected a bool, found {}", gguf::value_type_name(v->type)));
    return *b;
}

TokenType to_token_type(int64_t t) {
    return (t >= 0 && t <= 6) ? static_cast<TokenType>(t) : TokenType::Undefined;
}

void load_tokens(const gguf::File& f, Vocab& v) {
    const gguf::Array* tokens = find_array(f, kTokensKey, std::nullopt);
    if (!tokens) fail_key(f, kTokensKey, "key missing: the file has no vocabulary");
    const size_t n = tokens->items.size();
    if (n == 0) fail_key(f, kTokensKey, "the vocabulary is empty");
    if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
        fail_key(f, kTokensKey, fmt::format("{} tokens is more than token ids can address", n));
    }
    const gguf::Array* scores = find_array(f, kScoresKey, n);
    const gguf::Array* types = find_array(f, kTypesKey, n);

    v.text.resize(n);
    v.score.assign(n, 0.0f);
    v.type.assign(n, TokenType::Normal);  // the reference's default without token_type
    v.strip.assign(n, 0);
    for (size_t i = 0; i < n; ++i) {
        v.text[i] = array_string(f, kTokensKey, *tokens, i);
        // An empty token could never be matched and would make text
        // disappear when decoded; the reference renames them the same way.
        if (v.text[i].empty()) v.text[i] = fmt::format("[EMPTY_{}]", i);
        if (scores) {
            const std::optional<double> s = scores->items[i].as_float();
            if (!s) fail_key(f, kScoresKey, fmt::format("entry {}: expected a number", i));
            v.score[i] = static_cast<float>(*s);
        }
        if (types) {
            const std::optional<int64_t> t = types->items[i].as_int();
            if (!t) fail_key(f, kTypesKey, fmt::format("entry {}: expected an integer", i));
            v.type[i] = to_token_type(*t);
        }
    }
    // Built only now: the views must point into strings that stay put.
    v.token_to_id.reserve(n);
    for (size_t i = 0; i < n; ++i) v.token_to_id.insert_or_assign(std::string_view(v.text[i]), static_cast<int32_t>(i));
}

void load_merges(const gguf::File& f, Vocab& v) {
    const gguf::Array* merges = find_array(f, kMergesKey, std::nullopt);
    if (!merges) fail_key(f, kMergesKey, "key missing: a 'gpt2' (BPE) tokenizer needs its merges");
    if (merges->items.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
        fail_key(f, kMergesKey, fmt::format("{} merges is more than ranks can address", merges->items.size()));
    }
    auto intern = [&](const std::string& s) {
        if (const int32_t id = v.find(s); id >= 0) return id;
        const auto [it, inserted] =
            v.extra_parts.try_emplace(s, v.n_vocab() + static_cast<int32_t>(v.extra_parts.size()));
        return it->second;
    };
    v.merges.reserve(merges->items.size());
    for (size_t i = 0; i < merges->items.size(); ++i) {
        const std::string& m = array_string(f, kMergesKey, *merges, i);
        // "left right"; searching from 1 lets a left half start with a space.
        const size_t sp = m.find(' ', 1);
        if (sp == std::string::npos) fail_key(f, kMergesKey, fmt::format("entry {} '{}' is not two halves", i, m));
        const std::string left = m.substr(0, sp);
        const std::string right = m.substr(sp + 1);
        const int32_t l = intern(left);
        const int32_t r = intern(right);
        const int32_t result = intern(left + right);
        const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
        // The first listing of a pair wins: it has the lower rank.
        v.merges.try_emplace(key, BpeMerge{static_cast<int32_t>(i), result});
    }
    for (int b = 0; b < 256; ++b) {
        std::string ch;
        const uint32_t cp = bpe_byte_to_codepoint(static_cast<uint8_t>(b));
        // Two bytes of UTF-8 at most: every stand-in is below U+0800.
        if (cp < 0x80) {
            ch += static_cast<char>(cp);
        } else {
            ch += static_cast<char>(0xC0 | (cp >> 6));
            ch += static_cast<char>(0x80 | (cp & 0x3F));
        }
        v.byte_part[static_cast<size_t>(b)] = v.find_part(ch);
        // A byte with no token of its own (SmolLM2 has none for 0x04 and a
        // few other control bytes) is dropped from text that holds it, as
        // the reference does (BpeSession::emit), not refused at load.
    }
}

void load_byte_tokens(Vocab& v) {
    for (int b = 0; b < 256; ++b) {
        int32_t id = v.find(fmt::format("<0x{:02X}>", b));
        if (id < 0) id = v.find(std::string(1, static_cast<char>(b)));
        v.byte_token[static_cast<size_t>(b)] = id;
    }
}

// End-of-turn and end-of-generation tokens. Most files name only EOS; chat
// models mark the end of a turn with a control token that the reference
// recognizes by its text, and so does this.
void find_end_tokens(const gguf::File& f, Vocab& v) {
    const int32_t n = v.n_vocab();
    v.eot = read_token_id(f, "tokenizer.ggml.eot_token_id", n, -1);
    v.eom = read_token_id(f, "tokenizer.ggml.eom_token_id", n, -1);
    static constexpr std::string_view kEotTexts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>",
        "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // DeepSeek
    };
    // llama.cpp's list of end-of-generation spellings (2026): every token
    // spelled so ends generation and is a control token, even where the
    // file marks it otherwise (Gemma 3's vocabulary has a user-defined
    // "</s>"), so text is tokenized as llama.cpp tokenizes it.
    static constexpr std::string_view kEogTexts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
        "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
        "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // DeepSeek
        "[e~[",
    };
    // A token found by its text is a control token whatever the file says,
    // so that it is rendered and parsed as one.
    auto mark_control = [&](int32_t id) { v.type[static_cast<size_t>(id)] = TokenType::Control; };
    if (v.eot < 0) {
        for (const auto t : kEotTexts) {
            if (const int32_t id = v.find(t); id >= 0) {
                v.eot = id;
                mark_control(id);
                break;
            }
        }
    }
    if (v.eom < 0) {
        if (const int32_t id = v.find("<|eom_id|>"); id >= 0) {
            v.eom = id;
            mark_control(id);
        }
    }
    std::vector<int32_t> eog;
    for (const auto t : kEogTexts) {
        if (const int32_t id = v.find(t); id >= 0) {
            eog.push_back(id);
            mark_control(id);
        }
    }
    for (const int32_t id : {v.eos, v.eot, v.eom})
        if (id >= 0) eog.push_back(id);
    std::sort(eog.begin(), eog.end());
    eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
    v.end_of_generation = std::move(eog);
}

bool is_special_type(TokenType t) {
    return t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown;
}

// Whitespace stripping that the reference sets by model name, since GGUF
// has no key for it: Phi-3 drops whitespace after its special tokens (its
// chat template puts a newline after each), some Jina models before <mask>.
void set_strip_flags(const gguf::File& f, Vocab& v) {
    std::string name = f.find_string("general.name").value_or("");
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    auto contains = [](std::string_view s, std::string_view sub) { return s.find(sub) != std::string_view::npos; };
    auto set = [&](std::string_view text, uint8_t flag, bool on) {
        if (const int32_t id = v.find(text); id >= 0) {
            auto& s = v.strip[static_cast<size_t>(id)];
            s = on ? static_cast<uint8_t>(s | flag) : static_cast<uint8_t>(s & ~flag);
        }
    };
    if (contains(v.pre_name, "jina-v2-de") || contains(v.pre_name, "jina-v2-es") ||
        contains(v.pre_name, "jina-v2-code")) {
        set("<mask>", kStripLeft, true);
    } else if (contains(name, "phi-3") || contains(name, "phi3")) {
        for (int32_t id = 0; id < v.n_vocab(); ++id)
            if (is_special_type(v.type[static_cast<size_t>(id)])) v.strip[static_cast<size_t>(id)] |= kStripRight;
        set("</s>", kStripRight, true);
        for (const char* t : {"<unk>", "<s>", "<|endoftext|>"}) set(t, kStripRight, false);
    }
}

}  // namespace

int32_t Vocab::find_part(std::string_view s) const {
    if (const int32_t id = find(s); id >= 0) return id;
    const auto it = extra_parts.find(std::string(s));
    return it == extra_parts.end() ? -1 : it->second;
}

Vocab load_vocab(const gguf::File& f) {
    Vocab v;
    const std::optional<std::string> model = f.find_string("tokenizer.ggml.model");
    if (!model) fail_key(f, "tokenizer.ggml.model", "key missing: the file has no tokenizer");
    v.model_name = *model;
    v.pre_name = f.find_string("tokenizer.ggml.pre").value_or("");
    if (v.model_name == "llama") {
        v.kind = VocabKind::Spm;
    } else if (v.model_name == "gpt2") {
        v.kind = VocabKind::Bpe;
    } else {
        fail_key(f, "tokenizer.ggml.model",
                 fmt::format("'{}' is not supported (supported: 'llama' SentencePiece, 'gpt2' byte-level BPE)",
                             v.model_name));
    }

    load_tokens(f, v);
    const int32_t n = v.n_vocab();
    // The model's rows and the tokenizer's ids must be the same set: a
    // token without a row cannot be embedded, a row without a token cannot
    // be printed when sampled.
    if (const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight"); embd && embd->shape.size() >= 2) {
        if (embd->shape[1] != n) {
            fail_key(f, "tokenizer.ggml.tokens",
                     fmt::format("expected {} tokens, one for each row of token_embd.weight, found {}", embd->shape[1],
                                 n));
        }
    }

    if (v.kind == VocabKind::Spm) {
        // The pre-tokenizer key means nothing to SentencePiece.
        v.add_bos = true;
        v.add_space_prefix = true;
        v.bos = read_token_id(f, "tokenizer.ggml.bos_token_id", n, 1);
        v.eos = read_token_id(f, "tokenizer.ggml.eos_token_id", n, 2);
        v.unk = read_token_id(f, "tokenizer.ggml.unknown_token_id", n, 0);
        load_byte_tokens(v);
    } else {
        const std::optional<PreTokenizer> pre = pre_tokenizer_for(v.pre_name);
        if (!pre) {
            fail_key(f, "tokenizer.ggml.pre",
                     fmt::format("pre-tokenizer '{}' is not supported (supported: default, gpt-2 and its aliases, "
                                 "llama3/llama-bpe, qwen2, starcoder, falcon)",
                                 v.pre_name));
        }
        v.pre = *pre;
        // Llama 3 style vocabularies take a word whole when it is a token
        // and expect BOS; the others do neither unless their keys say so.
        v.ignore_merges = v.pre == PreTokenizer::Llama3;
        v.add_bos = v.pre == PreTokenizer::Llama3;
        v.bos = read_token_id(f, "tokenizer.ggml.bos_token_id", n, -1);
        v.eos = read_token_id(f, "tokenizer.ggml.eos_token_id", n, -1);
        v.unk = read_token_id(f, "tokenizer.ggml.unknown_token_id", n, -1);
        load_merges(f, v);
    }
    v.add_space_prefix = read_bool(f, "tokenizer.ggml.add_space_prefix", v.add_space_prefix);
    v.add_bos = read_bool(f, "tokenizer.ggml.add_bos_token", v.add_bos);
    v.add_eos = read_bool(f, "tokenizer.ggml.add_eos_token", v.add_eos);

    find_end_tokens(f, v);
    set_strip_flags(f, v);

    // Ascending ids: of two special tokens with the same text, the lower
    // id is the one found in text.
    for (int32_t id = 0; id < n; ++id) {
        if (is_special_type(v.type[static_cast<size_t>(id)])) v.special.insert(v.text[static_cast<size_t>(id)], id);
    }
    return v;
}

}  // namespace tandem::tokenizer_detail
