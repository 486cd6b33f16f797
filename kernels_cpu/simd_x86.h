// Helpers shared by the AVX2 and AVX-512 kernel files. Only those files
// include this header, and each is compiled with its own -m flags; every
// helper therefore has internal linkage (anonymous namespace), so the
// linker can never merge an AVX-512 instance into the AVX2 code path.
#pragma once

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "simd_x86.h needs -mavx2 -mfma -mf16c (set per file in kernels_cpu/CMakeLists.txt)"
#endif

// GCC 12's AVX-512 intrinsics initialize their "undefined" operands from
// themselves, which -Wmaybe-uninitialized reports at every inlined use
// (a known GCC 12 false positive); the state is by source location, so scoping the
// suppression to the header leaves our own code checked.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels_cpu/vec_dot.h"
#include "runtime/common/error.h"
#include "runtime/quant/quant_blocks.h"

// A kernel's name in an AVX2 source: name_avx2, or name_avx2w in the second
// build CMake makes of some AVX2 sources for the AVX-512 levels
// (LevelKernels::avx2w), name_avx2b in the third, with BMI2, for AVX2 CPUs
// with a fast pdep (LevelKernels::avx2b; kernels_cpu/CMakeLists.txt).
#if defined(TANDEM_AVX2_WIDE)
#define TANDEM_AVX2_FN(name) name##_avx2w
#elif defined(TANDEM_AVX2_BMI2)
#define TANDEM_AVX2_FN(name) name##_avx2b
#else
#define TANDEM_AVX2_FN(name) name##_avx2
#endif

namespace tandem::cpu::detail {

// uint32 lanes as GCC vectors, for the format's lane-wise formulas written
// once for scalars and vectors (e.g. quant::iq::iq4_xs_scale_bits): the
// same bits as __m256i / __m512i (std::bit_cast between them).
typedef uint32_t U32x8 __attribute__((vector_size(32)));
typedef uint32_t U32x16 __attribute__((vector_size(64)));

namespace {

inline float f16(quant::fp16_bits h) { return _cvtsh_ss(h); }

// A block's two fp16 scales through one conversion: [d, dmin, 0, 0].
inline __m128 scales_pair(quant::fp16_bits d, quant::fp16_bits dmin) {
    return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(d | static_cast<uint32_t>(dmin) << 16)));
}

// Sum of the eight int32 lanes (exact: any order gives the same total).
inline int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// 8x8 float transpose: out[j] lane r = in[r] lane j (out may alias in).
inline void transpose8x8_ps(const __m256* in, __m256* out) {
    const __m256 t0 = _mm256_unpacklo_ps(in[0], in[1]), t1 = _mm256_unpackhi_ps(in[0], in[1]);
    const __m256 t2 = _mm256_unpacklo_ps(in[2], in[3]), t3 = _mm256_unpackhi_ps(in[2], in[3]);
    const __m256 t4 = _mm256_unpacklo_ps(in[4], in[5]), t5 = _mm256_unpackhi_ps(in[4], in[5]);
    const __m256 t6 = _mm256_unpacklo_ps(in[6], in[7]), t7 = _mm256_unpackhi_ps(in[6], in[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)), u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)), u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    out[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    out[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    out[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    out[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    out[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    out[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    out[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    out[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// Single-row decode kernels that read their rows one after another ask
// for the lines of each block kRowStreamAhead bytes ahead into L1: the
// hardware prefetchers alone left one row's stream at ~7 GB/s a core.
// AVX-512, llama-1b tg64, 2 threads, Sapphire Rapids: Q6_K 21 -> 30 tok/s
// (1 KiB ahead 28, 4 KiB 23).
inline constexpr size_t kRowStreamAhead = 2048;
// The same kernels (and the several-rows ones through prefetch_ahead) also
// ask for each block's lines kL2StreamAhead bytes ahead into L2: a serving
// step's several tokens do 2-3x one token's arithmetic per byte, and with
// the L1 prefetch alone their reads and their arithmetic took turns (Zen
// 4, 2 threads, Q4_K four tokens over 47 MB of rows, past the 32 MB L3:
// 9.9-11.0 ns a row and super-block, about the sum of the arithmetic, ~5.8
// on two threads from L2, and one token's reads, 4.4-5.6). Old and new
// kernels taking turns in one process, new/old: 2048 columns 0.81-0.90,
// 5632 columns 0.80-0.84 (4 KiB ahead: 0.81-0.90 and 0.90-0.93; 8 KiB
// 0.81-0.83 and 0.92-0.96; 16 KiB 0.80-0.89 and 0.83-0.86); the same
// bits. The kernel's one-token pass, the same way: 0.81-0.88.
inline constexpr size_t kL2StreamAhead = 12288;
template <class Block>
inline void prefetch_stream_l2(const Block* b) {
    const char* p = reinterpret_cast<const char*>(b) + kL2StreamAhead;
    for (size_t o = 0; o < sizeof(Block); o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
}
template <class Block>
inline void prefetch_row_stream(const Block* b) {
    const char* p = reinterpret_cast<const char*>(b) + kRowStreamAhead;
    for (size_t o = 0; o < sizeof(Block); o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
    prefetch_stream_l2(b);
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// Per 128-bit lane, the 4x4 transpose of dwords: lane L of out[j] holds
// dword j of lane L of in[0], in[1], in[2], in[3].
inline void transpose4x4_epi32(const __m256i* in, __m256i* out) {
    const __m256i t0 = _mm256_unpacklo_epi32(in[0], in[1]), t1 = _mm256_unpackhi_epi32(in[0], in[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(in[2], in[3]), t3 = _mm256_unpackhi_epi32(in[2], in[3]);
    out[0] = _mm256_unpacklo_epi64(t0, t2);
    out[1] = _mm256_unpackhi_epi64(t0, t2);
    out[2] = _mm256_unpacklo_epi64(t1, t3);
    out[3] = _mm256_unpackhi_epi64(t1, t3);
}

inline uint32_t load_u32(const void* p) {
    uint32_t v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}

// Calls f(std::integral_constant<int, 0>{}) ... f(<N-1>): an unrolled loop
// whose index is a compile-time constant, so per-chunk shift counts and
// shuffle tables become immediates.
template <int N, class F>
inline void unroll(F&& f) {
    [&]<int... I>(std::integer_sequence<int, I...>) { (f(std::integral_constant<int, I>{}), ...); }
    (std::make_integer_sequence<int, N>{});
}

// Calls f(std::integral_constant<int, nt>{}) for a runtime token count nt
// in [1, N]: a several-tokens kernel's dispatch onto its NT instantiations.
template <int N, class F>
inline void with_token_count(int nt, F&& f) {
    TANDEM_CHECK(nt >= 1 && nt <= N, "decode rows: token count out of range");
    [&]<int... I>(std::integer_sequence<int, I...>) {
        ((nt == I + 1 ? (f(std::integral_constant<int, I + 1>{}), 0) : 0), ...);
    }(std::make_integer_sequence<int, N>{});
}
template <class F>
inline void with_decode_tokens(int nt, F&& f) {
    with_token_count<kMaxDecodeTokens>(nt, std::forward<F>(f));
}

// nt tokens (at most kMaxDecodeTokens) in passes of up to kPass:
// pass(std::integral_constant<int, NT>{}, acts, ys) with the NT tokens'
// activations (token t at a + t * a_stride) and outputs (y + t * ldy).
template <int kPass, class Pass>
void in_passes(const void* a, size_t a_stride, int nt, float* y, int64_t ldy, Pass&& pass) {
    TANDEM_CHECK(nt >= 1 && nt <= kMaxDecodeTokens, "decode rows: token count out of range");
    const auto* ab = static_cast<const uint8_t*>(a);
    const uint8_t* acts[kMaxDecodeTokens];
    float* ys[kMaxDecodeTokens];
    for (int t = 0; t < nt; ++t) {
        acts[t] = ab + static_cast<size_t>(t) * a_stride;
        ys[t] = y + t * ldy;
    }
    for (int t0 = 0; t0 < nt;) {
        const int take = nt - t0 < kPass ? nt - t0 : kPass;
        with_token_count<kPass>(take, [&](auto n_pass) { pass(n_pass, acts + t0, ys + t0); });
        t0 += take;
    }
}

// Dispatches a runtime token count onto the NT instantiations.
static_assert(kMaxTileTokens == 4, "tile() instantiates 1..4 tokens");
template <template <int> class K>
void tile(int64_t n, const void* w, const void* a, size_t a_stride, int nt, float* y, int64_t ldy) {
    switch (nt) {
        case 1: K<1>::run(n, w, a, a_stride, y, ldy); break;
        case 2: K<2>::run(n, w, a, a_stride, y, ldy); break;
        case 3: K<3>::run(n, w, a, a_stride, y, ldy); break;
        case 4: K<4>::run(n, w, a, a_stride, y, ldy); break;
        default: TANDEM_CHECK(false, "dot kernel: token tile outside [1, kMaxTileTokens]");
    }
}

// The minimum of a *_1 weight block and the sum of a Q8_1 block; 0 for the
// formats without them, whose code never uses the result.
template <class B>
inline quant::fp16_bits m_of(const B& b) {
    if constexpr (requires { b.m; }) {
        return b.m;
    } else {
        return 0;
    }
}
template <class B>
inline quant::fp16_bits s_of(const B& b) {
    if constexpr (requires { b.s; }) {
        return b.s;
    } else {
        return 0;
    }
}

// Activation row t of a tile.
template <class Block>
inline const Block* act_row(const void* a, size_t a_stride, int t) {
    return reinterpret_cast<const Block*>(static_cast<const unsigned char*>(a) + static_cast<size_t>(t) * a_stride);
}

// The scale decoders below build their result in a register from 32-bit
// pieces: going through a byte array (four 4-byte stores, one 16-byte
// load) would defeat store-to-load forwarding and stall every super-block.

// Sixteen 6-bit Q3_K scales from their 12 packed bytes, as int8 in
// [-32, 31]: low nibbles from bytes 0..7, the top two bits from 8..11.
inline __m128i q3_K_scales(const uint8_t* packed) {
    constexpr uint32_t kLow2 = 0x03030303u;
    constexpr uint32_t kLow4 = 0x0f0f0f0fu;
    const uint32_t a0 = load_u32(packed), a1 = load_u32(packed + 4), hi = load_u32(packed + 8);
    const uint32_t s0 = (a0 & kLow4) | (((hi >> 0) & kLow2) << 4);
    const uint32_t s1 = (a1 & kLow4) | (((hi >> 2) & kLow2) << 4);
    const uint32_t s2 = ((a0 >> 4) & kLow4) | (((hi >> 4) & kLow2) << 4);
    const uint32_t s3 = ((a1 >> 4) & kLow4) | (((hi >> 6) & kLow2) << 4);
    // (Two 64-bit halves measured faster here than four 32-bit inserts;
    // for q4_K_scales_mins below the opposite, per GCC 12's code.)
    const __m128i v = _mm_set_epi64x(static_cast<int64_t>(s2 | static_cast<uint64_t>(s3) << 32),
                                     static_cast<int64_t>(s0 | static_cast<uint64_t>(s1) << 32));
    return _mm_sub_epi8(v, _mm_set1_epi8(32));
}

// q4_K_scales_mins below in vector instructions: scales (bytes 0..7) and
// minimums (bytes 8..15) of a Q4_K/Q5_K super-block, as llama.cpp unpacks
// the 12 packed bytes u0, u1, u2 (6 bits each; the upper four sub-blocks'
// high bits are the top bits of the first eight bytes):
//   [u0 & 0x3f.., (u2 & 0x0f..) | ((u0 >> 6) & 0x03..) << 4,
//    u1 & 0x3f.., ((u2 >> 4) & 0x0f..) | ((u1 >> 6) & 0x03..) << 4]
// one 16-byte load (the 4 bytes past the scales are in the block: codes,
// or Q5_K's qh).
inline __m128i q4_K_scales_mins_simd(const uint8_t* packed) {
    const __m128i u = load128(packed);
    const __m128i low_src = _mm_shuffle_epi32(u, _MM_SHUFFLE(2, 1, 2, 0));   // u0 u2 u1 u2
    const __m128i high_src = _mm_shuffle_epi32(u, _MM_SHUFFLE(1, 1, 0, 0));  // u0 u0 u1 u1
    const __m128i low = _mm_and_si128(_mm_srlv_epi32(low_src, _mm_setr_epi32(0, 0, 0, 4)),
                                      _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i high = _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(high_src, 6), _mm_setr_epi32(0, 0x03030303, 0, 0x03030303)), 4);
    return _mm_or_si128(low, high);
}

// Q4_K/Q5_K: eight 6-bit scales (bytes 0-7) then eight 6-bit mins (8-15).
inline __m128i q4_K_scales_mins(const uint8_t* packed) {
    constexpr uint32_t kLow6 = 0x3f3f3f3fu;
    constexpr uint32_t kLow4 = 0x0f0f0f0fu;
    constexpr uint32_t kLow2 = 0x03030303u;
    const uint32_t u0 = load_u32(packed), u1 = load_u32(packed + 4), u2 = load_u32(packed + 8);
    const uint32_t sc_lo = u0 & kLow6;
    const uint32_t sc_hi = (u2 & kLow4) | (((u0 >> 6) & kLow2) << 4);
    const uint32_t mn_lo = u1 & kLow6;
    const uint32_t mn_hi = ((u2 >> 4) & kLow4) | (((u1 >> 6) & kLow2) << 4);
    return _mm_set_epi32(static_cast<int>(mn_hi), static_cast<int>(mn_lo), static_cast<int>(sc_hi), static_cast<int>(sc_lo));
}

}  // namespace
}  // namespace tandem::cpu::detail

#if defined(__AVX512F__)
#if !defined(__AVX512BW__) || !defined(__AVX512VL__)
#error "the AVX-512 kernels need -mavx512bw -mavx512vl"
#endif
namespace tandem::cpu::detail {
namespace {

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }

// [lo, hi] as one 512-bit register.
inline __m512i join256(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Two registers of int32 lanes, each within int16, as one register of
// words: a's lane in the low word of each dword, b's in the high. One
// vpdpwssd then multiplies both by their own scales and adds them in that
// lane (the decode rows kernels' way to apply two sub-blocks' scales).
inline __m512i interleave_words(__m512i a, __m512i b) {
    return _mm512_mask_blend_epi16(0xAAAAAAAAu, a, _mm512_slli_epi32(b, 16));
}

// The eight int32 lanes of llama.cpp's K-quant vec_dot (lane l: the sum
// over chunks of scale x the chunk's elements 4l .. 4l + 3) from four
// registers of lane sums, each within int16: registers 2p, 2p + 1
// interleaved as words (plus offset[p]'s words where given: a value offset
// made from the activation alone), one vpdpwssd per pair against the scale
// words scale_idx[p] picks from scales, then the 256-bit halves added.
inline __m256i scaled_lanes(const __m512i dot[4], __m512i scales, const __m512i scale_idx[2],
                            const __m512i* offset = nullptr) {
    __m512i tot = _mm512_setzero_si512();
    for (int p = 0; p < 2; ++p) {
        __m512i words = interleave_words(dot[2 * p], dot[2 * p + 1]);
        if (offset != nullptr) words = _mm512_add_epi16(words, offset[p]);
        tot = _mm512_dpwssd_epi32(tot, words, _mm512_permutexvar_epi16(scale_idx[p], scales));
    }
    return _mm256_add_epi32(_mm512_castsi512_si256(tot), _mm512_extracti64x4_epi64(tot, 1));
}

// The float version of join256. (insertf32x8 would need AVX512DQ, which
// the level check does not require, so go through the 64-bit-lane insert.)
inline __m512 join_ps(__m256 lo, __m256 hi) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}

// acc + sum of four u8 x s8 products per int32 lane. Without VNNI the
// emulation goes through saturating int16 pairs, which is exact for every
// caller here (|u| <= 128, |s| <= 127 gives at most 32512 per pair).
inline __m512i dpbusd(__m512i acc, __m512i u, __m512i s) {
#if defined(__AVX512VNNI__)
    return _mm512_dpbusd_epi32(acc, u, s);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
#endif
}

// acc + sum of two int16 x int16 products per int32 lane.
inline __m512i dpwssd(__m512i acc, __m512i a, __m512i b) {
#if defined(__AVX512VNNI__)
    return _mm512_dpwssd_epi32(acc, a, b);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
#endif
}

}  // namespace
}  // namespace tandem::cpu::detail
#endif  // __AVX512F__
