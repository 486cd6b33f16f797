// Decode (one token) over rows of Q4_0 with AVX-512 VNNI, in the order of
// the single-row kernel (Q4_0Order in dot_order.h, llama.cpp's order
// for Q4_0): per row, block after block, acc = fma(float(block total),
// dw * da, acc).
//
// Why a kernel of its own: a Q4_0 block is 18 bytes, so the single-row
// kernel spends most of its time on per-block overhead (one horizontal sum
// and one dependent scalar fused multiply-add per 32 weights: ~12 cycles per
// block on Zen 4, 5.8 GB/s from L2). Here:
// - Eight blocks of a row (144 bytes) come in through four 32-byte loads
//   and one 16-byte load (32-byte loads measured faster from DRAM than
//   64-byte ones, 14.1 -> 15.8 GB/s on one core); one word permute per four
//   blocks packs their 16-byte code arrays, another gathers the eight fp16
//   scales (every field of a block starts at an even offset, so 16-bit
//   permutes reach them all).
// - Codes stay unsigned; the -8 offset is the accumulator's starting value,
//   -8 * (sum of activations) per lane. That and the activation halves
//   arranged for the packed codes are made once per matmul
//   (prepare_q4_0_rows): made per call instead, they cost a quarter of the
//   speed from DRAM.
// - Lane sums of eight blocks are reduced together (two unpacks, one
//   shuffle, one permute) to eight exact block totals, converted and
//   stored with their eight fp16 scales (as bits: products of 32 bytes
//   made the tables too big to stay in L1 beside the streamed rows, and
//   wide rows read 10-12% slower from DRAM).
// - Eight rows' totals and scales are transposed so the float steps run
//   with rows in the lanes: dw * da and one fused multiply-add per block
//   per eight rows.
// Rows are read one after another (a span of kSpan blocks each), not
// interleaved: the prefetchers follow one stream well and many short ones
// poorly (measured for Q4_K, see decode_rows_x86.h).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels_cpu/simd_x86.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

using quant::block_q4_0;
using quant::block_q8_0;

static_assert(sizeof(block_q4_0) == 18 && sizeof(block_q8_0) == 34, "block layouts the permutes assume");

constexpr int kGroupRows = 8;   // rows in the float lanes
constexpr int kChunk = 8;       // blocks reduced together
constexpr int64_t kSpan = 256;  // blocks per pass over a row: 4.5 KiB of weights

// The activation as the kernel reads it, made once per matmul
// (prepare_q4_0_rows): per four blocks of the whole chunks the low halves
// (elements 0..15 of each block, for the low nibbles), the high halves and
// the starting lane values -8 * sums; each block's scale as a float; the
// Q8_0 row itself, for the blocks after the last whole chunk.
struct Prepared {
    int64_t nb, whole;  // blocks; blocks in whole chunks
    size_t d_offset, raw_offset, bytes;
    explicit Prepared(int64_t n)
        : nb(n / 32),
          whole(nb / kChunk * kChunk),
          d_offset(static_cast<size_t>(whole / 4) * 3 * 64),
          raw_offset(d_offset + (static_cast<size_t>(nb) * sizeof(float) + 63) / 64 * 64),
          bytes(raw_offset + static_cast<size_t>(nb) * sizeof(block_q8_0)) {}
};

// Word indices into (z0, z1) = 128 bytes from a chunk's first block.
// Codes of block j (j < 4) start at byte 2 + 18 j: word 1 + 9 j.
__m512i code_words_first() {
    alignas(64) int16_t idx[32];
    for (int j = 0; j < 4; ++j) {
        for (int m = 0; m < 8; ++m) idx[8 * j + m] = static_cast<int16_t>(1 + 9 * j + m);
    }
    return _mm512_load_si512(idx);
}
// Codes of block 4 + j from (z1, z2) = bytes 64..191: byte 10 + 18 j.
__m512i code_words_second() {
    alignas(64) int16_t idx[32];
    for (int j = 0; j < 4; ++j) {
        for (int m = 0; m < 8; ++m) idx[8 * j + m] = static_cast<int16_t>(5 + 9 * j + m);
    }
    return _mm512_load_si512(idx);
}
// Scale of block j at byte 18 j: word 9 j of (z0, z1).
__m512i scale_words() {
    alignas(64) int16_t idx[32] = {};
    for (int j = 0; j < 8; ++j) idx[j] = static_cast<int16_t>(9 * j);
    return _mm512_load_si512(idx);
}

// Word indices into (rows 0..3, rows 4..7) of a chunk's scale table (row r
// holds the fp16 scales of blocks 0..7 at words 8 r ..): word i takes block
// first + i / 8 of row i % 8, so blocks first .. first + 3 come out with the
// rows in order (the 8 x 8 transpose of 16-bit scales, half at a time).
__m512i scale_transpose_words(int first) {
    alignas(64) int16_t idx[32];
    for (int i = 0; i < 32; ++i) idx[i] = static_cast<int16_t>((i % 8) * 8 + first + i / 8);
    return _mm512_load_si512(idx);
}

// The integer total of one block (the tail of a row that is not a whole
// number of chunks).
int block_total(const block_q4_0& b, const block_q8_0& y) {
    int total = 0;
    for (int j = 0; j < 16; ++j) total += ((b.qs[j] & 0xF) - 8) * y.qs[j] + ((b.qs[j] >> 4) - 8) * y.qs[j + 16];
    return total;
}

}  // namespace

size_t q4_0_rows_prepared_bytes(int64_t n) { return Prepared(n).bytes; }

void prepare_q4_0_rows(const void* a, int64_t n, void* out) {
    const Prepared layout(n);
    const auto* ya = static_cast<const block_q8_0*>(a);
    auto* base = static_cast<uint8_t*>(out);
    TANDEM_CHECK(reinterpret_cast<uintptr_t>(base) % 64 == 0, "decode rows: prepared activation not 64-byte aligned");
    auto* v = reinterpret_cast<__m512i*>(base);
    const __m512i eight = _mm512_set1_epi8(8);
    for (int64_t g = 0; g < layout.whole / 4; ++g) {
        const block_q8_0* b = ya + 4 * g;
        const __m512i b01 = _mm512_inserti64x4(_mm512_castsi256_si512(load256(b[0].qs)), load256(b[1].qs), 1);
        const __m512i b23 = _mm512_inserti64x4(_mm512_castsi256_si512(load256(b[2].qs)), load256(b[3].qs), 1);
        const __m512i lo = _mm512_shuffle_i64x2(b01, b23, _MM_SHUFFLE(2, 0, 2, 0));
        const __m512i hi = _mm512_shuffle_i64x2(b01, b23, _MM_SHUFFLE(3, 1, 3, 1));
        const __m512i sum8 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, lo), eight, hi);
        v[3 * g] = lo;
        v[3 * g + 1] = hi;
        v[3 * g + 2] = _mm512_sub_epi32(_mm512_setzero_si512(), sum8);
    }
    auto* d = reinterpret_cast<float*>(base + layout.d_offset);
    for (int64_t i = 0; i < layout.nb; ++i) d[i] = f16(ya[i].d);
    std::memcpy(base + layout.raw_offset, ya, static_cast<size_t>(layout.nb) * sizeof(block_q8_0));
}

void dot_q4_0_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
    const Prepared layout(n);
    const auto* base = static_cast<const uint8_t*>(a);
    const auto* act = reinterpret_cast<const __m512i*>(base);
    const auto* act_d = reinterpret_cast<const float*>(base + layout.d_offset);
    const auto* ya = reinterpret_cast<const block_q8_0*>(base + layout.raw_offset);
    const int64_t nb = layout.nb, whole = layout.whole;
    const int n_groups = (n_rows + kGroupRows - 1) / kGroupRows;
    TANDEM_CHECK(n_groups <= kDecodeRows / kGroupRows, "decode rows: more rows than kDecodeRows");
    const block_q4_0* x[kDecodeRows];
    decode_row_pointers(w, row_stride, n_rows, n_groups * kGroupRows, x);
    const __m512i first_idx = code_words_first(), second_idx = code_words_second(), scale_idx = scale_words();
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i total_idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);

    // Per chunk and row: the eight block totals, and the eight fp16 weight
    // scales as stored (16 bytes, not 32 of products: the tables stay
    // small enough for L1 next to the streamed rows).
    alignas(32) __m256 totals[kSpan / kChunk][kGroupRows];
    alignas(64) __m128i scale_bits[kSpan / kChunk][kGroupRows];
    const __m512i tr_lo = scale_transpose_words(0), tr_hi = scale_transpose_words(4);
    __m256 acc[kDecodeRows / kGroupRows];
    for (__m256& v : acc) v = _mm256_setzero_ps();

    for (int64_t i0 = 0; i0 < whole; i0 += kSpan) {
        const int64_t ni = std::min(kSpan, whole - i0);
        const __m512i* act_span = act + 3 * (i0 / 4);
        for (int g = 0; g < n_groups; ++g) {
            // The float steps of chunk c once all eight rows' totals of it
            // are in; run inside the last row's loop, so that row's loads
            // overlap them (a separate pass with no loads is slower from
            // DRAM, as measured for Q4_K).
            auto float_step = [&](int64_t c, __m128i last_bits) {
                __m256 tt[kChunk];
                transpose8x8_ps(totals[c], tt);
                // Rows 0..3 and 4..7 of the scale table (the last row's from
                // its register: its fresh store inside a 64-byte load could
                // not be forwarded), then blocks 0..3 and 4..7 with the
                // rows in order.
                const __m512i r03 = _mm512_load_si512(&scale_bits[c][0]);
                const __m512i r47 = _mm512_inserti32x4(_mm512_load_si512(&scale_bits[c][4]), last_bits, 3);
                const __m512i b03 = _mm512_permutex2var_epi16(r03, tr_lo, r47);
                const __m512i b47 = _mm512_permutex2var_epi16(r03, tr_hi, r47);
                const float* da = act_d + i0 + c * kChunk;
                for (int j = 0; j < kChunk; ++j) {
                    const __m512i b = j < 4 ? b03 : b47;
                    const __m128i bits = j % 4 == 0   ? _mm512_castsi512_si128(b)
                                         : j % 4 == 1 ? _mm512_extracti32x4_epi32(b, 1)
                                         : j % 4 == 2 ? _mm512_extracti32x4_epi32(b, 2)
                                                      : _mm512_extracti32x4_epi32(b, 3);
                    const __m256 dw = _mm256_mul_ps(_mm256_cvtph_ps(bits), _mm256_set1_ps(da[j]));
                    acc[g] = _mm256_fmadd_ps(tt[j], dw, acc[g]);
                }
            };
            for (int r = 0; r < kGroupRows; ++r) {
                const auto* row = reinterpret_cast<const uint8_t*>(x[g * kGroupRows + r] + i0);
                for (int64_t c = 0; c < ni / kChunk; ++c) {
                    const uint8_t* p = row + c * kChunk * sizeof(block_q4_0);
                    for (int l = 0; l < 3; ++l) _mm_prefetch(reinterpret_cast<const char*>(p) + kRowStreamAhead + 64 * l, _MM_HINT_T0);
                    const __m512i z0 = _mm512_inserti64x4(_mm512_castsi256_si512(load256(p)), load256(p + 32), 1);
                    const __m512i z1 = _mm512_inserti64x4(_mm512_castsi256_si512(load256(p + 64)), load256(p + 96), 1);
                    const __m512i z2 = _mm512_castsi128_si512(load128(p + 128));  // the last 16 of 144 bytes
                    const __m512i qa = _mm512_permutex2var_epi16(z0, first_idx, z1);
                    const __m512i qb = _mm512_permutex2var_epi16(z1, second_idx, z2);
                    const __m512i* ga = act_span + 6 * c;  // lo, hi, start of blocks 0..3, then of 4..7
                    __m512i sa = _mm512_dpbusd_epi32(ga[2], _mm512_and_si512(qa, low4), ga[0]);
                    sa = _mm512_dpbusd_epi32(sa, _mm512_and_si512(_mm512_srli_epi16(qa, 4), low4), ga[1]);
                    __m512i sb = _mm512_dpbusd_epi32(ga[5], _mm512_and_si512(qb, low4), ga[3]);
                    sb = _mm512_dpbusd_epi32(sb, _mm512_and_si512(_mm512_srli_epi16(qb, 4), low4), ga[4]);
                    // Four lanes per block; per 128-bit lane k: block k of
                    // sa and block 4 + k of sb, totals into lanes 0 and 1.
                    const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi32(sa, sb), _mm512_unpackhi_epi32(sa, sb));
                    const __m512i v = _mm512_add_epi32(u, _mm512_shuffle_epi32(u, _MM_PERM_BADC));
                    const __m256i t = _mm512_castsi512_si256(_mm512_permutexvar_epi32(total_idx, v));
                    const __m128i dw_bits = _mm512_castsi512_si128(_mm512_permutex2var_epi16(z0, scale_idx, z1));
                    totals[c][r] = _mm256_cvtepi32_ps(t);
                    if (r == kGroupRows - 1) {
                        float_step(c, dw_bits);
                    } else {
                        scale_bits[c][r] = dw_bits;
                    }
                }
            }
        }
    }
    alignas(32) float out[kDecodeRows];
    for (int g = 0; g < n_groups; ++g) _mm256_store_ps(out + g * kGroupRows, acc[g]);
    for (int r = 0; r < n_rows; ++r) {
        float v = out[r];
        for (int64_t i = whole; i < nb; ++i) {
            v = std::fma(static_cast<float>(block_total(x[r][i], ya[i])), f16(x[r][i].d) * f16(ya[i].d), v);
        }
        y[r] = v;
    }
}

}  // namespace tandem::cpu::detail
