#include "runtime/engine/device.h"

#include <algorithm>

namespace tandem {

std::vector<float> tensor_floats(const gguf::File& file, const gguf::TensorInfo& t) {
    std::vector<float> v(static_cast<size_t>(t.n_elements));
    const auto bytes = file.tensor_data(t);
    const int64_t row = t.row_length();
    const uint64_t row_bytes = *quant::row_bytes(t.type, row);
    for (int64_t r = 0; r < t.n_rows(); ++r) {
        quant::dequantize_row(t.type, bytes.data() + r * row_bytes, v.data() + r * row, row);
    }
    return v;
}

}  // namespace tandem
