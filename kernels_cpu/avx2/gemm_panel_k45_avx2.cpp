// Panel GEMMs for Q4_K and Q5_K batch rows on AVX2 (scheme in
// avx2/gemm_panel_avx2.h), in the float orders of dot_q4_K_batch (spans of
// two sub-blocks, scale and minimum terms in separate fused multiply-add
// chains: llama.cpp's repacked kernel) and dot_q5_K_batch (super-block
// total x d, the minimum term with one fused multiply-add, then one with
// the activation scale: its tiled kernel). Both read the 32-element
// activation sums k4_panel_prepare_avx2 appends (the bytes the AVX-512
// k4_panel_prepare writes), against which one vpmaddwd gives the minimum
// term of two sub-blocks.
#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <cstddef>

#include "kernels_cpu/avx2/gemm_panel_avx2.h"
#include "kernels_cpu/gemm_panel.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;
using panel_avx2::kHalf;
constexpr int NT = panel_avx2::kTokens;

// Per super-block of a half panel: codes [sub-block 8][group 8][row 8][4]
// (elements 32 s + 4 g ..), scales as int16 pairs (sc, sc) per sub-block
// and row (vpmaddwd scales both pair sums of a row by them), minimums as
// int16 pairs of neighbouring sub-blocks (m 2j, m 2j+1) against the
// activation's 32-element sums of those two, d and dmin per row.
struct HalfK4 {
    alignas(32) uint8_t codes[8][8][kHalf][4];
    alignas(32) int32_t scale2[8][kHalf];
    alignas(32) int32_t min_pair[4][kHalf];
    alignas(32) float d[kHalf];
    alignas(32) float dmin[kHalf];
};

// The 16-byte header of the 8 rows (d, dmin, 12 bytes of 6-bit scales and
// minimums), as element::q4_K_scale_min on four sub-blocks per dword lane:
// scale bytes 0-3 (b0), 4-7 (b1), 8-11 (b2); sub-blocks 0-3: b0 & 63,
// b1 & 63; 4-7: (b2 & 15) | (b0 >> 6) << 4, (b2 >> 4) | (b1 >> 6) << 4.
void unpack_header(const panel_avx2::HalfRows& rows, int64_t i, HalfK4& p) {
    using panel_avx2::move_byte_bits;
    __m256i v[4];
    rows.lanes16(i, 0, v);
    const __m256i b0 = v[1], b1 = v[2], b2 = v[3];
    const __m256i sc[2] = {move_byte_bits(b0, 0, 0, 6), _mm256_or_si256(move_byte_bits(b2, 0, 0, 4), move_byte_bits(b0, 6, 4, 2))};
    const __m256i mn[2] = {move_byte_bits(b1, 0, 0, 6), _mm256_or_si256(move_byte_bits(b2, 4, 0, 4), move_byte_bits(b1, 6, 4, 2))};
    const __m256i byte = _mm256_set1_epi32(0xFF), byte1 = _mm256_set1_epi32(0xFF00);
    for (int s = 0; s < 8; ++s) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(p.scale2[s]), panel_avx2::byte_as_pair(sc[s / 4], s % 4));
    }
    for (int j = 0; j < 4; ++j) {
        // Bytes 2 (j % 2) and 2 (j % 2) + 1 of the minimums' dword, as words.
        const __m256i m = _mm256_srli_epi32(mn[j / 2], 16 * (j % 2));
        const __m256i pair = _mm256_or_si256(_mm256_and_si256(m, byte), _mm256_slli_epi32(_mm256_and_si256(m, byte1), 8));
        _mm256_store_si256(reinterpret_cast<__m256i*>(p.min_pair[j]), pair);
    }
    // d | dmin << 16 per lane: words [d 0-3, dmin 0-3 | d 4-7, dmin 4-7], then
    // the quadwords reordered to [d 0-7 | dmin 0-7].
    const __m256i words = _mm256_packus_epi32(_mm256_and_si256(v[0], _mm256_set1_epi32(0xFFFF)), _mm256_srli_epi32(v[0], 16));
    const __m256i ordered = _mm256_permute4x64_epi64(words, _MM_SHUFFLE(3, 1, 2, 0));
    _mm256_store_ps(p.d, _mm256_cvtph_ps(_mm256_castsi256_si128(ordered)));
    _mm256_store_ps(p.dmin, _mm256_cvtph_ps(_mm256_extracti128_si256(ordered, 1)));
}

// Super-block i of the 8 rows: qs bytes 32k .. 32k + 31 hold sub-block 2k
// in their low nibbles, 2k + 1 in their high ones; Q5_K adds bit s of
// qh[e] as bit 4 of element e of sub-block s.
template <bool kFive>
void unpack_k45(const panel_avx2::HalfRows& rows, int64_t i, HalfK4& p) {
    using Block = std::conditional_t<kFive, block_q5_K, block_q4_K>;
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256i qh[8];
    if constexpr (kFive) rows.lanes32(i, offsetof(block_q5_K, qh), qh);
    for (int k = 0; k < 4; ++k) {
        __m256i g[8];
        rows.lanes32(i, offsetof(Block, qs) + 32 * k, g);
        for (int j = 0; j < 8; ++j) {
            for (int hi = 0; hi < 2; ++hi) {
                const int s = 2 * k + hi;
                __m256i c = _mm256_and_si256(hi == 0 ? g[j] : _mm256_srli_epi32(g[j], 4), low4);
                if constexpr (kFive) c = _mm256_or_si256(c, panel_avx2::move_byte_bits(qh[j], s, 4, 1));
                _mm256_store_si256(reinterpret_cast<__m256i*>(p.codes[s][j]), c);
            }
        }
    }
    unpack_header(rows, i, p);
}

// Sub-block s against NT tokens, added (or, first, assigned) to isum:
// vpmaddubsw pair sums added in int16 over runs of groups of four, then
// widened and scaled by one vpmaddwd per run. Q4_K codes <= 15 against
// |activation| <= 128: 8 x 2 x 15 x 128 = 30720, so one run of eight;
// Q5_K's reach 31: two runs of four (4 x 2 x 31 x 128 = 31744).
template <int kRun>
inline void sub_block(const HalfK4& p, int s, const block_q8_K* const* act, int64_t i, __m256i* isum, bool first) {
    const __m256i sc = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.scale2[s]));
    for (int g0 = 0; g0 < 8; g0 += kRun) {
        __m256i dot[NT];
        for (int g = g0; g < g0 + kRun; ++g) {
            const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.codes[s][g]));
            for (int t = 0; t < NT; ++t) {
                const __m256i pr = panel_avx2::pairs(wv, act[t][i].qs + 32 * s + 4 * g);
                dot[t] = g == g0 ? pr : panel_avx2::add16(dot[t], pr);
            }
        }
        for (int t = 0; t < NT; ++t) {
            const __m256i m = _mm256_madd_epi16(dot[t], sc);
            isum[t] = first && g0 == 0 ? m : _mm256_add_epi32(isum[t], m);
        }
    }
}

// The minimum term of sub-blocks 2j and 2j + 1 of block i against one
// token's 32-element sums (sums: its row's extras).
inline __m256i min_span(const HalfK4& p, int j, const uint8_t* sums, int64_t i) {
    const __m256i mn = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.min_pair[j]));
    return _mm256_madd_epi16(mn, panel_avx2::bcast4(sums + kK4PanelExtraBytes * static_cast<size_t>(i) + 4 * j));
}

}  // namespace

void k4_panel_prepare_avx2(quant::Type a_type, void* row, int64_t n_cols) {
    TANDEM_CHECK(a_type == quant::Type::Q8_K, "q4_K/q5_K panel: activations not Q8_K");
    static_assert(kK4PanelExtraBytes == sizeof(__m128i), "eight int16 sums per super-block");
    panel_avx2::for_each_row_block<block_q8_K>(row, n_cols / kQK_K, kK4PanelExtraBytes, [](const block_q8_K& b, uint8_t* out) {
        // Sums of 32 from the pairs of 16-element sums (at most 32 x 128:
        // exact in 16 bits, so the saturating pack is exact too).
        const __m256i pairs = _mm256_madd_epi16(load256(b.bsums), _mm256_set1_epi16(1));
        const __m128i sums = _mm_packs_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out), sums);
    });
}

size_t q4_K_panel_bytes_avx2(int64_t n_cols) { return 2 * sizeof(HalfK4) * static_cast<size_t>(n_cols / kQK_K); }
size_t q5_K_panel_bytes_avx2(int64_t n_cols) { return q4_K_panel_bytes_avx2(n_cols); }

void q4_K_panel_gemm_avx2(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                          size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    const int64_t nb = n_cols / kQK_K;
    const HalfK4* blocks = panel_avx2::unpack_panel<HalfK4, block_q4_K>(w, row_stride, n_rows, nb, buf, unpack_k45<false>);
    panel_avx2::for_token_tiles<block_q8_K>(a, a_stride, n_tokens, n_rows, y, ldy, [&](int h, const block_q8_K* const* act, __m256* out) {
        const HalfK4* half = blocks + h * nb;
        __m256 acc[NT], acc_min[NT];
        for (int t = 0; t < NT; ++t) acc[t] = acc_min[t] = _mm256_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const HalfK4& p = half[i];
            for (int j = 0; j < 4; ++j) {  // spans of two sub-blocks (64 elements)
                __m256i isum[NT];
                sub_block<8>(p, 2 * j, act, i, isum, true);
                sub_block<8>(p, 2 * j + 1, act, i, isum, false);
                const __m256 d = _mm256_load_ps(p.d);
                for (int t = 0; t < NT; ++t) {
                    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(d, _mm256_set1_ps(act[t][i].d)), acc[t]);
                }
            }
        }
        // The minimum chain, separate in the reference too: its own pass
        // keeps the loop above within the sixteen registers.
        for (int t = 0; t < NT; ++t) {
            const uint8_t* sums = panel_avx2::extras(act[t], nb);
            for (int64_t i = 0; i < nb; ++i) {
                const HalfK4& p = half[i];
                const __m256 ddmin = _mm256_mul_ps(_mm256_load_ps(p.dmin), _mm256_set1_ps(act[t][i].d));
                for (int j = 0; j < 4; ++j) acc_min[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_span(p, j, sums, i)), ddmin, acc_min[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = _mm256_sub_ps(acc[t], acc_min[t]);
    });
}

void q5_K_panel_gemm_avx2(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                          size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    const int64_t nb = n_cols / kQK_K;
    const HalfK4* blocks = panel_avx2::unpack_panel<HalfK4, block_q5_K>(w, row_stride, n_rows, nb, buf, unpack_k45<true>);
    panel_avx2::for_token_tiles<block_q8_K>(a, a_stride, n_tokens, n_rows, y, ldy, [&](int h, const block_q8_K* const* act, __m256* out) {
        const HalfK4* half = blocks + h * nb;
        const uint8_t* sums[NT];
        for (int t = 0; t < NT; ++t) sums[t] = panel_avx2::extras(act[t], nb);
        __m256 acc[NT];
        for (auto& v : acc) v = _mm256_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const HalfK4& p = half[i];
            __m256i total[NT];
            for (int s = 0; s < 8; ++s) sub_block<4>(p, s, act, i, total, s == 0);
            const __m256 d = _mm256_load_ps(p.d), dmin = _mm256_load_ps(p.dmin);
            for (int t = 0; t < NT; ++t) {
                __m256i msum = min_span(p, 0, sums[t], i);
                for (int j = 1; j < 4; ++j) msum = _mm256_add_epi32(msum, min_span(p, j, sums[t], i));
                // v = fma(-dmin, msum, total * d); acc = fma(da, v, acc)
                const __m256 v = _mm256_fnmadd_ps(dmin, _mm256_cvtepi32_ps(msum), _mm256_mul_ps(_mm256_cvtepi32_ps(total[t]), d));
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(act[t][i].d), v, acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = acc[t];
    });
}

}  // namespace tandem::cpu::detail
