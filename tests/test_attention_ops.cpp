// The CPU attention kernel and the element-wise ops against plain
// double-precision references written from their definitions, on random
// data: causal masking, sliding windows, GQA head sharing, ring-buffer
// cells, attention sinks, both RoPE styles.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels_cpu/attention.h"
#include "kernels_cpu/attention_decode.h"
#include "kernels_cpu/attention_tiled.h"
#include "kernels_cpu/elementwise.h"
#include "kernels_cpu/expf_lanes.h"
#include "runtime/engine/kv_cache.h"
#include "runtime/quant/fp16.h"

namespace tc = tandem::cpu;
namespace tq = tandem::quant;

namespace {

std::vector<float> random_vector(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

float round_f16(float x) { return tq::fp16_to_fp32(tq::fp32_to_fp16(x)); }

struct AttnCase {
    int64_t n_head, n_head_kv, head_dim, n_cells, n_tokens, first_pos, window;
};

// Writes positions first_pos - (n_cells - n_tokens) .. first_pos + n_tokens - 1
// into a cache of n_cells (a ring when positions exceed n_cells), then
// compares the kernel with a direct computation over the visible positions.
void check_attention(const AttnCase& c, uint32_t seed) {
    const int64_t k_dim = c.n_head_kv * c.head_dim;
    tandem::LayerKvCache cache(tq::Type::F16, c.n_cells, k_dim, k_dim);
    const int64_t oldest = std::max<int64_t>(0, c.first_pos + c.n_tokens - c.n_cells);
    const int64_t last = c.first_pos + c.n_tokens - 1;
    const auto keys = random_vector(static_cast<size_t>((last + 1) * k_dim), seed);
    const auto vals = random_vector(static_cast<size_t>((last + 1) * k_dim), seed + 1);
    for (int64_t p = oldest; p <= last; ++p) {
        cache.store(static_cast<int32_t>(p), keys.data() + p * k_dim, vals.data() + p * k_dim);
    }
    const auto q = random_vector(static_cast<size_t>(c.n_tokens * c.n_head * c.head_dim), seed + 2);
    std::vector<int32_t> q_pos(static_cast<size_t>(c.n_tokens));
    for (int64_t t = 0; t < c.n_tokens; ++t) q_pos[static_cast<size_t>(t)] = static_cast<int32_t>(c.first_pos + t);

    tc::AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, c.head_dim, c.window,
                             1.0f / std::sqrt(static_cast<float>(c.head_dim))};
    std::vector<float> out(static_cast<size_t>(c.n_tokens * c.n_head * c.head_dim));
    tc::ThreadPool pool(2, false);
    tc::attention(q.data(), q_pos.data(), c.n_tokens, shape, cache.view(), out.data(), pool, tc::SimdLevel::Scalar);

    // The reference follows the definition, with the roundings the kernel
    // promises. Below 64 queries (llama.cpp's one-pass path): Q rounded to
    // fp16 and V accumulated in fp16 after each cell (as ggml's CPU flash
    // attention does). From 64 queries (the tiled path): Q in f32, V summed
    // in f32. Scores are exact here (double), so outputs may differ by an
    // fp16 step or two where a score difference flips a rounding; a wrong
    // mask, scale or head mapping is off by far more.
    const bool tiled = c.n_tokens >= tandem::cpu::detail::kTiledAttentionMinTokens;
    const auto round_acc = [&](float x) { return tiled ? x : round_f16(x); };
    const auto round_q = [&](float x) { return tiled ? x : round_f16(x); };
    const int64_t gqa = c.n_head / c.n_head_kv;
    for (int64_t t = 0; t < c.n_tokens; ++t) {
        const int64_t pos = c.first_pos + t;
        for (int64_t h = 0; h < c.n_head; ++h) {
            const int64_t g = h / gqa;
            std::vector<float> acc(static_cast<size_t>(c.head_dim), 0.0f);
            float m = -INFINITY, sum = 0.0f;
            // Cells are visited in storage order, as the kernel does.
            for (int64_t cell = 0; cell < c.n_cells; ++cell) {
                int64_t p = -1;
                for (int64_t cand = oldest; cand <= last; ++cand) {
                    if (cand % c.n_cells == cell) p = cand;
                }
                if (p < 0 || p > pos || (c.window > 0 && pos - p >= c.window)) continue;
                double dot = 0.0;
                for (int64_t d = 0; d < c.head_dim; ++d) {
                    dot += static_cast<double>(round_q(q[static_cast<size_t>((t * c.n_head + h) * c.head_dim + d)])) *
                           round_f16(keys[static_cast<size_t>(p * k_dim + g * c.head_dim + d)]);
                }
                const float sc = static_cast<float>(dot) * shape.scale;
                float ms = 1.0f, vs = 1.0f;
                if (sc > m) {
                    ms = std::exp(m - sc);
                    m = sc;
                    for (auto& a : acc) a = round_acc(a * ms);
                } else {
                    vs = std::exp(sc - m);
                }
                for (int64_t d = 0; d < c.head_dim; ++d) {
                    const float v = round_f16(vals[static_cast<size_t>(p * k_dim + g * c.head_dim + d)]);
                    acc[static_cast<size_t>(d)] = round_acc(std::fma(v, vs, acc[static_cast<size_t>(d)]));
                }
                sum = sum * ms + vs;
            }
            for (int64_t d = 0; d < c.head_dim; ++d) {
                const float o = acc[static_cast<size_t>(d)] / sum;
                const float got = out[static_cast<size_t>((t * c.n_head + h) * c.head_dim + d)];
                ASSERT_NEAR(got, o, 2e-3f * std::max(1.0f, std::fabs(o))) << "token " << t << " head " << h << " dim " << d;
            }
        }
    }
    // Every SIMD level gives the same attention up to score rounding.
    for (tc::SimdLevel level : {tc::SimdLevel::Avx2, tc::SimdLevel::Avx512}) {
        if (!tc::simd_level_supported(level)) continue;
        std::vector<float> simd(out.size());
        tc::attention(q.data(), q_pos.data(), c.n_tokens, shape, cache.view(), simd.data(), pool, level);
        for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(simd[i], out[i], 2e-3f * std::max(1.0f, std::fabs(out[i])));
    }
}

}  // namespace

TEST(CpuAttention, CausalPrefillWithGqa) { check_attention({8, 2, 64, 64, 17, 0, 0}, 1); }

TEST(CpuAttention, DecodeStepAfterHistory) { check_attention({4, 4, 32, 128, 1, 90, 0}, 2); }

TEST(CpuAttention, SlidingWindowOnRingBuffer) {
    // Window 16, micro-batch 8: 24 cells hold positions 36..59 for queries 52..59.
    check_attention({4, 1, 64, 24, 8, 52, 16}, 3);
}

TEST(CpuAttention, TiledPrefillOverHistoryAndWindow) {
    // 64 or more queries take the tiled kernel: 150 queries after 70 cached
    // positions (partial query and cell tiles), then a window on a ring.
    check_attention({8, 2, 64, 256, 150, 70, 0}, 11);
    check_attention({4, 1, 128, 160, 96, 200, 100}, 12);
}

// The one-pass path at every SIMD level this CPU has against the scalar
// per-head loop on the same inputs and threads, bit for bit; `what` names
// the case in a failure.
void expect_simd_matches_scalar_bits(const std::vector<float>& q, const std::vector<int32_t>& q_pos,
                                     const tc::AttentionShape& shape, const tc::KvCacheView& kv, int threads,
                                     const std::string& what) {
    tc::ThreadPool pool(threads, false);
    const auto n_tokens = static_cast<int64_t>(q_pos.size());
    std::vector<float> ref(q.size()), simd(q.size());
    tc::attention(q.data(), q_pos.data(), n_tokens, shape, kv, ref.data(), pool, tc::SimdLevel::Scalar);
    for (tc::SimdLevel level : {tc::SimdLevel::Avx2, tc::SimdLevel::Avx512}) {
        if (!tc::simd_level_supported(level)) continue;
        std::fill(simd.begin(), simd.end(), -1.0f);
        tc::attention(q.data(), q_pos.data(), n_tokens, shape, kv, simd.data(), pool, level);
        for (size_t i = 0; i < ref.size(); ++i) {
            ASSERT_EQ(std::bit_cast<uint32_t>(simd[i]), std::bit_cast<uint32_t>(ref[i]))
                << tc::simd_level_name(level) << ", " << what << ", " << threads << " threads, output " << i;
        }
    }
}

// The one-pass path at a SIMD level takes the query heads of a KV head
// together (attention_decode.h); its output must be the scalar per-head
// loop's, bit for bit, for F16 and Q8_0 caches: GQA factors 1 to 24 (24
// splits into two calls of 12), head sizes with a dot-product tail (80,
// F16 only) and without, windows, ring cells, one and several queries, tiles
// with 16 or more visible cells at every head size (the AVX-512 scores of
// sixteen cells reduced together).
TEST(CpuAttention, SharedKvHeadsMatchPerHeadBits) {
    if (tc::best_simd_level() == tc::SimdLevel::Scalar) GTEST_SKIP() << "no AVX2 on this CPU";
    struct Case {
        int64_t n_head, n_head_kv, head_dim, n_cells, n_tokens, first_pos, window;
    };
    const Case cases[] = {{32, 4, 64, 200, 1, 150, 0},  {8, 8, 128, 64, 3, 40, 0}, {12, 4, 80, 50, 2, 47, 0},
                          {24, 1, 64, 40, 1, 90, 16},   {16, 2, 256, 64, 5, 40, 0}};
    uint32_t seed = 40;
    for (const tq::Type cache_type : {tq::Type::F16, tq::Type::Q8_0})
    for (const Case& c : cases) {
        if (c.head_dim % tq::traits(cache_type).block_elems != 0) continue;
        const int64_t k_dim = c.n_head_kv * c.head_dim;
        tandem::LayerKvCache cache(cache_type, c.n_cells, k_dim, k_dim);
        const int64_t last = c.first_pos + c.n_tokens - 1;
        for (int64_t p = std::max<int64_t>(0, last + 1 - c.n_cells); p <= last; ++p) {
            const auto k = random_vector(static_cast<size_t>(k_dim), seed + static_cast<uint32_t>(2 * p));
            const auto v = random_vector(static_cast<size_t>(k_dim), seed + static_cast<uint32_t>(2 * p + 1), 2.0f);
            cache.store(static_cast<int32_t>(p), k.data(), v.data());
        }
        const auto q = random_vector(static_cast<size_t>(c.n_tokens * c.n_head * c.head_dim), seed++, 3.0f);
        std::vector<int32_t> q_pos(static_cast<size_t>(c.n_tokens));
        for (int64_t t = 0; t < c.n_tokens; ++t) q_pos[static_cast<size_t>(t)] = static_cast<int32_t>(c.first_pos + t);
        const tc::AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, c.head_dim, c.window,
                                       1.0f / std::sqrt(static_cast<float>(c.head_dim))};
        const std::string what = std::string(tq::traits(cache_type).name) + " cache, " + std::to_string(c.n_head) + "/" +
                                 std::to_string(c.n_head_kv) + " heads, dim " + std::to_string(c.head_dim);
        for (int threads : {1, 2}) expect_simd_matches_scalar_bits(q, q_pos, shape, cache.view(), threads, what);
    }
}

// Scores that tie, repeat and jump: keys drawn from three fixed rows (one of
// them zero), so equal scores meet the running maximum mid-tile, new maxima
// come after ties, and whole tiles repeat. The vector paths' softmax steps
// (AVX-512: a prefix maximum over sixteen cells) must keep the scalar
// loop's choices bit for bit.
TEST(CpuAttention, SharedKvHeadsMatchPerHeadBitsWithTiedScores) {
    if (tc::best_simd_level() == tc::SimdLevel::Scalar) GTEST_SKIP() << "no AVX2 on this CPU";
    const int64_t n_head = 8, n_head_kv = 2, head_dim = 64, n_cells = 100;
    const int64_t k_dim = n_head_kv * head_dim;
    const std::vector<float> rows[3] = {random_vector(static_cast<size_t>(k_dim), 7), random_vector(static_cast<size_t>(k_dim), 8),
                                        std::vector<float>(static_cast<size_t>(k_dim), 0.0f)};
    const int pattern[] = {2, 0, 0, 1, 2, 0, 1, 1, 0, 2, 2, 1, 0};
    tandem::LayerKvCache cache(tq::Type::F16, n_cells, k_dim, k_dim);
    for (int64_t p = 0; p < n_cells; ++p) {
        const auto v = random_vector(static_cast<size_t>(k_dim), 100 + static_cast<uint32_t>(p));
        cache.store(static_cast<int32_t>(p), rows[pattern[p % 13]].data(), v.data());
    }
    for (uint32_t seed = 0; seed < 6; ++seed) {
        const auto q = random_vector(static_cast<size_t>(n_head * head_dim), 200 + seed, 2.0f);
        const std::vector<int32_t> pos{static_cast<int32_t>(n_cells - 1 - 7 * seed)};
        const tc::AttentionShape shape{n_head, n_head_kv, head_dim, head_dim, 0, 0.125f};
        expect_simd_matches_scalar_bits(q, pos, shape, cache.view(), 1, "query " + std::to_string(seed));
    }
}

// A serving step: one query per stream, each against its own sequence's
// cells (streams of different lengths in one cache of four regions), in
// one call. Each output must be what attention() gives that query alone
// against its stream's view, bit for bit, at every level, with 1 and 2
// threads, for F16 and Q8_0 caches and GQA factors 3 (SmolLM2) and 4.
TEST(CpuAttention, PerTokenViewsMatchOneCallPerStream) {
    struct Case {
        int64_t n_head, n_head_kv, head_dim;
    };
    const int64_t n_streams = 4, n_cells = 4 * 64;
    for (const tq::Type cache_type : {tq::Type::F16, tq::Type::Q8_0})
    for (const Case& c : {Case{9, 3, 64}, Case{8, 2, 32}}) {
        const int64_t k_dim = c.n_head_kv * c.head_dim;
        tandem::LayerKvCache cache(cache_type, n_cells, k_dim, k_dim, 0, n_streams);
        std::vector<int32_t> pos(static_cast<size_t>(n_streams));
        uint32_t seed = 500;
        for (int32_t s = 0; s < n_streams; ++s) {
            const int32_t len = 5 + 13 * s;  // 5, 18, 31, 44 cells
            for (int32_t p = 0; p < len; ++p) {
                const auto k = random_vector(static_cast<size_t>(k_dim), seed++);
                const auto v = random_vector(static_cast<size_t>(k_dim), seed++, 2.0f);
                cache.store(s, p, k.data(), v.data());
            }
            pos[static_cast<size_t>(s)] = len - 1;
        }
        std::vector<tc::KvCacheView> views;
        for (int32_t s = 0; s < n_streams; ++s) views.push_back(cache.attention_view(s));
        const int64_t qd = c.n_head * c.head_dim;
        const auto q = random_vector(static_cast<size_t>(n_streams * qd), seed, 3.0f);
        const tc::AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, c.head_dim, 0,
                                       1.0f / std::sqrt(static_cast<float>(c.head_dim))};
        for (tc::SimdLevel level : {tc::SimdLevel::Scalar, tc::SimdLevel::Avx2, tc::SimdLevel::Avx512}) {
            if (!tc::simd_level_supported(level)) continue;
            for (int threads : {1, 2}) {
                tc::ThreadPool pool(threads, false);
                std::vector<float> alone(q.size()), together(q.size(), -1.0f);
                for (int64_t s = 0; s < n_streams; ++s) {
                    tc::attention(q.data() + s * qd, &pos[static_cast<size_t>(s)], 1, shape, views[static_cast<size_t>(s)],
                                  alone.data() + s * qd, pool, level);
                }
                tc::attention_per_token(q.data(), pos.data(), shape, views, together.data(), pool, level);
                for (size_t i = 0; i < q.size(); ++i) {
                    ASSERT_EQ(std::bit_cast<uint32_t>(together[i]), std::bit_cast<uint32_t>(alone[i]))
                        << tq::traits(cache_type).name << " cache, " << c.n_head << "/" << c.n_head_kv << " heads, "
                        << tc::simd_level_name(level) << ", " << threads << " threads, output " << i;
                }
            }
        }
    }
}

namespace {

// A cache of n_cells (a ring once positions pass n_cells) holding the
// positions up to last, and n_tokens queries ending at last.
struct SinkCase {
    tq::Type type;
    int64_t n_head, n_head_kv, head_dim, n_cells, n_tokens, last, window;
};

struct SinkInputs {
    tandem::LayerKvCache cache;
    std::vector<float> q;
    std::vector<int32_t> q_pos;
    tc::AttentionShape shape;
};

SinkInputs sink_inputs(const SinkCase& c, uint32_t seed) {
    const int64_t k_dim = c.n_head_kv * c.head_dim;
    SinkInputs in{tandem::LayerKvCache(c.type, c.n_cells, k_dim, k_dim), {}, {}, {}};
    for (int64_t p = std::max<int64_t>(0, c.last + 1 - c.n_cells); p <= c.last; ++p) {
        const auto k = random_vector(static_cast<size_t>(k_dim), seed + static_cast<uint32_t>(2 * p));
        const auto v = random_vector(static_cast<size_t>(k_dim), seed + static_cast<uint32_t>(2 * p + 1));
        in.cache.store(static_cast<int32_t>(p), k.data(), v.data());
    }
    in.q = random_vector(static_cast<size_t>(c.n_tokens * c.n_head * c.head_dim), seed + 1000);
    for (int64_t t = 0; t < c.n_tokens; ++t) in.q_pos.push_back(static_cast<int32_t>(c.last + 1 - c.n_tokens + t));
    in.shape = {c.n_head, c.n_head_kv, c.head_dim, c.head_dim, c.window, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
    return in;
}

// Attention from its definition in double, sinks in the denominator only:
// out = sum_c e^(s_c) v_c / (sum_c e^(s_c) + e^(sink)) over the visible
// cells, from the cache's stored K and V and the query as the path rounds
// it for Q.K (q_type: F32 on the tiled path, else the cache's partner).
// max_score: the largest visible score (sinks or not).
std::vector<double> reference_with_sinks(const SinkInputs& in, tq::Type q_type, double& max_score) {
    const tc::AttentionShape& sh = in.shape;
    const tc::KvCacheView kv = in.cache.view();
    const int64_t dk = sh.head_dim_k, dv = sh.head_dim_v, gqa = sh.n_head / sh.n_head_kv;
    const auto n_tokens = static_cast<int64_t>(in.q_pos.size());
    std::vector<double> out(static_cast<size_t>(n_tokens * sh.n_head * dv));
    std::vector<uint8_t> q_act(*tq::row_bytes(q_type, dk));
    std::vector<float> qr(static_cast<size_t>(dk)), k(static_cast<size_t>(dk)), v(static_cast<size_t>(dv));
    max_score = -INFINITY;
    for (int64_t t = 0; t < n_tokens; ++t) {
        const int32_t pos = in.q_pos[static_cast<size_t>(t)];
        for (int64_t h = 0; h < sh.n_head; ++h) {
            const int64_t g = h / gqa;
            tc::detail::scalar_activation_quantizer(q_type)(in.q.data() + (t * sh.n_head + h) * dk, q_act.data(), dk);
            tq::dequantize_row(q_type, q_act.data(), qr.data(), dk);
            std::vector<std::pair<double, int64_t>> scores;  // (score, cell)
            for (int64_t c = 0; c < kv.n_cells; ++c) {
                const int32_t kp = kv.cell_pos[c];
                if (kp < 0 || kp > pos || (sh.window > 0 && pos - kp >= sh.window)) continue;
                tq::dequantize_row(kv.k_type, kv.k + c * kv.k_row_bytes + g * *tq::row_bytes(kv.k_type, dk), k.data(), dk);
                double dot = 0.0;
                for (size_t d = 0; d < k.size(); ++d) dot += static_cast<double>(qr[d]) * k[d];
                scores.emplace_back(dot * sh.scale, c);
                max_score = std::max(max_score, dot * sh.scale);
            }
            double denom = sh.sinks ? std::exp(static_cast<double>(sh.sinks[h])) : 0.0;
            double* o = out.data() + (t * sh.n_head + h) * dv;
            for (const auto& [s, c] : scores) {
                const double w = std::exp(s);
                denom += w;
                tq::dequantize_row(kv.v_type, kv.v + c * kv.v_row_bytes + g * *tq::row_bytes(kv.v_type, dv), v.data(), dv);
                for (int64_t d = 0; d < dv; ++d) o[d] += w * v[static_cast<size_t>(d)];
            }
            for (int64_t d = 0; d < dv; ++d) o[d] /= denom;
        }
    }
    return out;
}

// Per-head sinks for gpt-oss: above every score (the sink becomes the
// softmax's maximum and the cells' sums are rescaled) on even heads, inside
// the scores' range on odd ones.
std::vector<float> sinks_for(int64_t n_head, double max_score) {
    std::vector<float> s(static_cast<size_t>(n_head));
    for (size_t h = 0; h < s.size(); ++h) s[h] = h % 2 == 0 ? static_cast<float>(max_score + 1.5) : 0.25f;
    return s;
}

const SinkCase kSinkCases[] = {
    {tq::Type::F16, 8, 2, 64, 96, 1, 120, 0},     // decode on a ring
    {tq::Type::F16, 12, 4, 64, 64, 5, 70, 24},    // a few queries, window, ring
    {tq::Type::Q8_0, 8, 2, 64, 96, 1, 120, 40},   // decode, window
    {tq::Type::Q8_0, 6, 2, 32, 50, 3, 40, 0},
    {tq::Type::F16, 8, 2, 64, 200, 80, 150, 0},   // tiled (64 or more queries)
    {tq::Type::F16, 4, 1, 64, 160, 96, 200, 50},  // tiled, window, ring
    {tq::Type::Q8_0, 4, 2, 64, 128, 70, 100, 30}, // 70 queries on the one-pass path
};

std::string sink_case_name(const SinkCase& c) {
    return std::string(tq::traits(c.type).name) + " cache, " + std::to_string(c.n_head) + "/" +
           std::to_string(c.n_head_kv) + " heads, " + std::to_string(c.n_tokens) + " queries, window " +
           std::to_string(c.window);
}

}  // namespace

// gpt-oss's sinks against the definition: the scalar paths (one-pass and
// tiled) within their roundings. V summed in fp16 (the one-pass path of an
// F16 cache) is off by up to an fp16 step of the sum (1.6e-3 seen); in f32
// by under 1e-6 (5e-7 seen). Without the sinks the outputs are off by
// tenths.
TEST(CpuAttention, SinksJoinTheDenominatorOnly) {
    uint32_t seed = 700;
    for (const SinkCase& c : kSinkCases) {
        SCOPED_TRACE(sink_case_name(c));
        SinkInputs in = sink_inputs(c, seed += 10);
        const bool tiled = c.type == tq::Type::F16 && c.n_tokens >= tandem::cpu::detail::kTiledAttentionMinTokens;
        const tq::Type q_type = tiled ? tq::Type::F32 : tc::activation_type(c.type);
        double max_score = 0.0;
        reference_with_sinks(in, q_type, max_score);
        const auto sinks = sinks_for(c.n_head, max_score);
        in.shape.sinks = sinks.data();
        const auto ref = reference_with_sinks(in, q_type, max_score);
        std::vector<float> out(ref.size());
        tc::ThreadPool pool(2, false);
        tc::attention(in.q.data(), in.q_pos.data(), c.n_tokens, in.shape, in.cache.view(), out.data(), pool,
                      tc::SimdLevel::Scalar);
        const double tol = c.type == tq::Type::F16 && !tiled ? 3e-3 : 2e-6;
        for (size_t i = 0; i < out.size(); ++i) {
            ASSERT_NEAR(out[i], ref[i], tol * std::max(1.0, std::fabs(ref[i]))) << "output " << i;
        }
    }
}

// With sinks, every SIMD level's one-pass and tiled paths give the scalar
// paths' bits (as without).
TEST(CpuAttention, SinksKeepSimdPathsOnScalarBits) {
    if (tc::best_simd_level() == tc::SimdLevel::Scalar) GTEST_SKIP() << "no AVX2 on this CPU";
    uint32_t seed = 800;
    for (const SinkCase& c : kSinkCases) {
        SinkInputs in = sink_inputs(c, seed += 10);
        double max_score = 0.0;
        reference_with_sinks(in, tc::activation_type(c.type), max_score);
        const auto sinks = sinks_for(c.n_head, max_score);
        in.shape.sinks = sinks.data();
        for (int threads : {1, 2}) {
            expect_simd_matches_scalar_bits(in.q, in.q_pos, in.shape, in.cache.view(), threads, sink_case_name(c));
        }
    }
}

TEST(CpuAttention, SharedHeadsPerTaskDividesTheGroup) {
    namespace td = tandem::cpu::detail;
    EXPECT_EQ(td::shared_heads_per_task(8, 4, 2), 8);     // 4 tasks for 2 threads
    EXPECT_EQ(td::shared_heads_per_task(8, 4, 16), 1);    // halved until 32 tasks
    EXPECT_EQ(td::shared_heads_per_task(4, 8, 8), 2);     // 16 tasks
    EXPECT_EQ(td::shared_heads_per_task(24, 1, 1), 12);   // at most kMaxSharedHeads, a divisor
    EXPECT_EQ(td::shared_heads_per_task(7, 1, 1), 7);
    EXPECT_EQ(td::shared_heads_per_task(17, 1, 1), 1);    // prime above the cap: one head per task
    EXPECT_EQ(td::shared_heads_per_task(1, 4, 2), 1);
}

// The tiled kernels' SIMD twins against the scalar loops, bit for bit, for
// every query block size and head sizes with and without vector tails.
TEST(CpuAttention, TiledKernelsMatchScalarBits) {
    namespace td = tandem::cpu::detail;
    const td::TiledAttentionKernels ref = td::tiled_attention_kernels(tc::SimdLevel::Scalar);
    for (tc::SimdLevel level : {tc::SimdLevel::Avx2, tc::SimdLevel::Avx512}) {
        if (!tc::simd_level_supported(level)) continue;
        const td::TiledAttentionKernels simd = td::tiled_attention_kernels(level);
        for (int64_t dim : {64, 128, 80, 72, 8, 576}) {
            const auto kt = random_vector(static_cast<size_t>(dim * td::kAttentionTile), 21);
            const auto v = random_vector(static_cast<size_t>(dim * td::kAttentionTile), 22);
            const auto qv = random_vector(static_cast<size_t>(td::kQueryBlock * dim), 23);
            const auto p = random_vector(static_cast<size_t>(td::kQueryBlock * td::kAttentionTile), 24);
            const auto acc0 = random_vector(static_cast<size_t>(td::kQueryBlock * dim), 25);
            for (int nq = 1; nq <= td::kQueryBlock; ++nq) {
                const float* qs[td::kQueryBlock];
                for (int j = 0; j < nq; ++j) qs[j] = qv.data() + j * dim;
                std::vector<float> s_ref(static_cast<size_t>(td::kQueryBlock * td::kAttentionTile), -1.0f);
                std::vector<float> s_simd = s_ref;
                float max_ref[td::kQueryBlock], max_simd[td::kQueryBlock];
                ref.scores(qs, nq, kt.data(), dim, 0.125f, s_ref.data(), max_ref);
                simd.scores(qs, nq, kt.data(), dim, 0.125f, s_simd.data(), max_simd);
                ASSERT_EQ(0, std::memcmp(s_ref.data(), s_simd.data(), s_ref.size() * sizeof(float)))
                    << tc::simd_level_name(level) << " scores, dim " << dim << ", " << nq << " queries";
                for (int j = 0; j < nq; ++j) {
                    const float* sj = s_ref.data() + j * td::kAttentionTile;
                    ASSERT_EQ(max_ref[j], *std::max_element(sj, sj + td::kAttentionTile));
                    ASSERT_EQ(max_simd[j], max_ref[j]);
                }
                std::vector<float> a_ref = acc0, a_simd = acc0;
                float* r[td::kQueryBlock];
                float* m[td::kQueryBlock];
                for (int j = 0; j < nq; ++j) {
                    r[j] = a_ref.data() + j * dim;
                    m[j] = a_simd.data() + j * dim;
                }
                const float rescale[td::kQueryBlock] = {1.0f, 0.25f, 0.8f, 0.0f};
                ref.accumulate(p.data(), nq, v.data(), dim, rescale, r);
                simd.accumulate(p.data(), nq, v.data(), dim, rescale, m);
                ASSERT_EQ(0, std::memcmp(a_ref.data(), a_simd.data(), a_ref.size() * sizeof(float)))
                    << tc::simd_level_name(level) << " accumulate, dim " << dim << ", " << nq << " queries";
                ASSERT_NE(a_ref, acc0);
            }
            // Keys widened and transposed from f16 rows with a stride (a KV
            // head inside a cache row), full and partial tiles.
            const int64_t row_halves = 3 * dim + 5;
            std::vector<uint16_t> rows(static_cast<size_t>(td::kAttentionTile * row_halves));
            for (size_t i = 0; i < rows.size(); ++i) rows[i] = tq::fp32_to_fp16(static_cast<float>(i % 977) * 0.01f - 4.0f);
            for (int64_t nc : {td::kAttentionTile, int64_t{37}, int64_t{8}, int64_t{1}}) {
                std::vector<float> kt_ref(static_cast<size_t>(dim * td::kAttentionTile), -1.0f), kt_simd(kt_ref.size(), -2.0f);
                const auto* first = reinterpret_cast<const uint8_t*>(rows.data() + dim);  // the second head
                ref.widen_keys(first, static_cast<uint64_t>(row_halves) * 2, nc, dim, kt_ref.data());
                simd.widen_keys(first, static_cast<uint64_t>(row_halves) * 2, nc, dim, kt_simd.data());
                ASSERT_EQ(kt_ref, kt_simd) << tc::simd_level_name(level) << " widen_keys, dim " << dim << ", " << nc << " cells";
                ASSERT_EQ(kt_ref[static_cast<size_t>((dim - 1) * td::kAttentionTile + nc - 1)],
                          tq::fp16_to_fp32(rows[static_cast<size_t>((nc - 1) * row_halves + 2 * dim - 1)]));
                ASSERT_EQ(kt_ref.back(), nc == td::kAttentionTile ? kt_ref.back() : 0.0f);
            }
        }
        // Masks: holes, future cells, a window; the softmax of what is left.
        std::vector<int32_t> cell_pos(static_cast<size_t>(td::kAttentionTile));
        for (int64_t c = 0; c < td::kAttentionTile; ++c) cell_pos[static_cast<size_t>(c)] = c % 7 == 3 ? -1 : static_cast<int32_t>(100 + c);
        auto scores = random_vector(static_cast<size_t>(td::kAttentionTile), 26, 3.0f);
        // exp(s - max) subnormal (the exponent step rounds), and below the
        // polynomial's range (exactly 0).
        scores[5] = -95.0f, scores[12] = -99.5f, scores[20] = -150.0f, scores[22] = -80.0f;
        for (int64_t window : {int64_t{0}, int64_t{20}}) {
            for (int32_t pos : {99, 100, 130, 163, 500}) {
                std::vector<float> s_ref = scores, s_simd = scores;
                const float mx_ref = ref.mask(cell_pos.data(), pos, window, s_ref.data());
                const float mx_simd = simd.mask(cell_pos.data(), pos, window, s_simd.data());
                ASSERT_EQ(s_ref, s_simd) << tc::simd_level_name(level) << " mask, pos " << pos << ", window " << window;
                ASSERT_EQ(mx_ref, mx_simd);
                int visible = 0;
                for (int64_t c = 0; c < td::kAttentionTile; ++c) {
                    const int32_t kp = cell_pos[static_cast<size_t>(c)];
                    const bool vis = kp >= 0 && kp <= pos && (window <= 0 || pos - kp < window);
                    visible += vis;
                    ASSERT_EQ(s_ref[static_cast<size_t>(c)], vis ? scores[static_cast<size_t>(c)] : -INFINITY);
                }
                if (visible == 0) continue;
                std::vector<float> p_ref(s_ref.size()), p_simd(s_ref.size());
                const double sum_ref = ref.softmax(s_ref.data(), mx_ref, p_ref.data());
                const double sum_simd = simd.softmax(s_ref.data(), mx_ref, p_simd.data());
                ASSERT_EQ(p_ref, p_simd) << tc::simd_level_name(level) << " softmax, pos " << pos;
                ASSERT_EQ(sum_ref, sum_simd);
                ASSERT_GE(sum_ref, 1.0);
            }
        }
    }
}

TEST(CpuOps, RmsNormMatchesDefinition) {
    const int64_t n = 640;
    const auto x = random_vector(3 * n, 4);
    const auto w = random_vector(n, 5);
    std::vector<float> y(3 * n);
    tc::rms_norm_rows(x.data(), w.data(), y.data(), n, 3, 1e-6f);
    for (int64_t r = 0; r < 3; ++r) {
        double ss = 0.0;
        for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[r * n + i]) * x[r * n + i];
        const double s = 1.0 / std::sqrt(ss / n + 1e-6);
        for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[r * n + i], x[r * n + i] * s * w[i], 1e-5);
    }
}

// Four rows' square sums side by side (AVX2) against one row at a time,
// bit for bit: row counts around the group of four, widths with and without
// a remainder, with and without a weight, in place.
TEST(CpuOps, RmsNormRowGroupsMatchScalarBits) {
    if (tc::best_simd_level() == tc::SimdLevel::Scalar) GTEST_SKIP() << "no AVX2 on this CPU";
    for (int64_t n : {640, 2050, 7}) {
        for (int64_t n_rows : {1, 3, 4, 5, 8, 9}) {
            const auto x = random_vector(static_cast<size_t>(n * n_rows), static_cast<uint32_t>(n + n_rows), 30.0f);
            const auto w = random_vector(static_cast<size_t>(n), 12);
            for (const float* wp : {w.data(), static_cast<const float*>(nullptr)}) {
                std::vector<float> ref(x.size()), vec = x;
                tc::rms_norm_rows(x.data(), wp, ref.data(), n, n_rows, 1e-5f, tc::SimdLevel::Scalar);
                tc::rms_norm_rows(vec.data(), wp, vec.data(), n, n_rows, 1e-5f, tc::best_simd_level());  // in place
                for (size_t i = 0; i < x.size(); ++i) {
                    ASSERT_EQ(std::bit_cast<uint32_t>(vec[i]), std::bit_cast<uint32_t>(ref[i]))
                        << "n " << n << " rows " << n_rows << " element " << i;
                }
            }
        }
    }
}

TEST(CpuOps, RopeRotatesPairsByPositionAngles) {
    const int64_t head_dim = 64, n_rot = 64, n_heads = 2, pos = 37;
    for (auto mode : {tc::RopeMode::Norm, tc::RopeMode::Neox}) {
        auto x = random_vector(n_heads * head_dim, 6);
        const auto orig = x;
        tc::RopeParams p;
        p.mode = mode;
        p.n_rot = n_rot;
        p.freq_base = 10000.0f;
        tc::rope_heads(x.data(), n_heads, head_dim, pos, p);
        for (int64_t h = 0; h < n_heads; ++h) {
            for (int64_t i = 0; i < n_rot / 2; ++i) {
                const double theta = pos * std::pow(10000.0, -2.0 * i / n_rot);
                const int64_t a = mode == tc::RopeMode::Norm ? 2 * i : i;
                const int64_t b = mode == tc::RopeMode::Norm ? 2 * i + 1 : i + n_rot / 2;
                const double x0 = orig[h * head_dim + a], x1 = orig[h * head_dim + b];
                // float angle accumulation drifts by a few ulps of pos*theta
                ASSERT_NEAR(x[h * head_dim + a], x0 * std::cos(theta) - x1 * std::sin(theta), 2e-4);
                ASSERT_NEAR(x[h * head_dim + b], x0 * std::sin(theta) + x1 * std::cos(theta), 2e-4);
            }
        }
    }
}

// The AVX2 rotation against the scalar one, bit for bit: both modes, pair
// counts with and without a remainder past the vector width (half = 32, 10,
// 3), rotated dimensions fewer than the head's, frequency factors, and
// positions far enough out that the angles are large.
TEST(CpuOps, RopeVectorRotationMatchesScalarBits) {
    if (tc::best_simd_level() == tc::SimdLevel::Scalar) GTEST_SKIP() << "no AVX2 on this CPU";
    std::vector<float> factors(32);
    for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 0.37f * static_cast<float>(i);
    for (auto mode : {tc::RopeMode::Norm, tc::RopeMode::Neox}) {
        for (int64_t n_rot : {64, 20, 6}) {
            for (bool with_factors : {false, true}) {
                for (int64_t pos : {0, 5, 31000}) {
                    const int64_t head_dim = 64, n_heads = 3;
                    const auto x = random_vector(static_cast<size_t>(n_heads * head_dim), static_cast<uint32_t>(9 + n_rot), 4.0f);
                    tc::RopeParams p;
                    p.mode = mode;
                    p.n_rot = n_rot;
                    p.freq_base = 500000.0f;
                    p.freq_scale = 0.25f;
                    p.freq_factors = with_factors ? factors.data() : nullptr;
                    auto ref = x, vec = x;
                    tc::rope_heads(ref.data(), n_heads, head_dim, pos, p, tc::SimdLevel::Scalar);
                    tc::rope_heads(vec.data(), n_heads, head_dim, pos, p, tc::best_simd_level());
                    for (size_t i = 0; i < x.size(); ++i) {
                        ASSERT_EQ(std::bit_cast<uint32_t>(vec[i]), std::bit_cast<uint32_t>(ref[i]))
                            << "mode " << static_cast<int>(mode) << " n_rot " << n_rot << " pos " << pos << " element " << i;
                    }
                    // Dimensions past n_rot are left alone.
                    for (int64_t h = 0; h < n_heads; ++h) {
                        for (int64_t d = n_rot; d < head_dim; ++d) ASSERT_EQ(vec[h * head_dim + d], x[h * head_dim + d]);
                    }
                }
            }
        }
    }
}

TEST(CpuOps, GatedActivationsMatchDefinitions) {
    const auto g = random_vector(1000, 7, 3.0f);
    const auto u = random_vector(1000, 8);
    std::vector<float> out(1000);
    for (const auto level : {tc::SimdLevel::Scalar, tc::best_simd_level()}) {
        // 1000 = 62 * 16 + 8: the last 8 take expf, the rest the polynomial.
        tc::swiglu(g.data(), u.data(), out.data(), 1000, level);
        for (size_t i = 0; i < 1000; ++i) ASSERT_NEAR(out[i], g[i] / (1.0 + std::exp(-g[i])) * u[i], 1e-5);
    }
    tc::geglu(g.data(), u.data(), out.data(), 1000);
    for (size_t i = 0; i < 1000; ++i) {
        const double x = g[i];
        const double gelu = 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
        // Input and GELU value are rounded to fp16 (relative step 2^-11) as
        // ggml's table does; |gelu'| < 1.13 bounds what the input rounding
        // moves.
        const double tol = (1.13 * std::fabs(x) + std::fabs(gelu)) * 1e-3 * std::fabs(u[i]) + 1e-7;
        ASSERT_NEAR(out[i], gelu * u[i], tol) << "x = " << x;
        if (x <= -10.0) {
            EXPECT_EQ(out[i], 0.0f);
        }
    }
    // The rounding itself, pinned: what the fp16 table of ggml holds.
    const float x = 0.7f;
    const float h = round_f16(x);
    const float expect = round_f16(0.5f * h * (1.0f + std::tanh(0.7978845608f * h * (1.0f + 0.044715f * h * h))));
    float one = 1.0f, y = 0.0f;
    tc::geglu(&x, &one, &y, 1);
    EXPECT_EQ(y, expect);
}

// GeGLU reads GELU from a table of every fp16 input: for each fp16 value
// between the +-10 cut-offs (and the cut-offs, beyond them, random floats
// between fp16 steps) the table path must give the formula's two roundings
// computed directly, and the AVX2 twin the scalar bits, tails included.
TEST(CpuOps, GegluTableIsTheFormulaAndAvx2MatchesScalarBits) {
    std::vector<float> g;
    for (uint32_t bits = 0; bits < 0x10000; ++bits) {
        const float v = tq::fp16_to_fp32(static_cast<tq::fp16_bits>(bits));
        if (std::isfinite(v) && std::fabs(v) <= 12.0f) g.push_back(v);
    }
    for (float v : {-10.0f, 10.0f, std::nextafter(-10.0f, 0.0f), std::nextafter(10.0f, 0.0f), -10.001f, 10.001f, -0.0f,
                    1e-30f, -1e-30f, 65519.0f, -65519.0f, 1e6f, -1e6f}) {
        g.push_back(v);
    }
    const auto extra = random_vector(4097, 21, 4.0f);  // between fp16 steps; odd length: a scalar tail
    g.insert(g.end(), extra.begin(), extra.end());
    const auto u = random_vector(g.size(), 22);
    std::vector<float> scalar(g.size()), simd(g.size());
    tc::geglu(g.data(), u.data(), scalar.data(), static_cast<int64_t>(g.size()), tc::SimdLevel::Scalar);
    for (size_t i = 0; i < g.size(); ++i) {
        float gelu = 0.0f;
        if (g[i] >= 10.0f) {
            gelu = g[i];
        } else if (g[i] > -10.0f) {
            const float h = round_f16(g[i]);
            gelu = round_f16(0.5f * h * (1.0f + std::tanh(0.79788456080286535587989211986876f * h * std::fma(0.044715f * h, h, 1.0f))));
        }
        ASSERT_EQ(std::bit_cast<uint32_t>(scalar[i]), std::bit_cast<uint32_t>(gelu * u[i])) << "x = " << g[i];
    }
    if (tc::best_simd_level() == tc::SimdLevel::Scalar) GTEST_SKIP() << "no AVX2 on this CPU";
    tc::geglu(g.data(), u.data(), simd.data(), static_cast<int64_t>(g.size()), tc::best_simd_level());
    for (size_t i = 0; i < g.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(simd[i]), std::bit_cast<uint32_t>(scalar[i])) << "x = " << g[i] << ", index " << i;
    }
}

#if defined(__x86_64__) || defined(_M_X64)
// The softmax steps' vector expfs (AVX2, AVX-512) against the C
// library's, bit for bit: every 4099th float (all signs, magnitudes,
// infinities and NaNs among them) and the edges of the range it computes
// itself (|x| < 88), in blocks whose lengths are not a multiple of its
// lanes. (All 2^32 floats matched when it was written.) It has to agree
// with std::exp here, or the kernels would not use it.
TEST(CpuAttention, VectorExpfIsTheLibraryExpf) {
    namespace td = tandem::cpu::detail;
    std::vector<float> x;
    for (uint64_t b = 0; b < (1ull << 32); b += 4099) x.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
    for (float v : {87.9999f, -87.9999f, 88.0f, -88.0f, -103.9f, -104.0f, 0.0f, -0.0f, 1e-30f, -1e-30f,
                    std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
        x.push_back(v);
    }
    const std::pair<tc::SimdLevel, td::ExpfLanesFn> kernels[] = {{tc::SimdLevel::Avx2, td::expf_lanes_avx2},
                                                                 {tc::SimdLevel::Avx512, td::expf_lanes_avx512}};
    int tested = 0;
    for (const auto& [level, expf_lanes] : kernels) {
        if (!tc::simd_level_supported(level)) continue;
        ++tested;
        ASSERT_TRUE(td::expf_lanes_agree(expf_lanes)) << tc::simd_level_name(level) << ": this C library's expf is not the one reproduced";
        std::vector<float> y(x.size());
        for (size_t i = 0; i < x.size(); i += 37) {
            expf_lanes(x.data() + i, y.data() + i, static_cast<int64_t>(std::min<size_t>(37, x.size() - i)));
        }
        for (size_t i = 0; i < x.size(); ++i) {
            const float ref = std::exp(x[i]);
            if (std::isnan(ref)) {
                EXPECT_TRUE(std::isnan(y[i])) << tc::simd_level_name(level) << ", x = " << x[i];
            } else {
                ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(ref)) << tc::simd_level_name(level) << ", x = " << x[i];
            }
        }
    }
    if (tested == 0) GTEST_SKIP() << "no AVX2 on this CPU";
}
#endif
