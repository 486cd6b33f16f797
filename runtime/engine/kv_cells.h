// The bookkeeping of one layer's KV cache, without the K/V rows: which
// position and which sequences each cell holds, and which cell a new
// position goes to. The session owns one per layer and alone changes it;
// the device holding the layer's rows (LayerKvCache in host memory,
// kv_cache.h; the CUDA cache on the GPU) stores into the cells it is given
// and reads these to attend.
//
// Each cell holds a position and the set of sequence ids (0..63, a bitmask)
// that see it, so a prompt prefix stored once can serve several sequences
// (copy_seq, as llama.cpp's seq_cp). A cell is free when its set is empty.
// cell_pos(seq) gives the attention kernels the cells of one sequence: the
// others read as empty (position -1).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace tandem {

class KvCells {
public:
    static constexpr int32_t kMaxSeqs = 64;  // sequence ids 0..63

    // ring_span: 0 for a global cache; else the positions one sequence keeps
    // (window + micro-batch): a sequence's cell ring_span or more positions
    // behind the one it stores may be reused.
    //
    // n_regions > 1 splits the cells into that many equal parts, part s for
    // sequence s alone (llama.cpp's non-unified cache, as its server uses
    // with several slots): where a sequence's positions go then depends on
    // its own history only, so its cells are in the same order, and its
    // attention sums the same bits, whatever the other sequences do.
    // Sequence ids from n_regions on hold no cells of their own (they can
    // still see cells through copy_seq).
    explicit KvCells(int64_t n_cells, int64_t ring_span = 0, int64_t n_regions = 1);

    // Sequence 0 with the single-sequence layout: position pos in cell
    // pos % n_cells, whatever the cell held. Returns the cell.
    int64_t place_single(int32_t pos);

    // Chooses the cell of position pos of sequence seq, records it and
    // returns it. The cell: in a ring, seq's oldest cell at or before pos -
    // ring_span if it has one (only seq's own, unshared cells); else the
    // first free cell from head_ on (wrapping). Throws Error when neither
    // exists. A single sequence placed at 0, 1, 2, ... gets cell pos
    // (global) or pos % n_cells (ring of ring_span == n_cells cells), as
    // place_single(pos). seq must not hold pos already (remove it first).
    int64_t place(int32_t seq, int32_t pos);

    // Takes seq (every sequence when seq < 0) off the cells with p0 <= pos <
    // p1 (p1 < 0: no upper bound). Cells left without a sequence are freed,
    // and the next place starts at the freed cell of the smallest position.
    void remove(int32_t seq, int32_t p0, int32_t p1);

    // Adds dst to src's cells with p0 <= pos < p1 (p1 < 0: no upper bound).
    void copy_seq(int32_t src, int32_t dst, int32_t p0, int32_t p1);

    int32_t seq_pos_min(int32_t seq) const;  // -1 when seq holds no cell
    int32_t seq_pos_max(int32_t seq) const;  // -1 when seq holds no cell

    void clear();

    // The cells seq holds, in cell order.
    std::vector<int64_t> cells_of(int32_t seq) const;
    // The cells a restore of seq may use: the free ones and those seq holds alone.
    int64_t cells_available_to(int32_t seq) const;
    // A saved sequence put back (Session::restore_sequence): takes seq off
    // every cell, then gives it positions pos[i] (distinct, >= 0), a cell
    // each: the cells hint[i] when every one is in range, distinct and free,
    // else the free cells in ascending order, so the rows keep their
    // relative order (attention sums cells in cell order). The next place
    // starts after the cell of the largest position. Returns the cells.
    // Throws Error when too few cells are free (seq then holds none).
    std::vector<int64_t> restore_seq(int32_t seq, std::span<const int32_t> pos, std::span<const int32_t> hint);

    // Every occupied cell's position, whatever its sequences (n_cells).
    const int32_t* cell_pos() const { return cell_pos_.data(); }
    // The same array with the cells seq does not hold at -1.
    const int32_t* cell_pos(int32_t seq) const;
    // The cells [begin, end) outside of which seq holds none ({0, 0} when
    // it holds none): attention reads only these (a sequence in a part of
    // its own, or early in a long context, has far fewer than n_cells).
    struct Span {
        int64_t begin = 0, end = 0;
    };
    Span cell_span(int32_t seq) const;

    int64_t n_cells() const { return n_cells_; }
    int64_t ring_span() const { return ring_span_; }
    int64_t n_regions() const { return n_regions_; }

private:
    // The cells seq may take: [begin, end). Throws Error for a sequence
    // without a part of its own.
    struct Range {
        int64_t begin, end;
    };
    Range range_of(int32_t seq) const;
    // Where the search for a free cell of seq's part starts.
    int64_t& head_of(int32_t seq) { return heads_[static_cast<size_t>(n_regions_ > 1 ? seq : 0)]; }
    // Sets a cell's position and sequences, and the per-sequence arrays.
    void assign(int64_t cell, int32_t pos, uint64_t seqs);

    int64_t n_cells_;
    int64_t ring_span_;
    int64_t n_regions_;
    int64_t region_cells_;            // cells of a part (n_cells with one part)
    std::vector<int32_t> cell_pos_;   // position of each cell, -1 if free
    std::vector<uint64_t> cell_seqs_; // sequences holding each cell, 0 if free
    // Per sequence: cell_pos_ with the cells it does not hold at -1; empty
    // until the sequence is first used.
    std::array<std::vector<int32_t>, kMaxSeqs> seq_pos_;
    std::vector<int32_t> no_pos_;     // all -1: the array of an unused sequence
    std::vector<int64_t> heads_;      // per part: where the search for a free cell starts
    std::array<Span, kMaxSeqs> spans_{};  // per sequence: cell_span
    void recompute_spans();
};

}  // namespace tandem
