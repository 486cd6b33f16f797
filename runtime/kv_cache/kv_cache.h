// The KV cache of one layer: one row per cell holding K (or V) of every KV
// head at one position, in F16 or Q8_0 blocks. Global layers have one cell
// per context position; sliding-window layers keep a ring of window +
// micro-batch cells, enough for every query of a batch to see its window.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels_cpu/attention.h"
#include "runtime/quant/quant_types.h"

namespace tandem {

class LayerKvCache {
public:
    LayerKvCache(quant::Type type, int64_t n_cells, int64_t k_dim, int64_t v_dim);

    // Quantizes and stores the K and V rows of position pos. Overwrites the
    // oldest cell in a ring.
    void store(int32_t pos, const float* k_row, const float* v_row);
    void clear();

    cpu::KvCacheView view() const;
    int64_t n_cells() const { return n_cells_; }
    uint64_t bytes() const { return k_.size() + v_.size(); }

private:
    quant::Type type_;
    int64_t n_cells_;
    uint64_t k_row_bytes_;
    uint64_t v_row_bytes_;
    std::vector<uint8_t> k_;
    std::vector<uint8_t> v_;
    std::vector<int32_t> cell_pos_;
};

}  // namespace tandem
