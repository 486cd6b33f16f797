// A prompt's tokens taken in blocks by the shared-KV kernel
// (attention_decode.h: SharedQueries): each K and V row is read and
// unpacked once for all the tokens of a block, each token still taking its
// own visible cells in order. Every query's output must be the scalar
// per-head loop's, bit for bit: every cache type and mixed pairs, token
// counts that do and do not fill the blocks, causal diagonals inside a
// tile, sliding windows that hide some of a block's cells from some of its
// tokens, rings, and contexts of several 512-cell chunks.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "kernels_cpu/attention.h"
#include "kernels_cpu/attention_decode.h"
#include "kernels_cpu/cpu_info.h"
#include "runtime/engine/kv_cache.h"
#include "runtime/model/model_spec.h"
#include "tests/test_cuda_inputs.h"

namespace tc = tandem::cpu;
namespace td = tandem::cpu::detail;
namespace tq = tandem::quant;
namespace tmod = tandem::model;

namespace {

using tandem::testing::random_floats;

struct BlockCase {
    int64_t n_head, n_head_kv, n_cells, last, n_tokens, window;
    float softcap = 0.0f;
    int64_t head_dim = 64;
};

std::string case_name(const tmod::CacheType& type, const BlockCase& c) {
    return tmod::cache_type_name(type) + ", " + std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) +
           " heads, " + std::to_string(c.n_cells) + " cells to position " + std::to_string(c.last) + ", " +
           std::to_string(c.n_tokens) + " tokens, window " + std::to_string(c.window) + ", softcap " +
           std::to_string(c.softcap) + ", head " + std::to_string(c.head_dim);
}

// Positions up to last in a cache of n_cells (a ring past it), the last
// n_tokens of them the queries'; key scales that vary by position, so that
// later tiles and chunks bring new maxima.
void expect_blocks_match_scalar(const tmod::CacheType& type, const BlockCase& c, uint32_t seed) {
    const int64_t head_dim = c.head_dim, k_dim = c.n_head_kv * head_dim;
    tandem::LayerKvCache cache(type, c.n_cells, k_dim, k_dim);
    for (int64_t p = std::max<int64_t>(0, c.last + 1 - c.n_cells); p <= c.last; ++p) {
        const float k_scale = 0.5f + static_cast<float>(p % 300) / 150.0f;
        const auto k = random_floats(static_cast<size_t>(k_dim), seed + static_cast<uint32_t>(2 * p), k_scale);
        const auto v = random_floats(static_cast<size_t>(k_dim), seed + static_cast<uint32_t>(2 * p + 1), 2.0f);
        cache.store(static_cast<int32_t>(p), k.data(), v.data());
    }
    const auto q = random_floats(static_cast<size_t>(c.n_tokens * c.n_head * head_dim), seed + 77777, 1.5f);
    std::vector<int32_t> q_pos;
    for (int64_t t = 0; t < c.n_tokens; ++t) q_pos.push_back(static_cast<int32_t>(c.last + 1 - c.n_tokens + t));
    const tc::AttentionShape shape{c.n_head, c.n_head_kv, head_dim, head_dim, c.window, 0.125f, c.softcap};
    std::vector<float> ref(q.size()), out(q.size());
    tc::ThreadPool one(1, false);
    tc::attention(q.data(), q_pos.data(), c.n_tokens, shape, cache.view(), ref.data(), one, tc::SimdLevel::Scalar);
    for (const tc::SimdLevel level : {tc::SimdLevel::Avx2, tc::SimdLevel::Avx512}) {
        if (!tc::simd_level_supported(level)) continue;
        for (const int threads : {1, 2}) {
            tc::ThreadPool pool(threads, false);
            std::fill(out.begin(), out.end(), -1.0f);
            tc::attention(q.data(), q_pos.data(), c.n_tokens, shape, cache.view(), out.data(), pool, level);
            for (size_t i = 0; i < out.size(); ++i) {
                ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(ref[i]))
                    << case_name(type, c) << ", " << tc::simd_level_name(level) << ", " << threads << " threads, output "
                    << i << " (token " << static_cast<int64_t>(i) / (c.n_head * head_dim) << ")";
            }
        }
    }
}

}  // namespace

// Blocks of as many tokens as kMaxBlockQueries holds, halved while the
// tasks are fewer than two a thread; never past the prompt.
TEST(CpuAttention, SharedKvBlocksFillTheQueriesAndKeepTheThreadsBusy) {
    EXPECT_EQ(td::shared_kv_block_tokens(512, 8, 4, 2), td::kMaxBlockQueries / 4);
    EXPECT_EQ(td::shared_kv_block_tokens(512, 8, 16, 2), td::kMaxBlockQueries / 16);
    EXPECT_EQ(td::shared_kv_block_tokens(3, 8, 4, 2), 3);
    EXPECT_EQ(td::shared_kv_block_tokens(1, 8, 4, 2), 1);
    EXPECT_EQ(td::shared_kv_block_tokens(16, 1, 4, 8), 1);  // 16 tasks for 8 threads
    EXPECT_EQ(td::shared_kv_block_tokens(16, 2, 4, 2), 8);
    EXPECT_EQ(td::shared_kv_block_tokens(512, 8, 32, 2), 1);
}

// Each cache type, mixed pairs (one side F16 or neither), and a soft cap.
TEST(CpuAttention, SharedKvTokenBlocksMatchScalarBits) {
    if (tc::best_simd_level() == tc::SimdLevel::Scalar) GTEST_SKIP() << "no AVX2 on this CPU";
    using T = tq::Type;
    const tmod::CacheType types[] = {{T::Q8_0, T::Q8_0}, {T::Q4_0, T::Q4_0},  {T::Q5_1, T::Q5_1},
                                     {T::IQ4_NL, T::IQ4_NL}, {T::BF16, T::BF16}, {T::F32, T::F32},
                                     {T::Q4_1, T::Q5_0}, {T::Q8_0, T::IQ4_NL}, {T::F16, T::F16},
                                     {T::Q8_0, T::F16},  {T::F16, T::Q4_0},  {T::Q5_0, T::Q8_0}};
    // GQA 4 (blocks of 8 tokens), 3 (10) and 1 (32); token counts below,
    // at and past a block, not multiples of it; the diagonal of a 13-token
    // prompt inside one tile; a window narrower than a block (each token's
    // first cell differs), one that hides whole chunks; a ring; Gemma 2's
    // soft cap (2 here, so that it bends these scores).
    const BlockCase cases[] = {
        {8, 2, 1100, 1099, 27, 0},   // three chunks
        {8, 2, 600, 599, 8, 0},
        {12, 4, 300, 299, 13, 0},
        {4, 4, 200, 199, 45, 0},
        {8, 2, 700, 699, 21, 5},     // window inside the block
        {8, 2, 1100, 1099, 9, 600},  // window hides the first chunk
        {8, 2, 512, 900, 11, 0},     // ring of one chunk
        {8, 2, 90, 89, 70, 0},       // more than the tiled kernel's 64 (F16 takes that)
        {8, 2, 600, 599, 1, 0, 2.0f},
        {8, 2, 300, 299, 12, 0, 2.0f},
    };
    uint32_t seed = 1000;
    for (const tmod::CacheType& type : types) {
        for (const BlockCase& c : cases) {
            if (type.k == T::F16 && type.v == T::F16 && c.n_tokens >= 64) continue;  // the tiled kernel's
            expect_blocks_match_scalar(type, c, seed += 11);
            if (HasFatalFailure()) return;
        }
    }
}

// BF16 and F32 keys take the widened tile and several cells' reductions
// together (FloatKeys): heads of 128 and 256 (all in the vector loops), 72
// and 40 (a step of 8 past the last 16, which the per-cell loop takes), one
// token and a block, beside each V side.
TEST(CpuAttention, SharedKvFloatKeysMatchScalarBits) {
    if (tc::best_simd_level() == tc::SimdLevel::Scalar) GTEST_SKIP() << "no AVX2 on this CPU";
    using T = tq::Type;
    const tmod::CacheType types[] = {{T::BF16, T::BF16}, {T::F32, T::F32}, {T::BF16, T::F16}, {T::F32, T::BF16}};
    uint32_t seed = 5000;
    for (const tmod::CacheType& type : types) {
        for (const int64_t head_dim : {128, 256, 72, 40}) {
            for (const int64_t n_tokens : {1, 11}) {
                expect_blocks_match_scalar(type, {8, 2, 300, 299, n_tokens, 0, 0.0f, head_dim}, seed += 13);
                if (HasFatalFailure()) return;
            }
        }
    }
}
