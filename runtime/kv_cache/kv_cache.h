// The KV cache of one layer: one row per cell holding K (or V) of every KV
// head at one position, in F16 or Q8_0 blocks. Global layers have one cell
// per context position; sliding-window layers keep a ring of window +
// micro-batch cells, enough for every query of a batch to see its window.
//
// Several sequences share the cells: each cell holds a position and the set
// of sequence ids (0..63, a bitmask) that see it, so a prompt prefix stored
// once can serve several sequences (copy_seq, as llama.cpp's seq_cp). A cell
// is free when its set is empty. view(seq) gives the attention kernels the
// cells of one sequence: the others read as empty (position -1).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "kernels_cpu/attention.h"
#include "runtime/quant/quant_types.h"

namespace tandem {

class LayerKvCache {
public:
    static constexpr int32_t kMaxSeqs = 64;  // sequence ids 0..63

    // ring_span: 0 for a global cache; else the positions one sequence keeps
    // (window + micro-batch): a sequence's cell ring_span or more positions
    // behind the one it stores may be reused.
    LayerKvCache(quant::Type type, int64_t n_cells, int64_t k_dim, int64_t v_dim, int64_t ring_span = 0);

    // Sequence 0 with the single-sequence layout: position pos in cell
    // pos % n_cells, overwriting whatever the cell held.
    void store(int32_t pos, const float* k_row, const float* v_row);

    // Quantizes and stores the K and V rows of position pos of sequence seq.
    // The cell: in a ring, seq's oldest cell at or before pos - ring_span if
    // it has one (only seq's own, unshared cells); else the first free cell
    // from head_ on (wrapping). Throws Error when neither exists. A single
    // sequence stored at 0, 1, 2, ... lands in cell pos (global) or
    // pos % n_cells (ring of ring_span == n_cells cells), as store(pos).
    // seq must not hold pos already (remove it first).
    void store(int32_t seq, int32_t pos, const float* k_row, const float* v_row);

    // Takes seq (every sequence when seq < 0) off the cells with p0 <= pos <
    // p1 (p1 < 0: no upper bound). Cells left without a sequence are freed,
    // and the next store starts at the freed cell of the smallest position.
    void remove(int32_t seq, int32_t p0, int32_t p1);

    // Adds dst to src's cells with p0 <= pos < p1 (p1 < 0: no upper bound);
    // no rows are copied.
    void copy_seq(int32_t src, int32_t dst, int32_t p0, int32_t p1);

    int32_t seq_pos_min(int32_t seq) const;  // -1 when seq holds no cell
    int32_t seq_pos_max(int32_t seq) const;  // -1 when seq holds no cell

    void clear();

    // Every occupied cell's position, whatever its sequences.
    cpu::KvCacheView view() const;
    // The same rows, with the cells seq does not hold at position -1.
    cpu::KvCacheView view(int32_t seq) const;

    int64_t n_cells() const { return n_cells_; }
    int64_t ring_span() const { return ring_span_; }
    uint64_t bytes() const { return k_.size() + v_.size(); }

private:
    void write_rows(int64_t cell, const float* k_row, const float* v_row);
    // Sets a cell's position and sequences, and the per-sequence arrays.
    void assign(int64_t cell, int32_t pos, uint64_t seqs);
    cpu::KvCacheView make_view(const int32_t* cell_pos) const;

    quant::Type type_;
    int64_t n_cells_;
    int64_t ring_span_;
    int64_t k_dim_;
    int64_t v_dim_;
    uint64_t k_row_bytes_;
    uint64_t v_row_bytes_;
    std::vector<uint8_t> k_;
    std::vector<uint8_t> v_;
    std::vector<int32_t> cell_pos_;   // position of each cell, -1 if free
    std::vector<uint64_t> cell_seqs_; // sequences holding each cell, 0 if free
    // Per sequence: cell_pos_ with the cells it does not hold at -1; empty
    // until the sequence is first used.
    std::array<std::vector<int32_t>, kMaxSeqs> seq_pos_;
    std::vector<int32_t> no_pos_;     // all -1: the view of an unused sequence
    int64_t head_ = 0;                // where the search for a free cell starts
};

}  // namespace tandem
