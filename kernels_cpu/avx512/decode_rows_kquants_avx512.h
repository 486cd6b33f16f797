// The activation layout that the AVX-512 rows kernels of Q4_K, Q2_K and
// Q5_K read (prepare_q4_K_rows, prepare_q2_K_rows), shared by
// decode_rows_kquants_avx512.cpp and the several-tokens Q4_K kernel in
// decode_rows_q4_K_tokens_avx512.cpp. Only for files built with the
// AVX-512 flags.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels_cpu/simd_x86.h"
#include "kernels_cpu/vec_dot.h"

namespace tandem::cpu::detail::kq_rows {

// Per super-block: the four registers of activation bytes matching the
// format's code registers, then 16 words of activation sums matching its
// minimum words (Q4_K: [0 x 8, sums of elements 32 s .. 32 s + 31],
// against [scales, minimums], so lanes 4..7 give the minimum sum; Q2_K:
// the 16 group sums as they are); after all super-blocks, each one's scale
// as a float.
struct PreparedBlock {
    __m512i act[4];
    __m256i sums;
    __m256i pad;
};
static_assert(sizeof(PreparedBlock) == 320, "prepared super-block layout");

constexpr int kGroupRows = 8;  // rows in the float lanes

inline size_t d_offset(int64_t nb) { return static_cast<size_t>(nb) * sizeof(PreparedBlock); }

// Sub-blocks of Q4_K/Q5_K code register k: the low 256 bits and the high.
constexpr int low_sub_block(int k) { return 4 * (k / 2) + k % 2; }
constexpr int high_sub_block(int k) { return low_sub_block(k) + 2; }

// Q4_K/Q5_K code registers from the 128 code bytes: the nibbles of the
// two 64-byte halves, sub-blocks [0|2], [1|3], [4|6], [5|7].
inline void q4_K_code_registers(const uint8_t* qs, __m512i* code) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i q0 = _mm512_loadu_si512(qs), q1 = _mm512_loadu_si512(qs + 64);
    code[0] = _mm512_and_si512(q0, low4);
    code[1] = _mm512_and_si512(_mm512_srli_epi16(q0, 4), low4);
    code[2] = _mm512_and_si512(q1, low4);
    code[3] = _mm512_and_si512(_mm512_srli_epi16(q1, 4), low4);
}

// The prepared activations of a pass's NT tokens (token t's at a[t], of
// nb super-blocks) and their super-block scales.
template <int NT>
struct TokenActs {
    const PreparedBlock* act[NT];
    const float* d[NT];
    TokenActs(const uint8_t* const* a, int64_t nb) {
        for (int t = 0; t < NT; ++t) {
            act[t] = reinterpret_cast<const PreparedBlock*>(a[t]);
            d[t] = reinterpret_cast<const float*>(a[t] + d_offset(nb));
        }
    }
};

// A pass's rows in groups of kGroupRows: x[0 .. kGroupRows * groups), rows past n_rows
// repeating row 0 (decode_row_pointers); returns the number of groups.
template <class Block>
int row_groups(const void* w, size_t row_stride, int n_rows, const Block** x) {
    const int n_groups = (n_rows + kGroupRows - 1) / kGroupRows;
    TANDEM_CHECK(n_groups <= kDecodeRows / kGroupRows, "decode rows: more rows than kDecodeRows");
    decode_row_pointers(w, row_stride, n_rows, n_groups * kGroupRows, x);
    return n_groups;
}

// The weights about 1 KiB ahead of block b (the rows of a pass lie one
// after another): a pass of several tokens does more work per byte than
// one token, and without these its reads from DRAM overlapped that work
// poorly (Q4_K, Zen 4: 2-2.5x slower than the same pass from L1).
template <class Block>
inline void prefetch_ahead(const Block* b) {
    const auto* p = reinterpret_cast<const char*>(b) + 1024;
    _mm_prefetch(p, _MM_HINT_T0);
    _mm_prefetch(p + 64, _MM_HINT_T0);
    _mm_prefetch(p + 128, _MM_HINT_T0);
    prefetch_stream_l2(b);
}

}  // namespace tandem::cpu::detail::kq_rows
