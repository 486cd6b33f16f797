// Decode attention over long contexts in fixed cell chunks
// (kernels_cpu/attention_chunks.h): the chunks of one KV head run on
// different threads when the (token, KV head) pairs are too few for the
// pool, and the result is the same bits at every thread count and SIMD
// level, and the definition's value within the cache's roundings.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels_cpu/attention.h"
#include "kernels_cpu/attention_chunks.h"
#include "kernels_cpu/attention_decode.h"
#include "kernels_cpu/cpu_info.h"
#include "runtime/engine/kv_cache.h"
#include "runtime/quant/quant_types.h"

namespace tc = tandem::cpu;
namespace td = tandem::cpu::detail;
namespace tq = tandem::quant;

// test_attention_ops.cpp: every SIMD level against the scalar path, bit for bit.
void expect_simd_matches_scalar_bits(const std::vector<float>& q, const std::vector<int32_t>& q_pos,
                                     const tc::AttentionShape& shape, const tc::KvCacheView& kv, int threads,
                                     const std::string& what);

namespace {

std::vector<float> gaussian(size_t n, uint32_t seed, float scale) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

struct LongCase {
    tq::Type type;
    int64_t n_head, n_head_kv, head_dim, n_cells, n_tokens, last, window;
    bool sinks;
};

struct LongInputs {
    tandem::LayerKvCache cache;
    std::vector<float> q, sinks;
    std::vector<int32_t> q_pos;
    tc::AttentionShape shape;
};

// Positions up to last in a cache of n_cells (a ring past it); keys scaled
// so that the scores spread over several units and later chunks bring new
// maxima.
LongInputs long_inputs(const LongCase& c, uint32_t seed) {
    const int64_t k_dim = c.n_head_kv * c.head_dim;
    LongInputs in{tandem::LayerKvCache(c.type, c.n_cells, k_dim, k_dim), {}, {}, {}, {}};
    for (int64_t p = std::max<int64_t>(0, c.last + 1 - c.n_cells); p <= c.last; ++p) {
        const float k_scale = 0.5f + static_cast<float>(p % 700) / 350.0f;
        const auto k = gaussian(static_cast<size_t>(k_dim), seed + static_cast<uint32_t>(2 * p), k_scale);
        const auto v = gaussian(static_cast<size_t>(k_dim), seed + static_cast<uint32_t>(2 * p + 1), 1.0f);
        in.cache.store(static_cast<int32_t>(p), k.data(), v.data());
    }
    in.q = gaussian(static_cast<size_t>(c.n_tokens * c.n_head * c.head_dim), seed + 99, 1.5f);
    for (int64_t t = 0; t < c.n_tokens; ++t) in.q_pos.push_back(static_cast<int32_t>(c.last + 1 - c.n_tokens + t));
    in.shape = {c.n_head, c.n_head_kv, c.head_dim, c.head_dim, c.window, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
    if (c.sinks) {
        for (int64_t h = 0; h < c.n_head; ++h) in.sinks.push_back(h % 2 == 0 ? 6.0f : -1.0f);
        in.shape.sinks = in.sinks.data();
    }
    return in;
}

std::string case_name(const LongCase& c) {
    return std::string(tq::traits(c.type).name) + " cache, " + std::to_string(c.n_head) + "/" +
           std::to_string(c.n_head_kv) + " heads, " + std::to_string(c.n_cells) + " cells, " +
           std::to_string(c.n_tokens) + " queries, window " + std::to_string(c.window) + (c.sinks ? ", sinks" : "");
}

// Several chunks each: one token on one or two KV heads (the split into
// chunk tasks at 8 threads), a ring, a window that hides the first chunks,
// a chunk-sized tail, sinks.
const LongCase kLongCases[] = {
    {tq::Type::F16, 8, 1, 64, 1300, 1, 1299, 0, false},
    {tq::Type::F16, 4, 2, 128, 1024, 2, 1500, 0, false},   // ring, two queries
    {tq::Type::Q8_0, 8, 2, 64, 1700, 1, 1699, 0, true},
    {tq::Type::Q8_0, 6, 1, 64, 2100, 3, 2099, 900, false},  // window: chunks 0-1 hidden
    {tq::Type::F16, 8, 2, 64, 1536, 1, 1535, 0, true},      // whole chunks only
};

}  // namespace

// The plan: few (token, KV head) pairs for the threads split the chunks,
// enough of them keep a task per pair's heads (the cache read once).
TEST(CpuAttention, FewKvHeadsSplitTheCellsOverTheThreads) {
    // Gemma 3 270M's decode step (1 KV head, 4 query heads) at 4096 cells
    // on 16 threads: 8 chunks, a task per query head and chunk.
    td::SharedKvPlan p = td::shared_kv_plan(1, 1, 4, 8, 16);
    EXPECT_TRUE(p.split_chunks);
    EXPECT_GE(p.tasks, 16);
    // Llama 3's (8 KV heads, GQA 4) on 2 threads: a task per KV head, all chunks.
    p = td::shared_kv_plan(1, 8, 4, 8, 2);
    EXPECT_FALSE(p.split_chunks);
    EXPECT_EQ(p.heads_per_task, 4);
    EXPECT_EQ(p.tasks, 8);
    // On 16 threads the chunks split instead of the query heads: each
    // task still reads its KV head's cells for all 4 heads.
    p = td::shared_kv_plan(1, 8, 4, 8, 16);
    EXPECT_TRUE(p.split_chunks);
    EXPECT_EQ(p.heads_per_task, 4);
    EXPECT_EQ(p.tasks, 64);
    // One chunk: nothing to split.
    p = td::shared_kv_plan(1, 1, 4, 1, 16);
    EXPECT_FALSE(p.split_chunks);
    // Four streams of 8 KV heads fill 16 threads.
    EXPECT_FALSE(td::shared_kv_plan(4, 8, 4, 8, 16).split_chunks);
}

// The merge of one chunk is the single pass's output; of several, the
// softmax over all of them.
TEST(CpuAttention, ChunkMergeIsTheSoftmaxOverAllChunks) {
    const int64_t dv = 3;
    // Chunk 0: M 1, S 2, A (2, 4, 6); chunk 1 empty; chunk 2: M 3, S 1, A (1, 1, 1).
    std::vector<float> parts = {1, 2, 2, 4, 6, -INFINITY, 0, 9, 9, 9, 3, 1, 1, 1, 1};
    float out[3];
    td::merge_chunks(parts.data(), 1, dv, nullptr, out);
    EXPECT_FLOAT_EQ(out[0], 1.0f);
    EXPECT_FLOAT_EQ(out[2], 3.0f);
    td::merge_chunks(parts.data(), 3, dv, nullptr, out);
    const double w0 = std::exp(1.0 - 3.0), s = 2 * w0 + 1;
    EXPECT_NEAR(out[0], (2 * w0 + 1) / s, 1e-6);
    EXPECT_NEAR(out[1], (4 * w0 + 1) / s, 1e-6);
    EXPECT_NEAR(out[2], (6 * w0 + 1) / s, 1e-6);
    // No visible cell anywhere: zeros.
    std::vector<float> empty = {-INFINITY, 0, 5, 5, 5};
    td::merge_chunks(empty.data(), 1, dv, nullptr, out);
    EXPECT_EQ(out[0], 0.0f);
}

// Against the definition in double (softmax over all visible cells, sinks
// in the denominator): the chunked merge is no approximation.
TEST(CpuAttention, LongContextChunksMatchTheDefinition) {
    uint32_t seed = 900;
    for (const LongCase& c : kLongCases) {
        SCOPED_TRACE(case_name(c));
        LongInputs in = long_inputs(c, seed += 17);
        const tc::KvCacheView kv = in.cache.view();
        const tc::AttentionShape& sh = in.shape;
        const int64_t d = c.head_dim, gqa = c.n_head / c.n_head_kv;
        std::vector<float> out(in.q.size());
        tc::ThreadPool pool(2, false);
        tc::attention(in.q.data(), in.q_pos.data(), c.n_tokens, sh, kv, out.data(), pool, tc::best_simd_level());
        std::vector<uint8_t> q_act(*tq::row_bytes(tc::activation_type(c.type), d));
        std::vector<float> qr(static_cast<size_t>(d)), k(static_cast<size_t>(d)), v(static_cast<size_t>(d));
        for (int64_t t = 0; t < c.n_tokens; ++t) {
            const int32_t pos = in.q_pos[static_cast<size_t>(t)];
            for (int64_t h = 0; h < c.n_head; ++h) {
                const int64_t g = h / gqa;
                td::scalar_activation_quantizer(tc::activation_type(c.type))(in.q.data() + (t * c.n_head + h) * d,
                                                                               q_act.data(), d);
                tq::dequantize_row(tc::activation_type(c.type), q_act.data(), qr.data(), d);
                std::vector<double> acc(static_cast<size_t>(d), 0.0);
                double denom = c.sinks ? std::exp(static_cast<double>(in.sinks[static_cast<size_t>(h)])) : 0.0;
                for (int64_t cell = 0; cell < kv.n_cells; ++cell) {
                    const int32_t kp = kv.cell_pos[cell];
                    if (kp < 0 || kp > pos || (c.window > 0 && pos - kp >= c.window)) continue;
                    tq::dequantize_row(c.type, kv.k + cell * kv.k_row_bytes + g * *tq::row_bytes(c.type, d), k.data(), d);
                    tq::dequantize_row(c.type, kv.v + cell * kv.v_row_bytes + g * *tq::row_bytes(c.type, d), v.data(), d);
                    double dot = 0.0;
                    for (int64_t i = 0; i < d; ++i) dot += static_cast<double>(qr[static_cast<size_t>(i)]) * k[static_cast<size_t>(i)];
                    const double w = std::exp(dot * sh.scale);
                    denom += w;
                    for (int64_t i = 0; i < d; ++i) acc[static_cast<size_t>(i)] += w * v[static_cast<size_t>(i)];
                }
                for (int64_t i = 0; i < d; ++i) {
                    const double ref = acc[static_cast<size_t>(i)] / denom;
                    const float got = out[static_cast<size_t>((t * c.n_head + h) * d + i)];
                    // fp16 V sums (an F16 cache) round at every cell: a few
                    // fp16 steps of the sum (4.1e-3 seen); f32 sums under 1e-5. A
                    // chunk merged with a wrong weight is off by tenths.
                    const double tol = c.type == tq::Type::F16 ? 1e-2 : 1e-5;
                    ASSERT_NEAR(got, ref, tol * std::max(1.0, std::fabs(ref))) << "token " << t << " head " << h << " dim " << i;
                }
            }
        }
    }
}

// Split into chunk tasks (8 threads) or not (1 and 2): the same bits, at
// every SIMD level and the scalar path.
TEST(CpuAttention, LongContextChunksGiveTheSameBitsAtEveryThreadCount) {
    uint32_t seed = 1900;
    for (const LongCase& c : kLongCases) {
        LongInputs in = long_inputs(c, seed += 17);
        const std::string what = case_name(c);
        for (int threads : {1, 2, 8}) expect_simd_matches_scalar_bits(in.q, in.q_pos, in.shape, in.cache.view(), threads, what);
        std::vector<float> one(in.q.size()), many(in.q.size());
        for (tc::SimdLevel level : {tc::SimdLevel::Scalar, tc::best_simd_level()}) {
            tc::ThreadPool pool1(1, false), pool8(8, false);
            tc::attention(in.q.data(), in.q_pos.data(), c.n_tokens, in.shape, in.cache.view(), one.data(), pool1, level);
            tc::attention(in.q.data(), in.q_pos.data(), c.n_tokens, in.shape, in.cache.view(), many.data(), pool8, level);
            for (size_t i = 0; i < one.size(); ++i) {
                ASSERT_EQ(std::bit_cast<uint32_t>(one[i]), std::bit_cast<uint32_t>(many[i]))
                    << what << ", " << tc::simd_level_name(level) << ", output " << i;
            }
        }
    }
}
