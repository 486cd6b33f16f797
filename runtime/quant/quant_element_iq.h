// The i-quants and MXFP4, one element at a time, for the host and the
// device: each type's decoder gives element k's integer code (grid value
// times sign, or table value), the integer multiplier of its sub-block
// scale as the dot products apply it, and its float value as the format
// defines it (ggml's dequantize_row_*: the same float operations in the
// same order, so the same bits). The scalar dequantize_row of each type
// (quant_ref_iq.cpp), the CUDA dequantize kernel and the dot orders
// (dot_order_iq.h) all read these.
//
// Layout words: a 256-element block is 8 chunks of 32 (c = k / 32), each
// 4 groups of 8 (g = k % 32 / 8), j = k % 8 the weight in its group.
#pragma once

#include <cstdint>

#include "runtime/quant/iq_tables.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_element.h"

namespace tandem::quant::iq {

TANDEM_HOST_DEVICE int signed_if(bool negative, int v) { return negative ? -v : v; }
TANDEM_HOST_DEVICE float signed_if(bool negative, float v) { return negative ? -v : v; }
// Little-endian fields at even offsets of a block. Every i-quant block is
// an even number of bytes and device rows start aligned, so on the device
// such a field is one 16-bit load (two for a word) instead of a load a
// byte; the host reads bytes.
TANDEM_HOST_DEVICE uint32_t load16(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
    return *reinterpret_cast<const uint16_t*>(p);
#else
    return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8;
#endif
}
TANDEM_HOST_DEVICE uint32_t load32_a2(const uint8_t* p) { return load16(p) | load16(p + 2) << 16; }

// Four magnitudes (bytes of mag, each 1..255) negated where the matching
// bit of neg4 is set, as signed bytes: ~m + 1 per byte, which never
// carries into the next byte because no magnitude is 0.
TANDEM_HOST_DEVICE uint32_t apply_signs4(uint32_t mag, uint32_t neg4) {
    const uint32_t ones = (neg4 * 0x00204081u) & 0x01010101u;  // bit j -> byte j
    return (mag ^ (ones * 0xFFu)) + ones;
}

// The grid types (all but IQ4_NL, IQ4_XS, MXFP4) share one shape: element
// k lies in the grid row row_index(b, k0), k0 = k rounded down to a
// multiple of kRowElems (8; 4 for the IQ3 types), at byte k - k0; kSigned
// types negate it where bit k % 8 of signs8(b, k rounded down to 8) is set
// (the IQ1 grid holds signed bytes). grid_codes4 and grid_codes8 read the
// rows from `grid`: the decoder's grid(), or a copy of it (the CUDA
// kernel's, in shared memory).
template <class D>
TANDEM_HOST_DEVICE int grid_element(const typename D::Block& b, int k) {
    return grid_byte(D::grid()[D::row_index(b, k - k % D::kRowElems)], k % D::kRowElems);
}
template <class D>
TANDEM_HOST_DEVICE bool grid_negative(const typename D::Block& b, int k) {
    return (D::signs8(b, k - k % 8) >> (k % 8)) & 1u;
}
// Elements k..k+3 (k a multiple of 4) as signed bytes.
template <class D>
TANDEM_HOST_DEVICE uint32_t grid_codes4(const typename D::Block& b, int k, const typename D::GridRow* grid) {
    uint32_t mag = 0;
    if constexpr (D::kRowElems == 8) {
        mag = static_cast<uint32_t>(grid[D::row_index(b, k - k % 8)] >> (8 * (k % 8)));
    } else {
        mag = grid[D::row_index(b, k)];
    }
    if constexpr (D::kSigned) return apply_signs4(mag, (D::signs8(b, k - k % 8) >> (k % 8)) & 0xFu);
    return mag;
}
// Elements k..k+7 (k a multiple of 8): its row (or two) and its sign set
// read once.
struct Codes8 {
    uint32_t lo, hi;  // elements k..k+3, k+4..k+7
};
template <class D>
TANDEM_HOST_DEVICE Codes8 grid_codes8(const typename D::Block& b, int k, const typename D::GridRow* grid) {
    Codes8 c{};
    if constexpr (D::kRowElems == 8) {
        const uint64_t row = grid[D::row_index(b, k)];
        c = {static_cast<uint32_t>(row), static_cast<uint32_t>(row >> 32)};
    } else {
        c = {grid[D::row_index(b, k)], grid[D::row_index(b, k + 4)]};
    }
    if constexpr (D::kSigned) {
        const uint32_t s = D::signs8(b, k);
        c = {apply_signs4(c.lo, s & 0xFu), apply_signs4(c.hi, s >> 4)};
    }
    return c;
}

// x = d * (0.5 + s) / 4 * grid * sign; dot multiplier 2 s + 1 (the 1/8 at the end).
struct Iq2xxs {
    using Block = block_iq2_xxs;
    using GridRow = uint64_t;
    static constexpr int kGridRows = 256, kRowElems = 8;
    static constexpr bool kSigned = true;
    TANDEM_HOST_DEVICE static const GridRow* grid() { return iq2xxs_grid(); }
    TANDEM_HOST_DEVICE static uint32_t word(const Block& b, int c, int w) {
        return static_cast<uint32_t>(b.qs[4 * c + 2 * w]) | static_cast<uint32_t>(b.qs[4 * c + 2 * w + 1]) << 16;
    }
    TANDEM_HOST_DEVICE static int scale_bits(const Block& b, int k) { return static_cast<int>(word(b, k / 32, 1) >> 28); }
    TANDEM_HOST_DEVICE static int row_index(const Block& b, int k) {
        return static_cast<int>((word(b, k / 32, 0) >> (8 * (k % 32 / 8))) & 0xFFu);
    }
    TANDEM_HOST_DEVICE static uint32_t signs8(const Block& b, int k) {
        return signs_of7((word(b, k / 32, 1) >> (7 * (k % 32 / 8))) & 127u);
    }
    TANDEM_HOST_DEVICE static int magnitude(const Block& b, int k) { return grid_element<Iq2xxs>(b, k); }
    TANDEM_HOST_DEVICE static bool negative(const Block& b, int k) { return grid_negative<Iq2xxs>(b, k); }
    TANDEM_HOST_DEVICE static int code(const Block& b, int k) { return signed_if(negative(b, k), magnitude(b, k)); }
    TANDEM_HOST_DEVICE static int mult(const Block& b, int k) { return 2 * scale_bits(b, k) + 1; }
    TANDEM_HOST_DEVICE static float value(const Block& b, int k) {
        const float db = element::half_to_float(b.d) * (0.5f + static_cast<float>(scale_bits(b, k))) * 0.25f;
        return signed_if(negative(b, k), db * static_cast<float>(magnitude(b, k)));
    }
};

// qs[k / 8]: 9-bit index and 7 sign bits; a 4-bit scale per 16.
struct Iq2xs {
    using Block = block_iq2_xs;
    using GridRow = uint64_t;
    static constexpr int kGridRows = 512, kRowElems = 8;
    static constexpr bool kSigned = true;
    TANDEM_HOST_DEVICE static const GridRow* grid() { return iq2xs_grid(); }
    TANDEM_HOST_DEVICE static int scale_bits(const Block& b, int k) { return (b.scales[k / 32] >> (4 * (k % 32 / 16))) & 0xF; }
    TANDEM_HOST_DEVICE static int row_index(const Block& b, int k) { return b.qs[k / 8] & 511; }
    TANDEM_HOST_DEVICE static uint32_t signs8(const Block& b, int k) { return signs_of7(b.qs[k / 8] >> 9); }
    TANDEM_HOST_DEVICE static int magnitude(const Block& b, int k) { return grid_element<Iq2xs>(b, k); }
    TANDEM_HOST_DEVICE static bool negative(const Block& b, int k) { return grid_negative<Iq2xs>(b, k); }
    TANDEM_HOST_DEVICE static int code(const Block& b, int k) { return signed_if(negative(b, k), magnitude(b, k)); }
    TANDEM_HOST_DEVICE static int mult(const Block& b, int k) { return 2 * scale_bits(b, k) + 1; }
    TANDEM_HOST_DEVICE static float value(const Block& b, int k) {
        const float db = element::half_to_float(b.d) * (0.5f + static_cast<float>(scale_bits(b, k))) * 0.25f;
        return signed_if(negative(b, k), db * static_cast<float>(magnitude(b, k)));
    }
};

// 10-bit index (top 2 bits in qh), 8 stored sign bits, a 4-bit scale per 16.
struct Iq2s {
    using Block = block_iq2_s;
    using GridRow = uint64_t;
    static constexpr int kGridRows = 1024, kRowElems = 8;
    static constexpr bool kSigned = true;
    TANDEM_HOST_DEVICE static const GridRow* grid() { return iq2s_grid(); }
    TANDEM_HOST_DEVICE static int scale_bits(const Block& b, int k) { return (b.scales[k / 32] >> (4 * (k % 32 / 16))) & 0xF; }
    TANDEM_HOST_DEVICE static int row_index(const Block& b, int k) {
        const int g = k % 32 / 8;
        return b.qs[k / 8] | ((b.qh[k / 32] << (8 - 2 * g)) & 0x300);
    }
    TANDEM_HOST_DEVICE static uint32_t signs8(const Block& b, int k) { return b.qs[kQK_K / 8 + k / 8]; }
    TANDEM_HOST_DEVICE static int magnitude(const Block& b, int k) { return grid_element<Iq2s>(b, k); }
    TANDEM_HOST_DEVICE static bool negative(const Block& b, int k) { return grid_negative<Iq2s>(b, k); }
    TANDEM_HOST_DEVICE static int code(const Block& b, int k) { return signed_if(negative(b, k), magnitude(b, k)); }
    TANDEM_HOST_DEVICE static int mult(const Block& b, int k) { return 2 * scale_bits(b, k) + 1; }
    TANDEM_HOST_DEVICE static float value(const Block& b, int k) {
        const float db = element::half_to_float(b.d) * (0.5f + static_cast<float>(scale_bits(b, k))) * 0.25f;
        return signed_if(negative(b, k), db * static_cast<float>(magnitude(b, k)));
    }
};

// Two 4-weight grid rows a group; per chunk a word of four 7-bit sign sets
// and the 4-bit scale: x = d * (0.5 + s) / 2 * grid * sign (1/4 at the end of a dot).
struct Iq3xxs {
    using Block = block_iq3_xxs;
    using GridRow = uint32_t;
    static constexpr int kGridRows = 256, kRowElems = 4;
    static constexpr bool kSigned = true;
    TANDEM_HOST_DEVICE static const GridRow* grid() { return iq3xxs_grid(); }
    TANDEM_HOST_DEVICE static uint32_t word(const Block& b, int k) {
        return load32_a2(b.qs + kQK_K / 4 + 4 * (k / 32));
    }
    TANDEM_HOST_DEVICE static int scale_bits(const Block& b, int k) { return static_cast<int>(word(b, k) >> 28); }
    TANDEM_HOST_DEVICE static int row_index(const Block& b, int k) { return b.qs[k / 4]; }  // group g: rows 2g, 2g + 1
    TANDEM_HOST_DEVICE static uint32_t signs8(const Block& b, int k) {
        return signs_of7((word(b, k) >> (7 * (k % 32 / 8))) & 127u);
    }
    TANDEM_HOST_DEVICE static int magnitude(const Block& b, int k) { return grid_element<Iq3xxs>(b, k); }
    TANDEM_HOST_DEVICE static bool negative(const Block& b, int k) { return grid_negative<Iq3xxs>(b, k); }
    TANDEM_HOST_DEVICE static int code(const Block& b, int k) { return signed_if(negative(b, k), magnitude(b, k)); }
    TANDEM_HOST_DEVICE static int mult(const Block& b, int k) { return 2 * scale_bits(b, k) + 1; }
    TANDEM_HOST_DEVICE static float value(const Block& b, int k) {
        const float db = element::half_to_float(b.d) * (0.5f + static_cast<float>(scale_bits(b, k))) * 0.5f;
        return signed_if(negative(b, k), db * static_cast<float>(magnitude(b, k)));
    }
};

// 9-bit index per 4 weights (bit 8 in qh), 8 sign bits a group, a 4-bit
// scale per chunk: x = d * (1 + 2 s) * grid * sign.
struct Iq3s {
    using Block = block_iq3_s;
    using GridRow = uint32_t;
    static constexpr int kGridRows = 512, kRowElems = 4;
    static constexpr bool kSigned = true;
    TANDEM_HOST_DEVICE static const GridRow* grid() { return iq3s_grid(); }
    TANDEM_HOST_DEVICE static int scale_bits(const Block& b, int k) { return (b.scales[k / 64] >> (4 * (k / 32 % 2))) & 0xF; }
    TANDEM_HOST_DEVICE static int row_index(const Block& b, int k) {
        const int q = k / 4;  // the 4-weight row of the block, 8 a chunk
        return b.qs[q] | (((b.qh[k / 32] >> (q % 8)) & 1) << 8);
    }
    TANDEM_HOST_DEVICE static uint32_t signs8(const Block& b, int k) { return b.signs[k / 8]; }
    TANDEM_HOST_DEVICE static int magnitude(const Block& b, int k) { return grid_element<Iq3s>(b, k); }
    TANDEM_HOST_DEVICE static bool negative(const Block& b, int k) { return grid_negative<Iq3s>(b, k); }
    TANDEM_HOST_DEVICE static int code(const Block& b, int k) { return signed_if(negative(b, k), magnitude(b, k)); }
    TANDEM_HOST_DEVICE static int mult(const Block& b, int k) { return 1 + 2 * scale_bits(b, k); }
    TANDEM_HOST_DEVICE static float value(const Block& b, int k) {
        const float db = element::half_to_float(b.d) * static_cast<float>(mult(b, k));
        return signed_if(negative(b, k), db * static_cast<float>(magnitude(b, k)));
    }
};

// 11-bit index into the -1/0/1 grid; qh[c]: 3 index bits a group, the
// chunk's 3-bit scale (bits 12-14) and its shift's sign (bit 15):
// x = d * (2 s + 1) * (grid +- 1/8).
struct Iq1s {
    using Block = block_iq1_s;
    using GridRow = uint64_t;
    static constexpr int kGridRows = 2048, kRowElems = 8;
    static constexpr bool kSigned = false;
    TANDEM_HOST_DEVICE static const GridRow* grid() { return iq1s_grid(); }
    TANDEM_HOST_DEVICE static int scale_bits(const Block& b, int k) { return (b.qh[k / 32] >> 12) & 7; }
    TANDEM_HOST_DEVICE static int row_index(const Block& b, int k) {
        const int g = k % 32 / 8;
        return b.qs[k / 8] | (((b.qh[k / 32] >> (3 * g)) & 7) << 8);
    }
    TANDEM_HOST_DEVICE static int code(const Block& b, int k) { return static_cast<int8_t>(grid_element<Iq1s>(b, k)); }
    TANDEM_HOST_DEVICE static int mult(const Block& b, int k) { return 2 * scale_bits(b, k) + 1; }
    TANDEM_HOST_DEVICE static bool shift_negative(const Block& b, int k) { return (b.qh[k / 32] & 0x8000) != 0; }
    // The code with its shift as an integer: 8 * grid +- 1 (the value times 8).
    TANDEM_HOST_DEVICE static int shifted_code(const Block& b, int k) { return 8 * code(b, k) + (shift_negative(b, k) ? -1 : 1); }
    TANDEM_HOST_DEVICE static float value(const Block& b, int k) {
        const float dl = element::half_to_float(b.d) * static_cast<float>(mult(b, k));
        const float delta = shift_negative(b, k) ? -kIq1Delta : kIq1Delta;
        return dl * (static_cast<float>(code(b, k)) + delta);
    }
};

// As IQ1_S with a shift sign per group (bit 3 of the group's nibble of
// qh), a 3-bit scale per 16, and the fp16 block scale in the top nibbles
// of the four 16-bit scale words.
struct Iq1m {
    using Block = block_iq1_m;
    using GridRow = uint64_t;
    static constexpr int kGridRows = 2048, kRowElems = 8;
    static constexpr bool kSigned = false;
    TANDEM_HOST_DEVICE static const GridRow* grid() { return iq1s_grid(); }
    TANDEM_HOST_DEVICE static uint32_t nibble(const Block& b, int k) {
        const int g = k % 32 / 8;
        return (b.qh[k / 16] >> (4 * (g % 2))) & 0xFu;
    }
    TANDEM_HOST_DEVICE static int scale_bits(const Block& b, int k) {
        const int c = k / 32;
        return static_cast<int>((load16(b.scales + 2 * (c / 2)) >> (6 * (c % 2) + 3 * (k % 32 / 16))) & 7u);
    }
    // The block's fp16 scale: the top nibbles of the four scale words.
    TANDEM_HOST_DEVICE static fp16_bits block_scale_bits(const Block& b) {
        const uint32_t s0 = load16(b.scales), s1 = load16(b.scales + 2), s2 = load16(b.scales + 4),
                       s3 = load16(b.scales + 6);
        return static_cast<fp16_bits>((s0 >> 12) | ((s1 >> 8) & 0x00F0u) | ((s2 >> 4) & 0x0F00u) | (s3 & 0xF000u));
    }
    TANDEM_HOST_DEVICE static float block_scale(const Block& b) { return element::half_to_float(block_scale_bits(b)); }
    TANDEM_HOST_DEVICE static int row_index(const Block& b, int k) {
        return b.qs[k / 8] | static_cast<int>((nibble(b, k) & 7u) << 8);
    }
    TANDEM_HOST_DEVICE static int code(const Block& b, int k) { return static_cast<int8_t>(grid_element<Iq1m>(b, k)); }
    TANDEM_HOST_DEVICE static int mult(const Block& b, int k) { return 2 * scale_bits(b, k) + 1; }
    TANDEM_HOST_DEVICE static bool shift_negative(const Block& b, int k) { return (nibble(b, k) & 8u) != 0; }
    TANDEM_HOST_DEVICE static int shifted_code(const Block& b, int k) { return 8 * code(b, k) + (shift_negative(b, k) ? -1 : 1); }
    TANDEM_HOST_DEVICE static float value(const Block& b, int k) {
        const float dl = block_scale(b) * static_cast<float>(mult(b, k));
        const float delta = shift_negative(b, k) ? -kIq1Delta : kIq1Delta;
        return dl * (static_cast<float>(code(b, k)) + delta);
    }
};

// x = d * table[q], nibbles as in Q4_0.
struct Iq4nl {
    using Block = block_iq4_nl;
    TANDEM_HOST_DEVICE static int code(const Block& b, int k) { return iq4nl_value(element::nibble32(b.qs, k)); }
    // Elements k..k+3 (k a multiple of 4): four nibbles, one table lookup.
    TANDEM_HOST_DEVICE static uint32_t codes4(const Block& b, int k) {
        return iq4nl_codes4((load32_a2(b.qs + k % 16) >> (4 * (k / 16))) & 0x0F0F0F0Fu);
    }
    TANDEM_HOST_DEVICE static int mult(const Block&, int) { return 1; }
    TANDEM_HOST_DEVICE static float value(const Block& b, int k) {
        return element::half_to_float(b.d) * static_cast<float>(code(b, k));
    }
};

// IQ4_XS chunk c's 6-bit scale minus 32, from the block's header words:
// scales_l read as a little-endian dword (bits 4c .. 4c + 3) and scales_h
// (bits 2c, 2c + 1). U is uint32_t, or a GCC vector of uint32_t lanes (the
// SIMD panels: one row's words a lane); the result is the int32's bits.
template <class U>
TANDEM_HOST_DEVICE constexpr U iq4_xs_scale_bits(U scales_l, U scales_h, int c) {
    return (((scales_l >> (4 * c)) & 0xFu) | (((scales_h >> (2 * c)) & 3u) << 4)) - 32u;
}

// A 6-bit scale per chunk, minus 32: x = d * (s - 32) * table[q].
struct Iq4xs {
    using Block = block_iq4_xs;
    TANDEM_HOST_DEVICE static int code(const Block& b, int k) {
        return iq4nl_value(element::nibble32(b.qs + 16 * (k / 32), k % 32));
    }
    TANDEM_HOST_DEVICE static uint32_t codes4(const Block& b, int k) {
        return iq4nl_codes4((load32_a2(b.qs + 16 * (k / 32) + k % 16) >> (4 * (k % 32 / 16))) & 0x0F0F0F0Fu);
    }
    TANDEM_HOST_DEVICE static int mult(const Block& b, int k) { return chunk_mult(b, k / 32); }
    TANDEM_HOST_DEVICE static int chunk_mult(const Block& b, int c) {
        return static_cast<int32_t>(iq4_xs_scale_bits<uint32_t>(load32_a2(b.scales_l), b.scales_h, c));
    }
    TANDEM_HOST_DEVICE static float value(const Block& b, int k) {
        const float dl = element::half_to_float(b.d) * static_cast<float>(mult(b, k));
        return dl * static_cast<float>(code(b, k));
    }
};

// x = 2^(e - 128) * table[q] (the table is twice E2M1), nibbles as in Q4_0.
struct Mxfp4 {
    using Block = block_mxfp4;
    TANDEM_HOST_DEVICE static int code(const Block& b, int k) { return mxfp4_value(element::nibble32(b.qs, k)); }
    TANDEM_HOST_DEVICE static int mult(const Block&, int) { return 1; }
    TANDEM_HOST_DEVICE static float scale(const Block& b) { return e8m0_half(b.e); }
    TANDEM_HOST_DEVICE static float value(const Block& b, int k) { return static_cast<float>(code(b, k)) * scale(b); }
};

// Four codes k..k+3 (k a multiple of 4) as signed bytes, one code at a
// time (tests check each decoder's own codes4 against it).
template <class D>
TANDEM_HOST_DEVICE uint32_t codes4_by_element(const typename D::Block& b, int k) {
    uint32_t r = 0;
    for (int e = 0; e < 4; ++e) r |= (static_cast<uint32_t>(D::code(b, k + e)) & 0xFFu) << (8 * e);
    return r;
}
// Whether D is a grid type (row_index, grid(), kRowElems), and its row
// type (unused for the others).
template <class D>
inline constexpr bool kHasGrid = requires { D::kRowElems; };
template <class D>
struct GridRowOf {
    using type = uint32_t;
};
template <class D>
    requires kHasGrid<D>
struct GridRowOf<D> {
    using type = typename D::GridRow;
};
template <class D>
using GridRow = typename GridRowOf<D>::type;
template <class D>
TANDEM_HOST_DEVICE const GridRow<D>* grid_of() {
    if constexpr (kHasGrid<D>) {
        return D::grid();
    } else {
        return nullptr;
    }
}
// The same for dot4: one grid row and four sign bits for a grid type,
// the decoder's own where it has one (IQ4_NL, IQ4_XS: one table lookup).
template <class D>
TANDEM_HOST_DEVICE uint32_t codes4(const typename D::Block& b, int k) {
    if constexpr (kHasGrid<D>) {
        return grid_codes4<D>(b, k, D::grid());
    } else if constexpr (requires { D::codes4(b, k); }) {
        return D::codes4(b, k);
    } else {
        return codes4_by_element<D>(b, k);
    }
}
// Elements k..k+7 (k a multiple of 8), a grid type's rows read from `grid`
// (grid_of<D>() or a copy of it).
template <class D>
TANDEM_HOST_DEVICE Codes8 codes8(const typename D::Block& b, int k, const GridRow<D>* grid) {
    if constexpr (kHasGrid<D>) {
        return grid_codes8<D>(b, k, grid);
    } else {
        return {codes4<D>(b, k), codes4<D>(b, k + 4)};
    }
}

}  // namespace tandem::quant::iq

namespace tandem::quant::element {

// The element functions of TANDEM_FOR_EACH_ELEMENT_TYPE (quant_element.h).
TANDEM_HOST_DEVICE float iq2_xxs(const block_iq2_xxs& b, int k) { return iq::Iq2xxs::value(b, k); }
TANDEM_HOST_DEVICE float iq2_xs(const block_iq2_xs& b, int k) { return iq::Iq2xs::value(b, k); }
TANDEM_HOST_DEVICE float iq2_s(const block_iq2_s& b, int k) { return iq::Iq2s::value(b, k); }
TANDEM_HOST_DEVICE float iq3_xxs(const block_iq3_xxs& b, int k) { return iq::Iq3xxs::value(b, k); }
TANDEM_HOST_DEVICE float iq3_s(const block_iq3_s& b, int k) { return iq::Iq3s::value(b, k); }
TANDEM_HOST_DEVICE float iq1_s(const block_iq1_s& b, int k) { return iq::Iq1s::value(b, k); }
TANDEM_HOST_DEVICE float iq1_m(const block_iq1_m& b, int k) { return iq::Iq1m::value(b, k); }
TANDEM_HOST_DEVICE float iq4_nl(const block_iq4_nl& b, int k) { return iq::Iq4nl::value(b, k); }
TANDEM_HOST_DEVICE float iq4_xs(const block_iq4_xs& b, int k) { return iq::Iq4xs::value(b, k); }
TANDEM_HOST_DEVICE float mxfp4(const block_mxfp4& b, int k) { return iq::Mxfp4::value(b, k); }

}  // namespace tandem::quant::element
