#include "runtime/model/tensor_check.h"

#include <cmath>

#include <fmt/format.h>

#include "runtime/quant/quant_types.h"

namespace tandem::model {
namespace {

// The first row of t (among those checked) holding a NaN or Inf; -1 if none.
int64_t first_bad_row(const gguf::File& file, const gguf::TensorInfo& t, bool every_row, std::vector<float>& row) {
    const int64_t n = t.row_length(), rows = t.n_rows();
    const auto row_bytes = quant::row_bytes(t.type, n);
    if (!row_bytes) return -1;  // the spec has checked shapes and types; nothing to read row by row
    const auto bytes = file.tensor_data(t);
    row.resize(static_cast<size_t>(n));
    const bool all = every_row || rows <= 2;
    const auto check = [&](int64_t r) {
        quant::dequantize_row(t.type, bytes.data() + static_cast<uint64_t>(r) * *row_bytes, row.data(), n);
        for (const float v : row) {
            if (!std::isfinite(v)) return true;
        }
        return false;
    };
    if (all) {
        for (int64_t r = 0; r < rows; ++r) {
            if (check(r)) return r;
        }
        return -1;
    }
    if (check(0)) return 0;
    if (check(rows - 1)) return rows - 1;
    return -1;
}

}  // namespace

std::vector<std::string> find_non_finite_tensors(const gguf::File& file, const ModelSpec& spec, bool every_row) {
    std::vector<const gguf::TensorInfo*> tensors;
    for (const LayerSpec& layer : spec.layers) {
        for (const gguf::TensorInfo* t : layer.tensors) {
            if (t) tensors.push_back(t);
        }
    }
    for (const gguf::TensorInfo* t : spec.globals) {
        if (t) tensors.push_back(t);
    }
    std::vector<std::string> out;
    std::vector<float> row;
    for (const gguf::TensorInfo* t : tensors) {
        // Vectors (norms, biases) are read whole: a few kilobytes each.
        const int64_t bad = first_bad_row(file, *t, every_row || t->n_rows() == 1, row);
        if (bad >= 0) {
            out.push_back(fmt::format("tensor '{}' holds NaN or Inf values (row {}): the output will be meaningless",
                                      t->name, bad));
        }
    }
    return out;
}

}  // namespace tandem::model
