// Panel GEMMs for the 32-element formats on AVX2 (scheme in
// avx2/gemm_panel_avx2.h).
//
// Q4_0, IQ4_NL and MXFP4 (nibble_formats.h) in the order of their
// single-row kernels (llama.cpp's repacked kernel: one fused multiply-add of
// each block's integer total). The values stay unsigned, u = value +
// kOffset, and each token's block total starts from -kOffset times the
// block's activation sum, which the panel's prepare appends to the
// activation row (write_block_starts, the bytes the AVX-512 panels read;
// here each beside the block's d as a float, write_starts_and_scales):
// the same exact integer as the values'. vpmaddubsw's pair sums saturate at
// int16, so how far they add in int16 depends on u's range:
//   - Q4_0 (u <= 15): the eight groups of four of a block, 8 x 2 x 15 x 128
//     = 30720, then one vpmaddwd a block;
//   - MXFP4 (u <= 24): runs of four groups (24576), two vpmaddwd a block;
//   - IQ4_NL (u <= 241: one pair sum alone could saturate): u = 16 h + l,
//     the nibbles h and l each a plane of codes <= 15 as Q4_0's, then
//     vpmaddwd against 16 (h) and 1 (l). Two vpmaddubsw per four elements,
//     where signed values would take vpsignb, vpmaddubsw and a vpmaddwd
//     (all three on Zen 4's two multiply pipes) per four elements.
//
// Q4_1, Q5_1 in the order of their single-row kernels (LegacyLanesOrder:
// eight lanes of four elements per row, each with its own fused
// multiply-add chain, added as ((0+4)+(2+6)) + ((1+5)+(3+7)), then the
// minimum chain). With the 8 rows of a half panel in the dword lanes, lane l
// of the reference is one vpmaddubsw + vpmaddwd per token (unsigned codes
// against the signed activation bytes): eight float accumulators per token,
// one token at a time (sixteen registers), and no horizontal sum. Q8_0 and
// Q5_0, whose values are signed, have their own kernels in
// avx2/gemm_panel_signed_avx2.cpp.
#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <cstddef>
#include <cstring>

#include "kernels_cpu/avx2/gemm_panel_avx2.h"
#include "kernels_cpu/gemm_panel.h"
#include "kernels_cpu/nibble_formats.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;
using panel_avx2::kHalf;
constexpr int NT = panel_avx2::kTokens;

// Per block of a half panel: the unsigned values u of each plane (one, or
// IQ4_NL's two: 16 h + l) [group 8][row 8][4] (elements 4 g ..), d per row.
template <class Block>
struct HalfNibbles {
    static constexpr int kPlanes = NibbleFormat<Block>::kMaxU <= 127 ? 1 : 2;
    static constexpr int kMaxCode = kPlanes == 2 ? 15 : NibbleFormat<Block>::kMaxU;
    // Groups whose pair sums add in int16: at most 2 x kMaxCode x 128 each
    // (activations >= -128), a divisor of 8.
    static constexpr int kRun = 8 * 2 * kMaxCode * 128 <= 32768 ? 8 : 4 * 2 * kMaxCode * 128 <= 32768 ? 4 : 2;
    static_assert(kRun * 2 * kMaxCode * 128 <= 32768, "int16 pair sums would saturate");
    alignas(32) uint8_t codes[kPlanes][8][kHalf][4];
    alignas(32) float d[kHalf];
};

// Block i of the 8 rows: group g is the low nibbles (g < 4) or the high
// ones of qs[4 (g % 4) ..], looked up in the format's table.
template <class Block>
void unpack_nibbles(const panel_avx2::HalfRows& rows, int64_t i, HalfNibbles<Block>& p) {
    using F = NibbleFormat<Block>;
    __m256i q[4];
    rows.lanes16(i, F::kQs, q);
    const __m256i low4 = _mm256_set1_epi8(0x0F), table = _mm256_broadcastsi128_si256(nibble_table<Block>());
    for (int g = 0; g < 8; ++g) {
        __m256i u = _mm256_and_si256(g < 4 ? q[g] : _mm256_srli_epi32(q[g - 4], 4), low4);
        if constexpr (F::kLookup) u = _mm256_shuffle_epi8(table, u);
        if constexpr (HalfNibbles<Block>::kPlanes == 2) {
            _mm256_store_si256(reinterpret_cast<__m256i*>(p.codes[0][g]), _mm256_and_si256(_mm256_srli_epi16(u, 4), low4));
            _mm256_store_si256(reinterpret_cast<__m256i*>(p.codes[1][g]), _mm256_and_si256(u, low4));
        } else {
            _mm256_store_si256(reinterpret_cast<__m256i*>(p.codes[0][g]), u);
        }
    }
    if constexpr (F::kHalfScale) {
        _mm256_store_ps(p.d, rows.halves(i, 0));
    } else {
        for (int r = 0; r < kHalf; ++r) p.d[r] = F::scale(*reinterpret_cast<const Block*>(rows.at(r, i, 0)));
    }
}

// ---- Q4_1, Q5_1 ------------------------------------------------------------------------
// Per block of a half panel: for lane l (elements 4l .. 4l + 3) the
// unsigned codes of the 8 rows; d and the minimum m per row.
struct HalfLanes {
    alignas(32) uint8_t u[8][kHalf][4];
    alignas(32) float d[kHalf];
    alignas(32) float m[kHalf];
};

// Block i of the 8 rows: the eight lanes of codes, and the header dword
// d | m << 16. Reads stay inside each block.
void codes(const panel_avx2::HalfRows& rows, int64_t i, const block_q4_1*, __m256i c[8], __m256i& header) {
    __m256i w[4];
    rows.lanes16(i, 0, w);
    panel_avx2::nibbles(rows, i, offsetof(block_q4_1, qs), c);
    header = w[0];
}
void codes(const panel_avx2::HalfRows& rows, int64_t i, const block_q5_1*, __m256i c[8], __m256i& header) {
    __m256i w[4];
    rows.lanes16(i, 0, w);
    panel_avx2::nibbles(rows, i, offsetof(block_q5_1, qs), c);
    panel_avx2::add_high_bits(w[1], c);
    header = w[0];
}

template <class Block>
void unpack_lanes(const panel_avx2::HalfRows& rows, int64_t i, HalfLanes& p) {
    __m256i c[8], header;
    codes(rows, i, static_cast<const Block*>(nullptr), c, header);
    for (int l = 0; l < 8; ++l) _mm256_store_si256(reinterpret_cast<__m256i*>(p.u[l]), c[l]);
    panel_avx2::header_floats(header, p.d, p.m);
}

size_t lanes_panel_bytes(int64_t n_cols) { return 2 * sizeof(HalfLanes) * static_cast<size_t>(n_cols / 32); }

template <class Block>
void lanes_gemm(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a, size_t a_stride,
                int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    const int64_t nb = n_cols / 32;
    const HalfLanes* blocks = panel_avx2::unpack_panel<HalfLanes, Block>(w, row_stride, n_rows, nb, buf, unpack_lanes<Block>);
    const __m256i ones = _mm256_set1_epi16(1);
    panel_avx2::for_token_tiles<block_q8_1>(a, a_stride, n_tokens, n_rows, y, ldy, [&](int h, const block_q8_1* const* act, __m256* out) {
        const HalfLanes* half = blocks + h * nb;
        for (int t = 0; t < NT; ++t) {  // one token at a time: eight accumulators
            __m256 acc[8];
            __m256 acc_min = _mm256_setzero_ps();
            for (auto& v : acc) v = _mm256_setzero_ps();
            for (int64_t i = 0; i < nb; ++i) {
                const HalfLanes& p = half[i];
                const block_q8_1& x = act[t][i];
                const __m256 d = _mm256_mul_ps(_mm256_load_ps(p.d), _mm256_set1_ps(f16(x.d)));
                for (int l = 0; l < 8; ++l) {
                    const __m256i u = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.u[l]));
                    const __m256i lane = _mm256_madd_epi16(panel_avx2::pairs(u, x.qs + 4 * l), ones);
                    acc[l] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lane), acc[l]);
                }
                acc_min = _mm256_fmadd_ps(_mm256_load_ps(p.m), _mm256_set1_ps(f16(x.s)), acc_min);
            }
            const __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6])),
                                             _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7])));
            out[t] = _mm256_add_ps(sum, acc_min);
        }
    });
}

template <class Block>
void nibble_gemm(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a, size_t a_stride,
                 int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    using Half = HalfNibbles<Block>;
    constexpr int kRun = Half::kRun;
    const int64_t nb = n_cols / 32;
    const Half* blocks = panel_avx2::unpack_panel<Half, Block>(w, row_stride, n_rows, nb, buf, unpack_nibbles<Block>);
    panel_avx2::for_token_tiles<block_q8_0>(a, a_stride, n_tokens, n_rows, y, ldy, [&](int h, const block_q8_0* const* act, __m256* out) {
        const Half* half = blocks + h * nb;
        const uint8_t* start[NT];
        for (int t = 0; t < NT; ++t) start[t] = panel_avx2::extras(act[t], nb);
        __m256 acc[NT];
        for (auto& v : acc) v = _mm256_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const Half& p = half[i];
            __m256i total[NT];
            for (int t = 0; t < NT; ++t) total[t] = panel_avx2::bcast4(start[t] + kQ4_0PanelExtraBytesAvx2 * static_cast<size_t>(i));
            for (int g0 = 0; g0 < 8; g0 += kRun) {
                __m256i dot[Half::kPlanes][NT];
                // Unrolled: the loop with its first-group test measured 6-7%
                // slower (2048x2048 x 256 tokens, one thread: IQ4_NL 16.7-16.9
                // -> 15.7-15.9 ms, Q4_0 10.8 -> 10.0).
#pragma GCC unroll 8
                for (int g = g0; g < g0 + kRun; ++g) {
                    __m256i wv[Half::kPlanes];
                    for (int pl = 0; pl < Half::kPlanes; ++pl) wv[pl] = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.codes[pl][g]));
                    for (int t = 0; t < NT; ++t) {
                        const __m256i av = panel_avx2::bcast4(act[t][i].qs + 4 * g);  // one broadcast for the planes
                        for (int pl = 0; pl < Half::kPlanes; ++pl) {
                            const __m256i pr = _mm256_maddubs_epi16(wv[pl], av);
                            dot[pl][t] = g == g0 ? pr : panel_avx2::add16(dot[pl][t], pr);
                        }
                    }
                }
                for (int pl = 0; pl < Half::kPlanes; ++pl) {
                    const __m256i mult = _mm256_set1_epi16(Half::kPlanes == 2 && pl == 0 ? 16 : 1);
                    for (int t = 0; t < NT; ++t) total[t] = _mm256_add_epi32(total[t], _mm256_madd_epi16(dot[pl][t], mult));
                }
            }
            const __m256 d = _mm256_load_ps(p.d);
            for (int t = 0; t < NT; ++t) {
                // The activation block's d, converted once by the prepare.
                const auto* da = reinterpret_cast<const float*>(start[t] + kQ4_0PanelExtraBytesAvx2 * static_cast<size_t>(i) + 4);
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total[t]), _mm256_mul_ps(d, _mm256_broadcast_ss(da)), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = acc[t];
    });
}

// What the AVX2 panels of Q4_0, IQ4_NL and MXFP4 read a block: the block
// start of write_block_starts (int32), then the activation block's d as a
// float, so the token loop loads it with one broadcast instead of a scalar
// conversion per token, block and half panel (2048x2048 x 256 tokens, one
// Zen 3 thread, ms: Q4_0 12.7-13.2 -> 11.8-12.2, IQ4_NL 20.4-20.5 ->
// 19.3-19.8, MXFP4 13.4-13.6 -> 13.2-13.7).
template <class Block>
void write_starts_and_scales(quant::Type a_type, void* row, int64_t n_cols) {
    write_block_starts<Block>(a_type, row, n_cols);
    const int64_t nb = n_cols / 32;
    const auto* blocks = static_cast<const block_q8_0*>(row);
    uint8_t* out = static_cast<uint8_t*>(row) + sizeof(block_q8_0) * static_cast<size_t>(nb);
    // Spread the starts in place, last first (entry i moves to 2i >= i).
    for (int64_t i = nb - 1; i >= 0; --i) {
        int32_t start;
        std::memcpy(&start, out + sizeof(int32_t) * static_cast<size_t>(i), sizeof start);
        const float da = f16(blocks[i].d);
        std::memcpy(out + kQ4_0PanelExtraBytesAvx2 * static_cast<size_t>(i), &start, sizeof start);
        std::memcpy(out + kQ4_0PanelExtraBytesAvx2 * static_cast<size_t>(i) + sizeof start, &da, sizeof da);
    }
}
static_assert(kQ4_0PanelExtraBytesAvx2 == sizeof(int32_t) + sizeof(float), "start, then d");

}  // namespace

size_t q4_1_panel_bytes_avx2(int64_t n_cols) { return lanes_panel_bytes(n_cols); }
size_t q5_1_panel_bytes_avx2(int64_t n_cols) { return lanes_panel_bytes(n_cols); }

void q4_1_panel_gemm_avx2(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                          size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    lanes_gemm<block_q4_1>(w, row_stride, n_rows, n_cols, a, a_stride, n_tokens, y, ldy, buf);
}
void q5_1_panel_gemm_avx2(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                          size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    lanes_gemm<block_q5_1>(w, row_stride, n_rows, n_cols, a, a_stride, n_tokens, y, ldy, buf);
}

#define TANDEM_NIBBLE_PANEL(name, Block)                                                                         \
    size_t name##_panel_bytes_avx2(int64_t n_cols) {                                                             \
        return 2 * sizeof(HalfNibbles<Block>) * static_cast<size_t>(n_cols / 32);                                \
    }                                                                                                            \
    void name##_panel_prepare_avx2(quant::Type a_type, void* row, int64_t n_cols) {                              \
        write_starts_and_scales<Block>(a_type, row, n_cols);                                                     \
    }                                                                                                            \
    void name##_panel_gemm_avx2(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a, \
                                size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {           \
        nibble_gemm<Block>(w, row_stride, n_rows, n_cols, a, a_stride, n_tokens, y, ldy, buf);                   \
    }
TANDEM_NIBBLE_PANEL(q4_0, block_q4_0)
TANDEM_NIBBLE_PANEL(iq4_nl, block_iq4_nl)
TANDEM_NIBBLE_PANEL(mxfp4, block_mxfp4)
#undef TANDEM_NIBBLE_PANEL

}  // namespace tandem::cpu::detail
