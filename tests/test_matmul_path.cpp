// The matmul path chooser (kernels_cpu/matmul_path.h) by table: for a
// weight type, level, order and batch, which tokens the panels, the batch
// form and the decode rows take, whether activations are quantized, and
// the column chunks. Rows at a level this CPU lacks are skipped (the
// kernels behind them cannot be looked up); the bits each path gives are
// Matmul.* and GemmPanel*'s business.
#include <gtest/gtest.h>

#include <string>

#include "kernels_cpu/matmul_path.h"
#include "runtime/common/error.h"

namespace {

using tandem::cpu::MatmulOrder;
using tandem::cpu::SimdLevel;
using tandem::cpu::detail::choose_matmul_path;
using tandem::quant::Type;

struct Row {
    Type type;
    SimdLevel level;
    int64_t n_tokens;
    MatmulOrder order;
    // Expected:
    int64_t panel_end;
    int64_t batch_end;
    bool rows;           // decode rows take tokens
    int64_t rows_first;  // from this token (with rows)
    bool quantized;      // activations quantized (or rounded) per row
    int64_t k_chunk;     // of n_cols = 4096
};

constexpr MatmulOrder F = MatmulOrder::Fastest, S = MatmulOrder::SingleToken;
constexpr int64_t N = 4096;

const Row kRows[] = {
    // One token: the decode rows, at every SIMD level; none at Scalar.
    {Type::Q4_K, SimdLevel::Avx2, 1, F, 0, 0, true, 0, true, N},
    {Type::Q4_K, SimdLevel::Avx512Vnni, 1, F, 0, 0, true, 0, true, N},
    {Type::Q4_K, SimdLevel::Scalar, 1, F, 0, 0, false, 0, true, N},
    {Type::Q8_0, SimdLevel::Avx512, 1, F, 0, 0, true, 0, true, N},
    // Prompt batches: panels from 32 tokens at Avx512Vnni, from 8 at the
    // AVX2 levels and at AVX-512 without VNNI (AVX2's panels), a multiple
    // of 4; Q4_K's batch form takes tokens from 4, in groups of 4.
    {Type::Q4_K, SimdLevel::Avx512Vnni, 64, F, 64, 64, false, 64, true, N},
    {Type::Q4_K, SimdLevel::Avx512Vnni, 66, F, 64, 64, false, 64, true, N},
    {Type::Q4_K, SimdLevel::Avx2, 8, F, 8, 8, false, 8, true, N},
    {Type::Q4_K, SimdLevel::Avx512, 8, F, 8, 8, false, 8, true, N},
    {Type::Q8_0, SimdLevel::Avx2Vnni, 37, F, 36, 0, false, 0, true, N},
    // Below the panels' minimum at Avx512Vnni, a serving step's few tokens
    // go through the decode rows (those of Q4_K's batch form too).
    {Type::Q4_K, SimdLevel::Avx512Vnni, 8, F, 0, 8, true, 0, true, N},
    // The single-token order: no batch form, so a type that has one keeps
    // its batches off the panels; a type without one (Q8_0) may use them.
    {Type::Q4_K, SimdLevel::Avx512Vnni, 40, S, 0, 0, false, 0, true, N},
    {Type::Q8_0, SimdLevel::Avx512Vnni, 40, S, 40, 0, false, 0, true, N},
    // The 256-element i-quants' batch form (from 8 tokens) runs its AVX2
    // kernel at AVX-512 too: their panels take its tokens from 8 at every
    // SIMD level, a multiple of 4 (the batch form the rest). One token and
    // smaller batches (in the single-token order up to 24 tokens) take
    // the decode rows (AVX2's; their AVX-512VL build at the AVX-512
    // levels); a larger batch in the single-token order the one-row kernel.
    {Type::IQ4_XS, SimdLevel::Avx512Vnni, 8, F, 8, 8, false, 8, true, N},
    {Type::IQ1_M, SimdLevel::Avx512Vnni, 37, F, 36, 37, false, 37, true, N},
    {Type::IQ2_XXS, SimdLevel::Avx2, 8, F, 8, 8, false, 8, true, N},
    {Type::IQ3_S, SimdLevel::Avx512, 21, F, 20, 21, false, 21, true, N},
    {Type::IQ3_S, SimdLevel::Avx2, 1, F, 0, 0, true, 0, true, N},
    {Type::IQ1_M, SimdLevel::Avx512Vnni, 1, F, 0, 0, true, 0, true, N},
    {Type::IQ1_S, SimdLevel::Avx512, 1, S, 0, 0, true, 0, true, N},
    {Type::IQ2_S, SimdLevel::Avx512Vnni, 7, F, 0, 0, true, 0, true, N},
    {Type::IQ2_XS, SimdLevel::Avx2Vnni, 2, F, 0, 0, true, 0, true, N},
    {Type::IQ2_XXS, SimdLevel::Avx512Vnni, 24, S, 0, 0, true, 0, true, N},
    {Type::IQ4_XS, SimdLevel::Avx2, 9, S, 0, 0, true, 0, true, N},
    {Type::IQ3_XXS, SimdLevel::Avx512Vnni, 40, S, 0, 0, false, 0, true, N},
    {Type::IQ4_XS, SimdLevel::Scalar, 64, F, 0, 64, false, 64, true, N},
    {Type::IQ3_S, SimdLevel::Scalar, 1, F, 0, 0, false, 0, true, N},
    // IQ4_NL and MXFP4 as Q4_0: AVX2's decode rows at every level (one
    // token, and a few below the panels), the panels for every token of a
    // batch (no batch form) from 32 at Avx512Vnni and from 8 at AVX2.
    {Type::IQ4_NL, SimdLevel::Avx2, 1, F, 0, 0, true, 0, true, N},
    {Type::IQ4_NL, SimdLevel::Avx512Vnni, 1, F, 0, 0, true, 0, true, N},
    {Type::MXFP4, SimdLevel::Avx512Vnni, 8, F, 0, 0, true, 0, true, N},
    {Type::IQ4_NL, SimdLevel::Avx512Vnni, 66, F, 64, 0, false, 0, true, N},
    {Type::MXFP4, SimdLevel::Avx2, 8, F, 8, 0, false, 0, true, N},
    // Float weights: F32 read as they are; BF16 and F16 batches rounded to
    // 16 bits but kept as f32 (the wide dot). A token group of four such
    // rows is too wide for L1: column chunks of 16 KiB (1024 f32), but for
    // F16, which keeps llama.cpp's one accumulation chain per output.
    {Type::F32, SimdLevel::Avx2, 1, F, 0, 0, false, 0, false, N},
    {Type::F32, SimdLevel::Avx2, 64, F, 0, 0, false, 0, false, 1024},
    {Type::BF16, SimdLevel::Avx2, 64, F, 0, 0, false, 0, true, 1024},
    {Type::F16, SimdLevel::Avx2, 64, F, 0, 0, false, 0, true, N},
};

std::string name(const Row& r) {
    return std::string(tandem::quant::traits(r.type).name) + " " + std::string(tandem::cpu::simd_level_name(r.level)) +
           " x" + std::to_string(r.n_tokens) + (r.order == S ? " single-token order" : "");
}

TEST(MatmulPath, ChoosesKernelsByTable) {
    int checked = 0;
    for (const Row& r : kRows) {
        if (!tandem::cpu::simd_level_supported(r.level)) continue;
        const auto p = choose_matmul_path({r.type, N, r.n_tokens, r.level, r.order});
        EXPECT_EQ(p.panel_end, r.panel_end) << name(r);
        EXPECT_EQ(p.panel != nullptr, r.panel_end > 0) << name(r);
        EXPECT_EQ(p.batch_end, r.batch_end) << name(r);
        EXPECT_EQ(p.rows.fn != nullptr, r.rows) << name(r);
        if (r.rows) {
            EXPECT_EQ(p.rows_first, r.rows_first) << name(r);
        }
        EXPECT_EQ(p.quantize != nullptr, r.quantized) << name(r);
        EXPECT_EQ(p.k_chunk, r.k_chunk) << name(r);
        EXPECT_NE(p.fn, nullptr) << name(r);
        ++checked;
    }
    // The scalar rows run everywhere.
    EXPECT_GT(checked, 0);
}

// A level pins its kernels: the VNNI builds only at the VNNI levels.
TEST(MatmulPath, VnniOnlyAtVnniLevels) {
    const auto* k = tandem::cpu::detail::weight_kernels(Type::Q4_K);
    ASSERT_NE(k, nullptr);
    if (tandem::cpu::simd_level_supported(SimdLevel::Avx512Vnni) && k->dot.avx512 != nullptr) {
        EXPECT_EQ(choose_matmul_path({Type::Q4_K, N, 1, SimdLevel::Avx512Vnni, F}).fn, k->dot.avx512);
    }
    if (tandem::cpu::simd_level_supported(SimdLevel::Avx512) && k->dot.avx512nv != nullptr) {
        EXPECT_EQ(choose_matmul_path({Type::Q4_K, N, 1, SimdLevel::Avx512, F}).fn, k->dot.avx512nv);
    }
    const auto* q8 = tandem::cpu::detail::weight_kernels(Type::Q8_0);
    if (tandem::cpu::simd_level_supported(SimdLevel::Avx2Vnni) && q8->panel_avxvnni.gemm != nullptr) {
        EXPECT_EQ(choose_matmul_path({Type::Q8_0, N, 64, SimdLevel::Avx2Vnni, F}).panel, &q8->panel_avxvnni);
        EXPECT_EQ(choose_matmul_path({Type::Q8_0, N, 64, SimdLevel::Avx2, F}).panel, &q8->panel_avx2);
    }
}

// The i-quants' panels: AVX-512 VNNI's at that level, AVX2's at the AVX2
// levels and at AVX-512 without VNNI.
TEST(MatmulPath, IquantPanelsByLevel) {
    for (Type t : {Type::IQ2_XXS, Type::IQ2_XS, Type::IQ2_S, Type::IQ3_XXS, Type::IQ3_S, Type::IQ1_S, Type::IQ1_M, Type::IQ4_XS}) {
        const auto* k = tandem::cpu::detail::weight_kernels(t);
        ASSERT_NE(k, nullptr);
        for (SimdLevel level : {SimdLevel::Avx2, SimdLevel::Avx2Vnni, SimdLevel::Avx512, SimdLevel::Avx512Vnni}) {
            if (!tandem::cpu::simd_level_supported(level)) continue;
            const auto* want = level == SimdLevel::Avx512Vnni ? &k->panel : &k->panel_avx2;
            ASSERT_NE(want->gemm, nullptr) << tandem::quant::traits(t).name;
            EXPECT_EQ(choose_matmul_path({t, N, 64, level, F}).panel, want)
                << tandem::quant::traits(t).name << " " << tandem::cpu::simd_level_name(level);
        }
    }
}

// The i-quants' decode rows at every SIMD level: AVX2's (IQ1_S's and
// IQ1_M's BMI2 build on a CPU with a fast pdep), and at the AVX-512 levels
// their AVX-512VL build (as the row kernels there): one token, and a small
// batch's tokens.
TEST(MatmulPath, IquantDecodeRowsAtEveryLevel) {
    for (Type t : {Type::IQ2_XXS, Type::IQ2_XS, Type::IQ2_S, Type::IQ3_XXS, Type::IQ3_S, Type::IQ1_S, Type::IQ1_M, Type::IQ4_XS}) {
        const auto* k = tandem::cpu::detail::weight_kernels(t);
        ASSERT_NE(k, nullptr);
        for (SimdLevel level : {SimdLevel::Avx2, SimdLevel::Avx2Vnni, SimdLevel::Avx512, SimdLevel::Avx512Vnni}) {
            if (!tandem::cpu::simd_level_supported(level)) continue;
            const std::string what = std::string(tandem::quant::traits(t).name) + " " + std::string(tandem::cpu::simd_level_name(level));
            const bool avx512 = level == SimdLevel::Avx512 || level == SimdLevel::Avx512Vnni;
            // (The sanitizer build has no AVX-512VL build: AVX2's there.)
            const bool iq1 = t == Type::IQ1_S || t == Type::IQ1_M;
            // (Nor has it the BMI2 build.)
            if (k->rows_avx2b.fn != nullptr) EXPECT_TRUE(iq1) << what << ": a BMI2 build for the IQ1 types only";
            const bool bmi2 = !avx512 && k->rows_avx2b.fn != nullptr && tandem::cpu::cpu_fast_pdep();
            const tandem::cpu::detail::DecodeRows& want =
                avx512 && k->rows_avx2w.fn != nullptr ? k->rows_avx2w : bmi2 ? k->rows_avx2b : k->rows_avx2;
            ASSERT_NE(want.multi, nullptr) << what;
            EXPECT_EQ(choose_matmul_path({t, N, 1, level, F}).rows.fn, want.fn) << what;
            EXPECT_EQ(choose_matmul_path({t, N, 5, level, F}).rows.multi, want.multi) << what;
            EXPECT_EQ(choose_matmul_path({t, N, 24, level, S}).rows.multi, want.multi) << what;
        }
    }
}

TEST(MatmulPath, UnknownTypeIsAnError) {
    EXPECT_THROW(choose_matmul_path({Type::Q8_K, 256, 1, SimdLevel::Scalar, F}), tandem::Error);
}

}  // namespace
