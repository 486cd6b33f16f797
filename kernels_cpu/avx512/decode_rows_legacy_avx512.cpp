// Decode (one token) over rows of Q4_1, Q5_0 and Q5_1 with AVX-512 VNNI,
// in the order of their single-row kernel (dot_legacy_lanes in
// vec_dot_scalar.cpp, llama.cpp's on x86): per row and block eight lanes of
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
#include <cmath>
#include <cstdint>
#include <cstring>

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
    static __m256i codes(const Block& b) { return nibbles(b.qs); }
    static quant::fp16_bits min_bits(const Block& b) { return b.m; }
};
struct Q5_0Rows {
    using Block = block_q5_0;
    using Act = block_q8_0;
    static constexpr int kOffset = 16;
    static constexpr bool kMin = false;
    static __m256i codes(const Block& b) { return with_high_bits(nibbles(b.qs), b.qh); }
    static quant::fp16_bits min_bits(const Block&) { return 0; }
};
struct Q5_1Rows {
    using Block = block_q5_1;
    using Act = block_q8_1;
    static constexpr int kOffset = 0;
    static constexpr bool kMin = true;
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

template <class F>
float dot_row(int64_t nb, const typename F::Block* x, const PreparedBlock* act, const float* act_d, const float* act_s) {
    __m256 acc = _mm256_setzero_ps();
    float acc_min = 0.0f;
    for (int64_t k = 0; k < nb; ++k) {
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

// Several tokens: each block's codes and scale converted once, then per
// token dot_row's integer lanes and float steps (NT independent chains, so
// the fma latency that bounds one row is shared out).
template <class F, int NT>
void rows_tokens(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, size_t a_stride, float* y,
                 int64_t ldy) {
    const Layout layout(n);
    const PreparedBlock* act[NT];
    const float* act_d[NT];
    const float* act_s[NT];
    for (int t = 0; t < NT; ++t) {
        const auto* base = static_cast<const uint8_t*>(a) + static_cast<size_t>(t) * a_stride;
        act[t] = reinterpret_cast<const PreparedBlock*>(base);
        act_d[t] = reinterpret_cast<const float*>(base + layout.d_offset);
        act_s[t] = reinterpret_cast<const float*>(base + layout.s_offset);
    }
    TANDEM_CHECK(n_rows <= kDecodeRows, "decode rows: more rows than kDecodeRows");
    for (int r = 0; r < n_rows; ++r) {
        const auto* x = reinterpret_cast<const typename F::Block*>(static_cast<const uint8_t*>(w) + r * row_stride);
        __m256 acc[NT];
        float acc_min[NT];
        for (int t = 0; t < NT; ++t) {
            acc[t] = _mm256_setzero_ps();
            acc_min[t] = 0.0f;
        }
        for (int64_t k = 0; k < layout.nb; ++k) {
            const __m256i codes = F::codes(x[k]);
            const __m128 dw = _mm_cvtph_ps(_mm_cvtsi32_si128(x[k].d));
            [[maybe_unused]] float m = 0.0f;
            if constexpr (F::kMin) m = f16(F::min_bits(x[k]));
            for (int t = 0; t < NT; ++t) {
                const PreparedBlock& p = act[t][k];
                const __m256i start = F::kOffset != 0 ? p.start : _mm256_setzero_si256();
                const __m256 lanes = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(start, codes, p.qs));
                const __m128 d = _mm_mul_ss(dw, _mm_set_ss(act_d[t][k]));
                acc[t] = _mm256_fmadd_ps(_mm256_broadcastss_ps(d), lanes, acc[t]);
                if constexpr (F::kMin) acc_min[t] = std::fma(m, act_s[t][k], acc_min[t]);
            }
        }
        for (int t = 0; t < NT; ++t) {
            alignas(32) float l[8];
            _mm256_store_ps(l, acc[t]);
            y[t * ldy + r] = (((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))) + acc_min[t];
        }
    }
}

template <class F>
void rows_multi(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, size_t a_stride, int nt, float* y,
                int64_t ldy) {
    const auto* ab = static_cast<const uint8_t*>(a);
    for (int t0 = 0; t0 < nt;) {
        const int left = nt - t0;
        const int take = left == 5 || left == 6 ? 3 : (left < 4 ? left : 4);
        const void* at = ab + static_cast<size_t>(t0) * a_stride;
        float* yt = y + t0 * ldy;
        switch (take) {
            case 1: rows_tokens<F, 1>(n, w, row_stride, n_rows, at, a_stride, yt, ldy); break;
            case 2: rows_tokens<F, 2>(n, w, row_stride, n_rows, at, a_stride, yt, ldy); break;
            case 3: rows_tokens<F, 3>(n, w, row_stride, n_rows, at, a_stride, yt, ldy); break;
            default: rows_tokens<F, 4>(n, w, row_stride, n_rows, at, a_stride, yt, ldy); break;
        }
        t0 += take;
    }
}

}  // namespace

void dot_q4_1_rows_multi_avx512(TANDEM_DECODE_MULTI_ARGS) { rows_multi<Q4_1Rows>(n, w, row_stride, n_rows, a, a_stride, nt, y, ldy); }
void dot_q5_0_rows_multi_avx512(TANDEM_DECODE_MULTI_ARGS) { rows_multi<Q5_0Rows>(n, w, row_stride, n_rows, a, a_stride, nt, y, ldy); }
void dot_q5_1_rows_multi_avx512(TANDEM_DECODE_MULTI_ARGS) { rows_multi<Q5_1Rows>(n, w, row_stride, n_rows, a, a_stride, nt, y, ldy); }

size_t legacy_rows_prepared_bytes(int64_t n) { return Layout(n).bytes; }
void prepare_q4_1_rows(const void* a, int64_t n, void* out) { prepare<Q4_1Rows>(a, n, out); }
void prepare_q5_0_rows(const void* a, int64_t n, void* out) { prepare<Q5_0Rows>(a, n, out); }
void prepare_q5_1_rows(const void* a, int64_t n, void* out) { prepare<Q5_1Rows>(a, n, out); }
void dot_q4_1_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
    decode_rows<Q4_1Rows>(n, w, row_stride, n_rows, a, y);
}
void dot_q5_0_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
    decode_rows<Q5_0Rows>(n, w, row_stride, n_rows, a, y);
}
void dot_q5_1_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
    decode_rows<Q5_1Rows>(n, w, row_stride, n_rows, a, y);
}

}  // namespace tandem::cpu::detail
