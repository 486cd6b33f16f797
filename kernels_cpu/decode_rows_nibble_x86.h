// The several-rows decode passes of the 4-bit formats with one total a
// block (Q4_0, IQ4_NL, MXFP4: their llama.cpp order, acc = fma(float(block
// total), dw * da, acc) per row, block after block), shared by
// avx2/decode_rows_q4_0_avx2.cpp (the scheme, and Q4_0's int16 words) and
// avx512/decode_rows_nibble_avx512.cpp (IQ4_NL and MXFP4 with vpdpbusd).
// A format is a policy (Q40Rows there, NibbleRows and Iq4nlSignRows here):
// its Block, its prepared activation chunk Act and arrange(), Codes and
// unpack() per row's chunk, the Word words() makes of a chunk against one
// token, and the float_steps() over eight rows' words.
//
// IQ4_NL and MXFP4 (one total a block and the same float steps: their
// llama.cpp order is Q4_0's) run the same passes with their values from a
// table (nibble_formats.h, one pshufb per 32 nibbles); their block totals
// do not fit the int16 words:
// - MXFP4 (and IQ4_NL with AVX-512 VNNI) takes u = value + offset, up to
//   24 (241), against the activations as they are (NibbleRows), the words
//   widened by vpmaddwd (VNNI: vpdpbusd) from -offset x the block sums;
// - IQ4_NL at AVX2 takes its signed values against the activations'
//   magnitudes (Iq4nlSignRows): vpsignb, vpmaddubsw, vpmaddwd a 32
//   products, no offset;
// - the totals and the weight scales (fp16, or MXFP4's E8M0) are kept as
//   floats, 64 bytes a row and chunk, and transposed as two 8 x 8 float
//   blocks for the float steps, which are Q4_0's.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels_cpu/nibble_formats.h"
#include "kernels_cpu/simd_x86.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/dot_order.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {  // internal linkage: each ISA's copy stays its own

using quant::block_q8_0;

constexpr int kGroupRows = 8;   // rows in the float lanes
constexpr int kChunk = 8;       // blocks reduced together
// From this many blocks a row's activation and table (72 bytes a block)
// crowd L1 and the weights are prefetched kPrefetchBytes ahead, past L1:
// 1024x14336 from DRAM ~870 -> ~620 us. Narrower rows gained nothing so
// on Zen 4; into L1, kRowStreamAhead ahead, they did on Sapphire Rapids
// (llama-1b tg64, 2 threads: 28-30 -> 36-37 tok/s, four streams 63-64 ->
// 79-82), and kL2StreamAhead ahead into L2 too on Zen 4 (IQ4_NL one token,
// one thread, 2048x2048 from DRAM: 122-125 -> 107-117 us, llama.cpp's
// repacked gemv 114; llama-1b IQ4_NL tg128: 44-51 -> 51-59 tok/s at
// AVX-512, 41-42 -> 45-49 at AVX2; unchanged from cache).
constexpr int64_t kPrefetchFrom = 256;
constexpr int kPrefetchBytes = 2304;

// The activation of one chunk as the kernel reads it: for k < 4 the low
// halves (elements 0..15, against the low nibbles) of blocks 2k and 2k + 1
// in one register, likewise the high halves; the starts of the integer
// sums, -offset * (sum of activations): Q4_0's per word of chunk_quads
// (two words a block, 16 elements each), MXFP4's (and IQ4_NL's with VNNI)
// per block as int32 [b0 b2 b4 b6 | b1 b3 b5 b7]; the blocks' scales as
// floats, in block order. 320 bytes, five cache lines.
struct alignas(64) ActChunk {
    __m256i lo[4], hi[4];
    __m256i offset;
    float d[kChunk];
};
static_assert(sizeof(ActChunk) == 320, "prepared chunk layout");

// The prepared row: one Act per whole chunk, then the Q8_0 blocks after the
// last whole chunk as they are.
template <class Act>
struct Prepared {
    int64_t nb, whole;  // blocks; blocks in whole chunks
    size_t tail_offset, bytes;
    explicit Prepared(int64_t n)
        : nb(n / 32),
          whole(nb / kChunk * kChunk),
          tail_offset(static_cast<size_t>(whole / kChunk) * sizeof(Act)),
          bytes(tail_offset + static_cast<size_t>(nb - whole) * sizeof(block_q8_0)) {}
};

// x[k] holds eight words of block 2k in its low half, of 2k + 1 in its
// high half; the result two words per block, each the sum of four of them:
// [b0 b0 b2 b2 b4 b4 b6 b6] in the low half, the odd blocks in the high one.
inline __m256i chunk_quads(const __m256i* x) {
    return _mm256_hadd_epi16(_mm256_hadd_epi16(x[0], x[1]), _mm256_hadd_epi16(x[2], x[3]));
}
// The same sums in int32, each word first multiplied by m (vpmaddwd):
// [b0 b2 b4 b6 | b1 b3 b5 b7], one per block; the words of x within 16383
// (the first hadd adds two).
inline __m256i chunk_totals(const __m256i* x, __m256i m) {
    const __m256i h01 = _mm256_madd_epi16(_mm256_hadd_epi16(x[0], x[1]), m);
    const __m256i h23 = _mm256_madd_epi16(_mm256_hadd_epi16(x[2], x[3]), m);
    return _mm256_hadd_epi32(h01, h23);
}

// The 16 code bytes of blocks 2k and 2k + 1 of the chunk at p (blocks of
// Block) in the two halves of a register: the second block's the high half
// of a load 16 bytes before them (a blend rather than an insert: no
// slower, and it leaves the shuffle units to the hadds and the transpose).
template <class Block>
inline __m256i pair_codes(const uint8_t* p, int k) {
    constexpr size_t qs = NibbleFormat<Block>::kQs, bytes = sizeof(Block);
    const uint8_t* b = p + 2 * bytes * static_cast<size_t>(k);
    return _mm256_blend_epi32(load256(b + qs), load256(b + bytes + qs - 16), 0xF0);
}

// The fp16 scales of a chunk of 18-byte blocks (scale first), per half
// [d0 0 d2 0 d4 0 d6 0 | 0 d1 0 d3 0 d5 0 d7]: scale j sits at byte 18 j,
// the low word of dword i of the low half of load i for j = 2i, the high
// word of dword i of its high half for j = 2i + 1; three dword blends and a
// mask leave each beside a zero word, so pair sums of words are the scales.
inline __m256i half_scale_dwords(const uint8_t* p) {
    const __m256i r0 = load256(p), r1 = load256(p + 32), r2 = load256(p + 64), r3 = load256(p + 96);
    return _mm256_blend_epi32(_mm256_blend_epi32(r0, r1, 0x22), _mm256_blend_epi32(r2, r3, 0x88), 0xCC);
}
inline __m256i half_scale_words(const uint8_t* p) {
    const auto high = static_cast<int>(0xFFFF0000u);
    return _mm256_and_si256(half_scale_dwords(p), _mm256_setr_epi32(0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF, high, high, high, high));
}

// x[k]: four int32 lanes of block 2k in the low half, of 2k + 1 in the
// high half; the result [b0 b2 b4 b6 | b1 b3 b5 b7], each block's lanes
// summed (unpacks and adds: fewer cycles than vphaddd on Zen 3).
inline __m256i block_sums(const __m256i* x) {
    const __m256i s01 = _mm256_add_epi32(_mm256_unpacklo_epi32(x[0], x[1]), _mm256_unpackhi_epi32(x[0], x[1]));
    const __m256i s23 = _mm256_add_epi32(_mm256_unpacklo_epi32(x[2], x[3]), _mm256_unpackhi_epi32(x[2], x[3]));
    return _mm256_add_epi32(_mm256_unpacklo_epi64(s01, s23), _mm256_unpackhi_epi64(s01, s23));
}

// A chunk's codes through a 16-value table (one pshufb per 32 nibbles):
// blocks 2k and 2k + 1's low nibbles in lo[k], high nibbles in hi[k].
template <class Block, class Codes>
inline void table_codes(const uint8_t* p, __m256i table, Codes& codes) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int k = 0; k < 4; ++k) {
        const __m256i q = pair_codes<Block>(p, k);
        codes.lo[k] = _mm256_shuffle_epi8(table, _mm256_and_si256(q, low4));
        codes.hi[k] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), low4));
    }
}

// ---- IQ4_NL, MXFP4: int32 block totals, totals and scales as floats ----------------
// Both keep each row's chunk as the eight block totals and weight scales as
// floats, [b0 b2 b4 b6 | b1 b3 b5 b7], transposed for the float steps.
struct FloatWord {
    __m256 total, d;  // per half, as floats: the totals and the scales in the same order
};

// The chunk's weight scales (fp16, or MXFP4's E8M0) as [d0 d2 d4 d6 | d1
// d3 d5 d7].
template <class Block>
inline __m256 chunk_scales(const uint8_t* p) {
    if constexpr (NibbleFormat<Block>::kHalfScale) {
        // The scale words of half_scale_dwords packed by one pshufb into
        // the low quadword of each half: [d0 d2 d4 d6 .. | d1 d3 d5 d7 ..].
        const __m256i pick = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                              2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1);
        const __m256i h = _mm256_shuffle_epi8(half_scale_dwords(p), pick);
        return _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(h, _MM_SHUFFLE(3, 1, 2, 0))));
    } else {
        // iq::e8m0_half on eight lanes: 2^(e - 128) as the float bits
        // (e - 1) << 23, or the subnormal 0x00200000 << e for e < 2.
        constexpr size_t s = sizeof(Block);
        const __m256i e = _mm256_setr_epi32(p[0], p[2 * s], p[4 * s], p[6 * s], p[s], p[3 * s], p[5 * s], p[7 * s]);
        const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
        const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
        return _mm256_castsi256_ps(_mm256_blendv_epi8(subnormal, normal, _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1))));
    }
}

// 8x8 transpose of the floats at v(r) (row r, 32-byte aligned, in memory):
// out[j] lane r = v(r)[j]. The halves are exchanged as they are loaded
// (rows r and r + 4 into one register), then 4x4 transposes inside the
// halves: 16 shuffles and 8 loads into the high half where
// transpose8x8_ps takes 24 shuffles.
template <class Row>
inline void transpose8x8_loaded(Row v, __m256* out) {
    for (int h = 0; h < 2; ++h) {  // h = 0: columns 0-3, 1: columns 4-7
        __m256 a[4];
        for (int r = 0; r < 4; ++r) {
            a[r] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_load_ps(v(r) + 4 * h)), _mm_load_ps(v(r + 4) + 4 * h), 1);
        }
        const __m256 t0 = _mm256_unpacklo_ps(a[0], a[1]), t1 = _mm256_unpackhi_ps(a[0], a[1]);
        const __m256 t2 = _mm256_unpacklo_ps(a[2], a[3]), t3 = _mm256_unpackhi_ps(a[2], a[3]);
        out[4 * h + 0] = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
        out[4 * h + 1] = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
        out[4 * h + 2] = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
        out[4 * h + 3] = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    }
}

// The float steps of one chunk for eight rows (in[r]: row r's FloatWord).
inline __m256 float_word_steps(const FloatWord* in, const float* da, __m256 acc) {
    // Position j of the transposes: block 2j (j < 4) or 2 (j - 4) + 1.
    __m256 t[kGroupRows], d[kGroupRows];
    transpose8x8_loaded([&](int r) { return reinterpret_cast<const float*>(&in[r].total); }, t);
    transpose8x8_loaded([&](int r) { return reinterpret_cast<const float*>(&in[r].d); }, d);
    for (int m = 0; m < 4; ++m) {
        acc = _mm256_fmadd_ps(t[m], _mm256_mul_ps(d[m], _mm256_set1_ps(da[2 * m])), acc);
        acc = _mm256_fmadd_ps(t[4 + m], _mm256_mul_ps(d[4 + m], _mm256_set1_ps(da[2 * m + 1])), acc);
    }
    return acc;
}

// The values u from the table, one pshufb per 32 nibbles, against the
// activations as they are: a u8 x s8 word of four products is within 4 x
// 24 x 128 = 12288 for MXFP4 at AVX2, and VNNI's vpdpbusd sums in int32
// (IQ4_NL's u <= 241 too). IQ4_NL at AVX2 has Iq4nlSignRows.
template <class B>
struct NibbleRows {
    using Block = B;
    using F = NibbleFormat<Block>;
    static constexpr quant::Type kType = std::is_same_v<Block, quant::block_mxfp4> ? quant::Type::MXFP4 : quant::Type::IQ4_NL;
#if !defined(__AVX512VNNI__)
    static_assert(4 * F::kMaxU * 128 <= 16383, "words of four products within chunk_totals' bound");
#endif
    using Act = ActChunk;
    struct Codes {
        __m256i lo[4], hi[4];
        __m256 d;  // [d0 d2 d4 d6 | d1 d3 d5 d7]
    };
    using Word = FloatWord;

    static void unpack(const uint8_t* p, Codes& codes) {
        table_codes<Block>(p, _mm256_broadcastsi128_si256(nibble_table<Block>()), codes);
        codes.d = chunk_scales<Block>(p);
    }

    static Word words(const Codes& codes, const Act& act) {
#if defined(__AVX512VNNI__)
        // Per block half, four lanes of eight products each.
        __m256i x[4];
        for (int k = 0; k < 4; ++k) {
            x[k] = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), codes.lo[k], act.lo[k]), codes.hi[k], act.hi[k]);
        }
        const __m256i sums = _mm256_hadd_epi32(_mm256_hadd_epi32(x[0], x[1]), _mm256_hadd_epi32(x[2], x[3]));
        return {_mm256_cvtepi32_ps(_mm256_add_epi32(act.offset, sums)), codes.d};
#else
        __m256i x[4];
        for (int k = 0; k < 4; ++k) {
            x[k] = _mm256_add_epi16(_mm256_maddubs_epi16(codes.lo[k], act.lo[k]), _mm256_maddubs_epi16(codes.hi[k], act.hi[k]));
        }
        return {_mm256_cvtepi32_ps(_mm256_add_epi32(act.offset, chunk_totals(x, _mm256_set1_epi16(1)))), codes.d};
#endif
    }

    // The activation halves, and -offset * (sum of activations) per block.
    static void arrange(const __m256i* lo, const __m256i* hi, Act& ac) {
        const __m256i one = _mm256_set1_epi8(1);
        __m256i x[4];
        for (int k = 0; k < 4; ++k) {
            ac.lo[k] = lo[k], ac.hi[k] = hi[k];
            x[k] = _mm256_add_epi16(_mm256_maddubs_epi16(one, lo[k]), _mm256_maddubs_epi16(one, hi[k]));
        }
        ac.offset = _mm256_mullo_epi32(chunk_totals(x, _mm256_set1_epi16(1)), _mm256_set1_epi32(-F::kOffset));
    }
    static constexpr bool kInt16Totals = false;

    static __m256 float_steps(const Word* in, const float* da, __m256 acc) { return float_word_steps(in, da, acc); }
};

// IQ4_NL at AVX2: the signed values (-127 .. 113, one pshufb per 32
// nibbles) against the activation's magnitudes, |a| x (value with a's
// sign): vpsignb, vpmaddubsw and one vpmaddwd against ones a 32 products,
// no offset. A pair sum is at most 2 x 128 x 127 = 32512, so vpmaddubsw
// never saturates, whatever the bytes (|-128| is 128 as the unsigned byte);
// the words are widened at once. (The values unsigned, u = value + 128 <=
// 241, overflow one pair sum: that form took the activations in two planes
// of 4 bits, two vpmaddubsw a 32 products and more int16 steps, 20
// multiplies a chunk and row where this takes 16; see
// avx2/decode_rows_q4_0_avx2.cpp for the timings. The magnitudes in the
// prepared chunk rather than vpabsb per row: 4-5% faster.)
struct Iq4nlSignRows {
    using Block = quant::block_iq4_nl;
    static constexpr quant::Type kType = quant::Type::IQ4_NL;
    static_assert(2 * 128 * 127 <= 32767, "pair sums of |a| x |value| within int16");
    // Per chunk: the activation halves as NibbleRows' (lo, hi) and their
    // magnitudes, the blocks' scales. 576 bytes.
    struct alignas(64) Act {
        __m256i lo[4], hi[4], mag_lo[4], mag_hi[4];
        float d[kChunk];
    };
    struct Codes {
        __m256i lo[4], hi[4];
        __m256 d;
    };
    using Word = FloatWord;

    static void unpack(const uint8_t* p, Codes& codes) {
        table_codes<Block>(p, _mm256_broadcastsi128_si256(load128(quant::iq::kIq4nlValues)), codes);
        codes.d = chunk_scales<Block>(p);
    }

    static Word words(const Codes& codes, const Act& act) {
        const __m256i ones = _mm256_set1_epi16(1);
        __m256i x[4];
        for (int k = 0; k < 4; ++k) {
            const __m256i lo = _mm256_maddubs_epi16(act.mag_lo[k], _mm256_sign_epi8(codes.lo[k], act.lo[k]));
            const __m256i hi = _mm256_maddubs_epi16(act.mag_hi[k], _mm256_sign_epi8(codes.hi[k], act.hi[k]));
            x[k] = _mm256_add_epi32(_mm256_madd_epi16(lo, ones), _mm256_madd_epi16(hi, ones));
        }
        return {_mm256_cvtepi32_ps(block_sums(x)), codes.d};
    }

    static void arrange(const __m256i* lo, const __m256i* hi, Act& ac) {
        for (int k = 0; k < 4; ++k) {
            ac.lo[k] = lo[k], ac.hi[k] = hi[k];
            ac.mag_lo[k] = _mm256_abs_epi8(lo[k]), ac.mag_hi[k] = _mm256_abs_epi8(hi[k]);
        }
    }
    static constexpr bool kInt16Totals = false;

    static __m256 float_steps(const Word* in, const float* da, __m256 acc) { return float_word_steps(in, da, acc); }
};

// Rows against NT tokens (token t prepared at a + t * a_stride): each
// chunk's codes are unpacked once and reduced against every token, with a
// table per token; each token's float steps are those it gets alone.
template <class Fmt, int NT>
void rows_tokens(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, size_t a_stride, float* y,
                 int64_t ldy) {
    using Block = typename Fmt::Block;
    using Act = typename Fmt::Act;
    const Prepared<Act> layout(n);
    const int64_t nb = layout.nb, whole = layout.whole, nc = whole / kChunk;
    const int n_groups = (n_rows + kGroupRows - 1) / kGroupRows;
    TANDEM_CHECK(n_groups <= kDecodeRows / kGroupRows, "decode rows: more rows than kDecodeRows");
    const Block* x[kDecodeRows];
    decode_row_pointers(w, row_stride, n_rows, n_groups * kGroupRows, x);
    const Act* act[NT];
    for (int t = 0; t < NT; ++t) act[t] = reinterpret_cast<const Act*>(static_cast<const uint8_t*>(a) + t * a_stride);

    // Per group, token, chunk and row: Fmt::words. A whole row in one pass
    // (for one token 256 bytes a chunk and group, Q4_0: 14 KiB a group at
    // 14336 columns, L1 and L2).
    struct ChunkWords {
        typename Fmt::Word row[kGroupRows];
    };
    // One token: every group's words kept, for their float steps together
    // (below); several: one group's, reused (twice the table, 2 x 7 tokens
    // x 28 KiB at 14336 columns, crowded L2: 1024x14336 x 7 tokens 12-20%
    // slower).
    constexpr bool kTogether = NT == 1;
    thread_local std::vector<ChunkWords> storage;
    storage.resize(static_cast<size_t>((kTogether ? n_groups : 1) * NT * nc));
    // A local pointer: stores of __m256i may alias anything, the vector
    // itself included, and would reload it every chunk.
    ChunkWords* const table = storage.data();
    const bool prefetch = nb >= kPrefetchFrom;
    __m256 acc[NT][kDecodeRows / kGroupRows];
    for (auto& token : acc) {
        for (__m256& v : token) v = _mm256_setzero_ps();
    }
    for (int g = 0; g < n_groups; ++g) {
        for (int r = 0; r < kGroupRows; ++r) {
            const auto* row = reinterpret_cast<const uint8_t*>(x[g * kGroupRows + r]);
            for (int64_t c = 0; c < nc; ++c) {
                const uint8_t* p = row + c * kChunk * sizeof(Block);
                if (prefetch) {
                    for (int l = 0; l < 3; ++l) _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes + 64 * l), _MM_HINT_NTA);
                } else {
                    for (int l = 0; l < 3; ++l) {
                        _mm_prefetch(reinterpret_cast<const char*>(p + kRowStreamAhead + 64 * l), _MM_HINT_T0);
                        _mm_prefetch(reinterpret_cast<const char*>(p + kL2StreamAhead + 64 * l), _MM_HINT_T1);
                    }
                }
                typename Fmt::Codes codes;
                Fmt::unpack(p, codes);
                const int slot = kTogether ? g : 0;
                for (int t = 0; t < NT; ++t) table[(slot * NT + t) * nc + c].row[r] = Fmt::words(codes, act[t][c]);
                // The float steps of chunk c once all the rows' words of it
                // are in: inside the last row's loop, so that row's loads
                // overlap them. One token: every group's at the last group's
                // last row, so that the groups' chains of dependent fused
                // multiply-adds (one a block) overlap each other (each group
                // at its own last row left that row waiting on its one
                // chain: IQ4_NL 2048x2048 from L3, one Zen 3 thread, 159-163
                // -> 155-157 us); several tokens: each group at its own,
                // their chains overlapping each other.
                if (r == kGroupRows - 1 && (!kTogether || g == n_groups - 1)) {
                    for (int gg = kTogether ? 0 : g; gg <= g; ++gg) {
                        for (int t = 0; t < NT; ++t) {
                            const int sl = kTogether ? gg : 0;
                            acc[t][gg] = Fmt::float_steps(table[(sl * NT + t) * nc + c].row, act[t][c].d, acc[t][gg]);
                        }
                    }
                }
            }
        }
    }
    // The blocks after the last whole chunk, one by one in order, as the
    // reference steps them.
    using Order = quant::dot::OrderOf<Fmt::kType, quant::dot::Form::Single>::type;
    for (int t = 0; t < NT; ++t) {
        const auto* tail = reinterpret_cast<const block_q8_0*>(reinterpret_cast<const uint8_t*>(act[t]) + layout.tail_offset);
        alignas(32) float out[kDecodeRows];
        for (int g = 0; g < n_groups; ++g) _mm256_store_ps(out + g * kGroupRows, acc[t][g]);
        for (int r = 0; r < n_rows; ++r) {
            float v = out[r], unused = 0.0f;
            for (int64_t i = whole; i < nb; ++i) Order::step(v, unused, Order::part(x[r][i], tail[i - whole]), 0);
            y[t * ldy + r] = v;
        }
    }
}

template <class Fmt>
void prepare_rows(const void* a, int64_t n, void* out) {
    using Act = typename Fmt::Act;
    const Prepared<Act> layout(n);
    const auto* ya = static_cast<const block_q8_0*>(a);
    auto* base = static_cast<uint8_t*>(out);
    TANDEM_CHECK(reinterpret_cast<uintptr_t>(base) % 64 == 0, "decode rows: prepared activation not 64-byte aligned");
    auto* chunks = reinterpret_cast<Act*>(base);
    __m256i least = _mm256_setzero_si256();
    for (int64_t c = 0; c < layout.whole / kChunk; ++c) {
        const block_q8_0* b = ya + kChunk * c;
        __m256i lo[4], hi[4];
        for (int k = 0; k < 4; ++k) {
            const __m256i y0 = load256(b[2 * k].qs), y1 = load256(b[2 * k + 1].qs);
            least = _mm256_min_epi8(least, _mm256_min_epi8(y0, y1));
            lo[k] = _mm256_permute2x128_si256(y0, y1, 0x20);
            hi[k] = _mm256_permute2x128_si256(y0, y1, 0x31);
        }
        Fmt::arrange(lo, hi, chunks[c]);
        for (int j = 0; j < kChunk; ++j) chunks[c].d[j] = f16(b[j].d);
    }
    if constexpr (Fmt::kInt16Totals) {
        TANDEM_CHECK(_mm256_movemask_epi8(_mm256_cmpeq_epi8(least, _mm256_set1_epi8(-128))) == 0,
                     "decode rows: Q8_0 activation of -128");
    }
    std::memcpy(base + layout.tail_offset, ya + layout.whole, static_cast<size_t>(layout.nb - layout.whole) * sizeof(block_q8_0));
}

}  // namespace

// The four entry points of a format at an ISA (vec_dot.h).
#define TANDEM_DECODE_ROWS_FNS(name, Fmt, isa)                                                                   \
    size_t name##_rows_##isa##_prepared_bytes(int64_t n) { return Prepared<Fmt::Act>(n).bytes; }                  \
    void prepare_##name##_rows_##isa(const void* a, int64_t n, void* out) { prepare_rows<Fmt>(a, n, out); }       \
    void dot_##name##_rows_##isa(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) { \
        rows_tokens<Fmt, 1>(n, w, row_stride, n_rows, a, 0, y, 0);                                               \
    }                                                                                                            \
    void dot_##name##_rows_multi_##isa(TANDEM_DECODE_MULTI_ARGS) {                                               \
        with_decode_tokens(nt, [&](auto NT) { rows_tokens<Fmt, NT()>(n, w, row_stride, n_rows, a, a_stride, y, ldy); }); \
    }

}  // namespace tandem::cpu::detail
