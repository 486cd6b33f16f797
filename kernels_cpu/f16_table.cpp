// Every fp16 value as a float, indexed by its bits (see vec_dot.h).
#include <cstdint>
#include <vector>

#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/fp16.h"

namespace tandem::cpu::detail {

const float* f16_table() {
    static const std::vector<float> table = [] {
        std::vector<float> t(65536);
        for (uint32_t i = 0; i < t.size(); ++i) t[i] = quant::fp16_to_fp32(static_cast<quant::fp16_bits>(i));
        return t;
    }();
    return table.data();
}

}  // namespace tandem::cpu::detail
