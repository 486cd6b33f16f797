// What the AVX-512 panel GEMMs (gemm_panel*_avx512.cpp) share: the rows of
// a panel, the row-to-lane transposes their unpackers are built from, the
// Q4_K/Q5_K scale header, the 4-byte activation broadcast and the loop over
// tiles of four tokens with its masked stores. Include only from
// files built with AVX-512 VNNI.
#pragma once

#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <cstdint>
#include <cstring>

#include "kernels_cpu/gemm_panel.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail::panel {

inline constexpr int kTokens = 4;  // tokens per pass over a panel

// The panel layout puts four bytes of each of the 16 rows side by side in
// one register, so unpacking a super-block of 16 rows is a transpose: these
// load bytes [src(r), src(r) + 32) (or 16) of every row r and return one
// register per dword index j, lane r = dword j of row r.
template <class Src>
void rows_to_lanes32(Src&& src, __m512i out[8]) {
    // r[q]: row q in the low 256-bit half, row q + 8 in the high one; an 8x8
    // dword transpose inside each half, then rows 0-3 and 4-7 joined.
    __m512i r[8], t[8], u[8];
    for (int q = 0; q < 8; ++q) {
        r[q] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src(q)))),
                                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src(q + 8))), 1);
    }
    for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int h = 0; h < 2; ++h) {  // rows 0-3 of each half, then rows 4-7
        u[4 * h + 0] = _mm512_unpacklo_epi64(t[4 * h], t[4 * h + 2]);      // dwords 0 | 4
        u[4 * h + 1] = _mm512_unpackhi_epi64(t[4 * h], t[4 * h + 2]);      // 1 | 5
        u[4 * h + 2] = _mm512_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);  // 2 | 6
        u[4 * h + 3] = _mm512_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);  // 3 | 7
    }
    const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), second = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    for (int j = 0; j < 4; ++j) {
        out[j] = _mm512_permutex2var_epi64(u[j], first, u[j + 4]);
        out[j + 4] = _mm512_permutex2var_epi64(u[j], second, u[j + 4]);
    }
}

template <class Src>
void rows_to_lanes16(Src&& src, __m512i out[4]) {
    // Lane L of a[q] holds row q + 4L; a 4x4 transpose inside each lane.
    __m512i a[4], t[4];
    const auto load = [&](int r) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(src(r))); };
    for (int q = 0; q < 4; ++q) {
        // Lane numbers are immediates: written out, not a loop (a
        // sanitizer build does not unroll it into constants).
        a[q] = _mm512_castsi128_si512(load(q));
        a[q] = _mm512_inserti32x4(a[q], load(q + 4), 1);
        a[q] = _mm512_inserti32x4(a[q], load(q + 8), 2);
        a[q] = _mm512_inserti32x4(a[q], load(q + 12), 3);
    }
    t[0] = _mm512_unpacklo_epi32(a[0], a[1]), t[1] = _mm512_unpackhi_epi32(a[0], a[1]);
    t[2] = _mm512_unpacklo_epi32(a[2], a[3]), t[3] = _mm512_unpackhi_epi32(a[2], a[3]);
    out[0] = _mm512_unpacklo_epi64(t[0], t[2]);
    out[1] = _mm512_unpackhi_epi64(t[0], t[2]);
    out[2] = _mm512_unpacklo_epi64(t[1], t[3]);
    out[3] = _mm512_unpackhi_epi64(t[1], t[3]);
}

// Bits [from, from + width) of every byte moved to [to, to + width) of the
// same byte, the rest cleared: the high bits the unpackers put above a
// code's low bits. The 32-bit shifts carry bits across bytes only into
// positions the mask clears.
inline __m512i move_byte_bits(__m512i x, int from, int to, int width) {
    const __m512i mask = _mm512_set1_epi8(static_cast<char>(((1 << width) - 1) << to));
    return _mm512_and_si512(from <= to ? _mm512_slli_epi32(x, static_cast<unsigned>(to - from))
                                        : _mm512_srli_epi32(x, static_cast<unsigned>(from - to)),
                            mask);
}

// The 16 rows of a panel, blocks of block_bytes: where block i of row r
// is, its fields loaded across the rows (lane r = row r), and the mask of
// the real rows (rows past n_rows point at row 0; the unpackers zero them).
struct PanelRows {
    const uint8_t* row[kPanelRows];
    __mmask16 live;
    size_t block_bytes;
    PanelRows(const void* w, size_t row_stride, int64_t n_rows, size_t block)
        : live(static_cast<__mmask16>((1u << n_rows) - 1u)), block_bytes(block) {
        for (int64_t r = 0; r < kPanelRows; ++r) row[r] = static_cast<const uint8_t*>(w) + (r < n_rows ? r : 0) * row_stride;
    }
    const uint8_t* at(int r, int64_t i, size_t offset) const {
        return row[r] + i * static_cast<int64_t>(block_bytes) + static_cast<int64_t>(offset);
    }
    // Dwords of the 32 (16) bytes at `offset` of block i: rows_to_lanes32 (16).
    void lanes32(int64_t i, size_t offset, __m512i out[8]) const {
        rows_to_lanes32([&](int r) { return at(r, i, offset); }, out);
    }
    void lanes16(int64_t i, size_t offset, __m512i out[4]) const {
        rows_to_lanes16([&](int r) { return at(r, i, offset); }, out);
    }
    // The fp16 at `offset` of block i as floats; 0 for rows past n_rows.
    __m512 halves(int64_t i, size_t offset) const {
        alignas(32) uint16_t h[kPanelRows];
        for (int r = 0; r < kPanelRows; ++r) {
            std::memcpy(&h[r], at(r, i, offset), 2);
            if (((live >> r) & 1) == 0) h[r] = 0;
        }
        return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(h)));
    }
};

// The first 16 bytes of a Q4_K or Q5_K super-block (d, dmin, then the 12
// bytes of packed 6-bit scales and minimums) of all 16 rows: scales as
// int32, minimums as int16 pairs of neighbouring sub-blocks (2j, 2j + 1),
// for vpdpwssd against the activation's 32-element sums of those two (see
// k4_panel_prepare), d and dmin as floats. This is
// element::q4_K_scale_min on four sub-blocks per byte lane: scale bytes 0-3
// (b0), 4-7 (b1), 8-11 (b2); sub-blocks 0-3: b0 & 63, b1 & 63; 4-7:
// (b2 & 15) | (b0 >> 6) << 4, (b2 >> 4) | (b1 >> 6) << 4.
inline void unpack_k4_header(const PanelRows& rows, int64_t i, int32_t (*scale)[kPanelRows], int16_t (*min_pair)[kPanelRows][2],
                             float* d, float* dmin) {
    __m512i v[4];
    rows.lanes16(i, 0, v);
    for (auto& x : v) x = _mm512_maskz_mov_epi32(rows.live, x);
    const __m512i b0 = v[1], b1 = v[2], b2 = v[3];
    const __m512i sc[2] = {move_byte_bits(b0, 0, 0, 6), _mm512_or_si512(move_byte_bits(b2, 0, 0, 4), move_byte_bits(b0, 6, 4, 2))};
    const __m512i mn[2] = {move_byte_bits(b1, 0, 0, 6), _mm512_or_si512(move_byte_bits(b2, 4, 0, 4), move_byte_bits(b1, 6, 4, 2))};
    const __m512i byte = _mm512_set1_epi32(0xFF), byte1 = _mm512_set1_epi32(0xFF00);
    for (int s = 0; s < 8; ++s) {
        _mm512_store_si512(scale[s], _mm512_and_si512(_mm512_srli_epi32(sc[s / 4], 8 * (s % 4)), byte));
    }
    for (int j = 0; j < 4; ++j) {
        // Bytes 2 (j % 2) and 2 (j % 2) + 1 of the minimums' dword, as words.
        const __m512i m = _mm512_srli_epi32(mn[j / 2], 16 * (j % 2));
        _mm512_store_si512(min_pair[j], _mm512_or_si512(_mm512_and_si512(m, byte), _mm512_slli_epi32(_mm512_and_si512(m, byte1), 8)));
    }
    _mm512_store_ps(d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v[0])));
    _mm512_store_ps(dmin, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v[0], 16))));
}

// What a panel's preparation appends to an activation row (gemm_panel.h)
// sits after the row's blocks, extra_bytes per block: extras_offset is where
// that area starts (Act: the activation block, Q8_0 or Q8_K),
// for_each_row_block runs fn(block, its extras) for every block of a row.
template <class Act>
size_t extras_offset(int64_t n_blocks) {
    return sizeof(Act) * static_cast<size_t>(n_blocks);
}
template <class Act, class Fn>
void for_each_row_block(void* row, int64_t n_blocks, size_t extra_bytes, Fn&& fn) {
    const auto* blocks = static_cast<const Act*>(row);
    uint8_t* extras = static_cast<uint8_t*>(row) + extras_offset<Act>(n_blocks);
    for (int64_t i = 0; i < n_blocks; ++i) fn(blocks[i], extras + extra_bytes * static_cast<size_t>(i));
}

// Four activation bytes broadcast to every lane, for vpdpbusd.
inline __m512i bcast4(const void* p) {
    int32_t four;
    std::memcpy(&four, p, 4);
    return _mm512_set1_epi32(four);
}

// acc += w (16 rows x 4 unsigned codes) . the four signed activation bytes
// at p broadcast to every lane: vpdpbusd with an embedded {1to16} memory
// broadcast, one instruction where GCC 12 emits a separate vpbroadcastd
// for _mm512_set1_epi32 (the load-and-broadcast then competes with the dot
// products for issue slots: one per vpdpbusd in the panel loops).
inline __m512i dpbusd_bcast(__m512i acc, __m512i w, const void* p) {
#if !defined(__GNUC__) || defined(TANDEM_NO_DPBUSD_ASM)
    return _mm512_dpbusd_epi32(acc, w, bcast4(p));
#else
    asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*static_cast<const int32_t*>(p)));
    return acc;
#endif
}

// The group starts of the Q6_K and Q3_K panels, as row extras: per
// super-block 16 int32, -offset times each 16-element group's activation
// sum, where a group's integer dot product of the unsigned codes starts, so
// it comes out as that of code - offset.
inline void write_group_starts(void* row, int64_t n_cols, int offset) {
    const __m512i factor = _mm512_set1_epi32(-offset);
    static_assert(kGroupStartsExtraBytes == sizeof(__m512i), "one register of starts per super-block");
    for_each_row_block<quant::block_q8_K>(row, n_cols / quant::kQK_K, kGroupStartsExtraBytes, [&](const quant::block_q8_K& b, uint8_t* out) {
        const __m512i sums = _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.bsums)));
        _mm512_storeu_si512(out, _mm512_mullo_epi32(sums, factor));
    });
}

// Runs tile(act, out) for each tile of kTokens tokens (n_tokens is a
// multiple of it): act are the tile's activation rows, out[t] receives
// token t's 16 row results, stored to y for the n_rows real rows.
template <class Act, class Tile>
void for_token_tiles(const void* a, size_t a_stride, int64_t n_tokens, int64_t n_rows, float* y, int64_t ldy,
                     Tile&& tile) {
    const auto* abase = static_cast<const uint8_t*>(a);
    const auto store_mask = static_cast<__mmask16>((1u << n_rows) - 1u);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokens) {
        const Act* act[kTokens];
        for (int t = 0; t < kTokens; ++t) act[t] = reinterpret_cast<const Act*>(abase + (t0 + t) * a_stride);
        __m512 out[kTokens];
        tile(act, out);
        for (int t = 0; t < kTokens; ++t) _mm512_mask_storeu_ps(y + (t0 + t) * ldy, store_mask, out[t]);
    }
}

}  // namespace tandem::cpu::detail::panel
