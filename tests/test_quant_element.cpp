// The per-element dequantization that the CUDA kernels use, compiled for the
// host and checked against the scalar reference on every element of random
// blocks. This pins the GPU indexing on machines without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/quant/quant_element.h"
#include "runtime/quant/quant_types.h"
#include "tests/random_blocks.h"

namespace tq = tandem::quant;

namespace {

using RowElementFn = float (*)(const void*, int64_t);

struct ElementCase {
    tq::Type type;
    RowElementFn fn;
};

#define TANDEM_ELEMENT_CASE(Name, Block, Fn, QK) \
    ElementCase{tq::Type::Name, &tq::element::row_element<Block, tq::element::Fn, QK>},
const ElementCase kCases[] = {TANDEM_FOR_EACH_ELEMENT_TYPE(TANDEM_ELEMENT_CASE)};
#undef TANDEM_ELEMENT_CASE

// Random bytes would make NaN/inf scales for the fp16 fields; quantizing
// random floats gives realistic blocks (random codes with sane scales for
// the grid types: random_blocks.h).
using tandem::testing::random_blocks;

}  // namespace

TEST(QuantElement, EveryElementMatchesReferenceDequantize) {
    constexpr int64_t kN = 4 * 256;
    for (const auto& c : kCases) {
        SCOPED_TRACE(std::string(tq::traits(c.type).name));
        for (uint32_t seed = 1; seed <= 3; ++seed) {
            const auto bytes = random_blocks(c.type, kN, seed);
            std::vector<float> ref(kN);
            tq::dequantize_row(c.type, bytes.data(), ref.data(), kN);
            int mismatches = 0;
            for (int64_t i = 0; i < kN; ++i) {
                const float got = c.fn(bytes.data(), i);
                if (std::memcmp(&got, &ref[i], sizeof(float)) != 0 && ++mismatches < 5) {
                    ADD_FAILURE() << "element " << i << ": element path " << got << ", reference " << ref[i];
                }
            }
            EXPECT_EQ(mismatches, 0);
        }
    }
}

TEST(QuantElement, TableCoversEveryStoredType) {
    for (const auto& tr : tq::all_traits()) {
        bool found = false;
        for (const auto& c : kCases) found |= (c.type == tr.type);
        EXPECT_TRUE(found) << "no element function for " << tr.name;
    }
}
