// Decode (one token) over rows of Q4_K and Q2_K with AVX-512 VNNI (and of
// Q5_K, in its own order: at the end of the file), in the
// order of their single-row kernels (KSpansOrder with whole super-blocks,
// llama.cpp's: per row and super-block the integer total and the integer
// minimum sum, each converted once and fused into the row's accumulators;
// the result is acc - acc_min). Described for Q4_K; Q2_K's policy below
// differs only in how codes, scales and minimums come out of its block.
//
// Why: the AVX2 rows kernel (decode_rows_x86.h) spends ~100 instructions on
// a 144-byte super-block (21 GB/s per core from L2), about as long as
// memory takes to deliver it, and the two do not overlap well. Here, per
// super-block of a row:
// - the 128 code bytes come in as two 64-byte loads and split into four
//   registers of nibbles, [sub-blocks 0|2], [1|3], [4|6], [5|7], each
//   multiplied by the activation arranged the same way once per matmul
//   (prepare_q4_K_rows): four vpdpbusd give four-element lane sums;
// - the lane sums fit 16 bits (|4 x 15 x 128| < 2^15), so two packs and
//   two vpdpwssd against the sub-block scales give the integer total in 16
//   lanes (instead of four 32-bit multiplies and adds);
// - the minimum sum is one vpdpwssd of the eight minimums against the
//   activation's 32-element sums (made by prepare);
// - per row each total folds to four lanes and both go to a small table;
//   once the eighth row has a super-block, one hadd tree across the eight
//   rows gives its totals with the rows in the lanes, and the float steps
//   run there, inside that last row's loop so its loads overlap them.
// Rows are read one after another (prefetchers follow one stream well).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels_cpu/avx512/decode_rows_kquants_avx512.h"
#include "kernels_cpu/simd_x86.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

using quant::block_q2_K;
using quant::block_q4_K;
using quant::block_q5_K;
using quant::block_q8_K;
using quant::kQK_K;

using kq_rows::d_offset;
using kq_rows::high_sub_block;
using kq_rows::low_sub_block;
using kq_rows::prefetch_ahead;
using kq_rows::PreparedBlock;

using kq_rows::kGroupRows;
constexpr int64_t kSpan = 128;  // super-blocks per pass over a row: 18 KiB of weights

// Word index into [scales 0..7, minimums 0..7] for word i of a packed pair
// of lane-sum registers: 128-bit lane k holds sub-blocks (k < 2 ? 0 : 2)
// and +1 (words 0..3 and 4..7), plus `first` (0, or 4 for the upper half).
__m512i scale_word_index(int first) {
    alignas(64) int16_t idx[32];
    for (int i = 0; i < 32; ++i) idx[i] = static_cast<int16_t>(first + (i / 8 < 2 ? 0 : 2) + (i % 8 < 4 ? 0 : 1));
    return _mm512_load_si512(idx);
}

// Q4_K: codes [sub-blocks 0|2], [1|3], [4|6], [5|7] as nibbles of the
// two 64-byte halves of qs; lane sums at most |4 x 15 x 128| < 2^15.
struct Q4KRows {
    using Block = block_q4_K;
    // Activation register k: sub-blocks s and s + 2, s = 0, 1, 4, 5.
    static int first_piece(int k) { return 32 * low_sub_block(k); }
    static int second_piece(int k) { return 32 * high_sub_block(k); }
    // Lanes 4..7 whose sum is the minimum sum: mins has it there already
    // (lanes 0..3 multiply the scales by 0).
    static __m256i upper_mins(__m256i mins) { return mins; }
    static __m256i act_sums(const block_q8_K& y) {
        // Sums of 32 elements from the pairs of 16-element sums (exact in
        // 16 bits: at most 32 x 128).
        const __m256i pairs = _mm256_madd_epi16(load256(y.bsums), _mm256_set1_epi16(1));  // 8 x int32
        return _mm256_inserti128_si256(_mm256_setzero_si256(), _mm256_cvtepi32_epi16(pairs), 1);
    }
    struct Kernel {
        __m512i sc_lo = scale_word_index(0), sc_hi = scale_word_index(4);
        // A super-block's codes and scale words, once for every token.
        struct Unpacked {
            __m512i code[4], sc_lo, sc_hi;
            __m256i sm;
        };
        Unpacked unpack(const Block& b) const {
            Unpacked u;
            kq_rows::q4_K_code_registers(b.qs, u.code);
            // [scales, minimums] as 16 words.
            u.sm = _mm256_cvtepu8_epi16(q4_K_scales_mins_simd(b.scales));
            const __m512i sm512 = _mm512_castsi256_si512(u.sm);
            u.sc_lo = _mm512_permutexvar_epi16(sc_lo, sm512);
            u.sc_hi = _mm512_permutexvar_epi16(sc_hi, sm512);
            return u;
        }
        static void totals(const Unpacked& u, const __m512i* act, __m256i sums, __m512i& tot, __m256i& mins) {
            const __m512i d0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u.code[0], act[0]);
            const __m512i d1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u.code[1], act[1]);
            const __m512i d2 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u.code[2], act[2]);
            const __m512i d3 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u.code[3], act[3]);
            tot = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_packs_epi32(d0, d1), u.sc_lo);
            tot = _mm512_dpwssd_epi32(tot, _mm512_packs_epi32(d2, d3), u.sc_hi);
            mins = _mm256_dpwssd_epi32(_mm256_setzero_si256(), u.sm, sums);  // lanes 4..7
        }
        void totals(const Block& b, const __m512i* act, __m256i sums, __m512i& tot, __m256i& mins) const {
            totals(unpack(b), act, sums, tot, mins);
        }
    };
};

// Q2_K: 16 groups of 16 with a 4-bit scale (low nibble) and minimum (high
// nibble); element 128 h + 32 j + e is bits 2 j of qs[32 h + e]. Code
// register j = (qs >> 2 j) & 3 holds, in its four 128-bit lanes, groups
// 2 j, 2 j + 1, 8 + 2 j, 9 + 2 j; lane sums at most 4 x 3 x 128.
struct Q2KRows {
    using Block = block_q2_K;
    // Activation register j: elements 32 j .. and 128 + 32 j ..
    static int first_piece(int j) { return 32 * j; }
    static int second_piece(int j) { return 128 + 32 * j; }
    static __m256i act_sums(const block_q8_K& y) { return load256(y.bsums); }
    // Lanes 4..7 whose sum is the minimum sum: all eight lanes of mins
    // hold part of it, the lower half is added to the upper.
    static __m256i upper_mins(__m256i mins) { return _mm256_add_epi32(mins, _mm256_permute2x128_si256(mins, mins, 0x00)); }
    // Word i of the packed pair (register 2 p, 2 p + 1): 128-bit lane k
    // has groups base(k) + 4 p (words 0..3) and + 2 (words 4..7).
    static __m512i scale_index(int p) {
        alignas(64) int16_t idx[32];
        for (int i = 0; i < 32; ++i) {
            const int k = i / 8;
            idx[i] = static_cast<int16_t>((k < 2 ? k : 6 + k) + 4 * p + (i % 8 < 4 ? 0 : 2));
        }
        return _mm512_load_si512(idx);
    }
    struct Kernel {
        __m512i low2 = _mm512_set1_epi8(0x03), sc01 = scale_index(0), sc23 = scale_index(1);
        struct Unpacked {
            __m512i code[4], sc_lo, sc_hi;
            __m256i mn;
        };
        Unpacked unpack(const Block& b) const {
            Unpacked u;
            const __m512i q = _mm512_loadu_si512(b.qs);
            for (int j = 0; j < 4; ++j) u.code[j] = _mm512_and_si512(_mm512_srli_epi16(q, 2 * j), low2);
            const __m128i packed = load128(b.scales);
            const __m512i sc = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(packed, _mm_set1_epi8(0x0F))));
            u.mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0F)));
            u.sc_lo = _mm512_permutexvar_epi16(sc01, sc);
            u.sc_hi = _mm512_permutexvar_epi16(sc23, sc);
            return u;
        }
        static void totals(const Unpacked& u, const __m512i* act, __m256i sums, __m512i& tot, __m256i& mins) {
            __m512i d[4];
            for (int j = 0; j < 4; ++j) d[j] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u.code[j], act[j]);
            tot = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_packs_epi32(d[0], d[1]), u.sc_lo);
            tot = _mm512_dpwssd_epi32(tot, _mm512_packs_epi32(d[2], d[3]), u.sc_hi);
            mins = _mm256_dpwssd_epi32(_mm256_setzero_si256(), u.mn, sums);
        }
        void totals(const Block& b, const __m512i* act, __m256i sums, __m512i& tot, __m256i& mins) const {
            totals(unpack(b), act, sums, tot, mins);
        }
    };
};

size_t prepared_bytes(int64_t n) {
    const int64_t nb = n / kQK_K;
    return d_offset(nb) + static_cast<size_t>(nb) * sizeof(float);
}

template <class F>
void prepare(const void* a, int64_t n, void* out) {
    const int64_t nb = n / kQK_K;
    const auto* ya = static_cast<const block_q8_K*>(a);
    TANDEM_CHECK(reinterpret_cast<uintptr_t>(out) % 64 == 0, "decode rows: prepared activation not 64-byte aligned");
    auto* blocks = static_cast<PreparedBlock*>(out);
    auto* d = reinterpret_cast<float*>(static_cast<uint8_t*>(out) + d_offset(nb));
    for (int64_t i = 0; i < nb; ++i) {
        const int8_t* q = ya[i].qs;
        for (int k = 0; k < 4; ++k) {
            blocks[i].act[k] = _mm512_inserti64x4(_mm512_castsi256_si512(load256(q + F::first_piece(k))),
                                                  load256(q + F::second_piece(k)), 1);
        }
        blocks[i].sums = F::act_sums(ya[i]);
        blocks[i].pad = _mm256_setzero_si256();
        d[i] = ya[i].d;
    }
}

template <class F>
void decode_rows(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
    using Block = typename F::Block;
    const int64_t nb = n / kQK_K;
    const auto* act = static_cast<const PreparedBlock*>(a);
    const auto* act_d = reinterpret_cast<const float*>(static_cast<const uint8_t*>(a) + d_offset(nb));
    const Block* x[kDecodeRows];
    const int n_groups = kq_rows::row_groups(w, row_stride, n_rows, x);
    const typename F::Kernel kernel;

    // Per super-block and row: four lanes whose sum is the integer total,
    // four whose sum is the minimum sum (reduced across rows later, where
    // eight rows give independent work), and the fp16 d and dmin.
    alignas(32) __m256i partial[kSpan][kGroupRows];
    alignas(32) uint32_t scales[kSpan][kGroupRows];
    __m256 acc[kDecodeRows / kGroupRows], acc_min[kDecodeRows / kGroupRows];
    for (int g = 0; g < n_groups; ++g) acc[g] = acc_min[g] = _mm256_setzero_ps();

    for (int64_t i0 = 0; i0 < nb; i0 += kSpan) {
        const int64_t ni = std::min(kSpan, nb - i0);
        for (int g = 0; g < n_groups; ++g) {
            // The group's accumulators as locals, so they stay in registers
            // (indexed by g they lived in memory: each super-block's step
            // waited on a store and its reload).
            __m256 gacc = acc[g], gmin = acc_min[g];
            // The float steps of super-block k, once all eight rows' partial
            // sums of it are in; run inside the last row's loop, so the
            // loads of that row overlap them (a separate pass over the
            // table, with no loads, measured 12% slower from DRAM). The
            // last row's values come in registers: its fresh 4-byte store
            // read back as part of a 32-byte load cannot be forwarded.
            auto float_step = [&](int64_t k, __m256i last_partial, uint32_t last_dd) {
                const __m256i* v = partial[k];
                // Rows 0..3: [totals | minimum sums]; rows 4..7 likewise.
                const __m256i lo = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
                const __m256i hi = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], last_partial));
                const __m256 t = _mm256_cvtepi32_ps(_mm256_permute2x128_si256(lo, hi, 0x20));
                const __m256 m = _mm256_cvtepi32_ps(_mm256_permute2x128_si256(lo, hi, 0x31));
                const __m256i dd = _mm256_insert_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(scales[k])),
                                                       static_cast<int>(last_dd), kGroupRows - 1);
                const __m256 d = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(dd));
                const __m256 dmin = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(dd, 16)));
                const __m256 da = _mm256_set1_ps(act_d[i0 + k]);
                gacc = _mm256_fmadd_ps(t, _mm256_mul_ps(d, da), gacc);
                gmin = _mm256_fmadd_ps(m, _mm256_mul_ps(dmin, da), gmin);
            };
            for (int r = 0; r < kGroupRows; ++r) {
                const Block* row = x[g * kGroupRows + r] + i0;
                for (int64_t k = 0; k < ni; ++k) {
                    const Block& b = row[k];
                    prefetch_row_stream(&b);
                    const PreparedBlock& p = act[i0 + k];
                    __m512i tot;
                    __m256i mins;
                    kernel.totals(b, p.act, p.sums, tot, mins);
                    const __m256i t8 = _mm256_add_epi32(_mm512_castsi512_si256(tot), _mm512_extracti64x4_epi64(tot, 1));
                    const __m128i t4 = _mm_add_epi32(_mm256_castsi256_si128(t8), _mm256_extracti128_si256(t8, 1));
                    const __m256i part = _mm256_blend_epi32(_mm256_castsi128_si256(t4), F::upper_mins(mins), 0xF0);
                    uint32_t dd;
                    std::memcpy(&dd, &b.d, sizeof(dd));  // d, dmin: adjacent fp16 in both formats
                    if (r == kGroupRows - 1) {
                        float_step(k, part, dd);
                    } else {
                        partial[k][r] = part;
                        scales[k][r] = dd;
                    }
                }
            }
            acc[g] = gacc;
            acc_min[g] = gmin;
        }
    }
    alignas(32) float out[kDecodeRows];
    for (int g = 0; g < n_groups; ++g) _mm256_store_ps(out + g * kGroupRows, _mm256_sub_ps(acc[g], acc_min[g]));
    for (int r = 0; r < n_rows; ++r) y[r] = out[r];
}

// Several tokens (a small batch of decode steps; Q2_K, and Q4_K in its
// batch form's order: Q4_K tokens in the one-token order take
// decode_rows_q4_K_tokens_avx512.cpp): decode_rows for each token, with
// each super-block of a row loaded and unpacked once for all NT tokens.
// Per token the integers, the hadd tree over the eight rows and the
// float steps are decode_rows' own, in its order, so each token gets the
// bits it gets alone. Spans are shorter so the table of partial sums (now
// per token) stays at 32 KiB.
template <class F>
struct Part {
    // The row's super-block total (lanes 0..3) and minimum sum (4..7) for
    // one token, as decode_rows keeps them.
    static __m256i of(const typename F::Kernel::Unpacked& u, const PreparedBlock& p) {
        __m512i tot;
        __m256i mins;
        F::Kernel::totals(u, p.act, p.sums, tot, mins);
        const __m256i t8 = _mm256_add_epi32(_mm512_castsi512_si256(tot), _mm512_extracti64x4_epi64(tot, 1));
        const __m128i t4 = _mm_add_epi32(_mm256_castsi256_si128(t8), _mm256_extracti128_si256(t8, 1));
        return _mm256_blend_epi32(_mm256_castsi128_si256(t4), F::upper_mins(mins), 0xF0);
    }
    // Q4_K's batch form (KSpansOrder with spans of two sub-blocks): the
    // integer total of each 64-element span (lanes 0..3) and its minimum
    // sum (4..7). The two scale products are kept apart: the first gives
    // spans 0 and 1 in its low and high 256 bits, the second spans 2, 3.
    static __m256i spans_of(const typename F::Kernel::Unpacked& u, const PreparedBlock& p) {
        const __m512i d0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u.code[0], p.act[0]);
        const __m512i d1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u.code[1], p.act[1]);
        const __m512i d2 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u.code[2], p.act[2]);
        const __m512i d3 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u.code[3], p.act[3]);
        const __m512i ta = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_packs_epi32(d0, d1), u.sc_lo);
        const __m512i tb = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_packs_epi32(d2, d3), u.sc_hi);
        const __m256i mins = _mm256_dpwssd_epi32(_mm256_setzero_si256(), u.sm, p.sums);  // lanes 4..7: spans 0..3
        const __m256i xa = _mm256_hadd_epi32(_mm512_castsi512_si256(ta), _mm512_extracti64x4_epi64(ta, 1));
        const __m256i xb = _mm256_hadd_epi32(_mm512_castsi512_si256(tb), _mm512_extracti64x4_epi64(tb, 1));
        const __m256i h = _mm256_hadd_epi32(xa, xb);  // [spans 0..3 of lanes 0..3 | of lanes 4..7]
        const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        return _mm256_blend_epi32(_mm256_castsi128_si256(s4), mins, 0xF0);
    }
};

// Rows of eight vectors (row r: [span totals 0..3, span minimum sums
// 0..3]) to eight vectors of the rows: c[j] holds value j of rows 0..7.
inline void transpose8(const __m256i* v, __m256i last, __m256i* c) {
    const __m256i t0 = _mm256_unpacklo_epi32(v[0], v[1]), t1 = _mm256_unpackhi_epi32(v[0], v[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(v[2], v[3]), t3 = _mm256_unpackhi_epi32(v[2], v[3]);
    const __m256i t4 = _mm256_unpacklo_epi32(v[4], v[5]), t5 = _mm256_unpackhi_epi32(v[4], v[5]);
    const __m256i t6 = _mm256_unpacklo_epi32(v[6], last), t7 = _mm256_unpackhi_epi32(v[6], last);
    const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    const __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
    const __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
    c[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
    c[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
    c[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
    c[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
    c[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
    c[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
    c[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
    c[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}

// kSpans: the batch form's order (Q4_K only): per super-block four fused
// multiply-adds of the span totals and four of the span minimum sums, in
// span order, instead of one of each.
// Token t's prepared activation at a[t], its outputs at y[t].
template <class F, int NT, bool kSpans = false>
void decode_rows_tokens(int64_t n, const void* w, size_t row_stride, int n_rows, const uint8_t* const* a, float* const* y) {
    using Block = typename F::Block;
    constexpr int64_t kSpanT = std::max<int64_t>(16, kSpan / NT);
    const int64_t nb = n / kQK_K;
    const kq_rows::TokenActs<NT> acts(a, nb);
    const auto& act = acts.act;
    const auto& act_d = acts.d;
    const Block* x[kDecodeRows];
    const int n_groups = kq_rows::row_groups(w, row_stride, n_rows, x);
    const typename F::Kernel kernel;

    alignas(32) __m256i partial[kSpanT][NT][kGroupRows];
    alignas(32) uint32_t scales[kSpanT][kGroupRows];
    __m256 acc[kDecodeRows / kGroupRows][NT], acc_min[kDecodeRows / kGroupRows][NT];
    for (int g = 0; g < n_groups; ++g) {
        for (int t = 0; t < NT; ++t) acc[g][t] = acc_min[g][t] = _mm256_setzero_ps();
    }

    for (int64_t i0 = 0; i0 < nb; i0 += kSpanT) {
        const int64_t ni = std::min(kSpanT, nb - i0);
        for (int g = 0; g < n_groups; ++g) {
            __m256 gacc[NT], gmin[NT];
            for (int t = 0; t < NT; ++t) {
                gacc[t] = acc[g][t];
                gmin[t] = acc_min[g][t];
            }
            for (int r = 0; r < kGroupRows - 1; ++r) {
                const Block* row = x[g * kGroupRows + r] + i0;
                for (int64_t k = 0; k < ni; ++k) {
                    const Block& b = row[k];
                    prefetch_ahead(&b);
                    const auto u = kernel.unpack(b);
                    for (int t = 0; t < NT; ++t) {
                        if constexpr (kSpans) {
                            partial[k][t][r] = Part<F>::spans_of(u, act[t][i0 + k]);
                        } else {
                            partial[k][t][r] = Part<F>::of(u, act[t][i0 + k]);
                        }
                    }
                    std::memcpy(&scales[k][r], &b.d, sizeof(uint32_t));  // d, dmin: adjacent fp16
                }
            }
            const Block* row = x[g * kGroupRows + kGroupRows - 1] + i0;
            for (int64_t k = 0; k < ni; ++k) {
                const Block& b = row[k];
                prefetch_ahead(&b);
                const auto u = kernel.unpack(b);
                uint32_t last_dd;
                std::memcpy(&last_dd, &b.d, sizeof(last_dd));
                const __m256i dd = _mm256_insert_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(scales[k])),
                                                       static_cast<int>(last_dd), kGroupRows - 1);
                const __m256 d = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(dd));
                const __m256 dmin = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(dd, 16)));
                for (int t = 0; t < NT; ++t) {
                    if constexpr (kSpans) {
                        __m256i c[8];
                        transpose8(partial[k][t], Part<F>::spans_of(u, act[t][i0 + k]), c);
                        const __m256 da = _mm256_set1_ps(act_d[t][i0 + k]);
                        const __m256 dd_a = _mm256_mul_ps(d, da), dm_a = _mm256_mul_ps(dmin, da);
                        for (int j = 0; j < 4; ++j) {
                            gacc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c[j]), dd_a, gacc[t]);
                            gmin[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c[4 + j]), dm_a, gmin[t]);
                        }
                        continue;
                    }
                    const __m256i last = Part<F>::of(u, act[t][i0 + k]);
                    const __m256i* v = partial[k][t];
                    const __m256i lo = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
                    const __m256i hi = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], last));
                    const __m256 tt = _mm256_cvtepi32_ps(_mm256_permute2x128_si256(lo, hi, 0x20));
                    const __m256 m = _mm256_cvtepi32_ps(_mm256_permute2x128_si256(lo, hi, 0x31));
                    const __m256 da = _mm256_set1_ps(act_d[t][i0 + k]);
                    gacc[t] = _mm256_fmadd_ps(tt, _mm256_mul_ps(d, da), gacc[t]);
                    gmin[t] = _mm256_fmadd_ps(m, _mm256_mul_ps(dmin, da), gmin[t]);
                }
            }
            for (int t = 0; t < NT; ++t) {
                acc[g][t] = gacc[t];
                acc_min[g][t] = gmin[t];
            }
        }
    }
    for (int t = 0; t < NT; ++t) {
        alignas(32) float out[kDecodeRows];
        for (int g = 0; g < n_groups; ++g) _mm256_store_ps(out + g * kGroupRows, _mm256_sub_ps(acc[g][t], acc_min[g][t]));
        for (int r = 0; r < n_rows; ++r) y[t][r] = out[r];
    }
}

// nt tokens, at most kMaxDecodeTokens, in passes of up to four.
template <class F, bool kSpans = false>
void decode_rows_multi(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, size_t a_stride, int nt,
                       float* y, int64_t ldy) {
    in_passes<4>(a, a_stride, nt, y, ldy, [&](auto nt_pass, const uint8_t* const* acts, float* const* ys) {
        decode_rows_tokens<F, decltype(nt_pass)::value, kSpans>(n, w, row_stride, n_rows, acts, ys);
    });
}

// Q5_K, in the order of its single-row kernel (KLanes in
// vec_dot_kquants_avx512_body.h, llama.cpp's AVX2 vec_dot): per row and super-block eight int32 lanes, lane l the sum
// over the eight 32-element sub-blocks s of scale(s) x (the dot product of
// elements 4l .. 4l + 3 of sub-block s), then acc = fma(d * da,
// float(lanes), acc); the minimum term, corr = sum of min(s) x (the
// activation sum of sub-block s), goes to acc_min = fma(-(dmin * da),
// float(corr), acc_min); at the end hsum(acc) + acc_min.
//
// Why a kernel of its own: the single-row kernel builds each 64-element
// chunk from a 32-byte load, a shift, an insert, a mask and three steps for
// the fifth bit, then multiplies with maddubs and dpwssd (19 GB/s per core
// from L2 on Zen 4), so decode of Q5_K files was compute-bound. Here, per
// super-block of a row (the register layout of the Q4_K rows kernel):
// - the 128 code bytes are two loads; their nibbles make four registers,
//   sub-blocks [0|2], [1|3], [4|6], [5|7], plus 16 where the sub-block's
//   bit of qh is set (one byte test against [qh|qh], one masked byte add);
// - one vpdpbusd per register against the activation arranged the same way
//   once per matmul gives 16 lanes (|lane| <= 4 x 31 x 128 < 2^15);
// - registers 2p, 2p + 1 are interleaved as 16-bit words, so one vpdpwssd
//   against both sub-blocks' scales adds their sums for the same lane l,
//   which is llama.cpp's grouping; the 256-bit halves add to the eight lanes;
// - the minimum sum is one vpmaddwd of the eight minimums against the
//   activation's 32-element sums and a 4-lane sum.
// The activation is Q4_K's (prepare_q4_K_rows): the same registers, and the
// 32-element sums in the upper half of its minimum words.
// One row at a time, super-block after super-block: one sequential stream
// (see decode_rows_legacy_avx512.cpp on interleaving rows from DRAM).

// Word index into the eight scales for the pair of code registers
// (2p, 2p + 1): the low word of dword L is register 2p's sub-block in
// half L / 8, the high word register 2p + 1's.
__m512i scale_pair_index(int p) {
    alignas(64) int16_t idx[32];
    for (int dw = 0; dw < 16; ++dw) {
        for (int k = 0; k < 2; ++k) {
            const int reg = 2 * p + k;
            idx[2 * dw + k] = static_cast<int16_t>(dw < 8 ? low_sub_block(reg) : high_sub_block(reg));
        }
    }
    return _mm512_load_si512(idx);
}

// Bit of qh that says "add 16" for code register k, per half.
__m512i fifth_bits(int k) {
    return join256(_mm256_set1_epi8(static_cast<char>(1 << low_sub_block(k))),
                   _mm256_set1_epi8(static_cast<char>(1 << high_sub_block(k))));
}

void decode_q5_K_rows(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
    const int64_t nb = n / kQK_K;
    const auto* act = static_cast<const PreparedBlock*>(a);
    const auto* act_d = reinterpret_cast<const float*>(static_cast<const uint8_t*>(a) + d_offset(nb));
    const __m512i sixteen = _mm512_set1_epi8(0x10);
    const __m512i fifth[4] = {fifth_bits(0), fifth_bits(1), fifth_bits(2), fifth_bits(3)};
    const __m512i scale_idx[2] = {scale_pair_index(0), scale_pair_index(1)};
    for (int r = 0; r < n_rows; ++r) {
        const auto* row = reinterpret_cast<const block_q5_K*>(static_cast<const uint8_t*>(w) + static_cast<size_t>(r) * row_stride);
        __m256 acc = _mm256_setzero_ps();
        float acc_min = 0.0f;
        for (int64_t i = 0; i < nb; ++i) {
            const block_q5_K& b = row[i];
            prefetch_row_stream(&b);
            const PreparedBlock& p = act[i];
            const __m512i qh = _mm512_broadcast_i64x4(load256(b.qh));
            __m512i nibbles[4];
            kq_rows::q4_K_code_registers(b.qs, nibbles);
            __m512i dot[4];
            for (int k = 0; k < 4; ++k) {
                const __m512i code = _mm512_mask_add_epi8(nibbles[k], _mm512_test_epi8_mask(qh, fifth[k]), nibbles[k], sixteen);
                dot[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), code, p.act[k]);
            }
            const __m128i sm = q4_K_scales_mins_simd(b.scales);  // 8 scales, then 8 minimums
            const __m512i scales = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));
            const __m256i lanes = scaled_lanes(dot, scales, scale_idx);
            const __m128i mins = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(sm, sm));
            const __m128i corr4 = _mm_madd_epi16(mins, _mm256_extracti128_si256(p.sums, 1));  // Q4_K's minimum words
            const __m128i corr2 = _mm_add_epi32(corr4, _mm_unpackhi_epi64(corr4, corr4));
            const int corr = _mm_cvtsi128_si32(_mm_add_epi32(corr2, _mm_shuffle_epi32(corr2, 1)));
            const float da = act_d[i];
            acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(b.d) * da), _mm256_cvtepi32_ps(lanes), acc);
            acc_min = std::fma(-(f16(b.dmin) * da), static_cast<float>(corr), acc_min);
        }
        y[r] = hsum(acc) + acc_min;
    }
}

}  // namespace

size_t q4_K_rows_prepared_bytes(int64_t n) { return prepared_bytes(n); }
void prepare_q4_K_rows(const void* a, int64_t n, void* out) { prepare<Q4KRows>(a, n, out); }
void dot_q4_K_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
    decode_rows<Q4KRows>(n, w, row_stride, n_rows, a, y);
}
void dot_q4_K_rows_batch_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, size_t a_stride,
                                int nt, float* y, int64_t ldy) {
    decode_rows_multi<Q4KRows, true>(n, w, row_stride, n_rows, a, a_stride, nt, y, ldy);
}
size_t q2_K_rows_prepared_bytes(int64_t n) { return prepared_bytes(n); }
void prepare_q2_K_rows(const void* a, int64_t n, void* out) { prepare<Q2KRows>(a, n, out); }
void dot_q2_K_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
    decode_rows<Q2KRows>(n, w, row_stride, n_rows, a, y);
}
void dot_q2_K_rows_multi_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, size_t a_stride,
                                int nt, float* y, int64_t ldy) {
    decode_rows_multi<Q2KRows>(n, w, row_stride, n_rows, a, a_stride, nt, y, ldy);
}
void dot_q5_K_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
    decode_q5_K_rows(n, w, row_stride, n_rows, a, y);
}

}  // namespace tandem::cpu::detail
