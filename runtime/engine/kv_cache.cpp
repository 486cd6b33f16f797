#include "runtime/engine/kv_cache.h"

#include "runtime/common/error.h"

namespace tandem {
namespace {

uint64_t row_bytes_of(quant::Type type, int64_t dim) {
    const auto bytes = quant::row_bytes(type, dim);
    TANDEM_CHECK(bytes, "KV cache row not a multiple of the cache type's block");
    return *bytes;
}

}  // namespace

LayerKvCache::LayerKvCache(quant::Type type, int64_t n_cells, int64_t k_dim, int64_t v_dim, int64_t ring_span)
    : type_(type),
      k_dim_(k_dim),
      v_dim_(v_dim),
      k_row_bytes_(row_bytes_of(type, k_dim)),
      v_row_bytes_(row_bytes_of(type, v_dim)),
      cells_(n_cells, ring_span) {
    k_.resize(static_cast<size_t>(n_cells) * k_row_bytes_);
    v_.resize(static_cast<size_t>(n_cells) * v_row_bytes_);
}

void LayerKvCache::write_rows(int64_t cell, const float* k_row, const float* v_row) {
    quant::quantize_row(type_, k_row, k_.data() + static_cast<uint64_t>(cell) * k_row_bytes_, k_dim_);
    quant::quantize_row(type_, v_row, v_.data() + static_cast<uint64_t>(cell) * v_row_bytes_, v_dim_);
}

void LayerKvCache::store(int32_t pos, const float* k_row, const float* v_row) {
    write_rows(cells_.place_single(pos), k_row, v_row);
}

void LayerKvCache::store(int32_t seq, int32_t pos, const float* k_row, const float* v_row) {
    write_rows(cells_.place(seq, pos), k_row, v_row);
}

cpu::KvCacheView LayerKvCache::make_view(const int32_t* cell_pos) const {
    cpu::KvCacheView v;
    v.type = type_;
    v.k = k_.data();
    v.v = v_.data();
    v.k_row_bytes = k_row_bytes_;
    v.v_row_bytes = v_row_bytes_;
    v.n_cells = cells_.n_cells();
    v.cell_pos = cell_pos;
    return v;
}

cpu::KvCacheView LayerKvCache::view() const { return make_view(cells_.cell_pos()); }

cpu::KvCacheView LayerKvCache::view(int32_t seq) const { return make_view(cells_.cell_pos(seq)); }

}  // namespace tandem
