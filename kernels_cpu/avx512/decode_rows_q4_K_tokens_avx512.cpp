// Several tokens (a serving step: one token per stream) over rows of Q4_K
// with AVX-512 VNNI, each token in the order of the one-token rows kernel
// (decode_rows_kquants_avx512.cpp: per row and super-block the integer
// total and the integer minimum sum, converted once each and fused into
// the row's two accumulators; the result is acc - acc_min). The integers
// are exact in any order, so only their float steps fix the bits, and each
// token gets the bits it gets alone.
//
// Sixteen rows in the lanes. The 16 rows of a pass are read a dword at a
// time and transposed in registers, so that lane i of a register holds
// four code bytes of row kLaneRow[i]; each vpdpbusd then multiplies those
// against one broadcast dword of a token's activation. A row's sums never
// leave its lane, so there is no reduction tree per super-block and
// token: the sub-block scales are one vpmulld per sub-block and token for
// all sixteen rows, the minimum sums four vpdpwssd, and the float steps
// one conversion and one fused multiply-add each for sixteen rows. The
// transposes (24 shuffles per 32 code bytes of 16 rows) are shared by the
// tokens.
//
// The kernel before this one kept each row's 16 lanes apart and reduced
// eight rows per token and super-block with a tree (stores, shuffles,
// two-source permutes), after four vpmaddwd/vpdpwssd scale products per
// token; those scale products alone took ~31 cycles of its ~41 per row,
// super-block and four tokens (Zen 4; a loop of just them ran 31.4 cycles,
// just its 16 vpdpbusd 17-20).
//
// The 16 rows stream side by side, a super-block of each at a time, so the
// hardware prefetchers see 16 short streams: each step asks for the same
// super-block of the 16 rows one pass on (w + 16 rows) into L2, in the
// order the next pass reads them. (Prefetching the next pass in address
// order, or the current rows 1-4 super-blocks ahead into L1, was slower.)
//
// Zen 4, old and new kernel taking turns in one process, same bits, new/old:
// four tokens on 512 rows of 2048 columns from L2, 0.61; from DRAM (141 MB
// of rows) on two threads, 0.77-0.78 at 2048 columns and 0.43-0.51 at 5632;
// two tokens 0.64 (L2), 0.93 (2048, DRAM), 0.64 (5632, DRAM); one token
// 0.84 (L2), about 1.0 from DRAM.
#include <cstdint>

#include "kernels_cpu/avx512/decode_rows_kquants_avx512.h"
#include "kernels_cpu/simd_x86.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

using kq_rows::PreparedBlock;
using quant::block_q4_K;
using quant::kQK_K;

static_assert(kDecodeRows == 16, "sixteen rows in the lanes");

// Lane i of every register below holds row kLaneRow[i] of the pass: the
// order the dword transposes leave.
constexpr int kLaneRow[16] = {0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15};

// A zero register made by the zeroing idiom, which the renamer handles
// without an execution port (the compiler's copies of one zero register
// into each destination of vpdpbusd take a vector port each).
inline __m512i fresh_zero() {
    __m512i z;
    asm volatile("vpxord %0, %0, %0" : "=v"(z));
    return z;
}

// acc + the dot products of w's bytes (unsigned) against the four signed
// bytes at p in every lane, the dword broadcast inside the instruction
// (GCC loads it into a register of its own first: 0.66 -> 0.61 new/old).
inline __m512i dpbusd_broadcast(__m512i acc, __m512i w, const uint8_t* p) {
    asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int32_t*>(p)));
    return acc;
}

// The 32 code bytes of chunk c (qs[32c .. 32c + 31]) of the 16 rows' blocks
// as eight registers, t[g] holding dword g of every row.
inline void transpose_chunk(const block_q4_K* const* b, int c, __m512i* t) {
    __m512i r[8];  // rows a and a + 8
    for (int a = 0; a < 8; ++a) {
        r[a] = _mm512_inserti64x4(_mm512_castsi256_si512(load256(b[a]->qs + 32 * c)), load256(b[a + 8]->qs + 32 * c), 1);
    }
    __m512i v[8];
    for (int h = 0; h < 2; ++h) {
        const __m512i* q = r + 4 * h;
        const __m512i u0 = _mm512_unpacklo_epi32(q[0], q[1]), u1 = _mm512_unpackhi_epi32(q[0], q[1]);
        const __m512i u2 = _mm512_unpacklo_epi32(q[2], q[3]), u3 = _mm512_unpackhi_epi32(q[2], q[3]);
        // Per 128-bit lane, four rows' dword j | j + 4 (lanes 0, 2 | 1, 3).
        v[4 * h + 0] = _mm512_unpacklo_epi64(u0, u2);
        v[4 * h + 1] = _mm512_unpackhi_epi64(u0, u2);
        v[4 * h + 2] = _mm512_unpacklo_epi64(u1, u3);
        v[4 * h + 3] = _mm512_unpackhi_epi64(u1, u3);
    }
    for (int g = 0; g < 4; ++g) {
        t[g] = _mm512_shuffle_i32x4(v[g], v[4 + g], 0x88);
        t[g + 4] = _mm512_shuffle_i32x4(v[g], v[4 + g], 0xDD);
    }
}

// Bytes 0..15 of the 16 rows' blocks (d, dmin, the 12 scale bytes) as four
// registers, w[k] holding dword k of every row.
inline void transpose_heads(const block_q4_K* const* b, __m512i* w) {
    __m512i z[4];  // 128-bit lanes: rows a, a + 8, a + 4, a + 12
    for (int a = 0; a < 4; ++a) {
        z[a] = _mm512_castsi128_si512(load128(b[a]));
        z[a] = _mm512_inserti32x4(z[a], load128(b[a + 8]), 1);
        z[a] = _mm512_inserti32x4(z[a], load128(b[a + 4]), 2);
        z[a] = _mm512_inserti32x4(z[a], load128(b[a + 12]), 3);
    }
    const __m512i a0 = _mm512_unpacklo_epi32(z[0], z[1]), a1 = _mm512_unpackhi_epi32(z[0], z[1]);
    const __m512i a2 = _mm512_unpacklo_epi32(z[2], z[3]), a3 = _mm512_unpackhi_epi32(z[2], z[3]);
    w[0] = _mm512_unpacklo_epi64(a0, a2);
    w[1] = _mm512_unpackhi_epi64(a0, a2);
    w[2] = _mm512_unpacklo_epi64(a1, a3);
    w[3] = _mm512_unpackhi_epi64(a1, a3);
}

// Byte shuffle taking byte `first` of every dword into its low byte (and,
// with pair, byte first + 1 into its third byte: two words), zeros elsewhere.
__m512i byte_pick(int first, bool pair) {
    alignas(64) int8_t idx[64];
    for (int i = 0; i < 16; ++i) {
        const int8_t none = static_cast<int8_t>(0x80);
        idx[4 * i + 0] = static_cast<int8_t>(4 * (i % 4) + first);
        idx[4 * i + 1] = none;
        idx[4 * i + 2] = pair ? static_cast<int8_t>(4 * (i % 4) + first + 1) : none;
        idx[4 * i + 3] = none;
    }
    return _mm512_load_si512(idx);
}

// Where to ask for the next pass's rows: one pass on (the rows of a matmul
// lie one after another, and a thread takes its passes in order; past the
// last one a prefetch is only a wasted hint).
inline void prefetch_next_pass(const block_q4_K* b, size_t pass_bytes) {
    const char* p = reinterpret_cast<const char*>(b) + pass_bytes;
    for (size_t o = 0; o < sizeof(block_q4_K); o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
}

// Token t's prepared activation at a[t], its outputs at y[t].
template <int NT>
void rows16_tokens(int64_t n, const void* w, size_t row_stride, int n_rows, const uint8_t* const* a, float* const* y) {
    const int64_t nb = n / kQK_K;
    const kq_rows::TokenActs<NT> acts(a, nb);
    const block_q4_K* x[kDecodeRows];
    decode_row_pointers(w, row_stride, n_rows, kDecodeRows, x);
    const size_t pass_bytes = kDecodeRows * row_stride;
    const __m512i low4 = _mm512_set1_epi8(0x0F), six = _mm512_set1_epi8(0x3F), top2 = _mm512_set1_epi8(0x30);
    const __m512i high4 = _mm512_set1_epi8(static_cast<char>(0xF0));
    const __m512i pick[4] = {byte_pick(0, false), byte_pick(1, false), byte_pick(2, false), byte_pick(3, false)};
    const __m512i pick_pair[2] = {byte_pick(0, true), byte_pick(2, true)};

    __m512 acc[NT], acc_min[NT];
    for (int t = 0; t < NT; ++t) acc[t] = acc_min[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const block_q4_K* b[kDecodeRows];
        for (int r = 0; r < kDecodeRows; ++r) {
            b[r] = x[r] + i;
            prefetch_next_pass(b[r], pass_bytes);
        }
        __m512i head[4];
        transpose_heads(b, head);
        // Bytes j of [s0..s3], [m0..m3], [s4..s7], [m4..m7]: the six-bit
        // scales and minimums (quant::ref's get_scale_min_k4, per byte).
        const __m512i s_lo = _mm512_and_si512(head[1], six);
        const __m512i m_lo = _mm512_and_si512(head[2], six);
        const __m512i s_hi = _mm512_or_si512(_mm512_and_si512(head[3], low4), _mm512_and_si512(_mm512_srli_epi32(head[1], 2), top2));
        const __m512i m_hi =
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(head[3], 4), low4), _mm512_and_si512(_mm512_srli_epi32(head[2], 2), top2));
        // d / 16: the totals below are 16 x the integer total (see hi).
        const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(head[0])), _mm512_set1_ps(0.0625f));
        const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(head[0], 16)));

        __m512i total[NT];
        for (int t = 0; t < NT; ++t) total[t] = _mm512_setzero_si512();
        for (int c = 0; c < 4; ++c) {
            __m512i tq[8];
            transpose_chunk(b, c, tq);
            // Chunk c's low nibbles are sub-block 2c, its high ones 2c + 1;
            // their activation bytes in the prepared layout (the one-token
            // kernel's code registers: low_sub_block/high_sub_block).
            const int lo_at = 64 * (2 * (c / 2)) + 32 * (c % 2), hi_at = lo_at + 64;
            __m512i dlo[NT], dhi[NT];
            for (int t = 0; t < NT; ++t) dlo[t] = fresh_zero(), dhi[t] = fresh_zero();
            for (int g = 0; g < 8; ++g) {
                const __m512i lo = _mm512_and_si512(tq[g], low4);
                const __m512i hi = _mm512_and_si512(tq[g], high4);  // 16 x the high nibble
                for (int t = 0; t < NT; ++t) {
                    const auto* p = reinterpret_cast<const uint8_t*>(acts.act[t][i].act);
                    dlo[t] = dpbusd_broadcast(dlo[t], lo, p + lo_at + 4 * g);
                    dhi[t] = dpbusd_broadcast(dhi[t], hi, p + hi_at + 4 * g);
                }
            }
            // total = 16 x the integer total: the high nibbles are kept in
            // place (one mask, no shift: 16 x the code) and the low
            // sub-block's scale is taken 16 times. |16 x total| <= 8 x 32 x
            // 240 x 127 x 63 < 2^31: exact. The float step multiplies by
            // d / 16 instead of d. Scaling by 16 is exact while d x da >=
            // 2^-122 (16 x the smallest normal float; a block below it adds
            // under 1e-28 to a row), so fma(float(16 t), d/16 x da, acc)
            // rounds the same exact product as fma(float(t), d x da, acc):
            // the same bits (new/old 0.97-0.99 from L2, 0.94-0.95 from DRAM
            // at 4 tokens).
            const __m512i s = c < 2 ? s_lo : s_hi;
            const __m512i sc_lo = _mm512_slli_epi32(_mm512_shuffle_epi8(s, pick[(2 * c) % 4]), 4);  // 16 x
            const __m512i sc_hi = _mm512_shuffle_epi8(s, pick[(2 * c + 1) % 4]);
            for (int t = 0; t < NT; ++t) {
                total[t] = _mm512_add_epi32(total[t], _mm512_add_epi32(_mm512_mullo_epi32(dlo[t], sc_lo), _mm512_mullo_epi32(dhi[t], sc_hi)));
            }
        }
        // Minimums as word pairs (m0, m1), (m2, m3), (m4, m5), (m6, m7),
        // against the activation's 32-element sums (words 8..15 of sums).
        const __m512i mw[4] = {_mm512_shuffle_epi8(m_lo, pick_pair[0]), _mm512_shuffle_epi8(m_lo, pick_pair[1]),
                               _mm512_shuffle_epi8(m_hi, pick_pair[0]), _mm512_shuffle_epi8(m_hi, pick_pair[1])};
        for (int t = 0; t < NT; ++t) {
            const auto* sums = reinterpret_cast<const uint8_t*>(&acts.act[t][i].sums) + 16;
            __m512i ms = _mm512_madd_epi16(mw[0], _mm512_set1_epi32(static_cast<int>(load_u32(sums))));
            for (int p = 1; p < 4; ++p) ms = _mm512_dpwssd_epi32(ms, mw[p], _mm512_set1_epi32(static_cast<int>(load_u32(sums + 4 * p))));
            const __m512 da = _mm512_set1_ps(acts.d[t][i]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total[t]), _mm512_mul_ps(d, da), acc[t]);
            acc_min[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ms), _mm512_mul_ps(dmin, da), acc_min[t]);
        }
    }
    for (int t = 0; t < NT; ++t) {
        alignas(64) float out[16];
        _mm512_store_ps(out, _mm512_sub_ps(acc[t], acc_min[t]));
        for (int l = 0; l < 16; ++l) {
            if (kLaneRow[l] < n_rows) y[t][kLaneRow[l]] = out[l];
        }
    }
}

}  // namespace

void dot_q4_K_rows_multi_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, size_t a_stride,
                                int nt, float* y, int64_t ldy) {
    // All nt tokens in one pass, transposed once: 5-7 tokens took 0.75-0.94
    // of the time of a pass of four and one of the rest; eight tokens the
    // same as two passes of four (their sums no longer fit the registers).
    in_passes<kMaxDecodeTokens>(a, a_stride, nt, y, ldy, [&](auto nt_pass, const uint8_t* const* acts, float* const* ys) {
        rows16_tokens<decltype(nt_pass)::value>(n, w, row_stride, n_rows, acts, ys);
    });
}

}  // namespace tandem::cpu::detail
