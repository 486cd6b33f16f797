// The AVX2 decoders of the 256-element i-quants: per block, D::prep(block)
// once (its signs, multipliers or grid indices, vectorized), then
// D::chunk(block, prep, c) for each chunk c of 32 elements as
//   mag:  32 unsigned magnitudes (grid bytes, |table value| or |grid|),
//   sgn:  32 signs as bytes (+1 or -1; 0 where the code is 0),
//   mult: the sixteen 16-bit sub-block multipliers of its int16 pairs.
// IQ1_S adds shift_mults (its shift term through the bsums), IQ1_M shifts
// (its shifts' signs per element). The vectorized prep took one token from
// 2.3-3.0 to 2.7-4.8 GB/s (IQ2_XXS..IQ1_M, 8192x2048, Zen 4). Shared by the single-row and batch dots
// (vec_dot_iquants_avx2.cpp) and the several-rows kernels; only files built
// with AVX2 flags include it.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels_cpu/simd_x86.h"
#include "runtime/quant/quant_element_iq.h"

// Internal linkage, as simd_x86.h's helpers (whose rule this follows).
namespace tandem::cpu::detail::iq_avx2 {
namespace {

using namespace tandem::quant;

// Every dword of bits: the 32 sign bits of a chunk. Byte j of the result:
// -1 where bit j is set, else +1.
inline __m256i spread_signs(__m256i bits) {
    const __m256i spread = _mm256_shuffle_epi8(
        bits, _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
    const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
    return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(1));
}
inline __m256i signs32(uint32_t bits) { return spread_signs(_mm256_set1_epi32(static_cast<int>(bits))); }
// Dword c of v in every dword.
inline __m256i dword_all(__m256i v, int c) { return _mm256_permutevar8x32_epi32(v, _mm256_set1_epi32(c)); }
// Bytes of 7 sign bits each (0..127) with the eighth bit that makes their
// count even (iq::signs_of7): bit 7 = parity of the two nibbles' parities.
inline __m256i parity7(__m256i v) {
    const __m256i par = _mm256_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0, 0, -128, -128, 0,
                                         -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    return _mm256_or_si256(v, _mm256_xor_si256(_mm256_shuffle_epi8(par, lo), _mm256_shuffle_epi8(par, hi)));
}
// Eight words of four 7-bit sign sets (bits 0..27) as their 32 sign bits
// (iq::signs_7x4 of each word).
inline __m256i signs_7x4x8(__m256i w) {
    const __m256i f = _mm256_or_si256(
        _mm256_or_si256(_mm256_and_si256(w, _mm256_set1_epi32(0x7F)), _mm256_and_si256(_mm256_slli_epi32(w, 1), _mm256_set1_epi32(0x7F00))),
        _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi32(w, 2), _mm256_set1_epi32(0x7F0000)),
                        _mm256_and_si256(_mm256_slli_epi32(w, 3), _mm256_set1_epi32(0x7F000000))));
    return parity7(f);
}
// Eight scale bytes s as dwords (2 (s & 15) + 1) | (2 (s >> 4) + 1) << 16.
inline __m256i mults_per16x8(const uint8_t* scales) {
    const __m256i s = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales)));
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i lo = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(s, _mm256_set1_epi32(15)), 1), one);
    const __m256i hi = _mm256_or_si256(_mm256_srli_epi32(s, 3), one);
    return _mm256_or_si256(lo, _mm256_slli_epi32(hi, 16));
}
// A dword (in every dword of d) as sixteen 16-bit multipliers: its low
// half in the low 128 bits, its high half in the high 128 bits.
inline __m256i mult_pairs(__m256i d) {
    return _mm256_shuffle_epi8(d, _mm256_set_epi64x(0x0302030203020302, 0x0302030203020302, 0x0100010001000100,
                                                    0x0100010001000100));
}
// Dword c of m as mult_pairs.
inline __m256i mult_per16_of(__m256i m, int c) { return mult_pairs(dword_all(m, c)); }
inline uint64_t load_u64(const void* p) {
    uint64_t v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}
inline __m256i grid64x4(const uint64_t* grid, int i0, int i1, int i2, int i3) {
    return _mm256_set_epi64x(static_cast<int64_t>(grid[i3]), static_cast<int64_t>(grid[i2]),
                             static_cast<int64_t>(grid[i1]), static_cast<int64_t>(grid[i0]));
}
// Eight 4-byte grid rows, row i[k] in dword k (IQ3_XXS: byte indices,
// IQ3_S: 9-bit ones).
template <class Index>
inline __m256i grid32x8(const uint32_t* grid, const Index* i) {
    return _mm256_set_epi32(static_cast<int>(grid[i[7]]), static_cast<int>(grid[i[6]]), static_cast<int>(grid[i[5]]),
                            static_cast<int>(grid[i[4]]), static_cast<int>(grid[i[3]]), static_cast<int>(grid[i[2]]),
                            static_cast<int>(grid[i[1]]), static_cast<int>(grid[i[0]]));
}
inline __m256i mult_per32(int m) { return _mm256_set1_epi16(static_cast<int16_t>(m)); }

// One decoded chunk.
struct Chunk {
    __m256i mag, sgn, mult;
};
// Signed codes w as a chunk: |w| and sign(w).
inline Chunk signed_chunk(__m256i w, __m256i mult) { return {_mm256_sign_epi8(w, w), w, mult}; }
struct NoPrep {};

// A block's weight scale, IqLanesOrder::weight_scale's value converted by
// F16C: the portable conversion is about 25 instructions a block (IQ1_S,
// one token: 3.0 -> 3.1 GB/s).
template <class B>
inline float weight_scale(const B& b) {
    return f16(b.d);
}
inline float weight_scale(const block_iq1_m& b) { return f16(iq::Iq1m::block_scale_bits(b)); }

// Each decoder D: D::prep(block) once per block (the block's signs,
// multipliers or grid indices, vectorized), then D::chunk(block, prep, c).
struct DIq2xxs {
    using B = block_iq2_xxs;
    struct Prep {
        __m256i sgn, mult;  // dword c: chunk c's 32 sign bits, its multiplier twice
    };
    static Prep prep(const B& b) {
        // Chunk c: dword 2c its four grid indices, dword 2c + 1 its signs and scale.
        const __m256i lo = load256(b.qs), hi = load256(b.qs + 16);
        const __m256i aux = _mm256_permute4x64_epi64(
            _mm256_castps_si256(_mm256_shuffle_ps(_mm256_castsi256_ps(lo), _mm256_castsi256_ps(hi), _MM_SHUFFLE(3, 1, 3, 1))),
            _MM_SHUFFLE(3, 1, 2, 0));
        const __m256i m = _mm256_or_si256(_mm256_srli_epi32(aux, 27), _mm256_set1_epi32(1));  // 2 (aux >> 28) + 1
        return {signs_7x4x8(aux), _mm256_or_si256(m, _mm256_slli_epi32(m, 16))};
    }
    static Chunk chunk(const B& b, const Prep& p, int c) {
        const auto* q = reinterpret_cast<const uint8_t*>(b.qs) + 8 * c;
        return {grid64x4(iq::kIq2xxsGrid, q[0], q[1], q[2], q[3]), spread_signs(dword_all(p.sgn, c)), dword_all(p.mult, c)};
    }
};
struct DIq2xs {
    using B = block_iq2_xs;
    struct Prep {
        __m256i sgn, mult;
    };
    static Prep prep(const B& b) {
        const __m256i lo = _mm256_srli_epi16(load256(b.qs), 9), hi = _mm256_srli_epi16(load256(b.qs + 16), 9);
        const __m256i s7 = _mm256_permute4x64_epi64(_mm256_packus_epi16(lo, hi), _MM_SHUFFLE(3, 1, 2, 0));
        return {parity7(s7), mults_per16x8(b.scales)};
    }
    static Chunk chunk(const B& b, const Prep& p, int c) {
        const uint16_t* q = b.qs + 4 * c;
        return {grid64x4(iq::kIq2xsGrid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511), spread_signs(dword_all(p.sgn, c)),
                mult_per16_of(p.mult, c)};
    }
};
struct DIq2s {
    using B = block_iq2_s;
    struct Prep {
        __m256i mult;
    };
    static Prep prep(const B& b) { return {mults_per16x8(b.scales)}; }
    // Index k: qs[k] | bits 2 (k % 4) .. +1 of qh[k / 4] as bits 8, 9, in
    // scalar registers: 4.1-4.5 -> 5.1-5.2 GB/s (one token, 8192x2048,
    // Zen 4) over a vectorized index pass read back from memory.
    static Chunk chunk(const B& b, const Prep& p, int c) {
        const uint8_t* q = b.qs + 4 * c;
        const uint32_t h = b.qh[c];
        return {grid64x4(iq::kIq2sGrid, q[0] | ((h << 8) & 0x300), q[1] | ((h << 6) & 0x300), q[2] | ((h << 4) & 0x300),
                         q[3] | ((h << 2) & 0x300)),
                signs32(load_u32(b.qs + kQK_K / 8 + 4 * c)), mult_per16_of(p.mult, c)};
    }
};
struct DIq3xxs {
    using B = block_iq3_xxs;
    using Prep = DIq2xxs::Prep;
    static Prep prep(const B& b) {
        const __m256i aux = load256(b.qs + kQK_K / 4);
        const __m256i m = _mm256_or_si256(_mm256_srli_epi32(aux, 27), _mm256_set1_epi32(1));
        return {signs_7x4x8(aux), _mm256_or_si256(m, _mm256_slli_epi32(m, 16))};
    }
    static Chunk chunk(const B& b, const Prep& p, int c) {
        return {grid32x8(iq::kIq3xxsGrid, b.qs + 8 * c), spread_signs(dword_all(p.sgn, c)), dword_all(p.mult, c)};
    }
};
struct DIq3s {
    using B = block_iq3_s;
    struct Prep {
        __m256i mult;
        alignas(32) uint16_t idx[64];
    };
    static Prep prep(const B& b) {
        Prep p;
        // Index k: qs[k] | bit k % 8 of qh[k / 8] as bit 8.
        const __m128i qh = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qh));
        const __m256i mul = _mm256_setr_epi16(256, 128, 64, 32, 16, 8, 4, 2, 256, 128, 64, 32, 16, 8, 4, 2);
        for (int h = 0; h < 4; ++h) {
            const __m256i lo = _mm256_cvtepu8_epi16(load128(b.qs + 16 * h));
            const __m256i top = _mm256_cvtepu8_epi16(
                _mm_shuffle_epi8(qh, _mm_set_epi64x(0x0101010101010101 * (2 * h + 1), 0x0101010101010101 * (2 * h))));
            const __m256i idx = _mm256_or_si256(lo, _mm256_and_si256(_mm256_mullo_epi16(top, mul), _mm256_set1_epi16(0x100)));
            _mm256_store_si256(reinterpret_cast<__m256i*>(p.idx + 16 * h), idx);
        }
        // Chunk c's scale: nibble c % 2 of scales[c / 2].
        const __m256i s = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(load_u32(b.scales))),
                                                                _mm_set_epi64x(-1, 0x0303020201010000)));
        const __m256i nib = _mm256_and_si256(_mm256_srlv_epi32(s, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4)), _mm256_set1_epi32(15));
        const __m256i m = _mm256_or_si256(_mm256_slli_epi32(nib, 1), _mm256_set1_epi32(1));
        p.mult = _mm256_or_si256(m, _mm256_slli_epi32(m, 16));
        return p;
    }
    static Chunk chunk(const B& b, const Prep& p, int c) {
        return {grid32x8(iq::kIq3sGrid, p.idx + 8 * c), signs32(load_u32(b.signs + 4 * c)), dword_all(p.mult, c)};
    }
};
struct DIq1s {
    using B = block_iq1_s;
    using Prep = NoPrep;
    static Prep prep(const B&) { return {}; }
    // Chunk c: index k = qs[4c + k] | bits 3k .. 3k + 2 of qh[c] as bits
    // 8..10, in scalar registers (BMI2's pdep where the build has it), its
    // multiplier 2 ((qh[c] >> 12) & 7) + 1. One token, 8192x2048, Zen 4:
    // a vectorized index pass read back from memory 2.6-2.8 GB/s, scalar
    // 3.0-3.1, pdep 3.7 (llama.cpp's pdep kernel: 3.0).
    static Chunk chunk(const B& b, const Prep&, int c) {
        const uint32_t h = b.qh[c];
#if defined(__BMI2__)
        const uint64_t idx = _pdep_u64(load_u32(b.qs + 4 * c), 0x00FF00FF00FF00FFull) | _pdep_u64(h, 0x0700070007000700ull);
        const __m256i mag = grid64x4(iq::kIq1sGrid, idx & 0xFFFF, (idx >> 16) & 0xFFFF, (idx >> 32) & 0xFFFF, idx >> 48);
#else
        const uint8_t* q = b.qs + 4 * c;
        const __m256i mag = grid64x4(iq::kIq1sGrid, q[0] | ((h << 8) & 0x700), q[1] | ((h << 5) & 0x700),
                                     q[2] | ((h << 2) & 0x700), q[3] | ((h >> 1) & 0x700));
#endif
        return signed_chunk(mag, _mm256_set1_epi16(static_cast<int16_t>(2 * ((h >> 12) & 7) + 1)));
    }
    // The block's shift multipliers as int16 pairs, +-(2 s + 1) of chunk c
    // in pair c (twice: one for each 16-element activation sum): the
    // shift term is madd(bsums, this), summed (no branch on the signs).
    static __m256i shift_mults(const B& b) {
        const __m128i qh = load128(b.qh);
        const __m128i m = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(qh, 11), _mm_set1_epi16(14)), _mm_set1_epi16(1));
        const __m128i neg = _mm_srai_epi16(qh, 15);
        const __m128i sm = _mm_sub_epi16(_mm_xor_si128(m, neg), neg);
        return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(sm, sm)), _mm_unpackhi_epi16(sm, sm), 1);
    }
};
struct DIq1m {
    using B = block_iq1_m;
    // Prep lives in memory (see IqDotAvx2): a chunk's multipliers and shift
    // signs are broadcast loads, not lane extracts and vpermd.
    static constexpr bool kMemPrep = true;
    struct Prep {
        // dword c: chunk c's multipliers (as IQ2_XS), its groups' shift signs (0x80 or 0)
        alignas(32) uint32_t mult[8];
        alignas(32) uint32_t shift[8];
    };
    static Prep prep(const B& b) {
        Prep p;
        // Group g of chunk c: bit 3 of nibble g % 2 of qh[2 c + g / 2], as bit 7 of byte 4 c + g.
        const __m128i qh = load128(b.qh);
        const __m128i m80 = _mm_set1_epi8(static_cast<char>(0x80));
        const __m128i lo = _mm_and_si128(_mm_slli_epi16(qh, 4), m80), hi = _mm_and_si128(qh, m80);
        _mm256_store_si256(reinterpret_cast<__m256i*>(p.shift),
                           _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi8(lo, hi)), _mm_unpackhi_epi8(lo, hi), 1));
        // Chunk c's 6 scale bits: 16-bit word c / 2 of scales shifted by 6 (c % 2).
        const __m256i w = _mm256_shuffle_epi8(_mm256_set1_epi64x(static_cast<int64_t>(load_u64(b.scales))),
                                              _mm256_set_epi64x(static_cast<int64_t>(0xFFFF0706FFFF0706ull), static_cast<int64_t>(0xFFFF0504FFFF0504ull),
                                                                static_cast<int64_t>(0xFFFF0302FFFF0302ull), static_cast<int64_t>(0xFFFF0100FFFF0100ull)));
        const __m256i sc = _mm256_srlv_epi32(w, _mm256_setr_epi32(0, 6, 0, 6, 0, 6, 0, 6));
        const __m256i one = _mm256_set1_epi32(1);
        const __m256i m0 = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(sc, _mm256_set1_epi32(7)), 1), one);
        const __m256i m1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(sc, 2), _mm256_set1_epi32(14)), one);
        _mm256_store_si256(reinterpret_cast<__m256i*>(p.mult), _mm256_or_si256(m0, _mm256_slli_epi32(m1, 16)));
        return p;
    }
    // Index k: qs[k] | the low 3 bits of nibble k % 2 of qh[k / 2] as bits
    // 8..10, in scalar registers (pdep where the build has BMI2). One token,
    // 8192x2048, Zen 4: 2.6 GB/s with a vectorized index pass read back from
    // memory, 3.0 scalar, 3.2 pdep (llama.cpp: 3.5).
    static Chunk chunk(const B& b, const Prep& p, int c) {
        const uint32_t h = iq::load16(b.qh + 2 * c);
#if defined(__BMI2__)
        const uint64_t idx = _pdep_u64(load_u32(b.qs + 4 * c), 0x00FF00FF00FF00FFull) | _pdep_u64(h & 0x7777, 0x0F000F000F000F00ull);
        const __m256i mag = grid64x4(iq::kIq1sGrid, idx & 0xFFFF, (idx >> 16) & 0xFFFF, (idx >> 32) & 0xFFFF, idx >> 48);
#else
        const uint8_t* q = b.qs + 4 * c;
        const __m256i mag = grid64x4(iq::kIq1sGrid, q[0] | ((h << 8) & 0x700), q[1] | ((h << 4) & 0x700),
                                     q[2] | (h & 0x700), q[3] | ((h >> 4) & 0x700));
#endif
        return signed_chunk(mag, mult_pairs(_mm256_set1_epi32(static_cast<int>(p.mult[c]))));
    }
    // The shifts' signs of chunk c, +1 or -1 for each of its 32 weights:
    // group g's byte sign-extended over its 8 bytes (0xFF..80 or 0), or'ed
    // with 1.
    static __m256i shifts(const B&, const Prep& p, int c) {
        return _mm256_or_si256(_mm256_cvtepi8_epi64(_mm_cvtsi32_si128(static_cast<int>(p.shift[c]))), _mm256_set1_epi8(1));
    }
};
struct DIq4xs {
    using B = block_iq4_xs;
    using Prep = NoPrep;
    static Prep prep(const B&) { return {}; }
    static Chunk chunk(const B& b, const Prep&, int c) {
        const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(iq::kIq4nlValues));
        const __m128i bits = load128(b.qs + 16 * c);
        const __m128i m4 = _mm_set1_epi8(0x0F);
        const __m256i w = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_shuffle_epi8(table, _mm_and_si128(bits, m4))),
            _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(bits, 4), m4)), 1);
        return signed_chunk(w, mult_per32(iq::Iq4xs::chunk_mult(b, c)));
    }
};

}  // namespace
}  // namespace tandem::cpu::detail::iq_avx2
