#include "runtime/engine/device.h"

#include <algorithm>

namespace tandem {

cpu::RouteParams route_params(const MoeRouteOp& op, const float* bias) {
    TANDEM_CHECK((op.bias != nullptr) == (bias != nullptr), "moe_route: the choice's bias is not on this device");
    cpu::RouteParams p;
    p.n_expert = op.n_expert;
    p.n_used = op.n_used;
    p.normalize = op.normalize;
    p.sigmoid = op.sigmoid;
    p.softmax_of_chosen = op.softmax_of_chosen;
    p.selection_bias = bias;
    p.scale = op.scale;
    p.n_groups = op.n_groups;
    p.n_groups_used = op.n_groups_used;
    return p;
}

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
