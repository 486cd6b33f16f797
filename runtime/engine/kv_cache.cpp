#include "runtime/engine/kv_cache.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "runtime/common/error.h"

namespace tandem {
namespace {

uint64_t row_bytes_of(quant::Type type, int64_t dim) {
    const auto bytes = quant::row_bytes(type, dim);
    TANDEM_CHECK(bytes, "KV cache row not a multiple of the cache type's block");
    return *bytes;
}

quant::QuantizeRowFn row_writer(quant::Type type, quant::QuantizeRowFn given) {
    const quant::QuantizeRowFn fn = given ? given : quant::traits(type).quantize_row;
    TANDEM_CHECK(fn != nullptr, "KV cache: the cache type has no row conversion");
    return fn;
}

}  // namespace

LayerKvCache::LayerKvCache(model::CacheType type, int64_t n_cells, int64_t k_dim, int64_t v_dim, int64_t ring_span,
                           int64_t n_regions, KvRowWriters writers)
    : LayerKvCache(type, std::make_unique<KvCells>(n_cells, ring_span, n_regions), nullptr, k_dim, v_dim,
                   writers) {}

LayerKvCache::LayerKvCache(model::CacheType type, const KvCells& cells, int64_t k_dim, int64_t v_dim,
                           KvRowWriters writers)
    : LayerKvCache(type, nullptr, &cells, k_dim, v_dim, writers) {}

LayerKvCache::LayerKvCache(model::CacheType type, std::unique_ptr<KvCells> owned, const KvCells* cells, int64_t k_dim,
                           int64_t v_dim, KvRowWriters writers)
    : type_(v_dim > 0 ? type : model::CacheType{type.k, type.k}),
      write_k_(row_writer(type_.k, writers.k)),
      write_v_(row_writer(type_.v, v_dim > 0 ? writers.v : writers.k)),
      k_dim_(k_dim),
      v_dim_(v_dim),
      k_row_bytes_(row_bytes_of(type_.k, k_dim)),
      v_row_bytes_(row_bytes_of(type_.v, v_dim)),
      owned_(std::move(owned)),
      cells_(owned_ ? owned_.get() : cells) {
    k_.resize(static_cast<size_t>(cells_->n_cells()) * k_row_bytes_);
    v_.resize(static_cast<size_t>(cells_->n_cells()) * v_row_bytes_);
}

KvCells& LayerKvCache::own() {
    TANDEM_CHECK(owned_ != nullptr, "KV cache: its cells are the session's, changed there");
    return *owned_;
}

void LayerKvCache::store_at(int64_t cell, const float* k_row, const float* v_row) {
    TANDEM_CHECK(cell >= 0 && cell < cells_->n_cells(), "KV cache: cell out of range");
    write_k_(k_row, k_.data() + static_cast<uint64_t>(cell) * k_row_bytes_, k_dim_);
    if (v_dim_ > 0) write_v_(v_row, v_.data() + static_cast<uint64_t>(cell) * v_row_bytes_, v_dim_);
}

void LayerKvCache::store(int32_t pos, const float* k_row, const float* v_row) {
    store_at(own().place_single(pos), k_row, v_row);
}

void LayerKvCache::store(int32_t seq, int32_t pos, const float* k_row, const float* v_row) {
    store_at(own().place(seq, pos), k_row, v_row);
}

KvSeqRows LayerKvCache::read_rows(std::span<const int64_t> cells) const {
    KvSeqRows r;
    r.k_row_bytes = static_cast<uint32_t>(k_row_bytes_);
    r.v_row_bytes = static_cast<uint32_t>(v_row_bytes_);
    r.k.resize(cells.size() * k_row_bytes_);
    r.v.resize(cells.size() * v_row_bytes_);
    for (size_t i = 0; i < cells.size(); ++i) {
        const auto c = static_cast<uint64_t>(cells[i]);
        r.pos.push_back(cells_->cell_pos()[c]);
        r.cell.push_back(static_cast<int32_t>(c));
        std::memcpy(r.k.data() + i * k_row_bytes_, k_.data() + c * k_row_bytes_, k_row_bytes_);
        if (v_row_bytes_ > 0) std::memcpy(r.v.data() + i * v_row_bytes_, v_.data() + c * v_row_bytes_, v_row_bytes_);
    }
    return r;
}

void LayerKvCache::check_row_bytes(const KvSeqRows& rows) const {
    if (rows.k_row_bytes != k_row_bytes_ || rows.v_row_bytes != v_row_bytes_) {
        throw Error(fmt::format("KV cache restore: rows of {} (K) and {} (V) bytes expected, found {} and {}",
                                k_row_bytes_, v_row_bytes_, rows.k_row_bytes, rows.v_row_bytes));
    }
}

void LayerKvCache::write_rows(std::span<const int64_t> cells, const KvSeqRows& rows) {
    check_row_bytes(rows);
    TANDEM_CHECK(cells.size() == rows.n_rows() && rows.k.size() == rows.n_rows() * k_row_bytes_ &&
                     rows.v.size() == rows.n_rows() * v_row_bytes_,
                 "KV cache restore: rows, cells and positions disagree");
    for (size_t i = 0; i < cells.size(); ++i) {
        const auto c = static_cast<uint64_t>(cells[i]);
        std::memcpy(k_.data() + c * k_row_bytes_, rows.k.data() + i * k_row_bytes_, k_row_bytes_);
        if (v_row_bytes_ > 0) std::memcpy(v_.data() + c * v_row_bytes_, rows.v.data() + i * v_row_bytes_, v_row_bytes_);
    }
}

KvSeqRows LayerKvCache::read_seq(int32_t seq) const { return read_rows(cells_->cells_of(seq)); }

void LayerKvCache::write_seq(int32_t seq, const KvSeqRows& rows) {
    check_row_bytes(rows);
    write_rows(own().restore_seq(seq, rows.pos, rows.cell), rows);
}

cpu::KvCacheView LayerKvCache::make_view(const int32_t* cell_pos, int64_t begin, int64_t end) const {
    cpu::KvCacheView v;
    v.k_type = type_.k;
    v.v_type = type_.v;
    v.k = k_.data() + static_cast<uint64_t>(begin) * k_row_bytes_;
    v.k_row_bytes = k_row_bytes_;
    if (v_dim_ > 0) {
        v.v = v_.data() + static_cast<uint64_t>(begin) * v_row_bytes_;
        v.v_row_bytes = v_row_bytes_;
    } else {  // V is each K row's first head_dim_v
        v.v = v.k;
        v.v_row_bytes = k_row_bytes_;
    }
    v.n_cells = end - begin;
    v.cell_pos = cell_pos + begin;
    return v;
}

cpu::KvCacheView LayerKvCache::view() const { return make_view(cells_->cell_pos(), 0, cells_->n_cells()); }

cpu::KvCacheView LayerKvCache::view(int32_t seq) const { return make_view(cells_->cell_pos(seq), 0, cells_->n_cells()); }

cpu::KvCacheView LayerKvCache::attention_view(int32_t seq) const {
    const KvCells::Span span = cells_->cell_span(seq);
    const int64_t begin = span.begin / cpu::kViewCellAlign * cpu::kViewCellAlign;
    return make_view(cells_->cell_pos(seq), begin, std::max(begin, span.end));
}

}  // namespace tandem
