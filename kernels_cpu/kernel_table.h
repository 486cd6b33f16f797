// One row per weight type: every CPU kernel that multiplies it, at every
// SIMD level. matmul() and the tests look kernels up here by type, never by
// a switch. What activations are quantized to is not here: it is the
// type's quant::dot_type(), which the CUDA side reads too.
//
// A null function means "no kernel at this level" (a build without x86
// intrinsics, or a type without that form); lookups then fall back to the
// next lower level or form.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels_cpu/vec_dot.h"

namespace tandem::cpu::detail {

// Panels of kPanelRows weight rows unpacked once and multiplied against
// four tokens at a time (gemm_panel.h; AVX-512 VNNI). prepare: what the
// kernel needs appended to each quantized activation row first (null for
// nothing); extra_bytes: how much it appends per activation block.
using PanelGemm = void (*)(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                           size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf);
using PanelPrepare = void (*)(quant::Type a_type, void* row, int64_t n_cols);
struct PanelKernel {
    PanelGemm gemm = nullptr;
    size_t (*bytes)(int64_t n_cols) = nullptr;
    PanelPrepare prepare = nullptr;
    size_t extra_bytes = 0;
};

struct WeightKernels {
    quant::Type type;
    // One weight row against up to kMaxTileTokens activation rows.
    LevelKernels dot;
    // llama.cpp's batch kernels (K-quants), for the tokens
    // quant::dot::batch_rule gives them.
    LevelKernels batch{};
    // Several weight rows against one token (decode): AVX2, AVX-512 VNNI.
    DecodeRows rows_avx2{};
    DecodeRows rows_avx512{};
    // The AVX2 rows built for the AVX-512 levels (as LevelKernels::avx2w),
    // for a type that runs its AVX2 kernels there (avx2_at_avx512).
    DecodeRows rows_avx2w{};
    // The AVX2 rows built with BMI2 (as LevelKernels::avx2b), for the AVX2
    // levels on CPUs with a fast pdep.
    DecodeRows rows_avx2b{};
    PanelKernel panel{};
    // The same panels on AVX2 (gemm_panel.h, *_avx2): batches at the AVX2
    // level, and at AVX-512 on CPUs without VNNI.
    PanelKernel panel_avx2{};
    // Where AVX-VNNI makes a panel faster (Q8_0, Q5_0): the AVX2 panel built
    // with it, taken instead of panel_avx2 at the Avx2Vnni level.
    PanelKernel panel_avxvnni{};
    // F16/BF16 batches: activations rounded once, kept as f32.
    quant::QuantizeRowFn wide_round = nullptr;
    LevelKernels wide{};
    // Sums in llama.cpp's float order (runtime/quant/dot_order.h).
    bool llama_order = false;
    // Its AVX-512 kernels pair blocks and lanes in another order than
    // llama.cpp's, so the AVX-512 level runs the AVX2 kernels.
    bool avx2_at_avx512 = false;
};

// nullptr for a type without CPU kernels (an activation-only type).
const WeightKernels* weight_kernels(quant::Type w_type);

}  // namespace tandem::cpu::detail
