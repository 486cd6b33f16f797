// The 32-element formats of sixteen 4-bit codes and one scale a block that
// llama.cpp multiplies in one float order, one integer total a block and
// acc = fma(total, d_w * d_a, acc) (Q4_0Order, BlockTotalOrder in
// runtime/quant/dot_order*.h): Q4_0, IQ4_NL and MXFP4 (llama.cpp repacks
// all three into the same interleaved blocks). Their panels and decode-rows
// kernels are Q4_0's, parameterized by this: a code's value as the
// unsigned byte u = value + kOffset (the vpmaddubsw/vpdpbusd operand that
// must be unsigned), the offset taken back off as -kOffset times the
// activation block's sum, and the block's scale d_w as a float.
//
// Q4_0's u is the nibble itself (kLookup false); IQ4_NL's and MXFP4's come
// from the 16-entry table kUnsigned, one pshufb of the nibbles. kMaxU bounds
// u for the kernels' int16 overflow checks. Include only from files built
// with -mavx2 -mfma -mf16c (or more).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels_cpu/simd_x86.h"
#include "runtime/quant/iq_tables.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_types.h"

namespace tandem::cpu::detail {
namespace {  // internal linkage: never merged with another ISA's copy

// table[q] + offset, as unsigned bytes.
constexpr std::array<uint8_t, 16> biased(const int8_t (&table)[16], int offset) {
    std::array<uint8_t, 16> u{};
    for (int q = 0; q < 16; ++q) u[q] = static_cast<uint8_t>(table[q] + offset);
    return u;
}
constexpr int max_of(const std::array<uint8_t, 16>& u) {
    int m = 0;
    for (uint8_t v : u) m = v > m ? v : m;
    return m;
}

template <class Block>
struct NibbleFormat;

template <>
struct NibbleFormat<quant::block_q4_0> {
    static constexpr int kOffset = 8;
    static constexpr bool kLookup = false;
    static constexpr int kMaxU = 15;
    static constexpr size_t kQs = offsetof(quant::block_q4_0, qs);
    static constexpr bool kHalfScale = true;  // d: the fp16 at offset 0
    static float scale(const quant::block_q4_0& b) { return f16(b.d); }
};

// IQ4_NL: values -127 .. 113, u in [1, 241].
template <>
struct NibbleFormat<quant::block_iq4_nl> {
    static constexpr int kOffset = 128;
    static constexpr bool kLookup = true;
    static constexpr std::array<uint8_t, 16> kUnsigned = biased(quant::iq::kIq4nlValues, kOffset);
    static constexpr int kMaxU = max_of(kUnsigned);
    static constexpr size_t kQs = offsetof(quant::block_iq4_nl, qs);
    static constexpr bool kHalfScale = true;
    static float scale(const quant::block_iq4_nl& b) { return f16(b.d); }
};

// MXFP4: values -12 .. 12 (twice the FP4 values; the E8M0 scale holds the
// half), u in [0, 24].
template <>
struct NibbleFormat<quant::block_mxfp4> {
    static constexpr int kOffset = 12;
    static constexpr bool kLookup = true;
    static constexpr std::array<uint8_t, 16> kUnsigned = biased(quant::iq::kMxfp4Values, kOffset);
    static constexpr int kMaxU = max_of(kUnsigned);
    static constexpr size_t kQs = offsetof(quant::block_mxfp4, qs);
    static constexpr bool kHalfScale = false;  // d: E8M0, one byte
    static float scale(const quant::block_mxfp4& b) { return quant::iq::e8m0_half(b.e); }
};

static_assert(NibbleFormat<quant::block_iq4_nl>::kMaxU == 241 && NibbleFormat<quant::block_mxfp4>::kMaxU == 24,
              "IQ4_NL: 113 + 128, MXFP4: 12 + 12");

// The 16 bytes of kUnsigned (Q4_0: the nibbles 0 .. 15), for pshufb.
template <class Block>
inline __m128i nibble_table() {
    if constexpr (NibbleFormat<Block>::kLookup) {
        return _mm_loadu_si128(reinterpret_cast<const __m128i*>(NibbleFormat<Block>::kUnsigned.data()));
    } else {
        return _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    }
}

// The start of each block's integer total in the panels: -kOffset x the
// sum of the activation block's 32 signed bytes (the sum of byte + 128 by
// vpsadbw, less 32 x 128), one int32 a block appended to a Q8_0 row of
// n_cols (gemm_panel.h: kQ4_0PanelExtraBytes), as the AVX-512 panels read
// them; the AVX2 panels' prepare spreads them to 8 bytes a block, each
// beside the block's d as a float (avx2/gemm_panel_legacy_avx2.cpp).
template <class Block>
void write_block_starts(quant::Type a_type, void* row, int64_t n_cols) {
    TANDEM_CHECK(a_type == quant::Type::Q8_0, "4-bit panel: activations not Q8_0");
    const int64_t nb = n_cols / 32;
    const auto* blocks = static_cast<const quant::block_q8_0*>(row);
    auto* out = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(row) + sizeof(quant::block_q8_0) * static_cast<size_t>(nb));
    for (int64_t i = 0; i < nb; ++i) {
        const __m256i q = _mm256_xor_si256(load256(blocks[i].qs), _mm256_set1_epi8(static_cast<char>(0x80)));
        const __m256i s = _mm256_sad_epu8(q, _mm256_setzero_si256());
        const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        const int32_t sum = static_cast<int32_t>(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 32 * 128;
        const int32_t start = -NibbleFormat<Block>::kOffset * sum;
        std::memcpy(out + i, &start, sizeof start);
    }
}

}  // namespace
}  // namespace tandem::cpu::detail
