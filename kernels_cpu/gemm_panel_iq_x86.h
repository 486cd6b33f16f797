// The 256-element i-quants' blocks as their panel GEMMs take them
// (avx512/gemm_panel_iq_avx512.cpp, avx2/gemm_panel_iq_avx2.cpp). Those
// compute llama.cpp's tiled order (IqTiledOrder in
// runtime/quant/dot_order_iq.h), as the scalar batch kernels do: per row,
// token and block the exact integer
//   total = sum over groups g of 16 elements: mult(g) * sum_{k in g} code_k * a_k
// (code: the grid value with its sign, the IQ4_XS table value, or for
// IQ1_S/IQ1_M 8 * grid +- 1, the shift in the integers; mult: the integer
// sub-block multiplier), then v = float(total) * d_w' and
// acc = fma(d_a, v, acc), d_w' the block's fp16 scale times the type's
// factor (1/8 IQ2_* and IQ1_*, 1/4 IQ3_XXS, 1 IQ3_S and IQ4_XS).
//
// Here one row's block is decoded at a time, 32 elements a register: the
// 256 codes plus a bias (u = code + bias, so that the panels' u8 x s8
// products see unsigned weights; they take bias x the activation sums
// back off), the 16 multipliers (one per 16 elements, repeated where a type
// has one per 32) and d_w'. The fields are read as the element decoders
// of runtime/quant/quant_element_iq.h read them, so every integer is the
// reference's. kMaxCode bounds |code|, for the panels' overflow checks.
// Include only from files built with -mavx2 -mfma -mf16c (or more).
#pragma once

#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <cstdint>
#include <cstring>

#include "runtime/quant/dot_order.h"
#include "runtime/quant/iq_tables.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_element_iq.h"

namespace tandem::cpu::detail::iq_panel {
namespace {  // internal linkage: never merged with another ISA's copy

using namespace tandem::quant;

// ---- compile-time bounds of the codes ------------------------------------------------
template <class G, size_t N>
constexpr int grid_max(const G (&grid)[N], int bytes, bool signed_bytes) {
    int m = 0;
    for (size_t i = 0; i < N; ++i) {
        for (int j = 0; j < bytes; ++j) {
            int v = static_cast<int>((grid[i] >> (8 * j)) & 0xFFu);
            if (signed_bytes && v > 127) v -= 256;
            m = v < 0 ? (-v > m ? -v : m) : (v > m ? v : m);
        }
    }
    return m;
}
// Whether every byte of every grid entry is even (then so is every code).
template <class G, size_t N>
constexpr bool grid_all_even(const G (&grid)[N], int bytes) {
    for (size_t i = 0; i < N; ++i) {
        for (int j = 0; j < bytes; ++j) {
            if (((grid[i] >> (8 * j)) & 1u) != 0) return false;
        }
    }
    return true;
}
constexpr int table_max(const int8_t (&t)[16]) {
    int m = 0;
    for (int8_t v : t) m = (v < 0 ? -v : v) > m ? (v < 0 ? -v : v) : m;
    return m;
}

// ---- signs -------------------------------------------------------------------------------
// The 8 sign bits of four 7-bit sign sets: iq::signs_7x4 (iq_tables.h).
using iq::signs_7x4;

// Byte j of the result: 0xFF where bit j of bits is set, else 0 (byte j
// takes byte j / 8 of bits, tests its bit j % 8).
inline __m256i bit_mask32(uint32_t bits) {
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(bits)),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
    const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
    return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}
// Magnitudes (bytes <= 127) negated where bit j of neg is set: (m ^ s) - s.
inline __m256i with_signs(__m256i mag, uint32_t neg) {
    const __m256i s = bit_mask32(neg);
    return _mm256_sub_epi8(_mm256_xor_si256(mag, s), s);
}

// Four 8-byte grid rows, row i0 in bytes 0-7.
inline __m256i rows64(const uint64_t* grid, uint32_t i0, uint32_t i1, uint32_t i2, uint32_t i3) {
    return _mm256_set_epi64x(static_cast<int64_t>(grid[i3]), static_cast<int64_t>(grid[i2]), static_cast<int64_t>(grid[i1]),
                             static_cast<int64_t>(grid[i0]));
}
// Eight 4-byte grid rows, row idx[0] in bytes 0-3.
inline __m256i rows32(const uint32_t* grid, const uint32_t* idx) {
    return _mm256_set_epi32(static_cast<int>(grid[idx[7]]), static_cast<int>(grid[idx[6]]), static_cast<int>(grid[idx[5]]),
                            static_cast<int>(grid[idx[4]]), static_cast<int>(grid[idx[3]]), static_cast<int>(grid[idx[2]]),
                            static_cast<int>(grid[idx[1]]), static_cast<int>(grid[idx[0]]));
}

// IQ1: the signed grid bytes (-1, 0, 1) times 8 plus the shifts (+1 or -1
// bytes): 8 * grid +- 1. The 16-bit shift carries bits into the next byte
// only below the mask.
inline __m256i iq1_codes(__m256i grid, __m256i shift) {
    return _mm256_add_epi8(_mm256_and_si256(_mm256_slli_epi16(grid, 3), _mm256_set1_epi8(static_cast<char>(0xF8))), shift);
}

// ---- the decoders: chunk(b, c, mult) gives elements 32c .. 32c + 31 as
// signed bytes and sets mult[2c], mult[2c + 1] (elements 32c + 16 ..);
// kMultPer32: the two are always equal (one multiplier a chunk) ----------------------
struct Iq2xxsDec {
    using Block = block_iq2_xxs;
    static constexpr Type kType = Type::IQ2_XXS;
    static constexpr int kMaxCode = grid_max(iq::kIq2xxsGrid, 8, false);
    static constexpr bool kMultPer32 = true;
    static __m256i chunk(const Block& b, int c, int32_t* mult) {
        // qs[4c..4c+3] as bytes: four grid indices, then four sign sets and the scale.
        uint8_t q[8];
        std::memcpy(q, b.qs + 4 * c, 8);
        uint32_t aux;
        std::memcpy(&aux, q + 4, 4);
        mult[2 * c] = mult[2 * c + 1] = 2 * static_cast<int32_t>(aux >> 28) + 1;
        return with_signs(rows64(iq::kIq2xxsGrid, q[0], q[1], q[2], q[3]), signs_7x4(aux));
    }
};

struct Iq2xsDec {
    using Block = block_iq2_xs;
    static constexpr Type kType = Type::IQ2_XS;
    static constexpr int kMaxCode = grid_max(iq::kIq2xsGrid, 8, false);
    static constexpr bool kMultPer32 = false;
    static __m256i chunk(const Block& b, int c, int32_t* mult) {
        const uint16_t* q = b.qs + 4 * c;  // 9-bit index, 7 sign bits
        mult[2 * c] = 2 * (b.scales[c] & 15) + 1;
        mult[2 * c + 1] = 2 * (b.scales[c] >> 4) + 1;
        const uint32_t neg = static_cast<uint32_t>(iq::kSigns8.v[q[0] >> 9]) | static_cast<uint32_t>(iq::kSigns8.v[q[1] >> 9]) << 8 |
                             static_cast<uint32_t>(iq::kSigns8.v[q[2] >> 9]) << 16 | static_cast<uint32_t>(iq::kSigns8.v[q[3] >> 9]) << 24;
        return with_signs(rows64(iq::kIq2xsGrid, q[0] & 511u, q[1] & 511u, q[2] & 511u, q[3] & 511u), neg);
    }
};

struct Iq2sDec {
    using Block = block_iq2_s;
    static constexpr Type kType = Type::IQ2_S;
    static constexpr int kMaxCode = grid_max(iq::kIq2sGrid, 8, false);
    static constexpr bool kMultPer32 = false;
    static __m256i chunk(const Block& b, int c, int32_t* mult) {
        const uint8_t* q = b.qs + 4 * c;
        const uint32_t h = b.qh[c];  // two high index bits a group
        mult[2 * c] = 2 * (b.scales[c] & 15) + 1;
        mult[2 * c + 1] = 2 * (b.scales[c] >> 4) + 1;
        uint32_t neg;
        std::memcpy(&neg, b.qs + kQK_K / 8 + 4 * c, 4);
        return with_signs(rows64(iq::kIq2sGrid, q[0] | ((h << 8) & 0x300u), q[1] | ((h << 6) & 0x300u), q[2] | ((h << 4) & 0x300u),
                                 q[3] | ((h << 2) & 0x300u)),
                          neg);
    }
};

struct Iq3xxsDec {
    using Block = block_iq3_xxs;
    static constexpr Type kType = Type::IQ3_XXS;
    static constexpr int kMaxCode = grid_max(iq::kIq3xxsGrid, 4, false);
    static constexpr bool kMultPer32 = true;
    static constexpr bool kEvenCodes = grid_all_even(iq::kIq3xxsGrid, 4);  // 4, 12, .., 52, 62
    static __m256i chunk(const Block& b, int c, int32_t* mult) {
        uint32_t idx[8], aux;
        for (int j = 0; j < 8; ++j) idx[j] = b.qs[8 * c + j];
        std::memcpy(&aux, b.qs + kQK_K / 4 + 4 * c, 4);
        mult[2 * c] = mult[2 * c + 1] = 2 * static_cast<int32_t>(aux >> 28) + 1;
        return with_signs(rows32(iq::kIq3xxsGrid, idx), signs_7x4(aux));
    }
};

struct Iq3sDec {
    using Block = block_iq3_s;
    static constexpr Type kType = Type::IQ3_S;
    static constexpr int kMaxCode = grid_max(iq::kIq3sGrid, 4, false);
    static constexpr bool kMultPer32 = true;
    static __m256i chunk(const Block& b, int c, int32_t* mult) {
        uint32_t idx[8], neg;
        const uint32_t h = b.qh[c];  // the ninth index bit of each row
        for (int j = 0; j < 8; ++j) idx[j] = b.qs[8 * c + j] | ((h >> j) & 1u) << 8;
        std::memcpy(&neg, b.signs + 4 * c, 4);
        mult[2 * c] = mult[2 * c + 1] = 1 + 2 * ((b.scales[c / 2] >> (4 * (c % 2))) & 15);
        return with_signs(rows32(iq::kIq3sGrid, idx), neg);
    }
};

struct Iq1sDec {
    using Block = block_iq1_s;
    static constexpr Type kType = Type::IQ1_S;
    static constexpr int kMaxCode = 8 * grid_max(iq::kIq1sGrid, 8, true) + 1;
    static constexpr bool kMultPer32 = true;
    static __m256i chunk(const Block& b, int c, int32_t* mult) {
        const uint8_t* q = b.qs + 4 * c;
        const uint32_t h = b.qh[c];  // 3 index bits a group, the scale, the shift's sign
        mult[2 * c] = mult[2 * c + 1] = 2 * static_cast<int32_t>((h >> 12) & 7) + 1;
        const __m256i grid = rows64(iq::kIq1sGrid, q[0] | (h & 7) << 8, q[1] | ((h >> 3) & 7) << 8, q[2] | ((h >> 6) & 7) << 8,
                                    q[3] | ((h >> 9) & 7) << 8);
        return iq1_codes(grid, _mm256_set1_epi8((h & 0x8000u) != 0 ? -1 : 1));
    }
};

struct Iq1mDec {
    using Block = block_iq1_m;
    static constexpr Type kType = Type::IQ1_M;
    static constexpr int kMaxCode = 8 * grid_max(iq::kIq1sGrid, 8, true) + 1;
    static constexpr bool kMultPer32 = false;
    static __m256i chunk(const Block& b, int c, int32_t* mult) {
        const uint8_t* q = b.qs + 4 * c;
        const uint32_t h0 = b.qh[2 * c], h1 = b.qh[2 * c + 1];  // a nibble a group: 3 index bits, the shift's sign
        const uint32_t sc = iq::load16(b.scales + 2 * (c / 2)) >> (6 * (c % 2));
        mult[2 * c] = 2 * static_cast<int32_t>(sc & 7) + 1;
        mult[2 * c + 1] = 2 * static_cast<int32_t>((sc >> 3) & 7) + 1;
        const __m256i grid = rows64(iq::kIq1sGrid, q[0] | (h0 & 7) << 8, q[1] | ((h0 >> 4) & 7) << 8, q[2] | (h1 & 7) << 8,
                                    q[3] | ((h1 >> 4) & 7) << 8);
        const auto shift = [](uint32_t negative) {
            return negative != 0 ? int64_t{-1} : int64_t{0x0101010101010101};
        };
        return iq1_codes(grid, _mm256_set_epi64x(shift(h1 & 0x80), shift(h1 & 0x08), shift(h0 & 0x80), shift(h0 & 0x08)));
    }
};

struct Iq4xsDec {
    using Block = block_iq4_xs;
    static constexpr Type kType = Type::IQ4_XS;
    static constexpr int kMaxCode = table_max(iq::kIq4nlValues);
    static constexpr bool kMultPer32 = true;
    static __m256i chunk(const Block& b, int c, int32_t* mult) {
        mult[2 * c] = mult[2 * c + 1] = iq::Iq4xs::chunk_mult(b, c);
        // Low nibbles are elements 0-15, high ones 16-31; pshufb looks them up.
        const __m256i table = _mm256_broadcastsi128_si256(load128(iq::kIq4nlValues));
        const __m128i bits = load128(b.qs + 16 * c);
        const __m256i nib = _mm256_and_si256(
            _mm256_inserti128_si256(_mm256_castsi128_si256(bits), _mm_srli_epi16(bits, 4), 1), _mm256_set1_epi8(0x0F));
        return _mm256_shuffle_epi8(table, nib);
    }
};

// d_w' of a block, by the reference's own float steps (IqTiledOrder:
// IqLanesOrder's weight scale times factor()).
template <class O>
struct TiledArg;
template <class T>
struct TiledArg<dot::IqTiledOrder<T>> {
    using type = T;
};
template <class Dec>
float block_dw(const typename Dec::Block& b) {
    using O = typename dot::OrderOf<Dec::kType, dot::Form::Batch>::type;
    static_assert(std::is_same_v<typename O::WBlock, typename Dec::Block>, "decoder and order of different types");
    return dot::IqLanesOrder<typename TiledArg<O>::type>::weight_scale(b) * O::factor();
}

// Block b of one row: out[k] = code_k + bias (bytes, mod 256), mult[g]
// the multiplier of elements 16g .. 16g + 15.
template <class Dec>
inline void decode(const typename Dec::Block& b, __m256i bias, uint8_t* out, int32_t* mult) {
    for (int c = 0; c < kQK_K / 32; ++c) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * c), _mm256_add_epi8(Dec::chunk(b, c, mult), bias));
    }
}

static_assert(Iq2xxsDec::kMaxCode == 43 && Iq2xsDec::kMaxCode == 43 && Iq2sDec::kMaxCode == 43, "IQ2 grids: 8, 25, 43");
static_assert(Iq3xxsDec::kMaxCode == 62 && Iq3xxsDec::kEvenCodes && Iq3sDec::kMaxCode == 15, "IQ3 grids: even up to 62, odd up to 15");
static_assert(Iq1sDec::kMaxCode == 9 && Iq1mDec::kMaxCode == 9 && Iq4xsDec::kMaxCode == 127, "IQ1: 8 grid +- 1");

}  // namespace
}  // namespace tandem::cpu::detail::iq_panel
