// SentencePiece (BPE flavour) as llama.cpp runs it on GGUF vocabularies:
// start from single UTF-8 characters, repeatedly merge the adjacent pair
// whose concatenation is the vocabulary entry with the highest score (ties:
// the leftmost pair), and spell whatever is left that is not a token with
// byte tokens <0xNN>.
//
// Pairs live in a heap; a merge invalidates at most the two pairs around it
// and adds two new ones, so a text of n characters costs O(n log n) instead
// of rescanning all pairs after every merge. Stale heap entries are
// recognized when popped (a symbol they name is gone or has grown).
#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/tokenizer/unicode.h"
#include "runtime/tokenizer/tokenizer_vocab.h"

namespace tandem::tokenizer_detail {
namespace {

struct Symbol {
    int32_t prev = -1;
    int32_t next = -1;
    uint32_t start = 0;  // byte offset in the text
    uint32_t size = 0;   // bytes; 0 once merged into the symbol on its left
};

struct Pair {
    float score = 0.0f;
    int32_t left = 0;
    int32_t right = 0;
    uint32_t size = 0;  // bytes of the merged text when queued
};

// Heap order: the top is the highest score, then the lowest left index.
struct PairLess {
    bool operator()(const Pair& a, const Pair& b) const {
        if (a.score != b.score) return a.score < b.score;
        return a.left > b.left;
    }
};

class SpmSession {
public:
    SpmSession(const Vocab& v, std::string_view text) : v_(v), text_(text) {}

    void run(std::vector<int32_t>& out) {
        split_characters();
        for (size_t i = 1; i < sym_.size(); ++i) try_pair(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
        while (!heap_.empty()) {
            std::pop_heap(heap_.begin(), heap_.end(), PairLess{});
            const Pair p = heap_.back();
            heap_.pop_back();
            Symbol& l = sym_[static_cast<size_t>(p.left)];
            Symbol& r = sym_[static_cast<size_t>(p.right)];
            if (l.size == 0 || r.size == 0 || l.size + r.size != p.size) continue;  // stale
            l.size += r.size;
            r.size = 0;
            l.next = r.next;
            if (r.next >= 0) sym_[static_cast<size_t>(r.next)].prev = p.left;
            try_pair(l.prev, p.left);
            try_pair(p.left, l.next);
        }
        if (sym_.empty()) return;
        for (int32_t i = 0; i != -1; i = sym_[static_cast<size_t>(i)].next) emit(sym_[static_cast<size_t>(i)], out);
    }

private:
    void split_characters() {
        sym_.reserve(text_.size());
        size_t off = 0;
        while (off < text_.size()) {
            const size_t len =
                std::min(utf8_sequence_length(static_cast<uint8_t>(text_[off])), text_.size() - off);
            Symbol s;
            s.start = static_cast<uint32_t>(off);
            s.size = static_cast<uint32_t>(len);
            s.prev = static_cast<int32_t>(sym_.size()) - 1;
            off += len;
            s.next = off == text_.size() ? -1 : static_cast<int32_t>(sym_.size()) + 1;
            sym_.push_back(s);
        }
    }

    std::string_view view(const Symbol& s, uint32_t size) const { return text_.substr(s.start, size); }

    void try_pair(int32_t left, int32_t right) {
        if (left < 0 || right < 0) return;
        const Symbol& l = sym_[static_cast<size_t>(left)];
        const uint32_t size = l.size + sym_[static_cast<size_t>(right)].size;
        const int32_t id = v_.find(view(l, size));
        if (id < 0) return;
        heap_.push_back({v_.score[static_cast<size_t>(id)], left, right, size});
        std::push_heap(heap_.begin(), heap_.end(), PairLess{});
    }

    // A symbol is either a token (every merge made one) or a single
    // character no token spells, which falls back to one token per byte.
    void emit(const Symbol& s, std::vector<int32_t>& out) const {
        const std::string_view t = view(s, s.size);
        if (const int32_t id = v_.find(t); id >= 0) {
            out.push_back(id);
            return;
        }
        for (const char c : t) {
            const auto b = static_cast<uint8_t>(c);
            int32_t id = v_.byte_token[b];
            if (id < 0) id = v_.unk;
            if (id < 0) {
                throw Error(fmt::format("cannot encode byte 0x{:02X}: the vocabulary has no <0x{:02X}> token and no "
                                        "<unk>",
                                        b, b));
            }
            out.push_back(id);
        }
    }

    const Vocab& v_;
    std::string_view text_;
    std::vector<Symbol> sym_;
    std::vector<Pair> heap_;
};

}  // namespace

void spm_encode(const Vocab& v, std::string_view text, std::vector<int32_t>& out) {
    if (text.size() > 0xFFFFFFFFu) throw Error("text too long to tokenize (4 GiB or more)");
    SpmSession(v, text).run(out);
}

}  // namespace tandem::tokenizer_detail
