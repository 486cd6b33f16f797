// Panel GEMMs for the 32-element formats on AVX2 (scheme in
// avx2/gemm_panel_avx2.h).
//
// Q4_0 in the order of dot_q4_0 (llama.cpp's repacked kernel: one fused
// multiply-add of each block's integer total). The codes stay unsigned and
// each token's block total starts from -8 times the block's activation sum,
// which q4_0_panel_prepare_avx2 appends to the activation row (the bytes the
// AVX-512 q4_0_panel_prepare writes): the same exact integer as subtracting
// 8 from every code.
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
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;
using panel_avx2::kHalf;
constexpr int NT = panel_avx2::kTokens;

// Per block of a half panel: codes [group 8][row 8][4] (elements 4 g ..),
// d per row.
struct HalfQ40 {
    alignas(32) uint8_t codes[8][kHalf][4];
    alignas(32) float d[kHalf];
};

// Block i of the 8 rows: group g is the low nibbles (g < 4) or the high
// ones of qs[4 (g % 4) ..].
void unpack_q4_0(const panel_avx2::HalfRows& rows, int64_t i, HalfQ40& p) {
    __m256i q[4];
    rows.lanes16(i, offsetof(block_q4_0, qs), q);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int g = 0; g < 8; ++g) {
        const __m256i codes = _mm256_and_si256(g < 4 ? q[g] : _mm256_srli_epi32(q[g - 4], 4), low4);
        _mm256_store_si256(reinterpret_cast<__m256i*>(p.codes[g]), codes);
    }
    _mm256_store_ps(p.d, rows.halves(i, offsetof(block_q4_0, d)));
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

size_t q4_0_panel_bytes_avx2(int64_t n_cols) { return 2 * sizeof(HalfQ40) * static_cast<size_t>(n_cols / 32); }

void q4_0_panel_prepare_avx2(quant::Type a_type, void* row, int64_t n_cols) {
    TANDEM_CHECK(a_type == quant::Type::Q8_0, "q4_0 panel: activations not Q8_0");
    panel_avx2::for_each_row_block<block_q8_0>(row, n_cols / 32, kQ4_0PanelExtraBytes, [](const block_q8_0& b, uint8_t* out) {
        // Sum of the 32 signed bytes: sum of (byte + 128) by vpsadbw, less 32 * 128.
        const __m256i q = _mm256_xor_si256(load256(b.qs), _mm256_set1_epi8(static_cast<char>(0x80)));
        const __m256i s = _mm256_sad_epu8(q, _mm256_setzero_si256());
        const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        const int32_t sum = static_cast<int32_t>(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 32 * 128;
        const int32_t start = -8 * sum;
        static_assert(sizeof start == kQ4_0PanelExtraBytes, "one start per block");
        std::memcpy(out, &start, sizeof start);
    });
}

void q4_0_panel_gemm_avx2(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                          size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    const int64_t nb = n_cols / 32;
    const HalfQ40* blocks = panel_avx2::unpack_panel<HalfQ40, block_q4_0>(w, row_stride, n_rows, nb, buf, unpack_q4_0);
    const __m256i ones = _mm256_set1_epi16(1);
    panel_avx2::for_token_tiles<block_q8_0>(a, a_stride, n_tokens, n_rows, y, ldy, [&](int h, const block_q8_0* const* act, __m256* out) {
        const HalfQ40* half = blocks + h * nb;
        const uint8_t* start[NT];
        for (int t = 0; t < NT; ++t) start[t] = panel_avx2::extras(act[t], nb);
        __m256 acc[NT];
        for (auto& v : acc) v = _mm256_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const HalfQ40& p = half[i];
            // Codes <= 15: the eight groups' pair sums add exactly in int16
            // (8 x 2 x 15 x 128 = 30720).
            __m256i dot[NT];
            for (int g = 0; g < 8; ++g) {
                const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.codes[g]));
                for (int t = 0; t < NT; ++t) {
                    const __m256i pr = panel_avx2::pairs(wv, act[t][i].qs + 4 * g);
                    dot[t] = g == 0 ? pr : panel_avx2::add16(dot[t], pr);
                }
            }
            const __m256 d = _mm256_load_ps(p.d);
            for (int t = 0; t < NT; ++t) {
                const __m256i total = _mm256_add_epi32(_mm256_madd_epi16(dot[t], ones), panel_avx2::bcast4(start[t] + kQ4_0PanelExtraBytes * static_cast<size_t>(i)));
                const __m256 da = _mm256_set1_ps(f16(act[t][i].d));
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(d, da), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = acc[t];
    });
}

}  // namespace tandem::cpu::detail
