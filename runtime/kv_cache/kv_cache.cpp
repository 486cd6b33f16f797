#include "runtime/kv_cache/kv_cache.h"

#include <algorithm>

#include "runtime/common/error.h"

namespace tandem {

LayerKvCache::LayerKvCache(quant::Type type, int64_t n_cells, int64_t k_dim, int64_t v_dim)
    : type_(type), n_cells_(n_cells) {
    const auto kb = quant::row_bytes(type, k_dim);
    const auto vb = quant::row_bytes(type, v_dim);
    TANDEM_CHECK(kb && vb, "KV cache row not a multiple of the cache type's block");
    TANDEM_CHECK(n_cells > 0, "KV cache without cells");
    k_row_bytes_ = *kb;
    v_row_bytes_ = *vb;
    k_.resize(static_cast<size_t>(n_cells) * k_row_bytes_);
    v_.resize(static_cast<size_t>(n_cells) * v_row_bytes_);
    cell_pos_.assign(static_cast<size_t>(n_cells), -1);
}

void LayerKvCache::store(int32_t pos, const float* k_row, const float* v_row) {
    TANDEM_CHECK(pos >= 0, "negative position");
    const int64_t cell = pos % n_cells_;
    const int64_t k_dim = static_cast<int64_t>(k_row_bytes_ / quant::traits(type_).block_bytes) *
                          quant::traits(type_).block_elems;
    const int64_t v_dim = static_cast<int64_t>(v_row_bytes_ / quant::traits(type_).block_bytes) *
                          quant::traits(type_).block_elems;
    quant::quantize_row(type_, k_row, k_.data() + cell * k_row_bytes_, k_dim);
    quant::quantize_row(type_, v_row, v_.data() + cell * v_row_bytes_, v_dim);
    cell_pos_[static_cast<size_t>(cell)] = pos;
}

void LayerKvCache::clear() { std::fill(cell_pos_.begin(), cell_pos_.end(), -1); }

cpu::KvCacheView LayerKvCache::view() const {
    cpu::KvCacheView v;
    v.type = type_;
    v.k = k_.data();
    v.v = v_.data();
    v.k_row_bytes = k_row_bytes_;
    v.v_row_bytes = v_row_bytes_;
    v.n_cells = n_cells_;
    v.cell_pos = cell_pos_.data();
    return v;
}

}  // namespace tandem
