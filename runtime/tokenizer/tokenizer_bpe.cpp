// Byte-level BPE (GPT-2 and descendants). The pre-tokenizer cuts text into
// words; each byte of a word is replaced by its printable stand-in
// character (GPT-2's bytes_to_unicode table, so the vocabulary never holds
// raw control bytes or spaces); then adjacent symbols merge in the order of
// tokenizer.ggml.merges, lowest rank first, leftmost first among equals.
//
// Symbols are named by part ids (token ids, or ids past the vocabulary for
// merge halves that are not tokens), so a candidate merge is one hash
// look-up of two integers instead of building strings. Merges sit in a
// heap; stale entries are recognized when popped.
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "runtime/tokenizer/tokenizer_vocab.h"
#include "runtime/tokenizer/unicode.h"

namespace tandem::tokenizer_detail {
namespace {

// GPT-2 keeps these bytes as the characters with the same code; the other
// 68 are given U+0100.. in byte order.
constexpr bool keeps_own_code(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr std::array<uint16_t, 256> make_byte_table() {
    std::array<uint16_t, 256> t{};
    uint16_t next = 0x100;
    for (int b = 0; b < 256; ++b) t[static_cast<size_t>(b)] = keeps_own_code(b) ? static_cast<uint16_t>(b) : next++;
    return t;
}

constexpr std::array<uint16_t, 256> kByteToCodepoint = make_byte_table();

// The inverse, over the only code points that stand for bytes: U+0000 to
// U+0143 (0x100 + the 68 moved bytes).
constexpr size_t kStandInLimit = 0x144;
constexpr std::array<int16_t, kStandInLimit> make_inverse_table() {
    std::array<int16_t, kStandInLimit> t{};
    for (auto& x : t) x = -1;
    for (int b = 0; b < 256; ++b) t[kByteToCodepoint[static_cast<size_t>(b)]] = static_cast<int16_t>(b);
    return t;
}

constexpr std::array<int16_t, kStandInLimit> kCodepointToByte = make_inverse_table();

struct Symbol {
    int32_t prev = -1;
    int32_t next = -1;
    uint32_t start = 0;  // byte offset in the word
    uint32_t size = 0;   // bytes of the word; 0 once merged away
    int32_t part = -1;   // part id, -1 when the text is neither token nor merge half
};

struct Candidate {
    int32_t rank = 0;
    int32_t left = 0;
    int32_t right = 0;
    int32_t left_part = 0;
    int32_t right_part = 0;
    int32_t result = 0;  // part id after merging
};

// Heap order: the top is the lowest rank, then the lowest left index.
struct CandidateLess {
    bool operator()(const Candidate& a, const Candidate& b) const {
        if (a.rank != b.rank) return a.rank > b.rank;
        return a.left > b.left;
    }
};

class BpeSession {
public:
    explicit BpeSession(const Vocab& v) : v_(v) {}

    void word(std::string_view w, std::vector<int32_t>& out) {
        map_bytes(w);
        if (v_.ignore_merges) {
            if (const int32_t id = v_.find(mapped_); id >= 0) {
                out.push_back(id);
                return;
            }
        }
        sym_.clear();
        heap_.clear();
        for (size_t i = 0; i < w.size(); ++i) {
            Symbol s;
            s.start = static_cast<uint32_t>(i);
            s.size = 1;
            s.prev = static_cast<int32_t>(i) - 1;
            s.next = i + 1 == w.size() ? -1 : static_cast<int32_t>(i) + 1;
            s.part = v_.byte_part[static_cast<uint8_t>(w[i])];
            sym_.push_back(s);
        }
        for (size_t i = 1; i < sym_.size(); ++i) try_merge(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
        while (!heap_.empty()) {
            std::pop_heap(heap_.begin(), heap_.end(), CandidateLess{});
            const Candidate c = heap_.back();
            heap_.pop_back();
            Symbol& l = sym_[static_cast<size_t>(c.left)];
            Symbol& r = sym_[static_cast<size_t>(c.right)];
            // Stale: one side was merged away, or grew since it was queued.
            if (l.size == 0 || r.size == 0 || l.part != c.left_part || r.part != c.right_part) continue;
            l.size += r.size;
            l.part = c.result;
            r.size = 0;
            l.next = r.next;
            if (r.next >= 0) sym_[static_cast<size_t>(r.next)].prev = c.left;
            try_merge(l.prev, c.left);
            try_merge(c.left, l.next);
        }
        for (int32_t i = 0; i != -1; i = sym_[static_cast<size_t>(i)].next) emit(sym_[static_cast<size_t>(i)], out);
    }

private:
    static uint64_t key(int32_t l, int32_t r) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
    }

    // The word in stand-in characters, with where each byte's character
    // starts in it.
    void map_bytes(std::string_view w) {
        mapped_.clear();
        mapped_start_.clear();
        for (const char c : w) {
            mapped_start_.push_back(static_cast<uint32_t>(mapped_.size()));
            append_utf8(mapped_, kByteToCodepoint[static_cast<uint8_t>(c)]);
        }
        mapped_start_.push_back(static_cast<uint32_t>(mapped_.size()));
    }

    void try_merge(int32_t left, int32_t right) {
        if (left < 0 || right < 0) return;
        const int32_t lp = sym_[static_cast<size_t>(left)].part;
        const int32_t rp = sym_[static_cast<size_t>(right)].part;
        if (lp < 0 || rp < 0) return;
        const auto it = v_.merges.find(key(lp, rp));
        if (it == v_.merges.end()) return;
        heap_.push_back({it->second.rank, left, right, lp, rp, it->second.result});
        std::push_heap(heap_.begin(), heap_.end(), CandidateLess{});
    }

    void emit(const Symbol& s, std::vector<int32_t>& out) const {
        if (s.part >= 0 && s.part < v_.n_vocab()) {
            out.push_back(s.part);
            return;
        }
        // Not a token (a vocabulary whose merges produce non-tokens, or that
        // lacks a byte's character): the reference looks up each byte of the
        // stand-in text on its own and drops those that are no token.
        const std::string_view t = std::string_view(mapped_).substr(
            mapped_start_[s.start], mapped_start_[s.start + s.size] - mapped_start_[s.start]);
        for (const char c : t) {
            if (const int32_t id = v_.find(std::string_view(&c, 1)); id >= 0) out.push_back(id);
        }
    }

    const Vocab& v_;
    std::string mapped_;
    std::vector<uint32_t> mapped_start_;
    std::vector<Symbol> sym_;
    std::vector<Candidate> heap_;
};

}  // namespace

uint32_t bpe_byte_to_codepoint(uint8_t byte) { return kByteToCodepoint[byte]; }

int bpe_codepoint_to_byte(uint32_t cp) { return cp < kStandInLimit ? kCodepointToByte[cp] : -1; }

void bpe_encode(const Vocab& v, std::string_view text, std::vector<int32_t>& out) {
    BpeSession session(v);
    for (const std::string_view w : pre_tokenize(text, v.pre)) session.word(w, out);
}

}  // namespace tandem::tokenizer_detail
