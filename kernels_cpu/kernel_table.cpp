#include "kernels_cpu/kernel_table.h"

#include <array>
#include <string>

#include "kernels_cpu/gemm_panel.h"
#include "runtime/common/error.h"
#include "runtime/quant/dot_order.h"

namespace tandem::cpu::detail {
namespace {

using quant::Type;

// The AVX-512VL build of AVX2 sources (avx2w), where the build made it
// (not in the sanitizer build: kernels_cpu/CMakeLists.txt); pick() and the
// rows choice fall back to the AVX2 build where it is null.
#if defined(TANDEM_HAVE_AVX2W)
#define TANDEM_AVX2W(f) TANDEM_X86(f)
#else
#define TANDEM_AVX2W(f) nullptr
#endif
// Likewise the BMI2 build of IQ1_S's and IQ1_M's AVX2 sources (avx2b).
#if defined(TANDEM_HAVE_AVX2B)
#define TANDEM_AVX2B(f) TANDEM_X86(f)
#else
#define TANDEM_AVX2B(f) nullptr
#endif
#define TANDEM_LEVELS(prefix) \
    LevelKernels{prefix##_scalar, TANDEM_X86(prefix##_avx2), TANDEM_X86(prefix##_avx512), TANDEM_X86(prefix##_avx512nv)}
#define TANDEM_WIDE(name) \
    LevelKernels{nullptr, TANDEM_X86(dot_##name##_wide_avx2), TANDEM_X86(dot_##name##_wide_avx512), TANDEM_X86(dot_##name##_wide_avx512nv)}
#define TANDEM_ROWS(name, prepare, bytes) \
    DecodeRows{TANDEM_X86(dot_##name##_rows_avx512), TANDEM_X86(prepare), TANDEM_X86(bytes)}
#define TANDEM_ROWS_MULTI(name, prepare, bytes) \
    DecodeRows{TANDEM_X86(dot_##name##_rows_avx512), TANDEM_X86(prepare), TANDEM_X86(bytes), TANDEM_X86(dot_##name##_rows_multi_avx512)}
// AVX2's rows kernels that take the activation row as it is.
#define TANDEM_ROWS_AVX2_MULTI(name) \
    DecodeRows{TANDEM_X86(dot_##name##_rows_avx2), nullptr, nullptr, TANDEM_X86(dot_##name##_rows_multi_avx2)}
#define TANDEM_PANEL(name, bytes, prepare, extra) \
    PanelKernel{TANDEM_X86(name##_panel_gemm_avx512), TANDEM_X86(bytes), TANDEM_X86(prepare), extra}
#define TANDEM_PANEL_AVX2(name, prepare, extra) \
    PanelKernel{TANDEM_X86(name##_panel_gemm_avx2), TANDEM_X86(name##_panel_bytes_avx2), TANDEM_X86(prepare), extra}
#define TANDEM_PANEL_AVXVNNI(name) \
    PanelKernel{TANDEM_X86(name##_panel_gemm_avxvnni), TANDEM_X86(name##_panel_bytes_avxvnni), nullptr, 0}

// IQ4_NL and MXFP4: Q4_0's decode rows (AVX2; with VNNI at AVX-512) and
// panels, their values through a table (kernels_cpu/nibble_formats.h).
#define TANDEM_NIBBLE_ROWS(name, isa)                                                                           \
    DecodeRows {                                                                                                \
        TANDEM_X86(dot_##name##_rows_##isa), TANDEM_X86(prepare_##name##_rows_##isa),                           \
            TANDEM_X86(name##_rows_##isa##_prepared_bytes), TANDEM_X86(dot_##name##_rows_multi_##isa)           \
    }
#define TANDEM_NIBBLE_ROW(T, name)                                                                                  \
    WeightKernels {                                                                                                 \
        .type = Type::T, .dot = LevelKernels{dot_##name##_scalar, TANDEM_X86(dot_##name##_avx2)},                   \
        .rows_avx2 = TANDEM_NIBBLE_ROWS(name, avx2), .rows_avx512 = TANDEM_NIBBLE_ROWS(name, avx512),                 \
        .panel = TANDEM_PANEL(name, q4_0_panel_bytes, name##_panel_prepare, kQ4_0PanelExtraBytes),                   \
        .panel_avx2 = TANDEM_PANEL_AVX2(name, name##_panel_prepare_avx2, kQ4_0PanelExtraBytesAvx2),                \
        .llama_order = true,                                                                                        \
        .avx2_at_avx512 = true                                                                                      \
    }
// The 256-element i-quants: batches of 8 or more in llama.cpp's tiled order,
// on the panels (gemm_panel_iq_x86.h) where a level has them; the AVX2
// panels read what their preparation appends to the activation rows
// (IQ4_XS: the 32-element sums; the others: their bias a run of quads). One
// token and small batches in the single-row order through the decode rows
// of avx2/decode_rows_iquants_avx2.cpp, its AVX-512VL build (avx2w) at the
// AVX-512 levels as for the row kernels.
#define TANDEM_PANEL_AVX2_IQ(name, prepare, extra) \
    PanelKernel{TANDEM_X86(name##_panel_gemm_avx2), TANDEM_X86(iq_panel_bytes_avx2), TANDEM_X86(prepare), extra}
#define TANDEM_IQ_PANEL_AVX2(name, run) \
    TANDEM_PANEL_AVX2_IQ(name, name##_panel_prepare_avx2, iq_panel_extra_bytes_avx2(run))
// bmi2: the type has a BMI2 build (avx2b), IQ1_S and IQ1_M.
#define TANDEM_IQ_BMI2_true(name, what) TANDEM_AVX2B(dot_##name##what##_avx2b)
#define TANDEM_IQ_BMI2_false(name, what) nullptr
#define TANDEM_IQ_TILED_ROW(T, name, panel_avx2_kernel, bmi2)                                 \
    WeightKernels {                                                                           \
        .type = Type::T,                                                                      \
        .dot = LevelKernels{.scalar = dot_##name##_scalar, .avx2 = TANDEM_X86(dot_##name##_avx2),         \
                            .avx2w = TANDEM_AVX2W(dot_##name##_avx2w),                                  \
                            .avx2b = TANDEM_IQ_BMI2_##bmi2(name, )},                                    \
        .batch = LevelKernels{.scalar = dot_##name##_batch_scalar, .avx2 = TANDEM_X86(dot_##name##_batch_avx2), \
                              .avx2w = TANDEM_AVX2W(dot_##name##_batch_avx2w),                          \
                              .avx2b = TANDEM_IQ_BMI2_##bmi2(name, _batch)},                            \
        .rows_avx2 = TANDEM_ROWS_AVX2_MULTI(name),                                             \
        .rows_avx2w = DecodeRows{TANDEM_AVX2W(dot_##name##_rows_avx2w), nullptr, nullptr,       \
                                 TANDEM_AVX2W(dot_##name##_rows_multi_avx2w)},                  \
        .rows_avx2b = DecodeRows{TANDEM_IQ_BMI2_##bmi2(name, _rows), nullptr, nullptr,         \
                                 TANDEM_IQ_BMI2_##bmi2(name, _rows_multi)},                     \
        .panel = TANDEM_PANEL(name, iq_panel_bytes, iq_panel_prepare, kIqPanelExtraBytes),    \
        .panel_avx2 = panel_avx2_kernel,                                                      \
        .llama_order = true, .avx2_at_avx512 = true                                           \
    }

// Off x86 only the scalar kernels exist: the rest are null there.
constexpr std::array kTable = {
    WeightKernels{.type = Type::F32, .dot = TANDEM_LEVELS(dot_f32)},
    WeightKernels{.type = Type::F16,
                  .dot = TANDEM_LEVELS(dot_f16),
                  .wide_round = TANDEM_X86(round_row_f16_avx2),
                  .wide = TANDEM_WIDE(f16),
                  .llama_order = true,
                  .avx2_at_avx512 = true},
    WeightKernels{.type = Type::BF16,
                  .dot = TANDEM_LEVELS(dot_bf16),
                  .wide_round = TANDEM_X86(round_row_bf16_avx2),
                  .wide = TANDEM_WIDE(bf16)},
    WeightKernels{.type = Type::Q4_0,
                  .dot = TANDEM_LEVELS(dot_q4_0),
                  .rows_avx2 = DecodeRows{TANDEM_X86(dot_q4_0_rows_avx2), TANDEM_X86(prepare_q4_0_rows_avx2),
                                          TANDEM_X86(q4_0_rows_avx2_prepared_bytes), TANDEM_X86(dot_q4_0_rows_multi_avx2)},
                  .rows_avx512 = TANDEM_ROWS(q4_0, prepare_q4_0_rows, q4_0_rows_prepared_bytes),
                  .panel = TANDEM_PANEL(q4_0, q4_0_panel_bytes, q4_0_panel_prepare, kQ4_0PanelExtraBytes),
                  .panel_avx2 = TANDEM_PANEL_AVX2(q4_0, q4_0_panel_prepare_avx2, kQ4_0PanelExtraBytesAvx2),
                  .llama_order = true,
                  .avx2_at_avx512 = true},
    WeightKernels{.type = Type::Q4_1,
                  .dot = TANDEM_LEVELS(dot_q4_1),
                  .rows_avx2 = TANDEM_ROWS_AVX2_MULTI(q4_1),
                  .rows_avx512 = TANDEM_ROWS_MULTI(q4_1, prepare_q4_1_rows, legacy_rows_prepared_bytes),
                  .panel = TANDEM_PANEL(q4_1, legacy_panel_bytes, nullptr, 0),
                  .panel_avx2 = TANDEM_PANEL_AVX2(q4_1, nullptr, 0),
                  .llama_order = true,
                  .avx2_at_avx512 = true},
    WeightKernels{.type = Type::Q5_0,
                  .dot = TANDEM_LEVELS(dot_q5_0),
                  .rows_avx2 = TANDEM_ROWS_AVX2_MULTI(q5_0),
                  .rows_avx512 = TANDEM_ROWS_MULTI(q5_0, prepare_q5_0_rows, legacy_rows_prepared_bytes),
                  .panel = TANDEM_PANEL(q5_0, legacy_panel_bytes, q5_0_panel_prepare, kLaneStartsExtraBytes),
                  .panel_avx2 = TANDEM_PANEL_AVX2(q5_0, nullptr, 0),
                  .panel_avxvnni = TANDEM_PANEL_AVXVNNI(q5_0),
                  .llama_order = true,
                  .avx2_at_avx512 = true},
    WeightKernels{.type = Type::Q5_1,
                  .dot = TANDEM_LEVELS(dot_q5_1),
                  .rows_avx2 = TANDEM_ROWS_AVX2_MULTI(q5_1),
                  .rows_avx512 = TANDEM_ROWS_MULTI(q5_1, prepare_q5_1_rows, legacy_rows_prepared_bytes),
                  .panel = TANDEM_PANEL(q5_1, legacy_panel_bytes, nullptr, 0),
                  .panel_avx2 = TANDEM_PANEL_AVX2(q5_1, nullptr, 0),
                  .llama_order = true,
                  .avx2_at_avx512 = true},
    WeightKernels{.type = Type::Q8_0,
                  .dot = TANDEM_LEVELS(dot_q8_0),
                  .rows_avx2 = TANDEM_ROWS_AVX2_MULTI(q8_0),
                  .rows_avx512 = TANDEM_ROWS_MULTI(q8_0, prepare_q8_0_rows, legacy_rows_prepared_bytes),
                  .panel = TANDEM_PANEL(q8_0, legacy_panel_bytes, q8_0_panel_prepare, kLaneStartsExtraBytes),
                  .panel_avx2 = TANDEM_PANEL_AVX2(q8_0, nullptr, 0),
                  .panel_avxvnni = TANDEM_PANEL_AVXVNNI(q8_0),
                  .llama_order = true,
                  .avx2_at_avx512 = true},
    WeightKernels{.type = Type::Q2_K,
                  .dot = TANDEM_LEVELS(dot_q2_K),
                  .batch = TANDEM_LEVELS(dot_q2_K_batch),
                  .rows_avx512 = TANDEM_ROWS_MULTI(q2_K, prepare_q2_K_rows, q2_K_rows_prepared_bytes),
                  .panel = TANDEM_PANEL(q2_K, q2_K_panel_bytes, nullptr, 0),
                  .panel_avx2 = TANDEM_PANEL_AVX2(q2_K, nullptr, 0),
                  .llama_order = true},
    WeightKernels{.type = Type::Q3_K,
                  .dot = TANDEM_LEVELS(dot_q3_K),
                  .batch = TANDEM_LEVELS(dot_q3_K_batch),
                  .rows_avx512 = TANDEM_ROWS(q3_K, prepare_q3_K_rows, q3_K_rows_prepared_bytes),
                  .panel = TANDEM_PANEL(q3_K, q3_K_panel_bytes, q3_K_panel_prepare, kGroupStartsExtraBytes),
                  .panel_avx2 = TANDEM_PANEL_AVX2(q3_K, nullptr, 0),
                  .llama_order = true},
    WeightKernels{.type = Type::Q4_K,
                  .dot = TANDEM_LEVELS(dot_q4_K),
                  .batch = TANDEM_LEVELS(dot_q4_K_batch),
                  .rows_avx2 = TANDEM_ROWS_AVX2_MULTI(q4_K),
                  .rows_avx512 = DecodeRows{TANDEM_X86(dot_q4_K_rows_avx512), TANDEM_X86(prepare_q4_K_rows),
                                            TANDEM_X86(q4_K_rows_prepared_bytes), TANDEM_X86(dot_q4_K_rows_multi_avx512),
                                            TANDEM_X86(dot_q4_K_rows_batch_avx512)},
                  .panel = TANDEM_PANEL(q4_K, q4_K_panel_bytes, k4_panel_prepare, kK4PanelExtraBytes),
                  .panel_avx2 = TANDEM_PANEL_AVX2(q4_K, k4_panel_prepare_avx2, kK4PanelExtraBytes),
                  .llama_order = true},
    // Q5_K's rows kernel reads Q4_K's prepared activation.
    WeightKernels{.type = Type::Q5_K,
                  .dot = TANDEM_LEVELS(dot_q5_K),
                  .batch = TANDEM_LEVELS(dot_q5_K_batch),
                  .rows_avx512 = TANDEM_ROWS(q5_K, prepare_q4_K_rows, q4_K_rows_prepared_bytes),
                  .panel = TANDEM_PANEL(q5_K, q5_K_panel_bytes, k4_panel_prepare, kK4PanelExtraBytes),
                  .panel_avx2 = TANDEM_PANEL_AVX2(q5_K, k4_panel_prepare_avx2, kK4PanelExtraBytes),
                  .llama_order = true},
    // Q6_K's rows kernel reads the Q8_K row itself.
    WeightKernels{.type = Type::Q6_K,
                  .dot = TANDEM_LEVELS(dot_q6_K),
                  .batch = TANDEM_LEVELS(dot_q6_K_batch),
                  .rows_avx512 = DecodeRows{TANDEM_X86(dot_q6_K_rows_avx512), nullptr, nullptr, TANDEM_X86(dot_q6_K_rows_multi_avx512)},
                  .panel = TANDEM_PANEL(q6_K, q6_K_panel_bytes, q6_K_panel_prepare, kGroupStartsExtraBytes),
                  .panel_avx2 = TANDEM_PANEL_AVX2(q6_K, nullptr, 0),
                  .llama_order = true},
    // The i-quants and MXFP4 in llama.cpp's order (the AVX2 kernels serve
    // the AVX-512 levels too): single rows as its AVX2 vec_dot, batches of 8
    // or more as its tiled kernels; IQ4_NL and MXFP4 repacked as Q4_0, one
    // order for both.
    TANDEM_IQ_TILED_ROW(IQ2_XXS, iq2_xxs, TANDEM_IQ_PANEL_AVX2(iq2_xxs, kIq2PanelRunAvx2), false),
    TANDEM_IQ_TILED_ROW(IQ2_XS, iq2_xs, TANDEM_IQ_PANEL_AVX2(iq2_xs, kIq2PanelRunAvx2), false),
    TANDEM_IQ_TILED_ROW(IQ2_S, iq2_s, TANDEM_IQ_PANEL_AVX2(iq2_s, kIq2PanelRunAvx2), false),
    TANDEM_IQ_TILED_ROW(IQ3_XXS, iq3_xxs, TANDEM_IQ_PANEL_AVX2(iq3_xxs, kIq3xxsPanelRunAvx2), false),
    TANDEM_IQ_TILED_ROW(IQ3_S, iq3_s, TANDEM_IQ_PANEL_AVX2(iq3_s, kIq3sPanelRunAvx2), false),
    TANDEM_IQ_TILED_ROW(IQ1_S, iq1_s, TANDEM_IQ_PANEL_AVX2(iq1_s, kIq1sPanelRunAvx2), true),
    TANDEM_IQ_TILED_ROW(IQ1_M, iq1_m, TANDEM_IQ_PANEL_AVX2(iq1_m, kIq1mPanelRunAvx2), true),
    TANDEM_NIBBLE_ROW(IQ4_NL, iq4_nl),
    TANDEM_IQ_TILED_ROW(IQ4_XS, iq4_xs, TANDEM_PANEL_AVX2_IQ(iq4_xs, iq4_xs_panel_prepare_avx2, kIq4xsPanelExtraBytesAvx2), false),
    TANDEM_NIBBLE_ROW(MXFP4, mxfp4),
};

#undef TANDEM_LEVELS
#undef TANDEM_WIDE
#undef TANDEM_ROWS
#undef TANDEM_ROWS_MULTI
#undef TANDEM_PANEL
#undef TANDEM_PANEL_AVX2
#undef TANDEM_NIBBLE_ROW
#undef TANDEM_NIBBLE_ROWS
#undef TANDEM_IQ_TILED_ROW

const WeightKernels& require(quant::Type w_type) {
    const WeightKernels* k = weight_kernels(w_type);
    if (k == nullptr) throw Error("no CPU matmul kernel for weight type " + std::string(quant::traits(w_type).name));
    return *k;
}

// The kernel of `k` for `level`: the AVX-512 build (VNNI or not, as the
// CPU has), or for a type that runs its AVX2 kernels there their AVX-512
// build (avx2w), else AVX2, else scalar; each only where present.
DotFn pick(const LevelKernels& k, SimdLevel level, bool avx2_at_avx512) {
    if (is_avx512(level)) {
        const DotFn f = avx2_at_avx512 ? k.avx2w : level == SimdLevel::Avx512Vnni ? k.avx512 : k.avx512nv;
        if (f != nullptr) return f;
    }
    if (level >= SimdLevel::Avx2 && k.avx2 != nullptr) return k.avx2b != nullptr && cpu_fast_pdep() ? k.avx2b : k.avx2;
    return k.scalar;
}

}  // namespace

const WeightKernels* weight_kernels(quant::Type w_type) {
    for (const WeightKernels& k : kTable) {
        if (k.type == w_type) return &k;
    }
    return nullptr;
}

bool follows_llama_order(quant::Type w_type) {
    const WeightKernels* k = weight_kernels(w_type);
    return k != nullptr && k->llama_order;
}

DotFn dot_kernel(quant::Type w_type, SimdLevel level) {
    const WeightKernels& k = require(w_type);
    TANDEM_CHECK(simd_level_supported(level), "kernel requested at a SIMD level this CPU lacks");
    return pick(k.dot, level, k.avx2_at_avx512);
}

BatchForm batch_form(quant::Type w_type, SimdLevel level) {
    TANDEM_CHECK(simd_level_supported(level), "kernel requested at a SIMD level this CPU lacks");
    const WeightKernels* k = weight_kernels(w_type);
    if (k == nullptr || k->batch.scalar == nullptr) return {};
    const quant::dot::BatchRule rule = quant::dot::batch_rule(w_type);
    return {pick(k->batch, level, k->avx2_at_avx512), rule.min_tokens, rule.group};
}

DecodeRows decode_rows_kernel(quant::Type w_type, SimdLevel level, bool several_tokens) {
    // Each reproduces the order of the single-row kernel it stands in for
    // at that level (Matmul.DecodeRowsKernelsMatchSingleRowBits).
    if (level == SimdLevel::Scalar) return {};
    TANDEM_CHECK(simd_level_supported(level), "kernel requested at a SIMD level this CPU lacks");
    const WeightKernels* k = weight_kernels(w_type);
    if (k == nullptr) return {};
    // A type that runs its AVX2 kernels at the AVX-512 levels runs their
    // AVX-512VL build there, rows included (the same bits).
    if (is_avx512(level) && k->avx2_at_avx512 && k->rows_avx2w.fn != nullptr) return k->rows_avx2w;
    if (level == SimdLevel::Avx512Vnni && k->rows_avx512.fn != nullptr) {
        // A type in llama.cpp's order has the same bits at every level, so
        // a small batch may take AVX2's several-tokens kernel where AVX-512
        // has none (Q4_0: 4 streams of llama-1b 1.02x -> 2.1x one stream).
        const bool avx2_tokens = several_tokens && k->rows_avx512.multi == nullptr && k->llama_order;
        if (!avx2_tokens || k->rows_avx2.multi == nullptr) return k->rows_avx512;
    }
    if (!is_avx512(level) && k->rows_avx2b.fn != nullptr && cpu_fast_pdep()) return k->rows_avx2b;
    return k->rows_avx2;
}

WideDot wide_dot_kernel(quant::Type w_type, SimdLevel level) {
    if (level == SimdLevel::Scalar) return {};
    TANDEM_CHECK(simd_level_supported(level), "kernel requested at a SIMD level this CPU lacks");
    const WeightKernels* k = weight_kernels(w_type);
    if (k == nullptr || k->wide_round == nullptr) return {};
    const DotFn fn = pick(k->wide, level, k->avx2_at_avx512);
    if (fn == nullptr) return {};
    return {fn, k->wide_round};
}

}  // namespace tandem::cpu::detail
