// CUDA kernels and the CUDA backend against their CPU twins. Every test
// skips cleanly where no GPU is usable (no driver, no device, a CPU-only
// build), and fails instead where one is required (the emulated build,
// scripts/device-check.sh on a GPU machine: tests/test_cuda_inputs.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "kernels_cpu/attention.h"
#include "kernels_cpu/blas_matmul.h"
#include "kernels_cpu/elementwise.h"
#include "kernels_cpu/matmul.h"
#include "kernels_cpu/moe.h"
#include "kernels_cuda/cuda_api.h"
#include "tests/cuda_ops/cuda_test_ops.h"
#include "kernels_cuda/device_matmul.h"
#include "kernels_cuda/matmul_math.h"
#include "kernels_cuda/matmul_types.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/quant/fp16.h"
#include "runtime/engine/kv_cache.h"
#include "runtime/model/model_spec.h"
#include "runtime/engine/session.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/golden_io.h"
#include "tests/test_cuda_inputs.h"
#include "tests/random_blocks.h"
#include "tests/test_paths.h"

namespace tq = tandem::quant;
namespace tc = tandem::cpu;
namespace cm = tandem::cuda::math;

namespace {

using tandem::testing::random_floats;

// Outputs farther from ref than tol(ref[i]): counted, so that a loop over
// types reports every type instead of stopping at the first.
template <class Tol>
int misses(const std::vector<float>& got, const std::vector<float>& ref, Tol tol) {
    int n = 0;
    for (size_t i = 0; i < ref.size(); ++i) n += std::fabs(got[i] - ref[i]) <= tol(ref[i]) ? 0 : 1;
    return n;
}

}  // namespace

// Every weight type against the CPU's matmul, bit for bit: one token,
// small batches on both sides of the batch forms' thresholds (Q2_K/Q4_K
// from 4 tokens in groups of 4, Q3_K/Q5_K/Q6_K from 8), and 19, 40 and 67
// tokens, past kCublasMinTokens (float weights of kCublasMinRows rows or
// more would take cuBLAS; these 37 keep the CPU's bits) and on the int8 tensor cores for Q4_0 and the K types (more
// tokens than a block_dot warp takes: 67 leaves Q2_K/Q4_K 3 tokens in the
// single order, and 37 rows end inside a 16-row tile).
// The single-token order gives every token of a batch its one-token bits
// on both sides. (The element kernel of before summed float products: its
// logits left the CPU's on every quantized model, scripts/emulated_kl.py.)
// Rows of type t: wf quantized, or for the grid types (i-quants, MXFP4)
// random codes with realistic scales.
static void weight_rows(tq::Type t, const std::vector<float>& wf, int64_t rows, int64_t cols, uint8_t* w) {
    const uint64_t rb = *tq::row_bytes(t, cols);
    for (int64_t r = 0; r < rows; ++r) {
        if (!tandem::testing::tested_on_random_codes(t)) {
            tq::quantize_row(t, wf.data() + r * cols, w + r * rb, cols);
        } else {
            tandem::testing::fill_random_blocks(t, cols, static_cast<uint32_t>(100 + r), w + r * rb);
        }
    }
}

class CudaMatmulTokens : public ::testing::TestWithParam<int64_t> {};

TEST_P(CudaMatmulTokens, EveryWeightTypeGivesTheCpuBits) {
    TANDEM_REQUIRE_GPU(dev);
    constexpr int64_t kRows = 37, kCols = 512;
    const int64_t kTokens = GetParam();
    const auto wf = random_floats(kRows * kCols, 1);
    const auto x = random_floats(kTokens * kCols, 2);
    tc::ThreadPool pool(2, false);
    for (const bool single : {false, true}) {
#define CHECK_TYPE(W)                                                                                           \
    {                                                                                                           \
        SCOPED_TRACE(std::string(#W) + (single ? " single-token order" : ""));                                  \
        const tq::Type t = tq::Type::W;                                                                         \
        const uint64_t rb = *tq::row_bytes(t, kCols);                                                           \
        std::vector<uint8_t> w(rb * kRows);                                                                     \
        weight_rows(t, wf, kRows, kCols, w.data());                                                             \
        tc::WeightView view{t, w.data(), kRows, kCols, rb};                                                     \
        std::vector<float> ref(kTokens * kRows), gpu(ref.size());                                               \
        tc::matmul(view, x.data(), kCols, kTokens, ref.data(), kRows, pool, tc::SimdLevel::Scalar,               \
                   single ? tc::MatmulOrder::SingleToken : tc::MatmulOrder::Fastest);                           \
        tandem::cuda::matmul_on_device(dev, t, w.data(), kRows, kCols, x.data(), kTokens, gpu.data(), single);  \
        const bool cublas = !single && tandem::cuda::uses_cublas(t, kRows, kTokens);                           \
        const bool blas = !single && tc::detail::blas_wanted(t, kTokens); /* the CPU's OpenBLAS: its own order */ \
        const float tol = cublas || blas ? 1e-5f * std::sqrt(float{kCols}) * 4.0f : 0.0f;                      \
        EXPECT_EQ(misses(gpu, ref, [&](float) { return tol; }), 0) << "of " << ref.size() << " outputs";        \
    }
        TANDEM_CUDA_MATMUL_TYPES(CHECK_TYPE)
#undef CHECK_TYPE
    }
}

INSTANTIATE_TEST_SUITE_P(CudaMatmul, CudaMatmulTokens, ::testing::Values(1, 2, 3, 7, 8, 19, 40, 67),
                         [](const ::testing::TestParamInfo<int64_t>& i) { return std::to_string(i.param) + "_tokens"; });

// The 256-element i-quants' kernel (matmul_iq.cu) on rows of many blocks:
// 10 blocks a row (every chain steps past the first chunk of blocks), 77
// rows (past two CUDA blocks of 32, ending inside a warp's 8), 1-7 tokens
// (every token count a warp takes), 9 in the single-token order (two token
// tiles), and 8 in both orders (the batch form's tiled total).
TEST(CudaMatmul, IQuantRowsOfManyBlocksGiveTheCpuBits) {
    TANDEM_REQUIRE_GPU(dev);
    constexpr int64_t kRows = 77, kCols = 2560;
    tc::ThreadPool pool(2, false);
    const auto wf = random_floats(kRows * kCols, 21);
    for (const tq::Type t : {tq::Type::IQ2_XXS, tq::Type::IQ2_XS, tq::Type::IQ2_S, tq::Type::IQ3_XXS, tq::Type::IQ3_S,
                             tq::Type::IQ1_S, tq::Type::IQ1_M, tq::Type::IQ4_XS}) {
        const uint64_t rb = *tq::row_bytes(t, kCols);
        std::vector<uint8_t> w(rb * kRows);
        weight_rows(t, wf, kRows, kCols, w.data());
        tc::WeightView view{t, w.data(), kRows, kCols, rb};
        for (const auto& [n, single] : {std::pair<int64_t, bool>{1, true}, {2, true}, {3, true}, {4, true}, {5, true},
                                       {7, true}, {9, true}, {8, true}, {8, false}}) {
            SCOPED_TRACE(std::string(tq::traits(t).name) + ", " + std::to_string(n) + " tokens" +
                         (single ? "" : ", batch form"));
            const auto x = random_floats(n * kCols, static_cast<uint32_t>(30 + n));
            std::vector<float> ref(n * kRows), gpu(ref.size());
            tc::matmul(view, x.data(), kCols, n, ref.data(), kRows, pool, tc::SimdLevel::Scalar,
                       single ? tc::MatmulOrder::SingleToken : tc::MatmulOrder::Fastest);
            tandem::cuda::matmul_on_device(dev, t, w.data(), kRows, kCols, x.data(), n, gpu.data(), single);
            EXPECT_EQ(misses(gpu, ref, [](float) { return 0.0f; }), 0) << "of " << ref.size() << " outputs";
        }
    }
}

// Batches of kCublasMinTokens or more of float weights: rows read into the
// tile and multiplied by a cuBLAS fp32 GEMM (no TF32) with the activations
// quantized to the partner type and read back (math::act_roundtrip), so
// the reference is the weights times those activations in double, within
// fp32 sums over the row's |w||x|. More rows than one tile holds at this
// width, so the tiling is exercised.
TEST(CudaMatmul, BatchesThroughCublasMatchDequantizedReference) {
    TANDEM_REQUIRE_GPU(dev);
    constexpr int64_t kCols = 4096, kTokens = 64;
    const int64_t kRows = static_cast<int64_t>(tandem::model::kMaxGemmTileBytes / (kCols * 4)) + 37;
    const auto wf = random_floats(kRows * kCols, 11);
    const auto x = random_floats(kTokens * kCols, 12);
    for (const tq::Type t : {tq::Type::F16, tq::Type::BF16, tq::Type::F32}) {
        SCOPED_TRACE(tq::traits(t).name);
        const uint64_t rb = *tq::row_bytes(t, kCols);
        std::vector<uint8_t> w(rb * kRows);
        std::vector<float> deq(kRows * kCols);
        for (int64_t r = 0; r < kRows; ++r) {
            tq::quantize_row(t, wf.data() + r * kCols, w.data() + r * rb, kCols);
            tq::dequantize_row(t, w.data() + r * rb, deq.data() + r * kCols, kCols);
        }
        std::vector<float> xa(x.size());
        tq::Type a = tq::Type::F32;
        ASSERT_TRUE(tandem::cuda::matmul_activation_type(t, a));
        for (int64_t tok = 0; tok < kTokens; ++tok) {
            const float* src = x.data() + tok * kCols;
            float* dst = xa.data() + tok * kCols;
            if (a == tq::Type::Q8_0) {
                for (int64_t b = 0; b < kCols / 32; ++b) cm::act_roundtrip<tq::Type::Q8_0>(src + b * 32, dst + b * 32);
            } else if (a == tq::Type::Q8_1) {
                for (int64_t b = 0; b < kCols / 32; ++b) cm::act_roundtrip<tq::Type::Q8_1>(src + b * 32, dst + b * 32);
            } else if (a == tq::Type::Q8_K) {
                for (int64_t b = 0; b < kCols / 256; ++b) cm::act_roundtrip<tq::Type::Q8_K>(src + b * 256, dst + b * 256);
            } else if (a == tq::Type::F16) {
                for (int64_t i = 0; i < kCols; ++i) cm::act_roundtrip<tq::Type::F16>(src + i, dst + i);
            } else if (a == tq::Type::BF16) {
                for (int64_t i = 0; i < kCols; ++i) cm::act_roundtrip<tq::Type::BF16>(src + i, dst + i);
            } else {
                std::copy(src, src + kCols, dst);
            }
        }
        std::vector<float> gpu(kTokens * kRows);
        tandem::cuda::matmul_on_device(dev, t, w.data(), kRows, kCols, x.data(), kTokens, gpu.data());
        int bad = 0, checked = 0;
        for (int64_t tok = 0; tok < kTokens; tok += 7) {
            for (int64_t r = 0; r < kRows; r += 13) {
                double ref = 0.0, mag = 0.0;
                for (int64_t i = 0; i < kCols; ++i) {
                    const double p = static_cast<double>(deq[r * kCols + i]) * xa[tok * kCols + i];
                    ref += p;
                    mag += std::fabs(p);
                }
                ++checked;
                bad += std::fabs(gpu[tok * kRows + r] - ref) <= 1e-5 * mag + 1e-6 ? 0 : 1;
            }
        }
        EXPECT_EQ(bad, 0) << "of " << checked << " outputs";
    }
}

TEST(CudaElementwise, RmsNormRopeGluMatchCpu) {
    TANDEM_REQUIRE_GPU(dev);
    constexpr int64_t kN = 1000, kRows = 6;
    const auto x = random_floats(kN * kRows, 3, 2.0f);
    const auto w = random_floats(kN, 4);
    std::vector<float> ref(x.size()), gpu(x.size());
    tc::rms_norm_rows(x.data(), w.data(), ref.data(), kN, kRows, 1e-6f);
    tandem::cuda::rms_norm_on_device(dev, x.data(), w.data(), gpu.data(), kN, kRows, 1e-6f);
    EXPECT_EQ(misses(gpu, ref, [](float r) { return 1e-6f * std::max(1.0f, std::fabs(r)); }), 0) << "rms_norm";

    for (const bool neox : {false, true}) {
        SCOPED_TRACE(neox ? "rope neox" : "rope norm");
        constexpr int64_t kTokens = 4, kHeads = 3, kDim = 128;
        auto q = random_floats(kTokens * kHeads * kDim, 5);
        auto q_gpu = q;
        const int32_t pos[kTokens] = {0, 5, 300, 4000};
        tc::RopeParams p;
        p.mode = neox ? tc::RopeMode::Neox : tc::RopeMode::Norm;
        p.n_rot = kDim;
        p.freq_base = 1000000.0f;
        for (int64_t t = 0; t < kTokens; ++t) tc::rope_heads(q.data() + t * kHeads * kDim, kHeads, kDim, pos[t], p);
        tandem::cuda::kernels::RopeArgs a;
        a.neox = neox;
        a.n_rot = kDim;
        a.theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(kDim));
        tandem::cuda::rope_on_device(dev, q_gpu.data(), kTokens, kHeads, kDim, pos, a);
        // cosf/sinf on the device may differ from glibc by an ulp or two.
        EXPECT_EQ(misses(q_gpu, q, [](float r) { return 2e-6f * std::max(1.0f, std::fabs(r)); }), 0);
    }

    const auto gate = random_floats(5000, 6, 3.0f);
    const auto up = random_floats(5000, 7);
    std::vector<float> r(gate.size()), g(gate.size());
    for (const bool gelu : {false, true}) {
        SCOPED_TRACE(gelu ? "geglu" : "swiglu");
        if (gelu) {
            tc::geglu(gate.data(), up.data(), r.data(), static_cast<int64_t>(gate.size()));
        } else {
            tc::swiglu(gate.data(), up.data(), r.data(), static_cast<int64_t>(gate.size()), tc::SimdLevel::Scalar);
        }
        tandem::cuda::glu_on_device(dev, gelu, gate.data(), up.data(), g.data(), static_cast<int64_t>(gate.size()));
        // GELU rounds its output to fp16: a one-ulp tanh difference can move
        // it by one half step (2^-11 relative).
        const float tol = gelu ? 1e-3f : 1e-6f;
        EXPECT_EQ(misses(g, r, [&](float v) { return tol * std::max(1.0f, std::fabs(v)); }), 0);
    }
}

// Both cache types: F16 (fp16 accumulation) and Q8_0 (the CPU's block dot
// product and query quantizer, f32 sums), within kCudaAttentionTol (the
// CPU's bits on the emulator). Every other type and mixed pairs:
// test_cuda_kv_types.cpp. A span of 1100 cells is three chunks, split over
// blocks (kernels::attention_splits) and merged in the CPU's order.
TEST(CudaAttention, MatchesCpuF16AndQ8Caches) {
    TANDEM_REQUIRE_GPU(dev);
    constexpr int64_t kHead = 8, kHeadKv = 2, kDim = 128, kTokens = 6;
    for (const int64_t kCells : {int64_t{40}, int64_t{1100}}) {
    const auto stored = static_cast<int32_t>(kCells - 4);
    tandem::cuda::kernels::KvCache shape_kv;
    shape_kv.n_cells = kCells;
    tandem::cuda::kernels::AttentionArgs with_room{kHead, kHeadKv, kDim, kDim};
    std::vector<float> room(1);
    with_room.partials = room.data();
    with_room.partial_floats = int64_t{1} << 40;
    EXPECT_EQ(tandem::cuda::kernels::attention_splits(with_room, shape_kv, kTokens) > 1, kCells > 512) << kCells;
    for (const tq::Type type : {tq::Type::F16, tq::Type::Q8_0}) {
        for (const int64_t window : {int64_t{0}, int64_t{10}}) {
            SCOPED_TRACE(std::string(tq::traits(type).name) + " window " + std::to_string(window) + ", " +
                         std::to_string(kCells) + " cells");
            tandem::LayerKvCache cache(type, kCells, kHeadKv * kDim, kHeadKv * kDim);
            for (int32_t p = 0; p < stored; ++p) {
                const auto k = random_floats(kHeadKv * kDim, 100 + static_cast<uint32_t>(p));
                const auto v = random_floats(kHeadKv * kDim, 200 + static_cast<uint32_t>(p));
                cache.store(p, k.data(), v.data());
            }
            const auto q = random_floats(kTokens * kHead * kDim, 9);
            int32_t pos[kTokens];
            for (int64_t t = 0; t < kTokens; ++t) pos[t] = stored - static_cast<int32_t>(kTokens) + static_cast<int32_t>(t);
            tc::AttentionShape shape{kHead, kHeadKv, kDim, kDim, window, 1.0f / std::sqrt(128.0f)};
            std::vector<float> ref(kTokens * kHead * kDim), gpu(ref.size());
            tc::ThreadPool pool(2, false);
            const auto kv = cache.view();
            tc::attention(q.data(), pos, kTokens, shape, kv, ref.data(), pool, tc::SimdLevel::Scalar);
            tandem::cuda::kernels::AttentionArgs a{kHead, kHeadKv, kDim, kDim, window, shape.scale};
            tandem::cuda::attention_on_device(dev, q.data(), pos, kTokens, a, {type, type}, kv.k, kv.v, kv.cell_pos,
                                              kCells, kHeadKv * kDim, kHeadKv * kDim, gpu.data());
            EXPECT_EQ(misses(gpu, ref, [](float r) { return tandem::testing::kCudaAttentionTol * std::max(1.0f, std::fabs(r)); }), 0);
        }
    }
    }
}

// DeepSeek-V3's latent attention: 16 query heads over one KV head of 576
// (the latent and the rotated part), V each K row's first 512 (the cache
// stores K alone; the device reads V from K's rows, 576 elements apart).
TEST(CudaAttention, LatentHeadsOf576And512MatchCpu) {
    TANDEM_REQUIRE_GPU(dev);
    constexpr int64_t kHead = 16, kKDim = 576, kVDim = 512, kTokens = 3, kCells = 40;
    for (const tq::Type type : {tq::Type::F16, tq::Type::Q8_0}) {
        SCOPED_TRACE(tq::traits(type).name);
        tandem::LayerKvCache cache(type, kCells, kKDim, 0);
        for (int32_t p = 0; p < kCells - 4; ++p) {
            const auto k = random_floats(kKDim, 300 + static_cast<uint32_t>(p));
            cache.store(p, k.data(), nullptr);
        }
        const auto q = random_floats(kTokens * kHead * kKDim, 19);
        const int32_t pos[kTokens] = {33, 34, 35};
        tc::AttentionShape shape{kHead, 1, kKDim, kVDim, 0, 0.1f};
        std::vector<float> ref(kTokens * kHead * kVDim), gpu(ref.size());
        tc::ThreadPool pool(2, false);
        const auto kv = cache.view();
        ASSERT_EQ(kv.v, kv.k);
        tc::attention(q.data(), pos, kTokens, shape, kv, ref.data(), pool, tc::SimdLevel::Scalar);
        tandem::cuda::kernels::AttentionArgs a{kHead, 1, kKDim, kVDim, 0, shape.scale};
        tandem::cuda::attention_on_device(dev, q.data(), pos, kTokens, a, {type, type}, kv.k, kv.k, kv.cell_pos, kCells,
                                          kKDim, kKDim, gpu.data());
        EXPECT_EQ(misses(gpu, ref, [](float r) { return tandem::testing::kCudaAttentionTol * std::max(1.0f, std::fabs(r)); }), 0);
    }
}

// Gemma 2's soft-capped scores (cap * tanh(qk * scale / cap)) against the
// CPU's scalar path, with a cap small enough to bend most scores; tanhf on
// the device may differ from glibc's by an ulp.
// K/V rows stored past 2 GiB into the cache: the cell's byte offset must
// be computed in 64 bits (a cell of 8 KiB rows at index 2^18 is 2^31 bytes
// in). The rows read back are the fp16 of what was stored.
TEST(CudaAttention, KvStoreReachesCellsPastTwoGiB) {
    TANDEM_REQUIRE_GPU(dev);
    constexpr int64_t kKDim = 4096, kVDim = 32;  // K rows of 8 KiB
    const int32_t far = static_cast<int32_t>((int64_t{1} << 31) / (kKDim * 2) + 3);
    const int64_t n_cells = far + 1;
    const std::vector<int32_t> cells = {5, far};
    const auto k = random_floats(2 * kKDim, 31);
    const auto v = random_floats(2 * kVDim, 32);
    std::vector<uint8_t> k_out(2 * kKDim * 2), v_out(2 * kVDim * 2);
    tandem::cuda::kv_store_on_device(dev, tandem::model::kCacheF16, k.data(), v.data(), 2, cells.data(), n_cells, kKDim,
                                     kVDim, k_out.data(), v_out.data());
    int bad = 0;
    for (size_t i = 0; i < k.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, k_out.data() + 2 * i, 2);
        bad += h == tq::fp32_to_fp16(k[i]) ? 0 : 1;
    }
    for (size_t i = 0; i < v.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, v_out.data() + 2 * i, 2);
        bad += h == tq::fp32_to_fp16(v[i]) ? 0 : 1;
    }
    EXPECT_EQ(bad, 0);
}

TEST(CudaAttention, SoftcapMatchesCpu) {
    TANDEM_REQUIRE_GPU(dev);
    constexpr int64_t kHead = 4, kHeadKv = 2, kDim = 64, kCells = 24, kTokens = 5;
    for (const tq::Type type : {tq::Type::F16, tq::Type::Q8_0}) {
        SCOPED_TRACE(tq::traits(type).name);
        tandem::LayerKvCache cache(type, kCells, kHeadKv * kDim, kHeadKv * kDim);
        for (int32_t p = 0; p < 20; ++p) {
            const auto k = random_floats(kHeadKv * kDim, 300 + static_cast<uint32_t>(p), 2.0f);
            const auto v = random_floats(kHeadKv * kDim, 400 + static_cast<uint32_t>(p));
            cache.store(p, k.data(), v.data());
        }
        const auto q = random_floats(kTokens * kHead * kDim, 10, 2.0f);
        const int32_t pos[kTokens] = {15, 16, 17, 18, 19};
        tc::AttentionShape shape{kHead, kHeadKv, kDim, kDim, 0, 1.0f / std::sqrt(64.0f)};
        shape.softcap = 2.0f;
        std::vector<float> ref(kTokens * kHead * kDim), gpu(ref.size());
        tc::ThreadPool pool(2, false);
        const auto kv = cache.view();
        tc::attention(q.data(), pos, kTokens, shape, kv, ref.data(), pool, tc::SimdLevel::Scalar);
        tandem::cuda::kernels::AttentionArgs a{kHead, kHeadKv, kDim, kDim, 0, shape.scale, shape.softcap};
        tandem::cuda::attention_on_device(dev, q.data(), pos, kTokens, a, {type, type}, kv.k, kv.v, kv.cell_pos, kCells,
                                          kHeadKv * kDim, kHeadKv * kDim, gpu.data());
        EXPECT_EQ(misses(gpu, ref, [](float r) { return tandem::testing::kCudaAttentionTol * std::max(1.0f, std::fabs(r)); }), 0);
    }
}

// gpt-oss's attention sinks (a logit per query head in the softmax's
// denominator only) against the CPU's scalar path, within
// kCudaAttentionTol: a sink above every visible score (even heads: the sink
// is the maximum) and one among them (odd heads), in one pass (40 cells)
// and over three chunks split over blocks (1100 cells: the sink joins once,
// after the merge; with a window of 10 the first chunks see no visible
// cell).
TEST(CudaAttention, SinksMatchCpu) {
    TANDEM_REQUIRE_GPU(dev);
    constexpr int64_t kHead = 8, kHeadKv = 2, kDim = 64, kTokens = 4;
    for (const int64_t kCells : {int64_t{40}, int64_t{1100}}) {
        const auto stored = static_cast<int32_t>(kCells - 4);
        std::vector<std::vector<float>> keys;
        for (int32_t p = 0; p < stored; ++p) {
            keys.push_back(random_floats(kHeadKv * kDim, 500 + static_cast<uint32_t>(p)));
        }
        const auto q = random_floats(kTokens * kHead * kDim, 11);
        int32_t pos[kTokens];
        for (int64_t t = 0; t < kTokens; ++t) pos[t] = stored - static_cast<int32_t>(kTokens) + static_cast<int32_t>(t);
        const float scale = 1.0f / std::sqrt(64.0f);
        for (const tq::Type type : {tq::Type::F16, tq::Type::Q8_0}) {
            tandem::LayerKvCache cache(type, kCells, kHeadKv * kDim, kHeadKv * kDim);
            for (int32_t p = 0; p < stored; ++p) {
                const auto v = random_floats(kHeadKv * kDim, 600 + static_cast<uint32_t>(p));
                cache.store(p, keys[static_cast<size_t>(p)].data(), v.data());
            }
            for (const int64_t window : {int64_t{0}, int64_t{10}}) {
                SCOPED_TRACE(std::string(tq::traits(type).name) + " window " + std::to_string(window) + ", " +
                             std::to_string(kCells) + " cells");
                float max_score = -INFINITY;
                for (int64_t t = 0; t < kTokens; ++t) {
                    for (int64_t h = 0; h < kHead; ++h) {
                        for (int32_t p = window > 0 ? pos[t] + 1 - static_cast<int32_t>(window) : 0; p <= pos[t]; ++p) {
                            const float* k = keys[static_cast<size_t>(p)].data() + h / (kHead / kHeadKv) * kDim;
                            float dot = 0.0f;
                            for (int64_t d = 0; d < kDim; ++d) dot += q[(t * kHead + h) * kDim + d] * k[d];
                            max_score = std::max(max_score, dot * scale);
                        }
                    }
                }
                std::vector<float> sinks(kHead);
                for (int64_t h = 0; h < kHead; ++h) sinks[h] = h % 2 == 0 ? max_score + 1.0f : 0.25f;
                tc::AttentionShape shape{kHead, kHeadKv, kDim, kDim, window, scale};
                shape.sinks = sinks.data();
                std::vector<float> ref(kTokens * kHead * kDim), gpu(ref.size());
                tc::ThreadPool pool(2, false);
                const auto kv = cache.view();
                tc::attention(q.data(), pos, kTokens, shape, kv, ref.data(), pool, tc::SimdLevel::Scalar);
                tandem::cuda::kernels::AttentionArgs a{kHead, kHeadKv, kDim, kDim, window, scale};
                a.sinks = sinks.data();  // host: attention_on_device uploads it
                tandem::cuda::attention_on_device(dev, q.data(), pos, kTokens, a, {type, type}, kv.k, kv.v,
                                                  kv.cell_pos, kCells, kHeadKv * kDim, kHeadKv * kDim, gpu.data());
                EXPECT_EQ(misses(gpu, ref, [](float r) { return tandem::testing::kCudaAttentionTol * std::max(1.0f, std::fabs(r)); }), 0);
            }
        }
    }
}

// A bias added to every row (Qwen2's Q/K/V biases) and a column band of a
// fused product (Phi-3's Q|K|V, gate|up): a float add and a copy, exact.
TEST(CudaElementwise, AddRowsAndCopyColsMatchCpu) {
    TANDEM_REQUIRE_GPU(dev);
    constexpr int64_t kLen = 300, kRows = 7;
    auto x = random_floats(kLen * kRows, 20);
    const auto v = random_floats(kLen, 21);
    std::vector<float> ref = x;
    for (int64_t r = 0; r < kRows; ++r) tc::add(ref.data() + r * kLen, v.data(), kLen);
    tandem::cuda::add_rows_on_device(dev, x.data(), v.data(), kLen, kRows);
    EXPECT_EQ(misses(x, ref, [](float) { return 0.0f; }), 0) << "add_rows";

    constexpr int64_t kSrc = 3 * kLen, kCol0 = 250, kWidth = 411;
    const auto src = random_floats(kSrc * kRows, 22);
    std::vector<float> want(kWidth * kRows), got(want.size());
    for (int64_t r = 0; r < kRows; ++r) {
        std::copy_n(src.begin() + r * kSrc + kCol0, kWidth, want.begin() + r * kWidth);
    }
    tandem::cuda::copy_cols_on_device(dev, src.data(), kSrc, kCol0, got.data(), kWidth, kRows);
    EXPECT_EQ(misses(got, want, [](float) { return 0.0f; }), 0) << "copy_cols";
}

// The experts' products as the device runs them (grouped by expert,
// gathered, each expert's slice through the matmul dispatch, put back or
// summed over slots) against the CPU device's definition: each (token,
// slot) row times its expert's slice, then w_0 * y_0 + w_1 * y_1 + ... in
// slot order, bit for bit. Few tokens take the single-row orders; 48
// tokens over 4 experts give each expert a batch (the batch forms).
TEST(CudaExperts, MatmulExpertsMatchCpu) {
    TANDEM_REQUIRE_GPU(dev);
    constexpr int64_t kExperts = 4, kUsed = 2, kRows = 96, kCols = 256;
    const tq::Type t = tq::Type::Q8_0;
    const uint64_t rb = *tq::row_bytes(t, kCols);
    const auto wf = random_floats(kExperts * kRows * kCols, 30);
    std::vector<uint8_t> w(rb * kExperts * kRows);
    for (int64_t r = 0; r < kExperts * kRows; ++r) tq::quantize_row(t, wf.data() + r * kCols, w.data() + r * rb, kCols);
    tc::ThreadPool pool(2, false);
    for (const int64_t tokens : {int64_t{5}, int64_t{48}}) {
        const auto logits = random_floats(kExperts * tokens, 31, 2.0f);
        std::vector<float> route(2 * kUsed * tokens);
        tc::moe_route(logits.data(), tc::RouteParams{kExperts, kUsed}, route.data(), tokens);
        for (const bool per_slot : {false, true}) {
            SCOPED_TRACE(std::to_string(tokens) + (per_slot ? " tokens, per slot, summed" : " tokens, shared input"));
            const auto x = random_floats((per_slot ? tokens * kUsed : tokens) * kCols, 32);
            std::vector<float> y(tokens * kUsed * kRows);
            for (int64_t r = 0; r < tokens * kUsed; ++r) {
                const auto e = static_cast<int64_t>(route[2 * r]);
                const tc::WeightView slice{t, w.data() + e * kRows * rb, kRows, kCols, rb};
                const float* xr = x.data() + (per_slot ? r : r / kUsed) * kCols;
                tc::matmul(slice, xr, kCols, 1, y.data() + r * kRows, kRows, pool, tc::SimdLevel::Scalar);
            }
            std::vector<float> ref = y;
            if (per_slot) {
                ref.assign(tokens * kRows, 0.0f);
                for (int64_t tok = 0; tok < tokens; ++tok) {
                    for (int64_t j = 0; j < kUsed; ++j) {
                        const float wj = tc::route_weight(route.data(), tok * kUsed + j);
                        for (int64_t c = 0; c < kRows; ++c) {
                            const float v = y[(tok * kUsed + j) * kRows + c] * wj;
                            ref[tok * kRows + c] = j == 0 ? v : ref[tok * kRows + c] + v;
                        }
                    }
                }
            }
            std::vector<float> gpu(ref.size());
            tandem::cuda::matmul_experts_on_device(dev, t, w.data(), kExperts, kRows, kCols, x.data(), route.data(),
                                                   kUsed, tokens, per_slot, per_slot, gpu.data());
            EXPECT_EQ(misses(gpu, ref, [&](float) { return 0.0f; }), 0)
                << "of " << ref.size() << " outputs";
        }
    }
}

using tandem::testing::mean_kl;

// One test per model, so that a missing model is a skip naming it
// (tests/test_cuda_inputs.h: tests/data holds tiny-llama-Q4_K_M; the others
// come from a shared/ folder that travels with the checkout, or skip).
class CudaBackendModel : public ::testing::TestWithParam<std::string> {};

// A model file opened, with its spec and tokenizer.
struct LoadedModel {
    explicit LoadedModel(const std::filesystem::path& path)
        : file(tandem::gguf::File::open(path)),
          spec(tandem::model::load_model_spec(file)),
          tok(tandem::Tokenizer::from_gguf(file)) {}
    tandem::gguf::File file;
    tandem::model::ModelSpec spec;
    tandem::Tokenizer tok;
};

static std::string model_test_name(const ::testing::TestParamInfo<std::string>& info) {
    std::string s = info.param;
    for (char& c : s) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    return s;
}

using EveryNgl = CudaBackendModel;

TEST_P(EveryNgl, MatchesCpu) {
    TANDEM_REQUIRE_GPU(dev);
    (void)dev;
    TANDEM_REQUIRE_MODEL(path, GetParam());
    const LoadedModel m(path);
    const auto& [file, spec, tok] = m;
    const auto tokens = tok.encode("Once upon a time, there was a little robot who wanted to learn.", true);
    tandem::SessionOptions opt;
    opt.n_ctx = 128;
    opt.n_ubatch = 16;  // several micro-batches: the KV cache must carry over
    bool exact = true;
    for (const auto& layer : spec.layers) {
        const tandem::gguf::TensorInfo* wq = nullptr;
        for (const auto role : {tandem::model::LayerTensor::AttnQ, tandem::model::LayerTensor::AttnQkv,
                                tandem::model::LayerTensor::AttnQA}) {
            if (!wq) wq = layer.get(role);
        }
        const tandem::quant::Type q = wq->type;
        exact = exact && !layer.has_experts() && q != tandem::quant::Type::F16 && q != tandem::quant::Type::F32;
    }
    std::vector<float> reference;
    tandem::Session(file, spec, opt).eval(tokens, true, reference);
    for (int64_t ngl = 0; ngl <= spec.hp.n_layer + 1; ++ngl) {
        SCOPED_TRACE("ngl " + std::to_string(ngl));
        opt.device = "cuda0";
        opt.n_gpu_layers = ngl;
        tandem::Session session(file, spec, opt);
        std::vector<float> logits;
        session.eval(tokens, true, logits);
        ASSERT_EQ(logits.size(), reference.size());
        // Issue 46's bound for batches (the golden bound is 1e-3). Dense
        // quantized models give the CPU's bits (their products, attention
        // scores and element ops are the CPU's). Float matrices in a batch
        // of 16 or more go through cuBLAS (the F16 models, the MoE synths'
        // F16 routers), where the CPU keeps its own order up to 256 tokens:
        // KL 1e-7 to 2e-5, through the prompt's logits and KV cache.
        EXPECT_LE(mean_kl(reference, logits, spec.hp.n_vocab), 1e-4);
        if (exact) {
            EXPECT_EQ(logits, reference);
        }
        // A decode step after the prompt uses the device KV cache.
        std::vector<float> next_ref, next;
        tandem::SessionOptions cpu_opt;
        cpu_opt.n_ctx = 128;
        cpu_opt.n_ubatch = 16;
        tandem::Session cpu(file, spec, cpu_opt);
        cpu.eval(tokens, false, next_ref);
        cpu.eval(std::vector<int32_t>{tokens[1]}, false, next_ref);
        session.eval(std::vector<int32_t>{tokens[1]}, false, next);
        EXPECT_LE(mean_kl(next_ref, next, spec.hp.n_vocab), 1e-4);
        if (exact) {
            EXPECT_EQ(next, next_ref);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(CudaBackend, EveryNgl,
                         ::testing::Values("tiny-llama-Q4_K_M.gguf", "tiny-llama-F16.gguf", "tiny-llama-Q8_0.gguf",
                                           "tiny-llama-b-Q4_K_M.gguf", "synth-qwen2-Q8_0.gguf", "synth-qwen3-Q8_0.gguf",
                                           "synth-qwen3moe-Q8_0.gguf", "synth-phi3-Q8_0.gguf", "synth-gemma2-Q8_0.gguf",
                                           "synth-mixtral-Q8_0.gguf", "synth-glm4moe-Q8_0.gguf",
                                           "synth-gpt-oss-Q8_0.gguf", "synth-deepseek2-Q8_0.gguf",
                                           // every i-quant block type, as weights and as token embeddings
                                           "synth-llama-IQ1_S.gguf", "synth-llama-IQ1_M.gguf", "synth-llama-IQ2_XS.gguf",
                                           "synth-llama-IQ2_M.gguf", "synth-llama-IQ3_XXS.gguf",
                                           "synth-llama-IQ4_NL.gguf", "synth-llama-IQ4_XS.gguf"),
                         model_test_name);

// The committed tiny model and a prompt of it.
struct TinyLlama {
    tandem::gguf::File file = tandem::gguf::File::open(tandem::testing::test_data("tiny-llama-Q4_K_M.gguf"));
    tandem::model::ModelSpec spec = tandem::model::load_model_spec(file);
    tandem::Tokenizer tok = tandem::Tokenizer::from_gguf(file);
    std::vector<int32_t> tokens = tok.encode("Once upon a time, there was a little robot who wanted to learn.", true);
};

// A Q8_0 KV cache on the device gives the CPU's Q8_0-cache logits at every
// split (prompt and a decode step that reads the device cache); a device
// too small is a clean out-of-memory.
TEST(CudaBackend, Q8CacheMatchesCpuAndTooSmallVramIsOutOfMemory) {
    TANDEM_REQUIRE_GPU(dev);
    (void)dev;
    const TinyLlama m;
    const auto& [file, spec, tok, tokens] = m;
    tandem::SessionOptions opt;
    opt.n_ctx = 64;
    opt.n_ubatch = 16;
    opt.cache_type = tandem::model::kCacheQ8_0;
    std::vector<float> reference, next_ref;
    {
        tandem::Session cpu(file, spec, opt);
        cpu.eval(tokens, true, reference);
        cpu.eval(std::vector<int32_t>{tokens[1]}, false, next_ref);
    }
    opt.device = "cuda0";
    for (int64_t ngl = 1; ngl <= spec.hp.n_layer + 1; ++ngl) {
        SCOPED_TRACE("ngl " + std::to_string(ngl));
        opt.n_gpu_layers = ngl;
        tandem::Session session(file, spec, opt);
        std::vector<float> logits, next;
        session.eval(tokens, true, logits);
        ASSERT_EQ(logits.size(), reference.size());
        EXPECT_LE(mean_kl(reference, logits, spec.hp.n_vocab), 1e-3);
        session.eval(std::vector<int32_t>{tokens[1]}, false, next);
        EXPECT_LE(mean_kl(next_ref, next, spec.hp.n_vocab), 1e-3);
    }
    opt.cache_type = tandem::model::kCacheF16;
    opt.n_gpu_layers = 2;
    opt.device_capacity = {1024};
    EXPECT_THROW(tandem::Session(file, spec, opt), tandem::OutOfDeviceMemory);
}

// A decode step on the GPU makes the host wait once: for its logits. The
// step's positions, token cells, changed cell positions and input row go
// up from pinned memory with async copies (runtime/engine_cuda/
// cuda_uploads.h). An MoE step waits once more per MoE layer, for the
// router's logits, which the CPU's function routes (as llama.cpp reads its
// expert ids back); the route and the experts' indices go up async. Counted
// by the emulator (emu::host_waits): with the synchronous copies of before,
// a step of tiny-llama's 4 layers waited 21 times (5 a layer: positions
// for two RoPEs and the attention, token cells, cell positions).
class HostWaits : public CudaBackendModel {};

TEST_P(HostWaits, ADecodeStepWaitsForItsLogitsAndItsRoutes) {
    TANDEM_REQUIRE_GPU(dev);
    (void)dev;
    TANDEM_REQUIRE_MODEL(path, GetParam());
    const LoadedModel m(path);
    const auto& [file, spec, tok] = m;
    const auto tokens = tok.encode("Once upon a time, there was a little robot", true);
    tandem::SessionOptions opt;
    opt.n_ctx = 64;
    opt.n_ubatch = 16;
    opt.device = "cuda0";
    opt.n_gpu_layers = spec.hp.n_layer + 1;  // the head too
    tandem::Session session(file, spec, opt);
    if (!session.accelerator_host_waits()) TANDEM_CUDA_SKIP("the device cannot count its waits (not the emulator)");
    int64_t moe_layers = 0;
    for (const auto& layer : spec.layers) moe_layers += layer.has_experts() ? 1 : 0;
    std::vector<float> logits;
    session.eval(tokens, false, logits);
    for (int step = 0; step < 3; ++step) {
        SCOPED_TRACE("decode step " + std::to_string(step));
        const uint64_t before = *session.accelerator_host_waits();
        session.eval(std::vector<int32_t>{tokens[static_cast<size_t>(step) + 1]}, false, logits);
        EXPECT_EQ(*session.accelerator_host_waits() - before, static_cast<uint64_t>(1 + moe_layers))
            << moe_layers << " MoE layers of " << spec.hp.n_layer;
    }
}

INSTANTIATE_TEST_SUITE_P(CudaBackend, HostWaits,
                         ::testing::Values("tiny-llama-Q4_K_M.gguf", "synth-qwen3moe-Q8_0.gguf"), model_test_name);

// Weight streaming on the GPU: a prompt long enough streams the CPU layers'
// matrices to the device (one at a time, double-buffered); the logits stay
// those of the CPU within the kernels' rounding, at every split that
// leaves a layer on the host.
using StreamedPrefill = CudaBackendModel;

TEST_P(StreamedPrefill, MatchesCpu) {
    TANDEM_REQUIRE_GPU(dev);
    (void)dev;
    TANDEM_REQUIRE_MODEL(path, GetParam());
    const LoadedModel m(path);
    const auto& [file, spec, tok] = m;
    const auto tokens = tok.encode("Once upon a time, there was a little robot who wanted to learn to dance.", true);
    tandem::SessionOptions opt;
    opt.n_ctx = 128;
    opt.n_ubatch = 64;
    std::vector<float> reference;
    tandem::Session(file, spec, opt).eval(tokens, true, reference);
    for (int64_t ngl = 0; ngl < spec.hp.n_layer; ++ngl) {
        SCOPED_TRACE("ngl " + std::to_string(ngl));
        opt.device = "cuda0";
        opt.n_gpu_layers = ngl;
        opt.stream_min_batch = 8;
        tandem::Session session(file, spec, opt);
        ASSERT_TRUE(session.weight_stream_active()) << session.weight_stream_note();
        std::vector<float> logits;
        session.eval(tokens, true, logits);
        EXPECT_EQ(session.streamed_batches(), 1);
        ASSERT_EQ(logits.size(), reference.size());
        EXPECT_LE(mean_kl(reference, logits, spec.hp.n_vocab), 1e-3);  // the golden bound
        const auto ledgers = session.ledgers();
        ASSERT_EQ(ledgers.size(), 2u);
        EXPECT_GE(ledgers[1]->used(tandem::MemoryCategory::Compute),
                  tandem::model::stream_bytes(spec, ngl, opt.n_ubatch));
    }
}

INSTANTIATE_TEST_SUITE_P(CudaBackend, StreamedPrefill,
                         ::testing::Values("tiny-llama-Q4_K_M.gguf", "tiny-llama-Q8_0.gguf", "tiny-llama-Q6_K.gguf",
                                           "tiny-llama-b-Q4_K_M.gguf"),
                         model_test_name);

#ifdef TANDEM_CUDA_EMULATED
// cuBLAS failing to start while streaming is turned on (the emulator's
// TANDEM_CUDA_EMULATE_FAIL_CUBLAS) turns streaming off: the session runs
// on the CPU and says why, instead of ending.
TEST(CudaBackend, CublasFailureTurnsStreamingOff) {
    const TinyLlama m;
    const auto& [file, spec, tok, tokens] = m;
    tandem::SessionOptions opt;
    opt.n_ctx = 64;
    opt.n_ubatch = 32;
    std::vector<float> reference, logits;
    tandem::Session(file, spec, opt).eval(tokens, true, reference);
    opt.device = "cuda0";
    opt.n_gpu_layers = 0;
    opt.stream_min_batch = 8;
    setenv("TANDEM_CUDA_EMULATE_FAIL_CUBLAS", "1", 1);
    std::unique_ptr<tandem::Session> session;
    ASSERT_NO_THROW(session = std::make_unique<tandem::Session>(file, spec, opt));
    unsetenv("TANDEM_CUDA_EMULATE_FAIL_CUBLAS");
    EXPECT_FALSE(session->weight_stream_active());
    EXPECT_NE(session->weight_stream_note().find("cuBLAS"), std::string::npos) << session->weight_stream_note();
    session->eval(tokens, true, logits);
    EXPECT_EQ(logits, reference) << "the CPU ran every layer";
}
#endif
