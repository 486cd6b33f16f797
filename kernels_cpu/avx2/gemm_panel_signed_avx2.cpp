// Panel GEMMs for Q8_0 and Q5_0 on AVX2 (scheme in avx2/gemm_panel_avx2.h),
// in the order of their single-row kernels (LegacyLanesOrder: eight lanes
// of four elements per row, each with its own fused multiply-add chain,
// lane = the exact integer sum of its four products, d = d_w * d_a per
// block, the lanes added as ((0+4)+(2+6)) + ((1+5)+(3+7)), then + 0.0f).
// The float operations per output are exactly those; only the integer
// arrangement and the loop order differ from Q4_1/Q5_1's kernel
// (avx2/gemm_panel_legacy_avx2.cpp), which these two types used before.
//
// Why they were slower than Q4_1/Q5_1 there (Zen 4 at the AVX2 level, 2
// threads, llama-1b pp512: Q8_0 74 and Q5_0 74.5 tok/s against Q4_1's 94):
// their values are signed, and vpmaddubsw needs one unsigned operand, so
// each lane of each token took a vpsignb on top of vpmaddubsw, vpmaddwd and
// the fused multiply-add. On Zen 4 all four run on the same two FP pipes
// (FP0/FP1; vcvtdq2ps and shifts use the other two): four ops there per
// lane and token, 2.0 cycles, against Q4_1's three (1.5). Measured
// cycles per lane and token of the inner loops alone, data in L1: the old
// Q8_0/Q5_0 loop 2.4, with vpsignb on registers 1.9-2.0, with the xor/sub
// sign trick 1.9, Q4_1's 1.5.
//
// Here neither needs a sign step in the inner loop:
//
// Q8_0: moving the offset to the activation (u8 = q + 128) would let
// vpmaddubsw saturate (255 x 128 x 2 > 32767 in one pair sum), so both
// sides are widened to int16 instead and vpmaddwd multiplies directly: lane
// = madd(w0 w2, a0 a2) + madd(w1 w3, a1 a3), two pipe-0/1 ops like
// vpmaddubsw + vpmaddwd, and the vpaddd goes to any pipe (1.6 cycles a
// lane, measured). The weights are widened once per panel, the activations
// once per chunk of 8 blocks x 8 tokens and shared by both halves.
//
// Q5_0: the offset moves to the activation, which is copied as u8 = q + 128
// once per chunk, against the signed values v = code - 16: each pair sum is
// then (a0 + 128) v0 + (a1 + 128) v1, |.| <= 255 x 16 x 2, and adding
// -128 (v0 + v1), computed once per weight block and shared by all tokens,
// in int16 (vpaddw, any pipe) leaves a0 v0 + a1 v1 exactly (1.55 cycles).
// Both are exact for every int8 activation, -128 included.
//
// To share the weights across tokens each half panel's lanes are walked
// one at a time over 8 tokens (a tile): lane l's weights of a block are
// loaded once for the 8 tokens, its eight accumulators (one per token) stay
// in registers across a chunk of blocks and in the scratch between chunks,
// and d_w * d_a of each block, half and token is multiplied once per chunk
// (dp) and read by the eight lanes. Per lane and token that leaves two
// activation broadcasts (one for Q5_0), the two multiplies, an add, the
// conversion and the fused multiply-add with d from L1. Measured on this
// kernel alone (one thread, 16 x 4096 panels, 512 tokens): Q8_0 0.71 ->
// 0.63 ns per lane and token, Q5_0 0.71 -> 0.57.
#define TANDEM_SIGNED_NAME(x) x##_avx2
#include "kernels_cpu/avx2/gemm_panel_signed_body.h"
