// Decode (one token) over rows of Q4_1, Q5_0, Q5_1 and Q8_0 with AVX-512 VNNI,
// in the order of their single-row kernel (LegacyLanesOrder in
// runtime/quant/dot_order.h, llama.cpp's on x86): per row and block eight lanes of
// four consecutive elements, acc[l] = fma(dw * da, float(lane l), acc[l]),
// the minimum terms acc_min = fma(m, s, acc_min), and at the end
// ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) + (acc3 + acc7)) + acc_min.
//
// Why a kernel of its own: the AVX2 single-row kernel these types use
// (the AVX-512 one pairs blocks, another order) ran at ~11.4 GB/s per core
// from L2 on Zen 4, below a core's share of DRAM, so decode of these files
// was compute-bound. Here, per block:
// - codes stay unsigned (nibbles, plus 16 where the block's qh bit is set:
//   one masked byte add), and one 32-byte vpdpbusd against the activation
//   gives the eight lanes; Q5_0's -16 offset is the lanes' starting value,
//   -16 x (sum of the lane's four activations), made once per matmul with
//   the activation scales as floats (prepare_*_rows);
// - the float step is one fused multiply-add on a register chain, which
//   bounds a row at one block per fma latency (~4 cycles).
// One row at a time, block after block: reading two or four rows block by
// block (two or four chains) ran 2.5-3x slower from DRAM (Q5_0 2048x2048,
// one thread: 171 us one row, 535 two, 425 four), and parking the lanes in
// a table to run several rows' float steps together (as the Q4_K kernel
// does) also lost from DRAM once a row's lanes outgrew L1.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels_cpu/simd_x86.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

using quant::block_q4_1;
using quant::block_q5_0;
using quant::block_q5_1;
using quant::block_q8_0;
using quant::block_q8_1;

// The activation per block as the kernel reads it: the lanes' starting
// values (Q5_0: -16 x the lane's activation sum; else 0) and the 32
// activation bytes; then each block's scale, then (Q8_1) its sum, as floats.
struct PreparedBlock {
    __m256i start;
    __m256i qs;
};
static_assert(sizeof(PreparedBlock) == 64, "prepared block layout");

struct Layout {
    int64_t nb;
    size_t d_offset, s_offset, bytes;
    explicit Layout(int64_t n)
        : nb(n / 32),
          d_offset(static_cast<size_t>(nb) * sizeof(PreparedBlock)),
          s_offset(d_offset + static_cast<size_t>(nb) * sizeof(float)),
          bytes(s_offset + static_cast<size_t>(nb) * sizeof(float)) {}
};

// Elements 0..15 of a block are the low nibbles of qs, 16..31 the high
// nibbles: as bytes, the same order as the activation's qs.
inline __m256i nibbles(const uint8_t* qs) {
    const __m128i q = load128(qs);
    return _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1),
                            _mm256_set1_epi8(0x0F));
}
// Bit 4 of element j is bit j of qh (little-endian 32 bits).
inline __m256i with_high_bits(__m256i codes, const uint8_t* qh) {
    uint32_t bits;
    std::memcpy(&bits, qh, sizeof(bits));
    return _mm256_mask_add_epi8(codes, _cvtu32_mask32(bits), codes, _mm256_set1_epi8(16));
}

struct Q4_1Rows {
    using Block = block_q4_1;
    using Act = block_q8_1;
    static constexpr int kOffset = 0;
    static constexpr bool kMin = true;
    static constexpr bool kFlipAct = false;
    static constexpr bool kHighBits = false;  // a fifth bit from qh
    static __m256i codes(const Block& b) { return nibbles(b.qs); }
    static quant::fp16_bits min_bits(const Block& b) { return b.m; }
};
struct Q5_0Rows {
    using Block = block_q5_0;
    using Act = block_q8_0;
    static constexpr int kOffset = 16;
    static constexpr bool kMin = false;
    static constexpr bool kFlipAct = false;
    static constexpr bool kHighBits = true;  // a fifth bit from qh
    static __m256i codes(const Block& b) { return with_high_bits(nibbles(b.qs), b.qh); }
    static quant::fp16_bits min_bits(const Block&) { return 0; }
};
// Q8_0: the signed codes plus 128 as unsigned bytes (flipping the sign
// bit), the -128 offset in the lanes' starting values as for Q5_0.
struct Q8_0Rows {
    using Block = quant::block_q8_0;
    using Act = block_q8_0;
    static constexpr int kOffset = 128;
    static constexpr bool kMin = false;
    // Several tokens: the activation gets the +128 instead (unsigned
    // bytes), so the offset's lane values, -128 x the sum of the lane's
    // four weights, are made once per block for all tokens.
    static constexpr bool kFlipAct = true;
    static constexpr bool kHighBits = false;  // a fifth bit from qh
    static __m256i codes(const Block& b) { return _mm256_xor_si256(load256(b.qs), _mm256_set1_epi8(static_cast<char>(0x80))); }
    static quant::fp16_bits min_bits(const Block&) { return 0; }
};
struct Q5_1Rows {
    using Block = block_q5_1;
    using Act = block_q8_1;
    static constexpr int kOffset = 0;
    static constexpr bool kMin = true;
    static constexpr bool kFlipAct = false;
    static constexpr bool kHighBits = true;  // a fifth bit from qh
    static __m256i codes(const Block& b) { return with_high_bits(nibbles(b.qs), b.qh); }
    static quant::fp16_bits min_bits(const Block& b) { return b.m; }
};

inline float act_sum(const block_q8_0&) { return 0.0f; }
inline float act_sum(const block_q8_1& y) { return f16(y.s); }

template <class F>
void prepare(const void* a, int64_t n, void* out) {
    const Layout layout(n);
    const auto* ya = static_cast<const typename F::Act*>(a);
    auto* base = static_cast<uint8_t*>(out);
    TANDEM_CHECK(reinterpret_cast<uintptr_t>(base) % 64 == 0, "decode rows: prepared activation not 64-byte aligned");
    auto* blocks = reinterpret_cast<PreparedBlock*>(base);
    auto* d = reinterpret_cast<float*>(base + layout.d_offset);
    auto* s = reinterpret_cast<float*>(base + layout.s_offset);
    const __m256i offset = _mm256_set1_epi8(static_cast<char>(F::kOffset));
    for (int64_t i = 0; i < layout.nb; ++i) {
        const __m256i q = load256(ya[i].qs);
        blocks[i].qs = q;
        blocks[i].start = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), offset, q));
        d[i] = f16(ya[i].d);
        s[i] = act_sum(ya[i]);
    }
}

// How far ahead of its block one token's row asks for weights (see
// decode_rows).
constexpr int kRowPrefetchBytes = 2048;
template <class F>
float dot_row(int64_t nb, const typename F::Block* x, const PreparedBlock* act, const float* act_d, const float* act_s) {
    __m256 acc = _mm256_setzero_ps();
    float acc_min = 0.0f;
    for (int64_t k = 0; k < nb; ++k) {
        _mm_prefetch(reinterpret_cast<const char*>(x + k) + kRowPrefetchBytes, _MM_HINT_T0);
        const PreparedBlock& p = act[k];
        const __m256i start = F::kOffset != 0 ? p.start : _mm256_setzero_si256();
        const __m256 lanes = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(start, F::codes(x[k]), p.qs));
        const __m128 d = _mm_mul_ss(_mm_cvtph_ps(_mm_cvtsi32_si128(x[k].d)), _mm_set_ss(act_d[k]));
        acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(d), lanes, acc);
        if constexpr (F::kMin) acc_min = std::fma(f16(F::min_bits(x[k])), act_s[k], acc_min);
    }
    alignas(32) float l[8];
    _mm256_store_ps(l, acc);
    return (((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))) + acc_min;
}

template <class F>
void decode_rows(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
    const Layout layout(n);
    const auto* base = static_cast<const uint8_t*>(a);
    const auto* act = reinterpret_cast<const PreparedBlock*>(base);
    const auto* act_d = reinterpret_cast<const float*>(base + layout.d_offset);
    const auto* act_s = reinterpret_cast<const float*>(base + layout.s_offset);
    TANDEM_CHECK(n_rows <= kDecodeRows, "decode rows: more rows than kDecodeRows");
    for (int r = 0; r < n_rows; ++r) {
        const auto* x = reinterpret_cast<const typename F::Block*>(static_cast<const uint8_t*>(w) + r * row_stride);
        y[r] = dot_row<F>(layout.nb, x, act, act_d, act_s);
    }
}

// Several tokens: each block's codes unpacked once per row, then per pair
// of tokens one 512-bit integer dot (the codes in both halves, token 2p's
// activation in the low half and 2p+1's in the high) and its float step:
// NT/2 chains per row, each half the single-token order of its token (the
// same integer lanes, the same product dw x ad_t rounded once, the same
// fused multiply-add per block), two rows at a time.
//
// The lanes become floats without a conversion: the integer dot starts
// from the bits of 1.5 x 2^23, so the sum's bits are that float plus the
// lane (|lane| < 2^22: at most 4 x 255 x 255), and subtracting 1.5 x 2^23
// leaves the lane exactly (a subtraction runs on two ports at 512 bits,
// the conversion on one). The weights' scales and minimums come from a
// table (f16_table); the tokens' blocks are gathered
// pair by pair (Gathered), with the activation scales as [ad_2p x 8,
// ad_2p+1 x 8]; the minimum terms are one 256-bit fused multiply-add for
// all tokens, lane t the same operation on the same values as token t's
// scalar one, and the tokens' final lane sums run as one transpose and
// seven additions in dot_row's order.
//
// Measured (tandem_bench_kernels streams/, one thread, Sapphire Rapids
// VM, medians of 3, old and new builds alternating), four tokens, before
// (one 256-bit chain per token: a conversion, a broadcast product and a
// fused multiply-add on two ports, the weight scales converted by the
// shuffle port) and after: Q4_1 1536x576 230-239 -> 136-138 us, DRAM
// 2048x2048 956-1080 -> 676-702; Q8_0 209-215 -> 127-139 and 898-1030
// -> 700-742. (Scales converted 16 at a time from a copy in memory instead
// of the table: slower, each conversion waited on the copy's stores.)
// How far ahead of the block being read the several-tokens kernel asks
// for weights: without it a pass of four Q8_0 tokens from DRAM ran ~30%
// slower than from L2.
constexpr int64_t kPrefetchAhead = 4096;
constexpr int32_t kMagicBits = 0x4B400000;  // 1.5 x 2^23 as a float
constexpr float kMagic = 12582912.0f;
static_assert(std::bit_cast<int32_t>(kMagic) == kMagicBits);

template <int NT, bool kStarts>
struct Gathered {
    static constexpr int NP = (NT + 1) / 2;  // token pairs; an odd count's last high half is zeros
    struct Block {
        __m512i qs[NP];
        __m512i start[kStarts ? NP : 1];  // the lanes' starting values plus kMagicBits (kStarts), else unused
        __m512 ad[NP];      // the pair's activation scales, each in eight lanes
        alignas(32) float s[8];  // lanes [0, NT): the tokens' sums (Q8_1)
    };
    std::vector<Block> blocks;
};

// v[0 .. nv) (nv <= 8, the rest taken as zeros) transposed: c[j] lane i
// is v[i] lane j.
inline void transpose8_ps(const __m256* v, int nv, __m256* c) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = i < nv ? v[i] : _mm256_setzero_ps();
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    c[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    c[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    c[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    c[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    c[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    c[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    c[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    c[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// A block's 32 codes in both 256-bit halves, as the unsigned bytes F::codes
// gives (Q8_0: its codes as they are, the activation carrying the flip).
template <class F>
inline __m512i codes512(const typename F::Block& b) {
    if constexpr (F::kFlipAct) {
        return _mm512_broadcast_i64x4(load256(b.qs));
    } else {
        // [q, q, q, q] by 128-bit lanes; lanes 1 and 3 shifted down a nibble.
        const __m512i q = _mm512_broadcast_i32x4(load128(b.qs));
        __m512i c = _mm512_and_si512(_mm512_srlv_epi64(q, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)), _mm512_set1_epi8(0x0F));
        if constexpr (F::kHighBits) {
            uint32_t bits;
            std::memcpy(&bits, b.qh, sizeof(bits));
            const __mmask64 m = _cvtu64_mask64(static_cast<uint64_t>(bits) | static_cast<uint64_t>(bits) << 32);
            c = _mm512_mask_add_epi8(c, m, c, _mm512_set1_epi8(16));
        }
        return c;
    }
}

// NR rows (one or two) against the gathered tokens: NR x NP independent
// fma chains of two tokens each.
template <class F, int NT, int NR, class G>
void row_group(int64_t nb, const uint8_t* w, size_t row_stride, const typename G::Block* blocks, const float* f16s, float* y,
               int64_t ldy) {
    constexpr int NP = G::NP;
    constexpr bool kStarts = F::kOffset != 0 && !F::kFlipAct;
    const typename F::Block* x[NR];
    for (int r = 0; r < NR; ++r) {
        x[r] = reinterpret_cast<const typename F::Block*>(w + r * row_stride);
    }
    __m512 acc[NR][NP];
    __m256 acc_min[NR];
    for (int r = 0; r < NR; ++r) {
        acc_min[r] = _mm256_setzero_ps();
        for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_ps();
    }
    const __m512i magic_bits = _mm512_set1_epi32(kMagicBits);
    const __m512 magic = _mm512_set1_ps(kMagic);
    for (int64_t k = 0; k < nb; ++k) {
        const typename G::Block& b = blocks[k];
        for (int r = 0; r < NR; ++r) {
            _mm_prefetch(reinterpret_cast<const char*>(x[r] + k) + kPrefetchAhead, _MM_HINT_T0);
            const __m512i codes = codes512<F>(x[r][k]);
            __m512i start = magic_bits;
            if constexpr (F::kFlipAct) {
                // -128 x (the sum of each lane's four codes), for all tokens.
                start = _mm512_sub_epi32(magic_bits, _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(static_cast<char>(0x80)), codes));
            }
            if constexpr (F::kMin) {
                acc_min[r] = _mm256_fmadd_ps(_mm256_set1_ps(f16s[F::min_bits(x[r][k])]), _mm256_load_ps(b.s), acc_min[r]);
            }
            const __m512 dw = _mm512_set1_ps(f16s[x[r][k].d]);
            for (int p = 0; p < NP; ++p) {
                if constexpr (kStarts) start = b.start[p];
                const __m512i dot = F::kFlipAct ? _mm512_dpbusd_epi32(start, b.qs[p], codes) : _mm512_dpbusd_epi32(start, codes, b.qs[p]);
                const __m512 lanes = _mm512_sub_ps(_mm512_castsi512_ps(dot), magic);
                acc[r][p] = _mm512_fmadd_ps(lanes, _mm512_mul_ps(dw, b.ad[p]), acc[r][p]);
            }
        }
    }
    for (int r = 0; r < NR; ++r) {
        __m256 per_token[2 * NP];
        for (int p = 0; p < NP; ++p) {
            per_token[2 * p] = _mm512_castps512_ps256(acc[r][p]);
            per_token[2 * p + 1] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r][p]), 1));
        }
        // Each token's eight lanes summed in dot_row's order, eight tokens
        // at once: transposed, lane t of column j is lane j of token t.
        __m256 c[8];
        transpose8_ps(per_token, NT, c);
        const __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c[0], c[4]), _mm256_add_ps(c[2], c[6])),
                                         _mm256_add_ps(_mm256_add_ps(c[1], c[5]), _mm256_add_ps(c[3], c[7])));
        alignas(32) float out[8];
        _mm256_store_ps(out, _mm256_add_ps(sum, acc_min[r]));
        for (int t = 0; t < NT; ++t) y[t * ldy + r] = out[t];
    }
}

template <class F, int NT>
void rows_tokens(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, size_t a_stride, float* y,
                 int64_t ldy) {
    static_assert(NT >= 1 && NT <= 8);
    constexpr bool kStarts = F::kOffset != 0 && !F::kFlipAct;
    using G = Gathered<NT, kStarts>;
    const Layout layout(n);
    thread_local G g;
    g.blocks.resize(static_cast<size_t>(layout.nb));
    typename G::Block* blocks = g.blocks.data();
    const PreparedBlock* act[8];
    const float *d[8], *sums[8];
    for (int t = 0; t < NT; ++t) {
        const auto* base = static_cast<const uint8_t*>(a) + static_cast<size_t>(t) * a_stride;
        act[t] = reinterpret_cast<const PreparedBlock*>(base);
        d[t] = reinterpret_cast<const float*>(base + layout.d_offset);
        sums[t] = reinterpret_cast<const float*>(base + layout.s_offset);
    }
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(F::kFlipAct ? 0x80 : 0));
    const __m256i magic = _mm256_set1_epi32(kMagicBits);
    for (int64_t k = 0; k < layout.nb; ++k) {
        typename G::Block& b = blocks[k];
        for (int p = 0; p < G::NP; ++p) {
            const int t0 = 2 * p, t1 = 2 * p + 1;
            const bool two = t1 < NT;
            const __m256i q0 = _mm256_xor_si256(act[t0][k].qs, flip);
            const __m256i q1 = two ? _mm256_xor_si256(act[t1][k].qs, flip) : _mm256_setzero_si256();
            b.qs[p] = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
            if constexpr (kStarts) {
                const __m256i s0 = _mm256_add_epi32(act[t0][k].start, magic);
                const __m256i s1 = two ? _mm256_add_epi32(act[t1][k].start, magic) : magic;
                b.start[p] = _mm512_inserti64x4(_mm512_castsi256_si512(s0), s1, 1);
            }
            const __m256 a0 = _mm256_set1_ps(d[t0][k]), a1 = _mm256_set1_ps(two ? d[t1][k] : 0.0f);
            b.ad[p] = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(a0)), _mm256_castps_pd(a1), 1));
        }
        for (int t = 0; t < 8; ++t) b.s[t] = t < NT ? sums[t][k] : 0.0f;
    }
    TANDEM_CHECK(n_rows <= kDecodeRows, "decode rows: more rows than kDecodeRows");
    const float* f16s = f16_table();
    const auto* wb = static_cast<const uint8_t*>(w);
    int r = 0;
    for (; r + 2 <= n_rows; r += 2) {
        row_group<F, NT, 2, G>(layout.nb, wb + r * row_stride, row_stride, blocks, f16s, y + r, ldy);
    }
    if (r < n_rows) row_group<F, NT, 1, G>(layout.nb, wb + r * row_stride, row_stride, blocks, f16s, y + r, ldy);
}

template <class F>
void rows_multi(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, size_t a_stride, int nt, float* y,
                int64_t ldy) {
    with_decode_tokens(nt, [&](auto NT) { rows_tokens<F, NT()>(n, w, row_stride, n_rows, a, a_stride, y, ldy); });
}

}  // namespace

void dot_q4_1_rows_multi_avx512(TANDEM_DECODE_MULTI_ARGS) { rows_multi<Q4_1Rows>(n, w, row_stride, n_rows, a, a_stride, nt, y, ldy); }
void dot_q5_0_rows_multi_avx512(TANDEM_DECODE_MULTI_ARGS) { rows_multi<Q5_0Rows>(n, w, row_stride, n_rows, a, a_stride, nt, y, ldy); }
void dot_q8_0_rows_multi_avx512(TANDEM_DECODE_MULTI_ARGS) { rows_multi<Q8_0Rows>(n, w, row_stride, n_rows, a, a_stride, nt, y, ldy); }
void dot_q5_1_rows_multi_avx512(TANDEM_DECODE_MULTI_ARGS) { rows_multi<Q5_1Rows>(n, w, row_stride, n_rows, a, a_stride, nt, y, ldy); }

size_t legacy_rows_prepared_bytes(int64_t n) { return Layout(n).bytes; }
void prepare_q4_1_rows(const void* a, int64_t n, void* out) { prepare<Q4_1Rows>(a, n, out); }
void prepare_q5_0_rows(const void* a, int64_t n, void* out) { prepare<Q5_0Rows>(a, n, out); }
void prepare_q8_0_rows(const void* a, int64_t n, void* out) { prepare<Q8_0Rows>(a, n, out); }
void prepare_q5_1_rows(const void* a, int64_t n, void* out) { prepare<Q5_1Rows>(a, n, out); }
void dot_q4_1_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
    decode_rows<Q4_1Rows>(n, w, row_stride, n_rows, a, y);
}
void dot_q5_0_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
    decode_rows<Q5_0Rows>(n, w, row_stride, n_rows, a, y);
}
void dot_q8_0_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
    decode_rows<Q8_0Rows>(n, w, row_stride, n_rows, a, y);
}
void dot_q5_1_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
    decode_rows<Q5_1Rows>(n, w, row_stride, n_rows, a, y);
}

}  // namespace tandem::cpu::detail
