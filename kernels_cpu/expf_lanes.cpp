#include "kernels_cpu/expf_lanes.h"

#include <bit>
#include <cmath>
#include <initializer_list>

namespace tandem::cpu::detail {

const int64_t* expf_table() {
    struct Table {
        alignas(64) int64_t tab[32];
        Table() {
            for (int i = 0; i < 32; ++i) {
                const auto v = static_cast<double>(std::exp2l(static_cast<long double>(i) / 32));
                tab[i] = std::bit_cast<int64_t>(v) - (static_cast<int64_t>(i) << 47);
            }
        }
    };
    static const Table t;
    return t.tab;
}

bool expf_lanes_agree(ExpfLanesFn f) {
    constexpr int64_t kBlock = 1024;
    float x[kBlock + 8], y[kBlock + 8];
    int64_t count = 0;
    const auto flush = [&]() {
        f(x, y, count);
        for (int64_t i = 0; i < count; ++i) {
            if (std::bit_cast<uint32_t>(y[i]) != std::bit_cast<uint32_t>(std::exp(x[i]))) return false;
        }
        count = 0;
        return true;
    };
    for (uint64_t b = 0; b < (1ull << 32); b += 4093) {
        const float v = std::bit_cast<float>(static_cast<uint32_t>(b));
        if (!(std::fabs(v) < 88.0f)) continue;
        x[count++] = v;
        if (count == kBlock && !flush()) return false;
    }
    for (float v : {87.99f, -87.99f, 88.0f, -88.0f, -103.5f, -104.0f, 0.0f, -0.0f}) x[count++] = v;
    return flush();
}

}  // namespace tandem::cpu::detail
