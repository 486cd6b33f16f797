// Several tokens (a serving step: one token per stream) over rows of Q4_K
// at the AVX2 level, each token in the order of the one-token rows kernel
// (decode_rows_x86.h: per row and super-block the integer total and the
// integer minimum sum, converted once each and fused into the row's two
// accumulators; the result is acc - acc_min), so each token gets the bits
// it gets alone. The activation is the Q8_K row as it is.
//
// Eight rows in the lanes, as the AVX-512 kernel does sixteen
// (avx512/decode_rows_q4_K_tokens_avx512.cpp): the rows are transposed a
// dword at a time, so lane r of a register holds four code bytes of row r,
// and vpmaddubsw multiplies them against one broadcast dword of a token's
// activation. All eight words of a lane belong to one sub-block, so the
// eight vpmaddubsw of a sub-block add as words (|word| <= 8 x 2 x 15 x 127
// < 2^15) and one vpmaddwd against the scale applies it: 9 multiply ops a
// row, token and super-block, where the kernel before (each row's own
// registers) took 16: a vpmaddwd per vpmaddubsw.
#include <cstdint>

#include "kernels_cpu/simd_x86.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

using quant::block_q4_K;
using quant::block_q8_K;
using quant::kQK_K;

constexpr int kRows = 8;  // rows in the lanes

// The 32 code bytes of chunk c (qs[32c .. 32c + 31]) of the eight rows'
// blocks: t[g] holds dword g of rows 0..7 in lanes 0..7.
inline void transpose_chunk(const block_q4_K* const* b, int c, __m256i* t) {
    __m256i r[kRows], v[kRows];
    for (int a = 0; a < kRows; ++a) r[a] = load256(b[a]->qs + 32 * c);
    transpose4x4_epi32(r, v);  // per 128-bit lane, rows 0..3 at dword j | j + 4
    transpose4x4_epi32(r + 4, v + 4);
    for (int g = 0; g < 4; ++g) {
        t[g] = _mm256_permute2x128_si256(v[g], v[4 + g], 0x20);
        t[g + 4] = _mm256_permute2x128_si256(v[g], v[4 + g], 0x31);
    }
}

// Bytes 0..15 of the eight rows' blocks (d, dmin, the 12 scale bytes):
// w[k] holds dword k of rows 0..7.
inline void transpose_heads(const block_q4_K* const* b, __m256i* w) {
    __m256i z[4];  // 128-bit lanes: rows a, a + 4
    for (int a = 0; a < 4; ++a) z[a] = _mm256_inserti128_si256(_mm256_castsi128_si256(load128(b[a])), load128(b[a + 4]), 1);
    transpose4x4_epi32(z, w);
}

// Byte shuffle putting byte `pick` of each dword into both of its words'
// low bytes (a word pair (v, v)), zeros elsewhere.
inline __m256i byte_pair(int pick) {
    const int8_t none = static_cast<int8_t>(0x80);
    alignas(32) int8_t idx[32];
    for (int i = 0; i < 8; ++i) {
        const auto at = static_cast<int8_t>(4 * (i % 4) + pick);
        idx[4 * i + 0] = at;
        idx[4 * i + 1] = none;
        idx[4 * i + 2] = at;
        idx[4 * i + 3] = none;
    }
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(idx));
}

// Lanes of dword k (d | dmin << 16) as floats: the low words, or the high.
inline __m256 half_floats(__m256i dw, bool high) {
    const __m256i v = high ? _mm256_srli_epi32(dw, 16) : _mm256_and_si256(dw, _mm256_set1_epi32(0xFFFF));
    return _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

template <int NT>
void rows8_tokens(int64_t n, const void* w, size_t row_stride, int n_rows, const block_q8_K* const* ya, float* const* y) {
    const int64_t nb = n / kQK_K;
    const block_q4_K* x[kRows];
    decode_row_pointers(w, row_stride, n_rows, kRows, x);
    const size_t pass_bytes = kRows * row_stride;
    const __m256i low4 = _mm256_set1_epi8(0x0F), six = _mm256_set1_epi8(0x3F), top2 = _mm256_set1_epi8(0x30);
    const __m256i pair[4] = {byte_pair(0), byte_pair(1), byte_pair(2), byte_pair(3)};

    __m256 acc[NT], acc_min[NT];
    for (int t = 0; t < NT; ++t) acc[t] = acc_min[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const block_q4_K* b[kRows];
        for (int r = 0; r < kRows; ++r) {
            b[r] = x[r] + i;
            // The same super-block of the next pass's rows, into L2.
            const char* p = reinterpret_cast<const char*>(b[r]) + pass_bytes;
            for (size_t o = 0; o < sizeof(block_q4_K); o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
        }
        __m256i head[4];
        transpose_heads(b, head);
        // Bytes j of [s0..s3], [m0..m3], [s4..s7], [m4..m7] (get_scale_min_k4).
        const __m256i s_lo = _mm256_and_si256(head[1], six);
        const __m256i m_lo = _mm256_and_si256(head[2], six);
        const __m256i s_hi = _mm256_or_si256(_mm256_and_si256(head[3], low4), _mm256_and_si256(_mm256_srli_epi32(head[1], 2), top2));
        const __m256i m_hi =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(head[3], 4), low4), _mm256_and_si256(_mm256_srli_epi32(head[2], 2), top2));

        __m256i total[NT];
        for (int t = 0; t < NT; ++t) total[t] = _mm256_setzero_si256();
        for (int c = 0; c < 4; ++c) {
            __m256i tq[8];
            transpose_chunk(b, c, tq);
            // Chunk c's low nibbles: elements 64c + 4g .. + 3 (sub-block
            // 2c); high nibbles: 32 further on (sub-block 2c + 1).
            __m256i wlo[NT], whi[NT];
            for (int t = 0; t < NT; ++t) wlo[t] = whi[t] = _mm256_setzero_si256();
            for (int g = 0; g < 8; ++g) {
                const __m256i lo = _mm256_and_si256(tq[g], low4);
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(tq[g], 4), low4);
                for (int t = 0; t < NT; ++t) {
                    const int8_t* q8 = ya[t][i].qs + 64 * c + 4 * g;
                    wlo[t] = _mm256_add_epi16(wlo[t], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(static_cast<int>(load_u32(q8)))));
                    whi[t] = _mm256_add_epi16(whi[t], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(static_cast<int>(load_u32(q8 + 32)))));
                }
            }
            const __m256i s = c < 2 ? s_lo : s_hi;
            const __m256i sc_lo = _mm256_shuffle_epi8(s, pair[(2 * c) % 4]);
            const __m256i sc_hi = _mm256_shuffle_epi8(s, pair[(2 * c + 1) % 4]);
            for (int t = 0; t < NT; ++t) {
                total[t] = _mm256_add_epi32(total[t], _mm256_add_epi32(_mm256_madd_epi16(wlo[t], sc_lo), _mm256_madd_epi16(whi[t], sc_hi)));
            }
        }
        const __m256 d = half_floats(head[0], false), dmin = half_floats(head[0], true);
        // Minimum j against the 32-element sum j (two 16-element bsums).
        const __m256i mw[8] = {_mm256_shuffle_epi8(m_lo, pair[0]), _mm256_shuffle_epi8(m_lo, pair[1]),
                               _mm256_shuffle_epi8(m_lo, pair[2]), _mm256_shuffle_epi8(m_lo, pair[3]),
                               _mm256_shuffle_epi8(m_hi, pair[0]), _mm256_shuffle_epi8(m_hi, pair[1]),
                               _mm256_shuffle_epi8(m_hi, pair[2]), _mm256_shuffle_epi8(m_hi, pair[3])};
        for (int t = 0; t < NT; ++t) {
            const int16_t* bs = ya[t][i].bsums;
            __m256i ms = _mm256_madd_epi16(mw[0], _mm256_set1_epi32(static_cast<int>(load_u32(bs))));
            for (int j = 1; j < 8; ++j) ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mw[j], _mm256_set1_epi32(static_cast<int>(load_u32(bs + 2 * j)))));
            const __m256 da = _mm256_set1_ps(ya[t][i].d);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total[t]), _mm256_mul_ps(d, da), acc[t]);
            acc_min[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dmin, da), acc_min[t]);
        }
    }
    for (int t = 0; t < NT; ++t) {
        alignas(32) float out[kRows];
        _mm256_store_ps(out, _mm256_sub_ps(acc[t], acc_min[t]));
        for (int r = 0; r < n_rows; ++r) y[t][r] = out[r];
    }
}

}  // namespace

void dot_q4_K_rows_multi_avx2(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, size_t a_stride, int nt,
                              float* y, int64_t ldy) {
    in_passes<4>(a, a_stride, nt, y, ldy, [&](auto nt_pass, const uint8_t* const* acts, float* const* ys) {
        constexpr int NT = decltype(nt_pass)::value;
        const block_q8_K* ya[NT];
        for (int t = 0; t < NT; ++t) ya[t] = reinterpret_cast<const block_q8_K*>(acts[t]);
        for (int r0 = 0; r0 < n_rows; r0 += kRows) {
            float* yr[NT];
            for (int t = 0; t < NT; ++t) yr[t] = ys[t] + r0;
            rows8_tokens<NT>(n, static_cast<const uint8_t*>(w) + static_cast<size_t>(r0) * row_stride, row_stride,
                             n_rows - r0 < kRows ? n_rows - r0 : kRows, ya, yr);
        }
    });
}

}  // namespace tandem::cpu::detail
