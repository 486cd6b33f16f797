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
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels_cpu/simd_x86.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

using quant::block_q4_0;
using quant::block_q8_0;

static_assert(sizeof(block_q4_0) == 18 && sizeof(block_q8_0) == 34, "block layouts the loads assume");

constexpr int kGroupRows = 8;   // rows in the float lanes
constexpr int kChunk = 8;       // blocks reduced together
// From this many blocks a row's activation and table (72 bytes a block)
// crowd L1 and the weights are prefetched kPrefetchBytes ahead, past L1:
// 1024x14336 from DRAM ~870 -> ~620 us. Narrower rows gained nothing so
// on Zen 4; into L1, kRowStreamAhead ahead, they did on Sapphire Rapids
// (llama-1b tg64, 2 threads: 28-30 -> 36-37 tok/s, four streams 63-64 ->
// 79-82).
constexpr int64_t kPrefetchFrom = 256;
constexpr int kPrefetchBytes = 2304;

// The activation of one chunk as the kernel reads it: for k < 4 the low
// halves (elements 0..15, against the low nibbles) of blocks 2k and 2k + 1
// in one register, likewise the high halves; -8 * (sum of activations) per
// word of chunk_quads (two words a block, 16 elements each); the blocks'
// scales as floats, in block order. 320 bytes, five cache lines.
struct alignas(64) ActChunk {
    __m256i lo[4], hi[4];
    __m256i offset;
    float d[kChunk];
};
static_assert(sizeof(ActChunk) == 320, "prepared chunk layout");

// The prepared row: one ActChunk per whole chunk, then the Q8_0 blocks
// after the last whole chunk as they are.
struct Prepared {
    int64_t nb, whole;  // blocks; blocks in whole chunks
    size_t tail_offset, bytes;
    explicit Prepared(int64_t n)
        : nb(n / 32),
          whole(nb / kChunk * kChunk),
          tail_offset(static_cast<size_t>(whole / kChunk) * sizeof(ActChunk)),
          bytes(tail_offset + static_cast<size_t>(nb - whole) * sizeof(block_q8_0)) {}
};

// x[k] holds eight words of block 2k in its low half, of 2k + 1 in its
// high half; the result two words per block, each the sum of four of them:
// [b0 b0 b2 b2 b4 b4 b6 b6] in the low half, the odd blocks in the high one.
inline __m256i chunk_quads(const __m256i* x) {
    return _mm256_hadd_epi16(_mm256_hadd_epi16(x[0], x[1]), _mm256_hadd_epi16(x[2], x[3]));
}

// A chunk's codes, unpacked once for every token: the low and the high
// nibbles of blocks 2k and 2k + 1, and the fp16 weight scales, per half
// [d0 0 d2 0 d4 0 d6 0 | 0 d1 0 d3 0 d5 0 d7].
struct Codes {
    __m256i lo[4], hi[4];
    __m256i scales;
};

inline void unpack_chunk(const uint8_t* p, Codes& codes) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int k = 0; k < 4; ++k) {
        const uint8_t* b = p + 36 * k;  // blocks 2k, 2k + 1
        // Codes of 2k at b + 2, of 2k + 1 at b + 20: the high half of a load
        // at b + 4 (a blend rather than an insert: no slower, and it leaves
        // the shuffle units to the hadds and the transpose).
        const __m256i q = _mm256_blend_epi32(load256(b + 2), load256(b + 4), 0xF0);
        codes.lo[k] = _mm256_and_si256(q, low4);
        codes.hi[k] = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
    }
    const __m256i r0 = load256(p), r1 = load256(p + 32), r2 = load256(p + 64), r3 = load256(p + 96);
    const __m256i b = _mm256_blend_epi32(_mm256_blend_epi32(r0, r1, 0x22), _mm256_blend_epi32(r2, r3, 0x88), 0xCC);
    // Each scale beside a zero word, so pair sums of words are the scales.
    const auto high = static_cast<int>(0xFFFF0000u);
    codes.scales = _mm256_and_si256(b, _mm256_setr_epi32(0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF, high, high, high, high));
}

// One chunk of one row against one token's activation as 16-bit words, per
// half [t0 t2 t4 t6 d0 d2 d4 d6 | t1 t3 t5 t7 d1 d3 d5 d7]: the block totals
// t and the fp16 weight scales d.
inline __m256i chunk_words(const Codes& codes, const ActChunk& act) {
    __m256i x[4];
    for (int k = 0; k < 4; ++k) {
        // Words of four products of codes <= 15 and activations >= -128:
        // |word| <= 4 * 15 * 128 = 7680, and 30720 after chunk_quads.
        x[k] = _mm256_add_epi16(_mm256_maddubs_epi16(codes.lo[k], act.lo[k]), _mm256_maddubs_epi16(codes.hi[k], act.hi[k]));
    }
    // With the offset, |word| <= 16 * 8 * 128; the sum of a block's two
    // words, its total, is within int16 since activations are >= -127
    // (prepare_q4_0_rows_avx2).
    return _mm256_hadd_epi16(_mm256_add_epi16(chunk_quads(x), act.offset), codes.scales);
}

// The float steps of one chunk for eight rows (in[r]: chunk_words of row r).
inline __m256 float_steps(const __m256i* in, const float* da, __m256 acc) {
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

// The integer total of one block (the blocks after the last whole chunk).
int block_total(const block_q4_0& b, const block_q8_0& y) {
    const __m128i q = load128(b.qs);
    const __m256i codes = _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1), _mm256_set1_epi8(0x0F));
    const __m256i ya = load256(y.qs);
    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(codes, ya), _mm256_set1_epi16(1));
    const __m256i sum8 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(8), ya), _mm256_set1_epi16(1));
    return hsum_i32(_mm256_sub_epi32(s, sum8));
}

// Rows against NT tokens (token t prepared at a + t * a_stride): each
// chunk's codes are unpacked once and reduced against every token, with a
// table per token; each token's float steps are those it gets alone.
template <int NT>
void rows_tokens(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, size_t a_stride, float* y,
                 int64_t ldy) {
    const Prepared layout(n);
    const int64_t nb = layout.nb, whole = layout.whole, nc = whole / kChunk;
    const int n_groups = (n_rows + kGroupRows - 1) / kGroupRows;
    TANDEM_CHECK(n_groups <= kDecodeRows / kGroupRows, "decode rows: more rows than kDecodeRows");
    const block_q4_0* x[kDecodeRows];
    decode_row_pointers(w, row_stride, n_rows, n_groups * kGroupRows, x);
    const ActChunk* act[NT];
    for (int t = 0; t < NT; ++t) act[t] = reinterpret_cast<const ActChunk*>(static_cast<const uint8_t*>(a) + t * a_stride);

    // Per token, chunk and row: chunk_words. A whole row in one pass (for
    // one token 256 bytes a chunk: 14 KiB at 14336 columns, L1 and L2).
    struct ChunkWords {
        __m256i row[kGroupRows];
    };
    thread_local std::vector<ChunkWords> storage;
    storage.resize(static_cast<size_t>(NT * nc));
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
                const uint8_t* p = row + c * kChunk * sizeof(block_q4_0);
                if (prefetch) {
                    for (int l = 0; l < 3; ++l) _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes + 64 * l), _MM_HINT_NTA);
                } else {
                    for (int l = 0; l < 3; ++l) _mm_prefetch(reinterpret_cast<const char*>(p + kRowStreamAhead + 64 * l), _MM_HINT_T0);
                }
                Codes codes;
                unpack_chunk(p, codes);
                for (int t = 0; t < NT; ++t) table[t * nc + c].row[r] = chunk_words(codes, act[t][c]);
                // The float steps of chunk c once all eight rows' words of it
                // are in: inside the last row's loop, so that row's loads
                // overlap them.
                if (r == kGroupRows - 1) {
                    for (int t = 0; t < NT; ++t) acc[t][g] = float_steps(table[t * nc + c].row, act[t][c].d, acc[t][g]);
                }
            }
        }
    }
    for (int t = 0; t < NT; ++t) {
        const auto* tail = reinterpret_cast<const block_q8_0*>(reinterpret_cast<const uint8_t*>(act[t]) + layout.tail_offset);
        alignas(32) float out[kDecodeRows];
        for (int g = 0; g < n_groups; ++g) _mm256_store_ps(out + g * kGroupRows, acc[t][g]);
        for (int r = 0; r < n_rows; ++r) {
            float v = out[r];
            for (int64_t i = whole; i < nb; ++i) {
                const block_q8_0& yb = tail[i - whole];
                v = std::fma(static_cast<float>(block_total(x[r][i], yb)), f16(x[r][i].d) * f16(yb.d), v);
            }
            y[t * ldy + r] = v;
        }
    }
}

}  // namespace

size_t q4_0_rows_avx2_prepared_bytes(int64_t n) { return Prepared(n).bytes; }

void prepare_q4_0_rows_avx2(const void* a, int64_t n, void* out) {
    const Prepared layout(n);
    const auto* ya = static_cast<const block_q8_0*>(a);
    auto* base = static_cast<uint8_t*>(out);
    TANDEM_CHECK(reinterpret_cast<uintptr_t>(base) % 64 == 0, "decode rows: prepared activation not 64-byte aligned");
    auto* chunks = reinterpret_cast<ActChunk*>(base);
    const __m256i eight = _mm256_set1_epi8(8);
    // The totals fit in int16 only with activations in [-127, 127], which
    // is what the Q8_0 quantizers make (round(x * 127 / amax)).
    __m256i least = _mm256_setzero_si256();
    for (int64_t c = 0; c < layout.whole / kChunk; ++c) {
        const block_q8_0* b = ya + kChunk * c;
        ActChunk& ac = chunks[c];
        __m256i x[4];
        for (int k = 0; k < 4; ++k) {
            const __m256i y0 = load256(b[2 * k].qs), y1 = load256(b[2 * k + 1].qs);
            least = _mm256_min_epi8(least, _mm256_min_epi8(y0, y1));
            ac.lo[k] = _mm256_permute2x128_si256(y0, y1, 0x20);
            ac.hi[k] = _mm256_permute2x128_si256(y0, y1, 0x31);
            x[k] = _mm256_add_epi16(_mm256_maddubs_epi16(eight, ac.lo[k]), _mm256_maddubs_epi16(eight, ac.hi[k]));
        }
        // -8 * (sum of activations), in the words chunk_words' sums take.
        ac.offset = _mm256_sub_epi16(_mm256_setzero_si256(), chunk_quads(x));
        for (int j = 0; j < kChunk; ++j) ac.d[j] = f16(b[j].d);
    }
    TANDEM_CHECK(_mm256_movemask_epi8(_mm256_cmpeq_epi8(least, _mm256_set1_epi8(-128))) == 0,
                 "decode rows: Q8_0 activation of -128");
    std::memcpy(base + layout.tail_offset, ya + layout.whole, static_cast<size_t>(layout.nb - layout.whole) * sizeof(block_q8_0));
}

// Zen 4, AVX2 level, one thread, min of 6 runs alternating (bench
// matvec/Q4_0/avx2/dram-*, us, single-row kernel -> this one): 512x2048
// 82.5 -> 32.4, 2048x2048 323 -> 122, 5632x2048 877 -> 309, 2048x5632
// 951 -> 294, 1024x14336 1173 -> 612, 4096x4096 1314 -> 426.
void dot_q4_0_rows_avx2(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
    rows_tokens<1>(n, w, row_stride, n_rows, a, 0, y, 0);
}

// Several tokens of a small batch (2..7 at AVX2: panels take 8 and more),
// one read and unpacking of the rows for all of them: dram-2048x2048 two
// tokens ~540 -> ~200 us, four ~800 -> ~370 against the token tiles.
void dot_q4_0_rows_multi_avx2(TANDEM_DECODE_MULTI_ARGS) {
    with_decode_tokens(nt, [&](auto NT) { rows_tokens<NT()>(n, w, row_stride, n_rows, a, a_stride, y, ldy); });
}

}  // namespace tandem::cpu::detail
