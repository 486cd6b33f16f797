// Q4_K rows of a batch on AVX-512 VNNI as a panel GEMM: 16 weight rows are
// unpacked once per call (transiently; the weights stay in their GGUF
// blocks) into a layout where one 512-bit register holds four codes of each
// of the 16 rows, so a vpdpbusd against four broadcast activation bytes
// adds four products into each row's own lane. Every lane is one output,
// so the per-span totals that llama.cpp's float order needs (see
// KSpansOrder in runtime/quant/dot_order.h, Span 2) come without horizontal sums:
// the bits equal the reference's, and the integer work is about a third of
// the row-at-a-time kernel's. Internal to kernels_cpu.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_types.h"

namespace tandem::cpu::detail {

inline constexpr int64_t kPanelRows = 16;

// Bytes of the per-thread buffer one panel of n_cols columns needs.
size_t q4_K_panel_bytes(int64_t n_cols);

// Some panels read sums of the activations, which their prepare appends to
// each quantized activation row (after its blocks, a_type the row's block
// type, n_cols its length; a_stride leaves room for them) before the panels
// run: the start of the integer sums a format's code offset or minimum
// needs. These are the bytes each appends per activation block.
inline constexpr size_t kK4PanelExtraBytes = 8 * sizeof(int16_t);     // Q4_K, Q5_K: eight 32-element sums
inline constexpr size_t kGroupStartsExtraBytes = 16 * sizeof(int32_t);  // Q6_K, Q3_K: -offset x 16 group sums
inline constexpr size_t kQ4_0PanelExtraBytes = sizeof(int32_t);        // Q4_0, IQ4_NL, MXFP4: -offset x the block's sum
inline constexpr size_t kQ4_0PanelExtraBytesAvx2 = 2 * sizeof(int32_t);  // their AVX2 panels: that, and the block's d as a float
inline constexpr size_t kLaneStartsExtraBytes = 8 * sizeof(int32_t);  // Q8_0, Q5_0: -offset x 8 four-byte sums

// The Q4_K and Q5_K panels read the 32-element sums k4_panel_prepare
// appends (a_type Q8_K).
void k4_panel_prepare(quant::Type a_type, void* row, int64_t n_cols);

// Y[t * ldy + r] for rows [r0, r0 + n_rows) (n_rows <= 16) and tokens
// [0, n_tokens) (a multiple of 4): Q4_K rows w (row_stride bytes apart)
// against Q8_K activation rows a (a_stride bytes apart), in the float
// order of dot_q4_K_batch. buf: q4_K_panel_bytes(n_cols), 64-byte aligned.
void q4_K_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf);

// Q6_K batch rows in the same panel scheme, in the order of dot_q6_K_batch
// (llama.cpp's tiled kernel: super-block total x d, then one fused
// multiply-add with the activation scale). Same contract as above. The
// Q6_K and Q3_K panels read the group starts their prepare appends (a_type
// Q8_K).
size_t q6_K_panel_bytes(int64_t n_cols);
void q6_K_panel_prepare(quant::Type a_type, void* row, int64_t n_cols);
void q3_K_panel_prepare(quant::Type a_type, void* row, int64_t n_cols);
void q6_K_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf);

// Q5_K (super-block total x d, minimum term with one fused multiply-add,
// then one with the activation scale: dot_q5_K_batch) and Q3_K (as Q6_K
// with the offset 4: dot_q3_K_batch), same contract.
size_t q5_K_panel_bytes(int64_t n_cols);
void q5_K_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf);
size_t q3_K_panel_bytes(int64_t n_cols);
void q3_K_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf);

// Q2_K (dot_q2_K_batch: spans of 128 elements, scale and minimum terms in
// separate fused multiply-add chains, as llama.cpp's repacked kernel).
size_t q2_K_panel_bytes(int64_t n_cols);
void q2_K_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf);

// Q4_0, IQ4_NL and MXFP4 against Q8_0 activations (dot_q4_0, dot_iq4_nl,
// dot_mxfp4: llama.cpp's repacked kernel, one fused multiply-add of each
// block's integer total), reading the block starts their prepare appends
// (a_type Q8_0: -offset x each block's sum, kernels_cpu/nibble_formats.h).
// One buffer layout for the three (q4_0_panel_bytes).
size_t q4_0_panel_bytes(int64_t n_cols);
#define TANDEM_NIBBLE_PANEL_DECL(name)                                                                            \
    void name##_panel_prepare(quant::Type a_type, void* row, int64_t n_cols);                                    \
    void name##_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a, \
                                  size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf);
TANDEM_NIBBLE_PANEL_DECL(q4_0)
TANDEM_NIBBLE_PANEL_DECL(iq4_nl)
TANDEM_NIBBLE_PANEL_DECL(mxfp4)
#undef TANDEM_NIBBLE_PANEL_DECL

// Q8_0, Q5_0 (against Q8_0) and Q4_1, Q5_1 (against Q8_1) in the order of
// their single-row kernels (LegacyLanesOrder: eight lanes of four elements
// per row, each with its own fused multiply-add chain). Q8_0 and Q5_0 read
// the lane starts their prepare appends (a_type Q8_0).
size_t legacy_panel_bytes(int64_t n_cols);
void q8_0_panel_prepare(quant::Type a_type, void* row, int64_t n_cols);
void q5_0_panel_prepare(quant::Type a_type, void* row, int64_t n_cols);
void q8_0_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf);
void q5_0_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf);
void q4_1_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf);
void q5_1_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf);

// The same panels on AVX2 (avx2/gemm_panel_avx2.h: two halves of 8 rows,
// vpmaddubsw/vpmaddwd), same contract and the same bits; their buffers are
// laid out differently (*_bytes_avx2). Q4_K and Q5_K read the 32-element
// sums k4_panel_prepare_avx2 appends (k4_panel_prepare's bytes), Q4_0,
// IQ4_NL and MXFP4 the block starts of <name>_panel_prepare_avx2
// (<name>_panel_prepare's), each beside its block's d as a float
// (kQ4_0PanelExtraBytesAvx2); the
// others read only the activation blocks (Q8_0 and Q5_0 need them in
// [-127, 127], as the Q8_0 quantizers make them).
#define TANDEM_PANEL_ISA_DECL(name, isa)                                                                         \
    size_t name##_panel_bytes_##isa(int64_t n_cols);                                                             \
    void name##_panel_gemm_##isa(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a, \
                                 size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf);
TANDEM_PANEL_ISA_DECL(q4_K, avx2)
TANDEM_PANEL_ISA_DECL(q5_K, avx2)
TANDEM_PANEL_ISA_DECL(q6_K, avx2)
TANDEM_PANEL_ISA_DECL(q3_K, avx2)
TANDEM_PANEL_ISA_DECL(q2_K, avx2)
TANDEM_PANEL_ISA_DECL(q4_0, avx2)
TANDEM_PANEL_ISA_DECL(iq4_nl, avx2)
TANDEM_PANEL_ISA_DECL(mxfp4, avx2)
TANDEM_PANEL_ISA_DECL(q8_0, avx2)
TANDEM_PANEL_ISA_DECL(q5_0, avx2)
TANDEM_PANEL_ISA_DECL(q4_1, avx2)
TANDEM_PANEL_ISA_DECL(q5_1, avx2)
// Q8_0 and Q5_0 built with AVX-VNNI (avx2/gemm_panel_signed_avxvnni.cpp):
// the same contract and bits; call only where the CPU has AVX-VNNI.
TANDEM_PANEL_ISA_DECL(q8_0, avxvnni)
TANDEM_PANEL_ISA_DECL(q5_0, avxvnni)
#undef TANDEM_PANEL_ISA_DECL
void k4_panel_prepare_avx2(quant::Type a_type, void* row, int64_t n_cols);
void q4_0_panel_prepare_avx2(quant::Type a_type, void* row, int64_t n_cols);
void iq4_nl_panel_prepare_avx2(quant::Type a_type, void* row, int64_t n_cols);
void mxfp4_panel_prepare_avx2(quant::Type a_type, void* row, int64_t n_cols);

// The 256-element i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S,
// IQ1_M, IQ4_XS: gemm_panel_iq_x86.h) in the order of their batch kernels
// (dot_<name>_batch: llama.cpp's tiled kernels, IqTiledOrder), the same
// contract as above. The AVX-512 panels read the starts iq_panel_prepare
// appends (a_type Q8_K): -128 x each 16-element activation sum, then -128 x
// each 32-element one; the AVX2 panels read what <name>_panel_prepare_avx2
// appends: IQ4_XS's the 32-element sums as int16 pairs, the others their
// bias terms as below.
inline constexpr size_t kIqPanelExtraBytes = (16 + 8) * sizeof(int32_t);
inline constexpr size_t kIq4xsPanelExtraBytesAvx2 = 4 * sizeof(int32_t);
// The other AVX2 i-quant panels take their codes' bias off in int16 runs
// of quads (avx2/gemm_panel_iq_avx2.cpp, which checks each run against its
// type's bounds): <name>_panel_prepare_avx2 appends an int16 pair a run.
inline constexpr int kIq2PanelRunAvx2 = 2;     // IQ2_XXS, IQ2_XS, IQ2_S: B 43
inline constexpr int kIq3xxsPanelRunAvx2 = 4;  // halved, B' 31
inline constexpr int kIq3sPanelRunAvx2 = 8;    // B 15, one multiplier a chunk
inline constexpr int kIq1sPanelRunAvx2 = 8;    // B 9, one multiplier a chunk
inline constexpr int kIq1mPanelRunAvx2 = 4;    // B 9, a multiplier a group
constexpr size_t iq_panel_extra_bytes_avx2(int run) { return 4 * static_cast<size_t>(quant::kQK_K / 4 / run); }
size_t iq_panel_bytes(int64_t n_cols);
size_t iq_panel_bytes_avx2(int64_t n_cols);
void iq_panel_prepare(quant::Type a_type, void* row, int64_t n_cols);
void iq4_xs_panel_prepare_avx2(quant::Type a_type, void* row, int64_t n_cols);
#define TANDEM_IQ_PANEL_DECL(name)                                                                                     \
    void name##_panel_prepare_avx2(quant::Type a_type, void* row, int64_t n_cols);                                     \
    void name##_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,     \
                                  size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf);                \
    void name##_panel_gemm_avx2(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,       \
                                size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf);
TANDEM_IQ_PANEL_DECL(iq2_xxs)
TANDEM_IQ_PANEL_DECL(iq2_xs)
TANDEM_IQ_PANEL_DECL(iq2_s)
TANDEM_IQ_PANEL_DECL(iq3_xxs)
TANDEM_IQ_PANEL_DECL(iq3_s)
TANDEM_IQ_PANEL_DECL(iq1_s)
TANDEM_IQ_PANEL_DECL(iq1_m)
TANDEM_IQ_PANEL_DECL(iq4_xs)
#undef TANDEM_IQ_PANEL_DECL

}  // namespace tandem::cpu::detail
