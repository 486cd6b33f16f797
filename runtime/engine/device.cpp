#include "runtime/engine/device.h"

#include <algorithm>

namespace tandem {

std::string_view act_name(Act a) {
    static constexpr std::string_view names[kActCount] = {"x",     "cur",    "q",     "k",      "v",
                                                                   "attn",  "gate",   "up",    "fused",  "router",
                                                                   "route", "logits"};
    return names[static_cast<int>(a)];
}

int64_t act_width(const model::HParams& hp, Act a) {
    switch (a) {
        case Act::X:
        case Act::Cur: return hp.n_embd;
        case Act::Q: return hp.q_dim();
        case Act::K: return hp.k_dim();
        case Act::V: return hp.v_dim();
        case Act::Attn: return std::max(hp.out_dim(), hp.n_embd);
        case Act::Gate:
        case Act::Up: return hp.ffn_width();
        case Act::Fused: return hp.fused_width;
        case Act::Router: return hp.n_expert;
        case Act::Route: return 2 * hp.n_expert_used;
        case Act::Logits: return hp.n_vocab;
        case Act::Count: break;
    }
    return 0;
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
