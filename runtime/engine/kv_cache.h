// The KV cache of one layer: one row per cell holding K (or V) of every KV
// head at one position, K and V each in its cache type (model::CacheType). Global layers have one cell
// per context position; sliding-window layers keep a ring of window +
// micro-batch cells, enough for every query of a batch to see its window.
//
// Several sequences share the cells; which cell holds what, and where a new
// position goes, is KvCells (kv_cells.h), which this class adds the rows in
// host memory to. view(seq) gives the attention kernels the cells of one
// sequence: the others read as empty (position -1).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels_cpu/attention.h"
#include "runtime/engine/kv_cells.h"
#include "runtime/engine/sequence_state.h"
#include "runtime/model/model_spec.h"
#include "runtime/quant/quant_types.h"

namespace tandem {

struct KvRowWriters {
    quant::QuantizeRowFn k = nullptr;
    quant::QuantizeRowFn v = nullptr;
};

class LayerKvCache {
public:
    static constexpr int32_t kMaxSeqs = KvCells::kMaxSeqs;  // sequence ids 0..63

    // ring_span: 0 for a global cache; else the positions one sequence keeps
    // (window + micro-batch): a sequence's cell ring_span or more positions
    // behind the one it stores may be reused.
    // n_regions: KvCells' parts, one per sequence (1: one shared pool).
    // v_dim 0: the cache stores K alone and V is each K row's first
    // head_dim_v floats (MLA's latent).
    // writers: what turns a K and a V row into their types' bytes (a CPU
    // device passes cpu::detail::cache_row_quantizer's, llama.cpp's cache
    // store); null: the type's quantize_row. With v_dim 0, V is K's type.
    LayerKvCache(model::CacheType type, int64_t n_cells, int64_t k_dim, int64_t v_dim, int64_t ring_span = 0,
                 int64_t n_regions = 1, KvRowWriters writers = {});
    // K and V of one type.
    LayerKvCache(quant::Type type, int64_t n_cells, int64_t k_dim, int64_t v_dim, int64_t ring_span = 0,
                 int64_t n_regions = 1, KvRowWriters writers = {})
        : LayerKvCache(model::CacheType{type, type}, n_cells, k_dim, v_dim, ring_span, n_regions, writers) {}
    // The rows of `cells`, which the session owns and changes (it must
    // outlive the cache): a device's cache. The calls that change cells
    // (store by position, remove, copy_seq, clear, write_seq) are then the
    // session's, on its cells, and throw here.
    LayerKvCache(model::CacheType type, const KvCells& cells, int64_t k_dim, int64_t v_dim,
                 KvRowWriters writers = {});

    // Quantizes and stores K and V rows in cell `cell` (the one the cells'
    // owner placed the position in).
    void store_at(int64_t cell, const float* k_row, const float* v_row);

    // With cells of its own: sequence 0 with the single-sequence layout:
    // position pos in cell pos % n_cells, overwriting whatever the cell held.
    void store(int32_t pos, const float* k_row, const float* v_row);

    // With cells of its own: stores the K and V rows of position pos of
    // sequence seq in the cell KvCells::place chooses (see there; throws
    // Error when the cache is full). seq must not hold pos already.
    void store(int32_t seq, int32_t pos, const float* k_row, const float* v_row);

    // With cells of its own: takes seq (every sequence when seq < 0) off
    // the cells with p0 <= pos < p1 (p1 < 0: no upper bound).
    void remove(int32_t seq, int32_t p0, int32_t p1) { own().remove(seq, p0, p1); }

    // With cells of its own: adds dst to src's cells with p0 <= pos < p1
    // (p1 < 0: no upper bound); no rows are copied.
    void copy_seq(int32_t src, int32_t dst, int32_t p0, int32_t p1) { own().copy_seq(src, dst, p0, p1); }

    // -1 when seq holds no cell.
    int32_t seq_pos_min(int32_t seq) const { return cells_->seq_pos_min(seq); }
    int32_t seq_pos_max(int32_t seq) const { return cells_->seq_pos_max(seq); }

    void clear() { own().clear(); }

    // The rows of `cells` in that order as stored, with their positions and
    // cells.
    KvSeqRows read_rows(std::span<const int64_t> cells) const;
    // Row i of `rows` into cells[i]. Throws Error when the row sizes differ
    // from this cache's.
    void write_rows(std::span<const int64_t> cells, const KvSeqRows& rows);
    // Sequence seq's cells: positions, cells and rows as stored.
    KvSeqRows read_seq(int32_t seq) const;
    // With cells of its own: replaces seq's cells with `rows`
    // (KvCells::restore_seq chooses the cells). Throws Error when the row
    // sizes differ from this cache's or too few cells are free (seq then
    // holds none).
    void write_seq(int32_t seq, const KvSeqRows& rows);

    // Every occupied cell's position, whatever its sequences.
    cpu::KvCacheView view() const;
    // The same rows, with the cells seq does not hold at position -1.
    cpu::KvCacheView view(int32_t seq) const;
    // view(seq) cut to the cells around seq's (KvCells::cell_span, from a
    // multiple of cpu::kViewCellAlign): attention over it sums the same bits
    // as over view(seq) and reads fewer cells (a slot's own part of the
    // cache, or a context not yet full).
    cpu::KvCacheView attention_view(int32_t seq) const;

    int64_t n_cells() const { return cells_->n_cells(); }
    int64_t ring_span() const { return cells_->ring_span(); }
    const KvCells& cells() const { return *cells_; }
    uint64_t bytes() const { return k_.size() + v_.size(); }

private:
    LayerKvCache(model::CacheType type, std::unique_ptr<KvCells> owned, const KvCells* cells, int64_t k_dim,
                 int64_t v_dim, KvRowWriters writers);
    KvCells& own();
    void check_row_bytes(const KvSeqRows& rows) const;
    cpu::KvCacheView make_view(const int32_t* cell_pos, int64_t begin, int64_t end) const;

    model::CacheType type_;
    quant::QuantizeRowFn write_k_, write_v_;
    int64_t k_dim_;
    int64_t v_dim_;
    uint64_t k_row_bytes_;
    uint64_t v_row_bytes_;
    std::unique_ptr<KvCells> owned_;  // when constructed with a cell count
    const KvCells* cells_;
    std::vector<uint8_t> k_;
    std::vector<uint8_t> v_;
};

}  // namespace tandem
