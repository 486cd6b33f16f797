// The 32-element legacy blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL,
// MXFP4) as AVX2 sees them, for the dot kernels (vec_dot_avx2.cpp) and the
// attention's eight-query scores (attention_decode_avx2.cpp): per type,
// Unpack(block) gives the 32 weight codes in element order as bytes,
// signed (the offset already subtracted) or unsigned (Q4_1, Q5_1, whose
// minimum is added separately through the activation sum); kBlockTotal
// says whether llama.cpp adds each block's integer total with one fused
// multiply-add (Q4_0Order, BlockTotalOrder in dot_order.h) or keeps eight
// lanes of float chains. Only files built with AVX2 flags include it.
#pragma once

#include <type_traits>

#include "kernels_cpu/simd_x86.h"
#include "runtime/quant/fp16.h"
#include "runtime/quant/iq_tables.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail::legacy_avx2 {
namespace {

// 32 nibbles in element order: low nibbles are elements 0..15, high
// nibbles 16..31, so one shift and one mask split the 16 bytes.
inline __m256i nibbles32(const uint8_t* qs) {
    const __m128i b = load128(qs);
    const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(b), _mm_srli_epi16(b, 4), 1);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Byte j = 0xFF where bit j of the 32-bit qh is set: broadcast byte j/8 of
// qh into byte j, then test bit j%8 with a per-byte mask.
inline __m256i bits32(const uint8_t* qh) {
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(load_u32(qh))),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
    const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
    return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// IQ4_NL and MXFP4: the codes a 16-entry table of the nibbles.
template <class Block, const int8_t* kTable>
inline __m256i table_codes(const Block& b) {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(load128(kTable)), nibbles32(b.qs));
}

struct UQ4_0 {
    using W = quant::block_q4_0;
    using A = quant::block_q8_0;
    static constexpr bool kSigned = true;
    // llama.cpp repacks Q4_0 and adds each block's integer total with one
    // fused multiply-add (Q4_0Order in dot_order.h).
    static constexpr bool kBlockTotal = true;
    static __m256i unpack(const W& b) { return _mm256_sub_epi8(nibbles32(b.qs), _mm256_set1_epi8(8)); }
    static float weight_scale(const W& b) { return f16(b.d); }
};
// IQ4_NL and MXFP4: llama.cpp repacks them as Q4_0 (BlockTotalOrder).
struct UIQ4_NL {
    using W = quant::block_iq4_nl;
    using A = quant::block_q8_0;
    static constexpr bool kSigned = true;
    static constexpr bool kBlockTotal = true;
    static __m256i unpack(const W& b) { return table_codes<W, quant::iq::kIq4nlValues>(b); }
    static float weight_scale(const W& b) { return f16(b.d); }
};
struct UMXFP4 {
    using W = quant::block_mxfp4;
    using A = quant::block_q8_0;
    static constexpr bool kSigned = true;
    static constexpr bool kBlockTotal = true;
    static __m256i unpack(const W& b) { return table_codes<W, quant::iq::kMxfp4Values>(b); }
    static float weight_scale(const W& b) { return quant::iq::e8m0_half(b.e); }
};
struct UQ4_1 {
    using W = quant::block_q4_1;
    using A = quant::block_q8_1;
    static constexpr bool kSigned = false;
    static constexpr bool kBlockTotal = false;
    static __m256i unpack(const W& b) { return nibbles32(b.qs); }
};
struct UQ5_0 {
    using W = quant::block_q5_0;
    using A = quant::block_q8_0;
    static constexpr bool kSigned = true;
    static constexpr bool kBlockTotal = false;
    // q - 16 as int8 without a subtraction: where the fifth bit is clear the
    // code is nibble - 16 = nibble | 0xF0 in two's complement.
    static __m256i unpack(const W& b) {
        return _mm256_or_si256(nibbles32(b.qs), _mm256_andnot_si256(bits32(b.qh), _mm256_set1_epi8(static_cast<char>(0xF0))));
    }
};
struct UQ5_1 {
    using W = quant::block_q5_1;
    using A = quant::block_q8_1;
    static constexpr bool kSigned = false;
    static constexpr bool kBlockTotal = false;
    static __m256i unpack(const W& b) {
        return _mm256_or_si256(nibbles32(b.qs), _mm256_and_si256(bits32(b.qh), _mm256_set1_epi8(0x10)));
    }
};
struct UQ8_0 {
    using W = quant::block_q8_0;
    using A = quant::block_q8_0;
    static constexpr bool kSigned = true;
    static constexpr bool kBlockTotal = false;
    static __m256i unpack(const W& b) { return load256(b.qs); }
};

// Whether a type's activation partner carries a sum (Q8_1), which the
// weight block's minimum multiplies.
template <class U>
inline constexpr bool kHasMin = std::is_same_v<typename U::A, quant::block_q8_1>;

// The integer sums of a block's code x activation products, four elements
// a lane: maddubs multiplies unsigned by signed bytes, so for signed codes
// the sign moves onto the activation (|w| * sign(w)y). qu: the codes'
// magnitudes (abs_codes).
template <class U>
inline __m256i abs_codes(__m256i q) {
    return U::kSigned ? _mm256_sign_epi8(q, q) : q;
}
template <class U>
inline __m256i block_sums(__m256i q, __m256i qu, const void* act_qs) {
    __m256i act = load256(act_qs);
    if constexpr (U::kSigned) act = _mm256_sign_epi8(act, q);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(qu, act), _mm256_set1_epi16(1));
}

}  // namespace
}  // namespace tandem::cpu::detail::legacy_avx2
