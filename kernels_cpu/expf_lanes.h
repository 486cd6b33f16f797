// expf several lanes at a time with the bits of the C library's expf, for
// the softmax steps of decode attention (one exp per score; llama.cpp's
// CPU backend calls expf there, so the same bits keep the same logits).
//
// The method is glibc's expf (since 2.28; the FMA build, which x86-64
// machines with FMA select): x*N/ln2 = k + r with N = 32, 2^(k/N) from a
// table of 2^(i/N) with k/N's integer part added to the exponent bits,
// 2^(r/N) by a degree-3 polynomial, all in double, one rounding to float.
// The operations and their fusions are the ones its disassembly shows (the
// reduction and the remainder are fused multiply-adds sharing the product
// x * N/ln2, the polynomial two more). Inputs of magnitude 88 or more
// (overflow, underflow, infinities, NaN) go to std::exp.
#pragma once

#include <cstdint>

namespace tandem::cpu::detail {

inline constexpr double kExpfInvLn2N = 0x1.71547652b82fep+5;  // 32 / ln 2
inline constexpr double kExpfShift = 0x1.8p+52;                // adding it rounds to an integer
inline constexpr double kExpfC0 = 0x1.c6af84b912394p-20, kExpfC1 = 0x1.ebfce50fac4f3p-13,
                        kExpfC2 = 0x1.62e42ff0c52d6p-6;
// tab[i] = bits(2^(i/32)) - (i << 47): adding k << 47 for k = i + 32 m
// gives the bits of 2^(k/32) (the exponent field moves by m). 64-byte
// aligned, 32 entries.
const int64_t* expf_table();

// y[i] = std::exp(x[i]) for i < n, bit for bit where expf_lanes_agree(f).
// AVX2: four lanes with a gather for the table. (It made decode attention
// 7-22% slower on Zen 4, measured before the decode kernel kept its V sums
// in registers; on Zen 3 it is faster than std::exp.)
using ExpfLanesFn = void (*)(const float* x, float* y, int64_t n);
void expf_lanes_avx512(const float* x, float* y, int64_t n);
void expf_lanes_avx2(const float* x, float* y, int64_t n);
// f against std::exp on every 4093rd float of magnitude below 88 and the
// edges of that range: another C library's expf (a correctly rounded one,
// say) fails, and the caller keeps calling std::exp.
bool expf_lanes_agree(ExpfLanesFn f);

}  // namespace tandem::cpu::detail
