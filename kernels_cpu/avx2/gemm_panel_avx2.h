// What the AVX2 panel GEMMs (avx2/gemm_panel_*_avx2.cpp) share. A panel is
// the same 16 weight rows as on AVX-512 (gemm_panel.h), taken as two halves
// of 8: one 256-bit register holds four codes of each of 8 rows, so
// vpmaddubsw against four broadcast activation bytes gives each row's two
// pair sums in its own dword lane, and the per-row totals the reference
// orders need come without horizontal sums. AVX2 has no vpdpbusd: the int16
// pair sums are added in int16 only as far as they provably cannot
// overflow (each kernel says how far), then widened by vpmaddwd against the
// row's scale, so every integer equals the reference's. Each half's
// unpacked super-blocks are contiguous in the buffer, so a pass streams
// them in order. Include only from files built with -mavx2 -mfma -mf16c.
#pragma once

#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <cstdint>
#include <cstring>

#include "kernels_cpu/gemm_panel.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail::panel_avx2 {
namespace {  // internal linkage: never merged with another ISA's copy

inline constexpr int kHalf = 8;    // rows per register
inline constexpr int kTokens = 4;  // tokens per pass over a half panel

// The 8 rows of a half panel, blocks of block_bytes apart: rows past n_rows
// read row 0, so their lanes hold finite numbers that are never stored.
struct HalfRows {
    const uint8_t* row[kHalf];
    size_t block_bytes;
    HalfRows(const void* w, size_t row_stride, int64_t n_rows, int half, size_t block) : block_bytes(block) {
        for (int r = 0; r < kHalf; ++r) {
            const int64_t rr = kHalf * half + r;
            row[r] = static_cast<const uint8_t*>(w) + (rr < n_rows ? rr : 0) * row_stride;
        }
    }
    const uint8_t* at(int r, int64_t i, size_t offset) const {
        return row[r] + i * static_cast<int64_t>(block_bytes) + static_cast<int64_t>(offset);
    }
    // The 32 bytes at `offset` of block i of every row, as one register per
    // dword index j: lane r = dword j of row r (an 8x8 dword transpose).
    void lanes32(int64_t i, size_t offset, __m256i out[8]) const {
        __m256 r[8];
        for (int q = 0; q < kHalf; ++q) r[q] = _mm256_castsi256_ps(load256(at(q, i, offset)));
        transpose8x8_ps(r, r);
        for (int j = 0; j < 8; ++j) out[j] = _mm256_castps_si256(r[j]);
    }
    // The same for 16 bytes: rows q and q + 4 in the two 128-bit halves,
    // then a 4x4 transpose inside each.
    void lanes16(int64_t i, size_t offset, __m256i out[4]) const {
        __m256i a[4];
        for (int q = 0; q < 4; ++q) {
            a[q] = _mm256_inserti128_si256(_mm256_castsi128_si256(load128(at(q, i, offset))), load128(at(q + 4, i, offset)), 1);
        }
        transpose4x4_epi32(a, out);
    }
    // The fp16 at `offset` of block i of every row, as floats.
    __m256 halves(int64_t i, size_t offset) const {
        alignas(16) uint16_t h[kHalf];
        for (int r = 0; r < kHalf; ++r) std::memcpy(&h[r], at(r, i, offset), 2);
        return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
    }
};

// Bits [from, from + width) of every byte moved to [to, to + width) of the
// same byte, the rest cleared (the 32-bit shifts carry bits across bytes
// only into positions the mask clears).
inline __m256i move_byte_bits(__m256i x, int from, int to, int width) {
    const __m256i mask = _mm256_set1_epi8(static_cast<char>(((1 << width) - 1) << to));
    return _mm256_and_si256(from <= to ? _mm256_slli_epi32(x, to - from) : _mm256_srli_epi32(x, from - to), mask);
}

// Byte b of every dword as the int16 pair (byte, byte): the operand with
// which vpmaddwd scales both pair sums of a row by it (unsigned bytes).
inline __m256i byte_as_pair(__m256i x, int b) {
    const __m256i v = _mm256_and_si256(_mm256_srli_epi32(x, 8 * b), _mm256_set1_epi32(0xFF));
    return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}
// The same for signed int32 lanes whose value fits int16: (v, v).
inline __m256i int_as_pair(__m256i v) {
    return _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(v, 16));
}
// Two int32 lanes (each fitting int16) as the pair (lo, hi).
inline __m256i ints_as_pair(__m256i lo, __m256i hi) {
    return _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(hi, 16));
}

// The 32 nibbles of a 32-element block's qs (16 bytes at qs_offset) as
// eight registers of four codes per row (row r in dword r): register l < 4
// the low nibbles of bytes 4l .. 4l + 3, l >= 4 the high nibbles of bytes
// 4 (l - 4) ..: elements 4l .. 4l + 3 in the GGUF order.
inline void nibbles(const HalfRows& rows, int64_t i, size_t qs_offset, __m256i c[8]) {
    __m256i q[4];
    rows.lanes16(i, qs_offset, q);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int l = 0; l < 8; ++l) c[l] = _mm256_and_si256(l < 4 ? q[l] : _mm256_srli_epi32(q[l - 4], 4), low4);
}

// Fifth bits from a 32-bit qh per row: bit 4l + b of qh to bit 4 of byte b
// of register l (the multiply spreads four bits to the bytes' low bits).
inline void add_high_bits(__m256i qh, __m256i c[8]) {
    const __m256i spread = _mm256_set1_epi32(0x00204081), lows = _mm256_set1_epi32(0x01010101);
    for (int l = 0; l < 8; ++l) {
        const __m256i four = _mm256_and_si256(_mm256_srli_epi32(qh, 4 * l), _mm256_set1_epi32(0xF));
        c[l] = _mm256_or_si256(c[l], _mm256_slli_epi32(_mm256_and_si256(_mm256_mullo_epi32(four, spread), lows), 4));
    }
}

// The header dwords d | m << 16 of the 8 rows (fp16 each) as floats: words
// [d 0-3, m 0-3 | d 4-7, m 4-7], then the quadwords reordered to
// [d 0-7 | m 0-7]. m may be null (formats without a minimum).
inline void header_floats(__m256i header, float* d, float* m) {
    const __m256i words = _mm256_packus_epi32(_mm256_and_si256(header, _mm256_set1_epi32(0xFFFF)), _mm256_srli_epi32(header, 16));
    const __m256i ordered = _mm256_permute4x64_epi64(words, _MM_SHUFFLE(3, 1, 2, 0));
    _mm256_store_ps(d, _mm256_cvtph_ps(_mm256_castsi256_si128(ordered)));
    if (m != nullptr) _mm256_store_ps(m, _mm256_cvtph_ps(_mm256_extracti128_si256(ordered, 1)));
}

// Four activation bytes (or two int16) broadcast to every lane.
inline __m256i bcast4(const void* p) {
    int32_t four;
    std::memcpy(&four, p, 4);
    return _mm256_set1_epi32(four);
}

// acc + p in int16 lanes, as an asm GCC cannot look into: it otherwise
// reassociates a run of such adds into a tree, computing every pair sum
// first and spilling them (measured: twice the time); chains stay chains.
inline __m256i add16(__m256i acc, __m256i p) {
    asm("vpaddw %1, %0, %0" : "+x"(acc) : "x"(p));
    return acc;
}

// Pair sums of the 8 rows' four unsigned codes (w) against four signed
// activation bytes broadcast from p, per row: two int16 per dword lane.
inline __m256i pairs(__m256i w, const void* p) { return _mm256_maddubs_epi16(w, bcast4(p)); }

// The 8 floats of a half panel's rows for one token, live of them real.
inline void store_rows(float* dst, __m256 v, int live) {
    if (live >= kHalf) {
        _mm256_storeu_ps(dst, v);
    } else {
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(live), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_maskstore_ps(dst, mask, v);
    }
}

// Unpacks the half panels (half h's super-blocks at [h nb, (h + 1) nb) of
// buf, the second only where there are more than 8 rows) with
// unpack(rows, i, half block) and returns them.
template <class Half, class Block, class Unpack>
const Half* unpack_panel(const void* w, size_t row_stride, int64_t n_rows, int64_t nb, void* buf, Unpack&& unpack) {
    auto* blocks = static_cast<Half*>(buf);
    for (int h = 0; h < (n_rows > kHalf ? 2 : 1); ++h) {
        const HalfRows rows(w, row_stride, n_rows, h, sizeof(Block));
        for (int64_t i = 0; i < nb; ++i) unpack(rows, i, blocks[h * nb + i]);
    }
    return blocks;
}

// What a panel's preparation appends to an activation row (gemm_panel.h)
// sits after the row's blocks, extra_bytes per block: for_each_row_block
// runs fn(block, its extras) for every block of a row (Act: the activation
// block type), extras(row, n_blocks) is where that area starts.
template <class Act>
const uint8_t* extras(const Act* row, int64_t n_blocks) {
    return reinterpret_cast<const uint8_t*>(row) + sizeof(Act) * static_cast<size_t>(n_blocks);
}
template <class Act, class Fn>
void for_each_row_block(void* row, int64_t n_blocks, size_t extra_bytes, Fn&& fn) {
    const auto* blocks = static_cast<const Act*>(row);
    uint8_t* out = static_cast<uint8_t*>(row) + sizeof(Act) * static_cast<size_t>(n_blocks);
    for (int64_t i = 0; i < n_blocks; ++i) fn(blocks[i], out + extra_bytes * static_cast<size_t>(i));
}

// Runs tile(half, act, out) for each tile of kTokens tokens (n_tokens is a
// multiple of it) and each half panel with a real row: act are the tile's
// activation rows, out[t] receives token t's 8 row results of that half,
// stored to y for its real rows.
template <class Act, class Tile>
void for_token_tiles(const void* a, size_t a_stride, int64_t n_tokens, int64_t n_rows, float* y, int64_t ldy,
                     Tile&& tile) {
    const auto* abase = static_cast<const uint8_t*>(a);
    const int n_halves = n_rows > kHalf ? 2 : 1;
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokens) {
        const Act* act[kTokens];
        for (int t = 0; t < kTokens; ++t) act[t] = reinterpret_cast<const Act*>(abase + (t0 + t) * a_stride);
        for (int h = 0; h < n_halves; ++h) {
            __m256 out[kTokens];
            tile(h, act, out);
            const int live = static_cast<int>(n_rows - kHalf * h);
            for (int t = 0; t < kTokens; ++t) store_rows(y + (t0 + t) * ldy + kHalf * h, out[t], live);
        }
    }
}

}  // namespace
}  // namespace tandem::cpu::detail::panel_avx2
