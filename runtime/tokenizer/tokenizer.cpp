// The Tokenizer class: special-token splitting, the per-fragment rules of
// the two vocabulary kinds, and decoding. The algorithms themselves are in
// tokenizer_spm.cpp and tokenizer_bpe.cpp, loading in tokenizer_load.cpp.
#include "runtime/tokenizer/tokenizer.h"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/tokenizer/tokenizer_vocab.h"
#include "runtime/tokenizer/unicode.h"

namespace tandem {

using tokenizer_detail::Fragment;
using tokenizer_detail::Vocab;
using tokenizer_detail::VocabKind;

struct Tokenizer::Impl {
    Vocab v;

    const Vocab& vocab() const { return v; }
    void check_id(int32_t id) const {
        if (id < 0 || id >= v.n_vocab()) {
            throw Error(fmt::format("token id {} is outside the vocabulary [0, {})", id, v.n_vocab()));
        }
    }
};

namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

std::string escape_spaces(std::string_view s, bool prefix_space) {
    std::string out;
    out.reserve(s.size() + s.size() / 4 + 3);
    if (prefix_space) out += kSpmSpace;
    for (const char c : s) {
        if (c == ' ') out += kSpmSpace;
        else out += c;
    }
    return out;
}

std::string unescape_spaces(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        if (s.compare(i, kSpmSpace.size(), kSpmSpace) == 0) {
            out += ' ';
            i += kSpmSpace.size();
        } else {
            out += s[i++];
        }
    }
    return out;
}

// "<0x0A>" -> 0x0A; -1 when the text is not of that form.
int parse_byte_token(std::string_view t) {
    if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
    int value = 0;
    for (const char c : t.substr(3, 2)) {
        value <<= 4;
        if (c >= '0' && c <= '9') value |= c - '0';
        else if (c >= 'A' && c <= 'F') value |= c - 'A' + 10;
        else if (c >= 'a' && c <= 'f') value |= c - 'a' + 10;
        else return -1;
    }
    return value;
}

// Byte-level text back to bytes; a character that stands for no byte (a
// vocabulary entry outside GGUF's conventions) is kept as it is.
std::string bytes_from_stand_ins(std::string_view t) {
    std::string out;
    out.reserve(t.size());
    for (const auto& c : tokenizer_detail::decode_utf8(t)) {
        const int b = tokenizer_detail::bpe_codepoint_to_byte(c.cp);
        if (b >= 0) out += static_cast<char>(b);
        else out.append(t.substr(c.offset, c.size));
    }
    return out;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_gguf(const gguf::File& file) {
    auto impl = std::make_unique<Impl>();
    // Moving a Vocab keeps token_to_id valid: moving the vector of texts
    // hands over its buffer, so the strings the views point into stay put.
    impl->v = tokenizer_detail::load_vocab(file);
    return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
    const Vocab& v = impl_->vocab();
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 2);
    if (add_bos) {
        if (v.bos < 0) throw Error("cannot add BOS: the vocabulary has no BOS token (tokenizer.ggml.bos_token_id)");
        out.push_back(v.bos);
    }
    if (text.empty()) return out;  // no fragments, so no space prefix either

    const std::vector<Fragment> fragments = tokenizer_detail::split_special(v, text, parse_special);
    // SentencePiece's space prefix goes at the start and after every
    // special token, as if each raw fragment were a text of its own.
    bool after_special = true;
    for (const Fragment& f : fragments) {
        if (f.token >= 0) {
            out.push_back(f.token);
            after_special = true;
            continue;
        }
        const std::string_view raw = text.substr(f.offset, f.length);
        if (v.kind == VocabKind::Spm) {
            tokenizer_detail::spm_encode(v, escape_spaces(raw, v.add_space_prefix && after_special), out);
        } else {
            tokenizer_detail::bpe_encode(v, raw, out);
        }
        after_special = false;
    }
    return out;
}

std::string Tokenizer::token_to_piece(int32_t id) const { return token_to_piece(id, true); }

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
    impl_->check_id(id);
    const Vocab& v = impl_->vocab();
    const std::string& t = v.text[static_cast<size_t>(id)];
    switch (v.type[static_cast<size_t>(id)]) {
        case TokenType::Normal:
            return v.kind == VocabKind::Spm ? unescape_spaces(t) : bytes_from_stand_ins(t);
        case TokenType::Byte:
            if (v.kind == VocabKind::Spm) {
                const int b = parse_byte_token(t);
                return b >= 0 ? std::string(1, static_cast<char>(b)) : t;
            }
            return {};  // byte-level BPE has no byte tokens; the reference prints nothing
        case TokenType::Control:
        case TokenType::Unknown:
            return render_special ? t : std::string();
        case TokenType::UserDefined:
            return t;  // added tokens are stored as the text they stand for
        case TokenType::Unused:
        case TokenType::Undefined:
            break;
    }
    return {};
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const { return decode(ids, true); }

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
    const Vocab& v = impl_->vocab();
    std::string out;
    size_t first_text = 0;  // the token that carries encode()'s space prefix
    if (!ids.empty() && ids[0] == v.bos && v.bos >= 0) first_text = 1;
    for (size_t i = 0; i < ids.size(); ++i) {
        std::string piece = token_to_piece(ids[i], render_special);
        if (i == first_text && v.add_space_prefix && v.type[static_cast<size_t>(ids[i])] == TokenType::Normal &&
            !piece.empty() && piece[0] == ' ') {
            piece.erase(0, 1);
        }
        out += piece;
    }
    return out;
}

int32_t Tokenizer::n_vocab() const { return impl_->v.n_vocab(); }
int32_t Tokenizer::bos() const { return impl_->v.bos; }
int32_t Tokenizer::eos() const { return impl_->v.eos; }
int32_t Tokenizer::eot() const { return impl_->v.eot; }
int32_t Tokenizer::unk() const { return impl_->v.unk; }
bool Tokenizer::add_bos_by_default() const { return impl_->v.add_bos && impl_->v.bos >= 0; }
bool Tokenizer::add_eos_by_default() const { return impl_->v.add_eos && impl_->v.eos >= 0; }
bool Tokenizer::add_space_prefix() const { return impl_->v.add_space_prefix; }

std::span<const int32_t> Tokenizer::end_of_generation_ids() const { return impl_->v.end_of_generation; }

bool Tokenizer::is_end_of_generation(int32_t id) const {
    const auto& eog = impl_->v.end_of_generation;
    return std::binary_search(eog.begin(), eog.end(), id);
}

std::string_view Tokenizer::model_name() const { return impl_->v.model_name; }
std::string_view Tokenizer::pre_tokenizer_name() const { return impl_->v.pre_name; }

std::string_view Tokenizer::token_text(int32_t id) const {
    impl_->check_id(id);
    return impl_->v.text[static_cast<size_t>(id)];
}

TokenType Tokenizer::token_type(int32_t id) const {
    impl_->check_id(id);
    return impl_->v.type[static_cast<size_t>(id)];
}

int32_t Tokenizer::find_token(std::string_view text) const { return impl_->v.find(text); }

}  // namespace tandem
