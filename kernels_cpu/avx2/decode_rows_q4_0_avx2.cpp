// Decode (one token) over rows of Q4_0 with AVX2 + FMA + F16C, in the order
// of the single-row kernel (Q4_0Order in dot_order.h, llama.cpp's
// order for Q4_0): per row, block after block, acc = fma(float(block
// total), dw * da, acc).
//
// Why a kernel of its own: the single-row kernel (LegacyDot with
// kBlockTotal, vec_dot_avx2.cpp) spends per 32 weights one horizontal sum
// and one dependent scalar fused multiply-add: ~7 GB/s on one Zen 4 core
// whatever the matrix, so decode was compute-bound. Here (1.9-3.2x that,
// see dot_q4_0_rows_avx2), as in decode_rows_q4_0_avx512.cpp:
// - Eight blocks of a row (a chunk, 144 bytes) are taken together: blocks
//   2k and 2k + 1 share a register, so one maddubs pair gives eight words
//   of each, and three hadds reduce the four registers to two words per
//   block, even blocks in the low half, odd ones in the high half.
// - Codes stay unsigned (maddubs wants u8 x s8); the -8 offset is added to
//   those words as -8 * (sum of their activations), made once per matmul
//   with the activation halves arranged for the paired codes
//   (prepare_q4_0_rows_avx2).
// - The eight fp16 weight scales come out of four 32-byte loads of the
//   chunk: scale j sits at byte 18 j, the low word of dword i of the low
//   half of load i for j = 2i, the high word of dword i of its high half
//   for j = 2i + 1; three dword blends and a mask leave each beside a zero.
// - One last hadd sums each block's two words into its total (in int16:
//   |total| <= 32 * 8 * 127) and puts the scales beside them: 32 bytes per
//   row and chunk. One 16-bit transpose of eight rows' gives both with the
//   rows in the lanes, so the float steps run eight rows at a time: dw * da
//   and one fused multiply-add per block. (Floats in the table instead,
//   totals and dw * da transposed apart: twice the table and the shuffles,
//   10-25% slower from DRAM.)
// Rows are read one after another, each whole, not interleaved and not in
// column spans: coming back to a row's second span after the other rows'
// first ones ran ~3x slower from DRAM (the integer work alone, 2048x5632
// in spans of 128 blocks, one thread: ~950 us against ~320 whole rows; the
// prefetchers lose the rows), so the table holds whole rows. The blocks
// after the last whole chunk of a row are added one by one at the end, in
// order.
//
// Several tokens of a small batch (DecodeRows::multi) share each chunk's
// loads and unpacking; each token keeps its table and float steps.
//
// The passes themselves, and IQ4_NL's and MXFP4's policy, are in
// kernels_cpu/decode_rows_nibble_x86.h.
#include "kernels_cpu/decode_rows_nibble_x86.h"

namespace tandem::cpu::detail {
namespace {

using quant::block_q4_0;

static_assert(sizeof(block_q4_0) == 18 && sizeof(block_q8_0) == 34, "block layouts the loads assume");

// ---- Q4_0: block totals and scales in int16 words -----------------------------------
struct Q40Rows {
    using Block = block_q4_0;
    using Act = ActChunk;
    static constexpr quant::Type kType = quant::Type::Q4_0;
    // A chunk's codes, unpacked once for every token: the low and the high
    // nibbles of blocks 2k and 2k + 1, and half_scale_words.
    struct Codes {
        __m256i lo[4], hi[4];
        __m256i scales;
    };
    // One row's chunk against one token, as 16-bit words per half [t0 t2 t4
    // t6 d0 d2 d4 d6 | t1 t3 t5 t7 d1 d3 d5 d7]: the block totals t and the
    // fp16 weight scales d.
    using Word = __m256i;

    static void unpack(const uint8_t* p, Codes& codes) {
        const __m256i low4 = _mm256_set1_epi8(0x0F);
        for (int k = 0; k < 4; ++k) {
            const __m256i q = pair_codes<Block>(p, k);
            codes.lo[k] = _mm256_and_si256(q, low4);
            codes.hi[k] = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
        }
        codes.scales = half_scale_words(p);
    }

    static Word words(const Codes& codes, const Act& act) {
        __m256i x[4];
        for (int k = 0; k < 4; ++k) {
            // Words of four products of codes <= 15 and activations >= -128:
            // |word| <= 4 * 15 * 128 = 7680, and 30720 after chunk_quads.
            x[k] = _mm256_add_epi16(_mm256_maddubs_epi16(codes.lo[k], act.lo[k]), _mm256_maddubs_epi16(codes.hi[k], act.hi[k]));
        }
        // With the offset, |word| <= 16 * 8 * 128; the sum of a block's two
        // words, its total, is within int16 since activations are >= -127
        // (checked by the preparation).
        return _mm256_hadd_epi16(_mm256_add_epi16(chunk_quads(x), act.offset), codes.scales);
    }

    // The activation halves as they are, and -8 * (sum of activations) in
    // the words words()' sums take.
    static void arrange(const __m256i* lo, const __m256i* hi, Act& ac) {
        const __m256i eight = _mm256_set1_epi8(8);
        __m256i x[4];
        for (int k = 0; k < 4; ++k) {
            ac.lo[k] = lo[k], ac.hi[k] = hi[k];
            x[k] = _mm256_add_epi16(_mm256_maddubs_epi16(eight, lo[k]), _mm256_maddubs_epi16(eight, hi[k]));
        }
        ac.offset = _mm256_sub_epi16(_mm256_setzero_si256(), chunk_quads(x));
    }
    // The totals fit in int16 only with activations in [-127, 127], which
    // is what the Q8_0 quantizers make (round(x * 127 / amax)).
    static constexpr bool kInt16Totals = true;

    // The float steps of one chunk for eight rows (in[r]: words of row r).
    static __m256 float_steps(const Word* in, const float* da, __m256 acc) {
        // 8 x 8 transpose of 16-bit words in each half: out[p] lane r = in[r]
        // lane p, then position p < 4 is the totals of blocks 2p (low half) and
        // 2p + 1 (high half), position 4 + p their scales.
        __m256i a[8], b[8], out[8];
        for (int i = 0; i < 4; ++i) {
            a[2 * i] = _mm256_unpacklo_epi16(in[2 * i], in[2 * i + 1]);
            a[2 * i + 1] = _mm256_unpackhi_epi16(in[2 * i], in[2 * i + 1]);
        }
        for (int i = 0; i < 2; ++i) {
            b[4 * i] = _mm256_unpacklo_epi32(a[4 * i], a[4 * i + 2]);
            b[4 * i + 1] = _mm256_unpackhi_epi32(a[4 * i], a[4 * i + 2]);
            b[4 * i + 2] = _mm256_unpacklo_epi32(a[4 * i + 1], a[4 * i + 3]);
            b[4 * i + 3] = _mm256_unpackhi_epi32(a[4 * i + 1], a[4 * i + 3]);
        }
        for (int i = 0; i < 4; ++i) {
            out[2 * i] = _mm256_unpacklo_epi64(b[i], b[i + 4]);
            out[2 * i + 1] = _mm256_unpackhi_epi64(b[i], b[i + 4]);
        }
        auto step = [&](__m128i t, __m128i d, float a_scale) {
            const __m256 dw = _mm256_mul_ps(_mm256_cvtph_ps(d), _mm256_set1_ps(a_scale));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(t)), dw, acc);
        };
        for (int m = 0; m < 4; ++m) {
            step(_mm256_castsi256_si128(out[m]), _mm256_castsi256_si128(out[4 + m]), da[2 * m]);
            step(_mm256_extracti128_si256(out[m], 1), _mm256_extracti128_si256(out[4 + m], 1), da[2 * m + 1]);
        }
        return acc;
    }
};

}  // namespace

// Zen 4, AVX2 level, one thread, min of 6 runs alternating (bench
// matvec/Q4_0/avx2/dram-*, us, single-row kernel -> this one): 512x2048
// 82.5 -> 32.4, 2048x2048 323 -> 122, 5632x2048 877 -> 309, 2048x5632
// 951 -> 294, 1024x14336 1173 -> 612, 4096x4096 1314 -> 426.
//
// Several tokens of a small batch (2..7 at AVX2: panels take 8 and more),
// one read and unpacking of the rows for all of them: dram-2048x2048 two
// tokens ~540 -> ~200 us, four ~800 -> ~370 against the token tiles.
TANDEM_DECODE_ROWS_FNS(q4_0, Q40Rows, avx2)
// IQ4_NL, one Zen 3 thread, min of 200-1000 runs, us, against llama.cpp
// 0.3.36's repacked gemv (ggml_gemv_iq4_nl_8x8_q8_0 on the same blocks,
// the same bits): 2048x2048 from L3 191 -> 155-157 (ggml 150), 512x2048
// 47.5 -> 38.1 (37.5), 2048x8192 929 -> 838 (738-777), 2048x2048 from DRAM
// 198 -> 173 (176-181). Steps: the signed values against |a| (two planes
// before), the block sums by unpacks instead of vphaddd, the scales packed
// by one pshufb instead of vphaddw, the float transposes half by loads,
// and the groups' float steps together.
TANDEM_DECODE_ROWS_FNS(iq4_nl, Iq4nlSignRows, avx2)
TANDEM_DECODE_ROWS_FNS(mxfp4, NibbleRows<quant::block_mxfp4>, avx2)

}  // namespace tandem::cpu::detail
