#include "runtime/engine/kv_cells.h"

#include <algorithm>
#include <bit>
#include <string>

#include <fmt/format.h>

#include "runtime/common/error.h"

namespace tandem {
namespace {

void check_seq(int32_t seq, const char* what) {
    if (seq < 0 || seq >= KvCells::kMaxSeqs) {
        throw Error(fmt::format("KV cache {}: sequence id {} out of range [0, {}]", what, seq, KvCells::kMaxSeqs - 1));
    }
}

uint64_t seq_bit(int32_t seq) { return uint64_t{1} << seq; }

// p0 <= pos < p1, p1 < 0 meaning no upper bound.
bool in_range(int32_t pos, int32_t p0, int32_t p1) { return pos >= p0 && (p1 < 0 || pos < p1); }

}  // namespace

KvCells::KvCells(int64_t n_cells, int64_t ring_span, int64_t n_regions)
    : n_cells_(n_cells), ring_span_(ring_span), n_regions_(n_regions), region_cells_(n_cells / std::max<int64_t>(1, n_regions)) {
    TANDEM_CHECK(n_cells > 0, "KV cache without cells");
    TANDEM_CHECK(ring_span >= 0, "KV cache with a negative ring span");
    TANDEM_CHECK(n_regions >= 1 && n_regions <= kMaxSeqs && region_cells_ > 0, "KV cache parts out of range");
    heads_.resize(static_cast<size_t>(n_regions));
    for (int64_t r = 0; r < n_regions; ++r) heads_[static_cast<size_t>(r)] = r * region_cells_;
    cell_pos_.assign(static_cast<size_t>(n_cells), -1);
    cell_seqs_.assign(static_cast<size_t>(n_cells), 0);
    no_pos_.assign(static_cast<size_t>(n_cells), -1);
}

void KvCells::assign(int64_t cell, int32_t pos, uint64_t seqs) {
    const auto c = static_cast<size_t>(cell);
    // Sequences that lose the cell read -1 there; the ones holding it, pos.
    for (uint64_t lost = cell_seqs_[c] & ~seqs; lost != 0; lost &= lost - 1) {
        seq_pos_[static_cast<size_t>(std::countr_zero(lost))][c] = -1;
    }
    for (uint64_t held = seqs; held != 0; held &= held - 1) {
        const auto s = static_cast<size_t>(std::countr_zero(held));
        auto& arr = seq_pos_[s];
        if (arr.empty()) arr.assign(static_cast<size_t>(n_cells_), -1);
        arr[c] = pos;
        Span& span = spans_[s];
        if (span.begin == span.end) {
            span = {cell, cell + 1};
        } else {
            span.begin = std::min(span.begin, cell);
            span.end = std::max(span.end, cell + 1);
        }
    }
    cell_pos_[c] = seqs != 0 ? pos : -1;
    cell_seqs_[c] = seqs;
}

KvCells::Range KvCells::range_of(int32_t seq) const {
    if (n_regions_ == 1) return {0, n_cells_};
    if (seq >= n_regions_) {
        throw Error(fmt::format("KV cache: sequence {} has no cells: the cache is split into {} parts, one for each of "
                                "sequences 0..{}",
                                seq, n_regions_, n_regions_ - 1));
    }
    return {seq * region_cells_, (seq + 1) * region_cells_};
}

int64_t KvCells::place_single(int32_t pos) {
    TANDEM_CHECK(pos >= 0, "negative position");
    const Range r = range_of(0);
    const int64_t cell = r.begin + pos % (r.end - r.begin);
    assign(cell, pos, seq_bit(0));
    head_of(0) = cell + 1 == r.end ? r.begin : cell + 1;
    return cell;
}

int64_t KvCells::place(int32_t seq, int32_t pos) {
    check_seq(seq, "store");
    if (pos < 0) throw Error(fmt::format("KV cache store: negative position {} for sequence {}", pos, seq));
    const uint64_t bit = seq_bit(seq);
    const Range r = range_of(seq);
    const int64_t n_range = r.end - r.begin;
    int64_t cell = -1;
    // A ring reuses the sequence's own cell that left its span first, before
    // taking a free cell: a sequence then keeps at most ring_span cells and
    // cannot crowd the others out of the ring.
    if (ring_span_ > 0) {
        const int64_t limit = static_cast<int64_t>(pos) - ring_span_;
        for (int64_t c = r.begin; c < r.end; ++c) {
            const auto i = static_cast<size_t>(c);
            if (cell_seqs_[i] == bit && cell_pos_[i] <= limit &&
                (cell < 0 || cell_pos_[i] < cell_pos_[static_cast<size_t>(cell)])) {
                cell = c;
            }
        }
    }
    const int64_t head = head_of(seq);
    for (int64_t i = 0; cell < 0 && i < n_range; ++i) {
        const int64_t c = r.begin + (head - r.begin + i) % n_range;
        if (cell_seqs_[static_cast<size_t>(c)] == 0) cell = c;
    }
    if (cell < 0) {
        int64_t own = 0;
        for (uint64_t s : cell_seqs_) own += s == bit;
        throw Error(fmt::format(
            "KV cache full: no cell for sequence {} position {}: all {} cells hold positions ({} of them sequence "
            "{}'s alone, from {} to {}){}",
            seq, pos, n_range, own, seq, seq_pos_min(seq), seq_pos_max(seq),
            ring_span_ > 0 ? fmt::format(", and none of its own is {} or more positions back", ring_span_)
                           : std::string()));
    }
    assign(cell, pos, bit);
    head_of(seq) = cell + 1 == r.end ? r.begin : cell + 1;
    return cell;
}

void KvCells::remove(int32_t seq, int32_t p0, int32_t p1) {
    uint64_t bits = ~uint64_t{0};
    if (seq >= 0) {
        check_seq(seq, "remove");
        bits = seq_bit(seq);
    }
    // Per part: the freed cell of the smallest position, where the next
    // place starts; a part left empty starts again at its first cell, as a
    // fresh cache does.
    std::vector<int64_t> freed(heads_.size(), -1);
    std::vector<int32_t> freed_pos(heads_.size(), 0);
    for (int64_t c = 0; c < n_cells_; ++c) {
        const auto i = static_cast<size_t>(c);
        const int32_t pos = cell_pos_[i];
        if ((cell_seqs_[i] & bits) == 0 || !in_range(pos, p0, p1)) continue;
        const uint64_t left = cell_seqs_[i] & ~bits;
        assign(c, pos, left);
        const auto part = static_cast<size_t>(std::min(c / region_cells_, n_regions_ - 1));
        if (left == 0 && (freed[part] < 0 || pos < freed_pos[part])) {
            freed[part] = c;
            freed_pos[part] = pos;
        }
    }
    for (size_t part = 0; part < heads_.size(); ++part) {
        if (freed[part] < 0) continue;
        const int64_t begin = static_cast<int64_t>(part) * region_cells_;
        const int64_t end = n_regions_ == 1 ? n_cells_ : begin + region_cells_;
        bool empty = true;
        for (int64_t c = begin; c < end && empty; ++c) empty = cell_seqs_[static_cast<size_t>(c)] == 0;
        heads_[part] = empty ? begin : freed[part];
    }
    recompute_spans();
}

void KvCells::recompute_spans() {
    spans_.fill(Span{});
    for (int64_t c = 0; c < n_cells_; ++c) {
        for (uint64_t held = cell_seqs_[static_cast<size_t>(c)]; held != 0; held &= held - 1) {
            Span& span = spans_[static_cast<size_t>(std::countr_zero(held))];
            if (span.begin == span.end) span.begin = c;
            span.end = c + 1;
        }
    }
}

KvCells::Span KvCells::cell_span(int32_t seq) const {
    check_seq(seq, "view");
    return spans_[static_cast<size_t>(seq)];
}

void KvCells::copy_seq(int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    check_seq(src, "copy_seq");
    check_seq(dst, "copy_seq");
    if (src == dst) return;
    for (int64_t c = 0; c < n_cells_; ++c) {
        const auto i = static_cast<size_t>(c);
        if ((cell_seqs_[i] & seq_bit(src)) != 0 && in_range(cell_pos_[i], p0, p1)) {
            assign(c, cell_pos_[i], cell_seqs_[i] | seq_bit(dst));
        }
    }
}

int32_t KvCells::seq_pos_min(int32_t seq) const {
    check_seq(seq, "seq_pos_min");
    int32_t lo = -1;
    for (int32_t p : seq_pos_[static_cast<size_t>(seq)]) {
        if (p >= 0 && (lo < 0 || p < lo)) lo = p;
    }
    return lo;
}

int32_t KvCells::seq_pos_max(int32_t seq) const {
    check_seq(seq, "seq_pos_max");
    int32_t hi = -1;
    for (int32_t p : seq_pos_[static_cast<size_t>(seq)]) hi = std::max(hi, p);
    return hi;
}

void KvCells::clear() {
    std::fill(cell_pos_.begin(), cell_pos_.end(), -1);
    std::fill(cell_seqs_.begin(), cell_seqs_.end(), 0);
    for (auto& arr : seq_pos_) std::fill(arr.begin(), arr.end(), -1);
    spans_.fill(Span{});
    for (size_t r = 0; r < heads_.size(); ++r) heads_[r] = static_cast<int64_t>(r) * region_cells_;
}

std::vector<int64_t> KvCells::cells_of(int32_t seq) const {
    check_seq(seq, "cells_of");
    std::vector<int64_t> out;
    for (int64_t c = 0; c < n_cells_; ++c) {
        if ((cell_seqs_[static_cast<size_t>(c)] & seq_bit(seq)) != 0) out.push_back(c);
    }
    return out;
}

int64_t KvCells::cells_available_to(int32_t seq) const {
    check_seq(seq, "cells_available_to");
    const Range r = range_of(seq);
    int64_t n = 0;
    for (int64_t c = 0; c < n_cells_; ++c) {
        const uint64_t s = cell_seqs_[static_cast<size_t>(c)];
        n += (s == 0 && c >= r.begin && c < r.end) || s == seq_bit(seq);
    }
    return n;
}

std::vector<int64_t> KvCells::restore_seq(int32_t seq, std::span<const int32_t> pos, std::span<const int32_t> hint) {
    check_seq(seq, "restore");
    TANDEM_CHECK(hint.size() == pos.size(), "KV cache restore: one cell hint per position");
    size_t last = 0;
    for (size_t i = 0; i < pos.size(); ++i) {
        if (pos[i] < 0) throw Error(fmt::format("KV cache restore: negative position {}", pos[i]));
        if (pos[i] > pos[last]) last = i;
    }
    const Range r = range_of(seq);
    remove(seq, 0, -1);
    std::vector<int64_t> cells(pos.size());
    bool use_hint = true;
    std::vector<uint8_t> taken(static_cast<size_t>(n_cells_), 0);
    for (size_t i = 0; i < hint.size() && use_hint; ++i) {
        const int32_t c = hint[i];
        use_hint = c >= r.begin && c < r.end && cell_seqs_[static_cast<size_t>(c)] == 0 && !taken[static_cast<size_t>(c)];
        if (use_hint) {
            taken[static_cast<size_t>(c)] = 1;
            cells[i] = c;
        }
    }
    if (!use_hint) {
        size_t i = 0;
        for (int64_t c = r.begin; c < r.end && i < pos.size(); ++c) {
            if (cell_seqs_[static_cast<size_t>(c)] == 0) cells[i++] = c;
        }
        if (i < pos.size()) {
            throw Error(fmt::format("KV cache restore: sequence {} needs {} cells, {} of the {} are free", seq,
                                    pos.size(), i, r.end - r.begin));
        }
    }
    for (size_t i = 0; i < pos.size(); ++i) assign(cells[i], pos[i], seq_bit(seq));
    if (!pos.empty()) head_of(seq) = cells[last] + 1 == r.end ? r.begin : cells[last] + 1;
    return cells;
}

const int32_t* KvCells::cell_pos(int32_t seq) const {
    check_seq(seq, "view");
    const auto& arr = seq_pos_[static_cast<size_t>(seq)];
    return arr.empty() ? no_pos_.data() : arr.data();
}

}  // namespace tandem
