// Several tokens (a serving step: one token per stream) over rows of Q4_K
// with AVX-512 VNNI, each token in the order of the one-token rows kernel
// (decode_rows_kquants_avx512.cpp: per row and super-block the integer
// total and the integer minimum sum, converted once each and fused into
// the row's two accumulators; the result is acc - acc_min). The integers
// are exact in any order, so only their float steps fix the bits, and each
// token gets the bits it gets alone.
//
// Why a kernel of its own: the one-token kernel folds each row's total to
// four lanes with two extractions, packs its four dot products into words
// and reduces eight rows with a tree of 256-bit hadds. While 512-bit uops
// are in flight only ports 0 and 5 take vector work, and with four tokens
// those ran full (perf: the compiler's copies of a zero register into each
// vpdpbusd destination took a port each, too). Here, per row, token and
// super-block:
// - four vpdpbusd of the code registers against the activation (the
//   one-token kernel's registers and prepared activation), each starting
//   from a zeroing idiom, which needs no port;
// - the four sub-block scale products as one vpmaddwd and three vpdpwssd
//   on the dot products' 32-bit lanes against the scales as 32-bit lanes
//   (a lane is under 2^15 in magnitude, so its low word is its value and
//   the high word meets a zero), no packs;
// - two stores of the 16 lanes' halves, placed so that one add of two
//   loaded registers pairs two rows (the tree's first step).
// Per eight rows and token, the rest of the tree (shuffles, two-source
// permutes) takes the eight totals and the eight minimum sums (one
// vpmaddwd of four rows' minimums against the activation's 32-element
// sums) into one register, rows in the lanes, for one conversion and one
// fused multiply-add of [totals | minimum sums] against [d | dmin] x da.
// One thread, Sapphire Rapids, both kernels built alike and taking turns in
// one process (best of 400 passes each), TSC cycles per row and
// super-block: 4 tokens on 512 rows of 2048 columns from L2, 44-52 -> 38-46
// (new/old 0.73-0.92 over nine rounds); 256 rows of 5632 columns 0.97-0.98;
// from DRAM 0.94-0.96; one token 0.96-0.97.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels_cpu/avx512/decode_rows_kquants_avx512.h"
#include "kernels_cpu/simd_x86.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

using kq_rows::d_offset;
using kq_rows::PreparedBlock;
using quant::block_q4_K;
using quant::kQK_K;

using kq_rows::kGroupRows;

// Dword index into [scales 0..7, minimums 0..7] for code register k:
// lanes 0..7 its low sub-block's scale, 8..15 its high one's.
__m512i scale_lanes_index(int k) {
    alignas(64) int32_t idx[16];
    for (int i = 0; i < 16; ++i) idx[i] = i < 8 ? kq_rows::low_sub_block(k) : kq_rows::high_sub_block(k);
    return _mm512_load_si512(idx);
}

// The tree's last step takes, from two registers of four rows each (128
// bits a row, four lanes whose sum is the row's value), lane i of every
// row: part_index(0) gives lanes 0 (rows 0..7) then 1, part_index(2)
// lanes 2 then 3.
__m512i part_index(int first) {
    alignas(64) int32_t idx[16];
    for (int h = 0; h < 2; ++h) {
        for (int r = 0; r < kGroupRows; ++r) idx[8 * h + r] = (r < 4 ? 0 : 16) + 4 * (r % 4) + first + h;
    }
    return _mm512_load_si512(idx);
}

struct Kernel {
    __m512i scale_idx[4] = {scale_lanes_index(0), scale_lanes_index(1), scale_lanes_index(2), scale_lanes_index(3)};
    __m512i parts02 = part_index(0), parts13 = part_index(2);
    __m256i half_idx = _mm256_setr_epi16(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);

    // A super-block's codes and scales, once for every token; its eight
    // minimums (bytes 8..15 of sm) go to the tree.
    struct Unpacked {
        __m512i code[4], scale[4];
        __m128i sm;
    };
    Unpacked unpack(const block_q4_K& b) const {
        Unpacked u;
        kq_rows::q4_K_code_registers(b.qs, u.code);
        u.sm = q4_K_scales_mins_simd(b.scales);
        const __m512i sm32 = _mm512_cvtepu8_epi32(u.sm);
        for (int k = 0; k < 4; ++k) u.scale[k] = _mm512_permutexvar_epi32(scale_idx[k], sm32);
        return u;
    }
    // A zero register made by the zeroing idiom, which the renamer handles
    // without an execution port (the compiler's copies of one zero register
    // into each destination of vpdpbusd take a vector port each).
    static __m512i fresh_zero() {
        __m512i z;
        asm volatile("vpxord %0, %0, %0" : "=v"(z));
        return z;
    }
    // One token's 16 lanes whose sum is the row's integer total.
    static __m512i total_lanes(const Unpacked& u, const PreparedBlock& p) {
        __m512i d[4];
        for (int k = 0; k < 4; ++k) d[k] = _mm512_dpbusd_epi32(fresh_zero(), u.code[k], p.act[k]);
        __m512i z = _mm512_madd_epi16(d[0], u.scale[0]);
        for (int k = 1; k < 4; ++k) z = _mm512_dpwssd_epi32(z, d[k], u.scale[k]);
        return z;
    }
    // Stores row r's 16 lanes z as halves: the low 256 bits at v[r / 2]'s
    // half r % 2, the high 256 bits at v[4 + r / 2]'s, so that v[p] +
    // v[4 + p] holds rows 2p and 2p + 1, eight lanes each whose sum is the
    // row's total (the tree's first step made by two stores and one add).
    static void store_halves(__m512i* v, int r, __m512i z) {
        auto* lo = reinterpret_cast<uint8_t*>(v + r / 2) + 32 * (r % 2);
        _mm256_store_si256(reinterpret_cast<__m256i*>(lo), _mm512_castsi512_si256(z));
        _mm512_mask_storeu_epi32(reinterpret_cast<uint8_t*>(v + 4 + r / 2) + 32 * (r % 2) - 32, 0xFF00, z);
    }
    // [totals of rows 0..7 | minimum sums of rows 0..7] from the rows'
    // stored halves and their minimums as words (mins[0]: rows 0..3, 128
    // bits a row; mins[1]: rows 4..7).
    __m512i rows_totals(const __m512i* v, const __m512i* mins, const PreparedBlock& p) const {
        __m512i pairs[4];
        for (int q = 0; q < 4; ++q) pairs[q] = _mm512_add_epi32(v[q], v[4 + q]);
        // Quads: 128-bit lane j holds four lanes of row j whose sum is its total.
        auto quad = [](__m512i a, __m512i b) {
            return _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, 0x88), _mm512_shuffle_i64x2(a, b, 0xDD));
        };
        const __m512i t0 = quad(pairs[0], pairs[1]), t1 = quad(pairs[2], pairs[3]);
        // The activation's eight 32-element sums in each 128-bit lane.
        const __m512i sums = _mm512_broadcast_i32x4(load128(reinterpret_cast<const uint8_t*>(&p.sums) + 16));
        const __m512i m0 = _mm512_madd_epi16(mins[0], sums), m1 = _mm512_madd_epi16(mins[1], sums);
        // [lanes 0 + 2 of rows 0..7 | lanes 1 + 3], totals, then minimums.
        const __m512i pt = _mm512_add_epi32(_mm512_permutex2var_epi32(t0, parts02, t1), _mm512_permutex2var_epi32(t0, parts13, t1));
        const __m512i pm = _mm512_add_epi32(_mm512_permutex2var_epi32(m0, parts02, m1), _mm512_permutex2var_epi32(m0, parts13, m1));
        return _mm512_add_epi32(_mm512_shuffle_i64x2(pt, pm, 0x44), _mm512_shuffle_i64x2(pt, pm, 0xEE));
    }
    // [d of rows 0..7 | dmin of rows 0..7] from the rows' (d, dmin) words.
    __m512 scales(__m256i dd) const { return _mm512_cvtph_ps(_mm256_permutexvar_epi16(half_idx, dd)); }
};

// Token t's prepared activation at a[t], its outputs at y[t]. The rows of
// a group of eight are read one after another over a span of super-blocks
// and leave their lanes in a table; the last row's pass runs the trees and
// float steps, so its loads overlap them.
template <int NT>
void rows_tokens(int64_t n, const void* w, size_t row_stride, int n_rows, const uint8_t* const* a, float* const* y) {
    // The table of lanes: 16 KiB (at 32 KiB, 5632 columns ran 1.5x slower).
    constexpr int64_t kSpan = std::max(4, 32 / NT);
    const int64_t nb = n / kQK_K;
    const kq_rows::TokenActs<NT> acts(a, nb);
    const auto& act = acts.act;
    const auto& act_d = acts.d;
    const block_q4_K* x[kDecodeRows];
    const int n_groups = kq_rows::row_groups(w, row_stride, n_rows, x);
    const Kernel kernel;

    alignas(64) __m512i lanes[kSpan][NT][kGroupRows];  // per token, eight registers: store_halves
    alignas(64) uint64_t mins[kSpan][kGroupRows];      // the eight minimum bytes of each row
    alignas(32) uint32_t dd[kSpan][kGroupRows];        // (d, dmin) of each row
    __m512 acc[kDecodeRows / kGroupRows][NT];          // [acc | acc_min] of eight rows
    for (int g = 0; g < n_groups; ++g) {
        for (int t = 0; t < NT; ++t) acc[g][t] = _mm512_setzero_ps();
    }

    for (int64_t i0 = 0; i0 < nb; i0 += kSpan) {
        const int64_t ni = std::min(kSpan, nb - i0);
        for (int g = 0; g < n_groups; ++g) {
            __m512 gacc[NT];
            for (int t = 0; t < NT; ++t) gacc[t] = acc[g][t];
            // The float steps of super-block k, once all eight rows' lanes
            // of it are stored.
            auto float_steps = [&](int64_t k) {
                const __m512 dm = kernel.scales(_mm256_load_si256(reinterpret_cast<const __m256i*>(dd[k])));
                const __m512i min_words[2] = {
                    _mm512_cvtepu8_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(&mins[k][0]))),
                    _mm512_cvtepu8_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(&mins[k][4])))};
                for (int t = 0; t < NT; ++t) {
                    const __m512 tm = _mm512_cvtepi32_ps(kernel.rows_totals(lanes[k][t], min_words, act[t][i0 + k]));
                    gacc[t] = _mm512_fmadd_ps(tm, _mm512_mul_ps(dm, _mm512_set1_ps(act_d[t][i0 + k])), gacc[t]);
                }
            };
            for (int r = 0; r < kGroupRows; ++r) {
                const block_q4_K* row = x[g * kGroupRows + r] + i0;
                for (int64_t k = 0; k < ni; ++k) {
                    const block_q4_K& b = row[k];
                    kq_rows::prefetch_ahead(&b);
                    const auto u = kernel.unpack(b);
                    for (int t = 0; t < NT; ++t) {
                        Kernel::store_halves(lanes[k][t], r, Kernel::total_lanes(u, act[t][i0 + k]));
                    }
                    _mm_storeh_pi(reinterpret_cast<__m64*>(&mins[k][r]), _mm_castsi128_ps(u.sm));
                    std::memcpy(&dd[k][r], &b.d, sizeof(uint32_t));  // d, dmin: adjacent fp16
                    // The last row runs the float steps of the super-block
                    // before, whose stores are done by now (a load of
                    // several fresh stores waits for them to commit), so
                    // its loads overlap them.
                    if (r == kGroupRows - 1 && k > 0) float_steps(k - 1);
                }
            }
            float_steps(ni - 1);
            for (int t = 0; t < NT; ++t) acc[g][t] = gacc[t];
        }
    }
    for (int t = 0; t < NT; ++t) {
        alignas(32) float out[kDecodeRows];
        for (int g = 0; g < n_groups; ++g) {
            const __m512 v = acc[g][t];
            _mm256_store_ps(out + g * kGroupRows,
                            _mm256_sub_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
        }
        for (int r = 0; r < n_rows; ++r) y[t][r] = out[r];
    }
}

}  // namespace

void dot_q4_K_rows_multi_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, size_t a_stride,
                                int nt, float* y, int64_t ldy) {
    kq_rows::in_passes_of_four(a, a_stride, nt, y, ldy, [&](auto nt_pass, const uint8_t* const* acts, float* const* ys) {
        rows_tokens<decltype(nt_pass)::value>(n, w, row_stride, n_rows, acts, ys);
    });
}

}  // namespace tandem::cpu::detail
