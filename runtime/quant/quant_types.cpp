#include "runtime/quant/quant_types.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

#include "runtime/common/ascii.h"
#include "runtime/common/error.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_ref.h"

namespace tandem::quant {
namespace {

template <QuantizeRowWeightedFn F>
void unweighted(const float* src, void* dst, int64_t n) {
    F(src, dst, n, nullptr);
}

// One row per type: the only place that knows block geometry and which
// reference routine implements it.
constexpr std::array kTraits = {
    TypeTraits{Type::F32, "F32", 1, sizeof(float), false, false, ref::quantize_row_f32, ref::dequantize_row_f32},
    TypeTraits{Type::F16, "F16", 1, sizeof(fp16_bits), false, false, ref::quantize_row_f16, ref::dequantize_row_f16},
    TypeTraits{Type::BF16, "BF16", 1, sizeof(bf16_bits), false, false, ref::quantize_row_bf16, ref::dequantize_row_bf16},
    TypeTraits{Type::Q4_0, "Q4_0", kQK4_0, sizeof(block_q4_0), true, false, ref::quantize_row_q4_0, ref::dequantize_row_q4_0,
               ref::quantize_row_q4_0_w},
    TypeTraits{Type::Q4_1, "Q4_1", kQK4_1, sizeof(block_q4_1), true, false, ref::quantize_row_q4_1, ref::dequantize_row_q4_1,
               ref::quantize_row_q4_1_w},
    TypeTraits{Type::Q5_0, "Q5_0", kQK5_0, sizeof(block_q5_0), true, false, ref::quantize_row_q5_0, ref::dequantize_row_q5_0,
               ref::quantize_row_q5_0_w},
    TypeTraits{Type::Q5_1, "Q5_1", kQK5_1, sizeof(block_q5_1), true, false, ref::quantize_row_q5_1, ref::dequantize_row_q5_1,
               ref::quantize_row_q5_1_w},
    TypeTraits{Type::Q8_0, "Q8_0", kQK8_0, sizeof(block_q8_0), true, false, ref::quantize_row_q8_0, ref::dequantize_row_q8_0},
    TypeTraits{Type::Q8_1, "Q8_1", kQK8_1, sizeof(block_q8_1), true, true, ref::quantize_row_q8_1, ref::dequantize_row_q8_1},
    TypeTraits{Type::Q2_K, "Q2_K", kQK_K, sizeof(block_q2_K), true, false, ref::quantize_row_q2_K, ref::dequantize_row_q2_K,
               ref::quantize_row_q2_K_w},
    TypeTraits{Type::Q3_K, "Q3_K", kQK_K, sizeof(block_q3_K), true, false, ref::quantize_row_q3_K, ref::dequantize_row_q3_K,
               ref::quantize_row_q3_K_w},
    TypeTraits{Type::Q4_K, "Q4_K", kQK_K, sizeof(block_q4_K), true, false, ref::quantize_row_q4_K, ref::dequantize_row_q4_K,
               ref::quantize_row_q4_K_w},
    TypeTraits{Type::Q5_K, "Q5_K", kQK_K, sizeof(block_q5_K), true, false, ref::quantize_row_q5_K, ref::dequantize_row_q5_K,
               ref::quantize_row_q5_K_w},
    TypeTraits{Type::Q6_K, "Q6_K", kQK_K, sizeof(block_q6_K), true, false, ref::quantize_row_q6_K, ref::dequantize_row_q6_K,
               ref::quantize_row_q6_K_w},
    TypeTraits{Type::Q8_K, "Q8_K", kQK_K, sizeof(block_q8_K), true, true, ref::quantize_row_q8_K, ref::dequantize_row_q8_K},
    // The i-quants: made by importance-weighted searches; quantize_row is
    // the search without weights (unweighted<>, an Error for the types
    // ggml refuses to make without them).
    TypeTraits{Type::IQ2_XXS, "IQ2_XXS", kQK_K, sizeof(block_iq2_xxs), true, false, unweighted<ref::quantize_row_iq2_xxs_w>,
               ref::dequantize_row_iq2_xxs, ref::quantize_row_iq2_xxs_w, true},
    TypeTraits{Type::IQ2_XS, "IQ2_XS", kQK_K, sizeof(block_iq2_xs), true, false, unweighted<ref::quantize_row_iq2_xs_w>,
               ref::dequantize_row_iq2_xs, ref::quantize_row_iq2_xs_w, true},
    TypeTraits{Type::IQ2_S, "IQ2_S", kQK_K, sizeof(block_iq2_s), true, false, unweighted<ref::quantize_row_iq2_s_w>,
               ref::dequantize_row_iq2_s, ref::quantize_row_iq2_s_w},
    TypeTraits{Type::IQ3_XXS, "IQ3_XXS", kQK_K, sizeof(block_iq3_xxs), true, false, unweighted<ref::quantize_row_iq3_xxs_w>,
               ref::dequantize_row_iq3_xxs, ref::quantize_row_iq3_xxs_w},
    TypeTraits{Type::IQ3_S, "IQ3_S", kQK_K, sizeof(block_iq3_s), true, false, unweighted<ref::quantize_row_iq3_s_w>,
               ref::dequantize_row_iq3_s, ref::quantize_row_iq3_s_w},
    TypeTraits{Type::IQ1_S, "IQ1_S", kQK_K, sizeof(block_iq1_s), true, false, unweighted<ref::quantize_row_iq1_s_w>,
               ref::dequantize_row_iq1_s, ref::quantize_row_iq1_s_w, true},
    TypeTraits{Type::IQ1_M, "IQ1_M", kQK_K, sizeof(block_iq1_m), true, false, unweighted<ref::quantize_row_iq1_m_w>,
               ref::dequantize_row_iq1_m, ref::quantize_row_iq1_m_w},
    TypeTraits{Type::IQ4_NL, "IQ4_NL", kQK4_NL, sizeof(block_iq4_nl), true, false, unweighted<ref::quantize_row_iq4_nl_w>,
               ref::dequantize_row_iq4_nl, ref::quantize_row_iq4_nl_w},
    TypeTraits{Type::IQ4_XS, "IQ4_XS", kQK_K, sizeof(block_iq4_xs), true, false, unweighted<ref::quantize_row_iq4_xs_w>,
               ref::dequantize_row_iq4_xs, ref::quantize_row_iq4_xs_w},
    TypeTraits{Type::MXFP4, "MXFP4", kQK_MXFP4, sizeof(block_mxfp4), true, false, ref::quantize_row_mxfp4, ref::dequantize_row_mxfp4},
};


}  // namespace

const TypeTraits* find_traits(uint32_t type_id) {
    for (const auto& t : kTraits) {
        if (static_cast<uint32_t>(t.type) == type_id) return &t;
    }
    return nullptr;
}

const TypeTraits& traits(Type t) {
    const TypeTraits* found = find_traits(static_cast<uint32_t>(t));
    TANDEM_CHECK(found != nullptr, "Type value without a traits row");
    return *found;
}

std::optional<Type> type_from_name(std::string_view name) {
    for (const auto& t : kTraits) {
        if (iequals_ascii(t.name, name)) return t.type;
    }
    return std::nullopt;
}

std::span<const TypeTraits> all_traits() { return kTraits; }

std::optional<uint64_t> row_bytes(Type t, int64_t n) {
    const TypeTraits& tr = traits(t);
    if (n < 0 || n % tr.block_elems != 0) return std::nullopt;
    return static_cast<uint64_t>(n / tr.block_elems) * tr.block_bytes;
}

void quantize_row(Type t, const float* src, void* dst, int64_t n) {
    const TypeTraits& tr = traits(t);
    TANDEM_CHECK(n % tr.block_elems == 0, "quantize_row: length not a multiple of the block size");
    if (tr.quantize_row == nullptr) {
        throw Error("Tandem reads " + std::string(tr.name) + " but cannot quantize to it yet");
    }
    if (tr.needs_weights) {
        throw Error(std::string(tr.name) + " is made only with importance weights (an importance matrix); none were given");
    }
    tr.quantize_row(src, dst, n);
}

void quantize_row_weighted(Type t, const float* src, void* dst, int64_t n, const float* qw) {
    const TypeTraits& tr = traits(t);
    if (qw == nullptr || tr.quantize_weighted == nullptr) return quantize_row(t, src, dst, n);
    TANDEM_CHECK(n % tr.block_elems == 0, "quantize_row_weighted: length not a multiple of the block size");
    tr.quantize_weighted(src, dst, n, qw);
}

void dequantize_row(Type t, const void* src, float* dst, int64_t n) {
    const TypeTraits& tr = traits(t);
    TANDEM_CHECK(n % tr.block_elems == 0, "dequantize_row: length not a multiple of the block size");
    tr.dequantize_row(src, dst, n);
}

}  // namespace tandem::quant
