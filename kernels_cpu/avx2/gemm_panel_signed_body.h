// The body of the Q8_0/Q5_0 panel GEMMs (scheme and measurements in
// avx2/gemm_panel_signed_avx2.cpp), built twice: for AVX2
// (gemm_panel_signed_avx2.cpp, TANDEM_SIGNED_NAME(x) = x_avx2) and for
// AVX2 with AVX-VNNI (gemm_panel_signed_avxvnni.cpp, x_avxvnni, -mavxvnni),
// where a lane is one vpdpbusd instead of two multiplies and an add. The
// integers are exact either way and the float operations the same: the
// same bits.
#pragma once

#ifndef TANDEM_SIGNED_NAME
#error "define TANDEM_SIGNED_NAME(x) before including this file"
#endif

#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels_cpu/avx2/gemm_panel_avx2.h"
#include "kernels_cpu/gemm_panel.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {  // internal linkage: each ISA's copy stays its own

using namespace tandem::quant;
using panel_avx2::kHalf;

// Blocks per chunk: the chunk's weights of both halves (2 x 8 x 544 bytes),
// its activations, d products and the accumulators stay in the 32 KiB L1
// (16 and 12 measured the same, 32 slower).
constexpr int kChunk = 8;
// Tokens per tile: eight accumulators, the lane's weights and temporaries
// fill the sixteen registers. Tiles of 4 take the rest (n_tokens is a
// multiple of 4); 8 measured faster than 4.
constexpr int kTile = 8;

inline __m256i load32(const void* p) { return _mm256_load_si256(static_cast<const __m256i*>(p)); }
inline void store32(void* p, __m256i v) { _mm256_store_si256(static_cast<__m256i*>(p), v); }

// Bytes of a register as int16: the even bytes (0, 2, ..) and the odd ones
// (1, 3, ..), each sign-extended in its own word.
inline __m256i even_bytes16(__m256i v) { return _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 8); }
inline __m256i odd_bytes16(__m256i v) { return _mm256_srai_epi16(v, 8); }

#if defined(__AVXVNNI__)
// q + 128 as unsigned bytes (the sign bit flipped).
inline __m256i flip_signs(__m256i q) { return _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80))); }
// -128 x the sum of each dword's four signed bytes.
inline __m256i lane_start(__m256i v) {
    const __m256i sums = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), v);
    return _mm256_slli_epi32(_mm256_sub_epi32(_mm256_setzero_si256(), sums), 7);
}
#endif

// ---- Q8_0 -------------------------------------------------------------------------------
#if defined(__AVXVNNI__)
// With AVX-VNNI one vpdpbusd makes a lane: the activation as u8 = q + 128
// against the signed weight values, accumulated onto -128 x the lane's sum
// of values (per block and row, shared by all tokens): (a + 128) v summed,
// less 128 sum(v), is sum(a v) exactly (|.| < 2^17, no wrap). Values(rows,
// i, v, header) gives a block's values (lane l of row r in dword r of v[l])
// and its header dwords (header[0] as HalfRows::lanes16 at offset 0).
template <class B, class Values>
struct VnniSigned {
    using Block = B;
    struct Half {
        alignas(32) int8_t v[8][kHalf][4];
        alignas(32) int32_t start[8][kHalf];
        alignas(32) float d[kHalf];
    };
    static void unpack(const panel_avx2::HalfRows& rows, int64_t i, Half& p) {
        __m256i v[8], header[4];
        Values::get(rows, i, v, header);
        for (int l = 0; l < 8; ++l) {
            store32(p.v[l], v[l]);
            store32(p.start[l], lane_start(v[l]));
        }
        panel_avx2::header_floats(header[0], p.d, nullptr);
    }
    static constexpr size_t kActBytes = 32;
    static void copy_act(const block_q8_0& b, uint8_t* out) { store32(out, flip_signs(load256(b.qs))); }
    struct Lane {
        __m256i v, start;
    };
    static Lane lane_weights(const Half& p, int l) { return {load32(p.v[l]), load32(p.start[l])}; }
    static __m256i lane_sum(const Lane& w, const uint8_t* act, int l) {
        return _mm256_dpbusd_avx_epi32(w.start, panel_avx2::bcast4(act + 4 * l), w.v);
    }
};
struct Q8Values {
    static void get(const panel_avx2::HalfRows& rows, int64_t i, __m256i v[8], __m256i header[4]) {
        rows.lanes32(i, offsetof(block_q8_0, qs), v);
        rows.lanes16(i, 0, header);
    }
};
using Q8 = VnniSigned<block_q8_0, Q8Values>;
#else
struct Q8 {
    using Block = block_q8_0;
    // Per block of a half panel, lane l (elements 4l .. 4l + 3), row r in
    // dword r: (w[4l], w[4l + 2]) and (w[4l + 1], w[4l + 3]) as int16.
    struct Half {
        alignas(32) int16_t even[8][kHalf][2];
        alignas(32) int16_t odd[8][kHalf][2];
        alignas(32) float d[kHalf];
    };
    static void unpack(const panel_avx2::HalfRows& rows, int64_t i, Half& p) {
        __m256i c[8];
        rows.lanes32(i, offsetof(block_q8_0, qs), c);
        for (int l = 0; l < 8; ++l) {
            store32(p.even[l], even_bytes16(c[l]));
            store32(p.odd[l], odd_bytes16(c[l]));
        }
        __m256i w[4];
        rows.lanes16(i, 0, w);
        panel_avx2::header_floats(w[0], p.d, nullptr);
    }
    // A token's block in the chunk: the even elements' int16 (the pair of
    // lane l at byte 4l), then the odd ones' (at 32 + 4l).
    static constexpr size_t kActBytes = 64;
    static void copy_act(const block_q8_0& b, uint8_t* out) {
        const __m256i q = load256(b.qs);
        store32(out, even_bytes16(q));
        store32(out + 32, odd_bytes16(q));
    }
    struct Lane {
        __m256i even, odd;
    };
    static Lane lane_weights(const Half& p, int l) { return {load32(p.even[l]), load32(p.odd[l])}; }
    // Products of at most 128 x 128: the int32 sums are exact.
    static __m256i lane_sum(const Lane& w, const uint8_t* act, int l) {
        const __m256i even = _mm256_madd_epi16(w.even, panel_avx2::bcast4(act + 4 * l));
        return _mm256_add_epi32(even, _mm256_madd_epi16(w.odd, panel_avx2::bcast4(act + 32 + 4 * l)));
    }
};
#endif

// ---- Q5_0 -------------------------------------------------------------------------------
#if defined(__AVXVNNI__)
// The values code - 16.
struct Q5Values {
    static void get(const panel_avx2::HalfRows& rows, int64_t i, __m256i v[8], __m256i header[4]) {
        rows.lanes16(i, 0, header);
        panel_avx2::nibbles(rows, i, offsetof(block_q5_0, qs), v);
        // qh after the 2-byte d
        panel_avx2::add_high_bits(_mm256_or_si256(_mm256_srli_epi32(header[0], 16), _mm256_slli_epi32(header[1], 16)), v);
        for (int l = 0; l < 8; ++l) v[l] = _mm256_sub_epi8(v[l], _mm256_set1_epi8(16));
    }
};
using Q5 = VnniSigned<block_q5_0, Q5Values>;
#else
struct Q5 {
    using Block = block_q5_0;
    // Per block of a half panel, lane l, row r in dword r: the four values
    // code - 16, and -128 x the sums of its two pairs as int16.
    struct Half {
        alignas(32) int8_t v[8][kHalf][4];
        alignas(32) int16_t start[8][kHalf][2];
        alignas(32) float d[kHalf];
    };
    static void unpack(const panel_avx2::HalfRows& rows, int64_t i, Half& p) {
        __m256i w[4], c[8];
        rows.lanes16(i, 0, w);
        panel_avx2::nibbles(rows, i, offsetof(block_q5_0, qs), c);
        panel_avx2::add_high_bits(_mm256_or_si256(_mm256_srli_epi32(w[0], 16), _mm256_slli_epi32(w[1], 16)), c);  // qh after the 2-byte d
        for (int l = 0; l < 8; ++l) {
            const __m256i v = _mm256_sub_epi8(c[l], _mm256_set1_epi8(16));
            store32(p.v[l], v);
            const __m256i pair_sums = _mm256_maddubs_epi16(_mm256_set1_epi8(1), v);  // in [-32, 30]
            store32(p.start[l], _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(pair_sums, 7)));
        }
        panel_avx2::header_floats(w[0], p.d, nullptr);
    }
    // A token's block in the chunk: q + 128 as unsigned bytes.
    static constexpr size_t kActBytes = 32;
    static void copy_act(const block_q8_0& b, uint8_t* out) {
        store32(out, _mm256_xor_si256(load256(b.qs), _mm256_set1_epi8(static_cast<char>(0x80))));
    }
    struct Lane {
        __m256i v, start;
    };
    static Lane lane_weights(const Half& p, int l) { return {load32(p.v[l]), load32(p.start[l])}; }
    // Pair sums (a + 128) v within +-8160, plus -128 (v0 + v1): a0 v0 + a1 v1,
    // within +-4096, exact in int16; vpmaddwd adds the two pairs.
    static __m256i lane_sum(const Lane& w, const uint8_t* act, int l) {
        const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(panel_avx2::bcast4(act + 4 * l), w.v), w.start);
        return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
    }
};
#endif

// What a tile works in, after the unpacked half panels in the buffer: the
// chunk's activations [block][token], d_w x d_a [half][block][token] and the
// accumulators [half][lane][token].
template <class K>
struct Scratch {
    alignas(32) uint8_t act[kChunk][kTile][K::kActBytes];
    alignas(32) float dp[2][kChunk][kTile][kHalf];
    alignas(32) float acc[2][8][kTile][kHalf];
};

template <class K>
size_t signed_panel_bytes(int64_t n_cols) {
    return 2 * sizeof(typename K::Half) * static_cast<size_t>(n_cols / 32) + sizeof(Scratch<K>) + 64;
}

// T tokens (rows act[0 .. T)) against the kHalves half panels: y[t * ldy +
// r] for the real rows. next_tile: bytes from a token's row to the same
// token of the next tile (0 at the last), whose rows are prefetched into
// L2 as this tile reads its own: read in 8 rows of 8 blocks at a time, they
// stall on L3 otherwise (the activation copy measured 14% of the time
// before, Q8_0 0.675 -> 0.63 ns with it and the loop specialized per half
// count).
template <class K, int T, int kHalves>
void tile(const typename K::Half* blocks, int64_t nb, const block_q8_0* const* act, size_t next_tile, Scratch<K>& s,
          float* y, int64_t ldy, int64_t n_rows) {
    for (int h = 0; h < kHalves; ++h) {
        for (int l = 0; l < 8; ++l) {
            for (int t = 0; t < T; ++t) _mm256_store_ps(s.acc[h][l][t], _mm256_setzero_ps());
        }
    }
    for (int64_t c0 = 0; c0 < nb; c0 += kChunk) {
        const int cn = static_cast<int>(std::min<int64_t>(kChunk, nb - c0));
        for (int c = 0; c < cn; ++c) {
            __m256 dw[kHalves];
            for (int h = 0; h < kHalves; ++h) dw[h] = _mm256_load_ps(blocks[h * nb + c0 + c].d);
            for (int t = 0; t < T; ++t) {
                const block_q8_0& b = act[t][c0 + c];
                K::copy_act(b, s.act[c][t]);
                const __m256 da = _mm256_set1_ps(f16(b.d));
                for (int h = 0; h < kHalves; ++h) _mm256_store_ps(s.dp[h][c][t], _mm256_mul_ps(dw[h], da));
                _mm_prefetch(reinterpret_cast<const char*>(&b) + next_tile, _MM_HINT_T1);
            }
        }
        for (int h = 0; h < kHalves; ++h) {
            const typename K::Half* half = blocks + h * nb + c0;
            for (int l = 0; l < 8; ++l) {
                __m256 acc[T];
                for (int t = 0; t < T; ++t) acc[t] = _mm256_load_ps(s.acc[h][l][t]);
                for (int c = 0; c < cn; ++c) {
                    const typename K::Lane w = K::lane_weights(half[c], l);
                    for (int t = 0; t < T; ++t) {
                        const __m256i lane = K::lane_sum(w, s.act[c][t], l);
                        acc[t] = _mm256_fmadd_ps(_mm256_load_ps(s.dp[h][c][t]), _mm256_cvtepi32_ps(lane), acc[t]);
                    }
                }
                for (int t = 0; t < T; ++t) _mm256_store_ps(s.acc[h][l][t], acc[t]);
            }
        }
    }
    for (int h = 0; h < kHalves; ++h) {
        for (int t = 0; t < T; ++t) {
            const auto a = [&](int l) { return _mm256_load_ps(s.acc[h][l][t]); };
            const __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a(0), a(4)), _mm256_add_ps(a(2), a(6))),
                                             _mm256_add_ps(_mm256_add_ps(a(1), a(5)), _mm256_add_ps(a(3), a(7))));
            // + 0.0f: the reference adds its (here zero) minimum chain,
            // which turns a -0 sum into +0.
            panel_avx2::store_rows(y + t * ldy + kHalf * h, _mm256_add_ps(sum, _mm256_setzero_ps()),
                                   static_cast<int>(n_rows - kHalf * h));
        }
    }
}

template <class K>
void signed_gemm(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a, size_t a_stride,
                 int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    using Half = typename K::Half;
    const int64_t nb = n_cols / 32;
    const Half* blocks = panel_avx2::unpack_panel<Half, typename K::Block>(w, row_stride, n_rows, nb, buf, K::unpack);
    const auto scratch_at = (reinterpret_cast<uintptr_t>(blocks + 2 * nb) + 63) & ~uintptr_t{63};
    auto& s = *reinterpret_cast<Scratch<K>*>(scratch_at);
    const bool two = n_rows > kHalf;
    const auto* abase = static_cast<const uint8_t*>(a);
    for (int64_t t0 = 0; t0 < n_tokens;) {
        const int T = n_tokens - t0 >= kTile ? kTile : 4;
        const block_q8_0* act[kTile];
        for (int t = 0; t < T; ++t) act[t] = reinterpret_cast<const block_q8_0*>(abase + (t0 + t) * a_stride);
        // The last tile prefetches its own rows again (a prefetch past the
        // rows would be harmless too, but needs no thought this way).
        const size_t next_tile = t0 + T < n_tokens ? a_stride * static_cast<size_t>(T) : 0;
        float* yt = y + t0 * ldy;
        if (T == kTile) {
            if (two) tile<K, kTile, 2>(blocks, nb, act, next_tile, s, yt, ldy, n_rows);
            else tile<K, kTile, 1>(blocks, nb, act, next_tile, s, yt, ldy, n_rows);
        } else {
            if (two) tile<K, 4, 2>(blocks, nb, act, next_tile, s, yt, ldy, n_rows);
            else tile<K, 4, 1>(blocks, nb, act, next_tile, s, yt, ldy, n_rows);
        }
        t0 += T;
    }
}

}  // namespace

size_t TANDEM_SIGNED_NAME(q8_0_panel_bytes)(int64_t n_cols) { return signed_panel_bytes<Q8>(n_cols); }
size_t TANDEM_SIGNED_NAME(q5_0_panel_bytes)(int64_t n_cols) { return signed_panel_bytes<Q5>(n_cols); }

void TANDEM_SIGNED_NAME(q8_0_panel_gemm)(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                          size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    signed_gemm<Q8>(w, row_stride, n_rows, n_cols, a, a_stride, n_tokens, y, ldy, buf);
}
void TANDEM_SIGNED_NAME(q5_0_panel_gemm)(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                          size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    signed_gemm<Q5>(w, row_stride, n_rows, n_cols, a, a_stride, n_tokens, y, ldy, buf);
}

}  // namespace tandem::cpu::detail
