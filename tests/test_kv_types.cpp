// Every KV cache type llama.cpp offers (f32, f16, bf16, q8_0, q4_0, q4_1,
// iq4_nl, q5_0, q5_1), K and V chosen apart, and the Walsh-Hadamard
// rotation a quantized cache stores through (model::KvRotation):
//   - the transform is the orthonormal H_n, its own inverse;
//   - which types and head sizes rotate;
//   - attention over every type pair is the definition's, within the
//     roundings of its sums, and every SIMD level gives the scalar bits;
//   - rotating Q, K and V and turning the output back changes nothing but
//     roundings.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels_cpu/attention.h"
#include "kernels_cpu/matmul.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/engine/kv_cache.h"
#include "runtime/model/model_spec.h"
#include "runtime/quant/hadamard.h"
#include "tests/kv_type_inputs.h"
#include "tests/test_cuda_inputs.h"

namespace tc = tandem::cpu;
namespace tq = tandem::quant;
namespace tmod = tandem::model;

namespace {

using tandem::testing::random_floats;

// H_n from its recursion, in double.
std::vector<double> hadamard_matrix(int64_t n) {
    std::vector<double> h{1.0};
    for (int64_t m = 1; m < n; m *= 2) {
        std::vector<double> next(static_cast<size_t>(4 * m * m));
        for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < m; ++j) {
                const double v = h[static_cast<size_t>(i * m + j)] / std::sqrt(2.0);
                next[static_cast<size_t>(i * 2 * m + j)] = v;
                next[static_cast<size_t>(i * 2 * m + j + m)] = v;
                next[static_cast<size_t>((i + m) * 2 * m + j)] = v;
                next[static_cast<size_t>((i + m) * 2 * m + j + m)] = -v;
            }
        }
        h = std::move(next);
    }
    return h;
}

}  // namespace

TEST(KvRotation, HadamardBlockIsTheOrthonormalMatrix) {
    for (const int64_t n : {1, 2, 64, 128, 256}) {
        const auto h = hadamard_matrix(n);
        auto x = random_floats(static_cast<size_t>(n), static_cast<uint32_t>(n), 3.0f);
        const auto in = x;
        tq::hadamard_block(x.data(), n);
        for (int64_t i = 0; i < n; ++i) {
            double ref = 0.0;
            for (int64_t j = 0; j < n; ++j) ref += h[static_cast<size_t>(i * n + j)] * in[static_cast<size_t>(j)];
            ASSERT_NEAR(x[static_cast<size_t>(i)], ref, 1e-5 * std::sqrt(static_cast<double>(n))) << n << " " << i;
        }
        tq::hadamard_block(x.data(), n);  // H is its own inverse
        for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(x[static_cast<size_t>(i)], in[static_cast<size_t>(i)], 1e-5);
    }
}

TEST(KvRotation, QuantizedTypesRotateWhereTheHeadTakesIt) {
    tmod::HParams hp;
    hp.n_head = 8;
    hp.n_head_kv = 2;
    hp.head_dim_k = hp.head_dim_v = 64;
    const tmod::CacheType q4{tq::Type::Q4_0, tq::Type::Q4_0};
    EXPECT_EQ(tmod::kv_rotation(hp, q4).k, 64);
    EXPECT_EQ(tmod::kv_rotation(hp, q4).v, 64);
    for (const tq::Type t : {tq::Type::F32, tq::Type::F16, tq::Type::BF16}) {
        EXPECT_EQ(tmod::kv_rotation(hp, {t, t}).k, 0) << tq::traits(t).name;
        EXPECT_EQ(tmod::kv_rotation(hp, {t, t}).v, 0) << tq::traits(t).name;
    }
    for (const tq::Type t : {tq::Type::Q8_0, tq::Type::Q4_1, tq::Type::IQ4_NL, tq::Type::Q5_0, tq::Type::Q5_1}) {
        EXPECT_EQ(tmod::kv_rotation(hp, {t, t}).k, 64) << tq::traits(t).name;
    }
    EXPECT_EQ(tmod::kv_rotation(hp, {tq::Type::Q8_0, tq::Type::F16}).v, 0);  // each side by its own type
    EXPECT_EQ(tmod::kv_rotation(hp, {tq::Type::F16, tq::Type::Q8_0}).k, 0);
    hp.head_dim_k = hp.head_dim_v = 128;  // K by the largest power of two dividing the head, V by 64
    EXPECT_EQ(tmod::kv_rotation(hp, q4).k, 128);
    EXPECT_EQ(tmod::kv_rotation(hp, q4).v, 64);
    hp.head_dim_k = hp.head_dim_v = 192;
    EXPECT_EQ(tmod::kv_rotation(hp, q4).k, 64);
    hp.head_dim_k = hp.head_dim_v = 96;  // not a multiple of 64: none
    EXPECT_EQ(tmod::kv_rotation(hp, q4).k, 0);
    EXPECT_EQ(tmod::kv_rotation(hp, q4).v, 0);
    hp.head_dim_k = 64;
    hp.n_lora_kv = 512;  // latent attention: none
    EXPECT_EQ(tmod::kv_rotation(hp, q4).k, 0);
}

TEST(KvRotation, LatentAttentionNeedsOneTypeAndBlocksMustFit) {
    tmod::HParams hp;
    hp.n_head = 8;
    hp.n_head_kv = 2;
    hp.head_dim_k = hp.head_dim_v = 48;
    EXPECT_NO_THROW(tmod::check_cache_type(hp, {tq::Type::F16, tq::Type::F32}));
    try {
        tmod::check_cache_type(hp, {tq::Type::Q4_0, tq::Type::F16});
        FAIL() << "a 48-wide head took q4_0's 32-element blocks";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("multiples of 32"), std::string::npos) << e.what();
    }
    hp.head_dim_k = 64;
    hp.n_lora_kv = 512;
    try {
        tmod::check_cache_type(hp, {tq::Type::Q8_0, tq::Type::F16});
        FAIL() << "MLA took different K and V types";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("latent"), std::string::npos) << e.what();
    }
}

namespace {

using tandem::testing::kv_type_pairs;

struct Filled {
    tandem::LayerKvCache cache;
    std::vector<float> q;
    std::vector<int32_t> q_pos;
    tc::AttentionShape shape;
};

// n_cells cells holding positions [0, n_cells), queries at the last n_tokens.
Filled filled(tmod::CacheType type, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n_cells,
              int64_t n_tokens, uint32_t seed) {
    const int64_t k_dim = n_head_kv * head_dim;
    Filled f{tandem::LayerKvCache(type, n_cells, k_dim, k_dim), {}, {}, {}};
    for (int64_t p = 0; p < n_cells; ++p) {
        const auto k = random_floats(static_cast<size_t>(k_dim), seed + static_cast<uint32_t>(2 * p));
        const auto v = random_floats(static_cast<size_t>(k_dim), seed + static_cast<uint32_t>(2 * p + 1), 2.0f);
        f.cache.store(static_cast<int32_t>(p), k.data(), v.data());
    }
    f.q = random_floats(static_cast<size_t>(n_tokens * n_head * head_dim), seed + 99991, 2.0f);
    for (int64_t t = 0; t < n_tokens; ++t) f.q_pos.push_back(static_cast<int32_t>(n_cells - n_tokens + t));
    f.shape = {n_head, n_head_kv, head_dim, head_dim, 0, 1.0f / std::sqrt(static_cast<float>(head_dim))};
    return f;
}

// The definition in double over the stored V, the scores Q.K as K's
// block dot kernel gives them (the products' own tests check those; here
// the softmax and the sums over V are checked).
std::vector<double> definition(const Filled& f) {
    const tc::AttentionShape& sh = f.shape;
    const tc::KvCacheView kv = f.cache.view();
    const int64_t dk = sh.head_dim_k, dv = sh.head_dim_v, gqa = sh.n_head / sh.n_head_kv;
    const tq::Type q_type = tc::activation_type(kv.k_type);
    std::vector<uint8_t> q_act(*tq::row_bytes(q_type, dk));
    std::vector<float> v(static_cast<size_t>(dv));
    std::vector<double> out(f.q_pos.size() * static_cast<size_t>(sh.n_head * dv));
    for (size_t t = 0; t < f.q_pos.size(); ++t) {
        for (int64_t h = 0; h < sh.n_head; ++h) {
            const int64_t g = h / gqa;
            tc::detail::scalar_activation_quantizer(q_type)(f.q.data() + (static_cast<int64_t>(t) * sh.n_head + h) * dk, q_act.data(), dk);
            std::vector<double> w;
            double top = -INFINITY;
            for (int64_t c = 0; c <= f.q_pos[t]; ++c) {
                const uint8_t* k = kv.k + c * kv.k_row_bytes + g * *tq::row_bytes(kv.k_type, dk);
                w.push_back(static_cast<double>(tc::vec_dot(kv.k_type, k, q_act.data(), dk, tc::SimdLevel::Scalar)) *
                            sh.scale);
                top = std::max(top, w.back());
            }
            double sum = 0.0;
            double* o = out.data() + (t * static_cast<size_t>(sh.n_head) + static_cast<size_t>(h)) * static_cast<size_t>(dv);
            for (size_t c = 0; c < w.size(); ++c) {
                const double e = std::exp(w[c] - top);
                sum += e;
                tq::dequantize_row(kv.v_type, kv.v + c * kv.v_row_bytes + g * *tq::row_bytes(kv.v_type, dv), v.data(), dv);
                for (int64_t d = 0; d < dv; ++d) o[d] += e * v[static_cast<size_t>(d)];
            }
            for (int64_t d = 0; d < dv; ++d) o[d] /= sum;
        }
    }
    return out;
}

}  // namespace

// Each pair against the definition: sums in f32 within 1e-5 of the
// outputs' scale; an F16 V's sums, rounded to fp16 at every cell as
// ggml's are, drift by a few fp16 steps over 90 cells (8 steps, 4.5e-3,
// seen).
TEST(KvTypes, AttentionOfEveryPairIsTheDefinition) {
    uint32_t seed = 10;
    for (const tmod::CacheType type : kv_type_pairs()) {
        SCOPED_TRACE(tmod::cache_type_name(type));
        for (const int64_t n_tokens : {1, 3}) {
            const Filled f = filled(type, 8, 2, 64, 90, n_tokens, seed += 7);
            const auto ref = definition(f);
            const double tol = type.v == tq::Type::F16 ? 1e-2 : 1e-5;
            for (const tc::SimdLevel level : {tc::SimdLevel::Scalar, tc::best_simd_level()}) {
                tc::ThreadPool pool(2, false);
                std::vector<float> out(ref.size());
                tc::attention(f.q.data(), f.q_pos.data(), n_tokens, f.shape, f.cache.view(), out.data(), pool, level);
                for (size_t i = 0; i < out.size(); ++i) {
                    ASSERT_NEAR(out[i], ref[i], tol * std::max(1.0, std::fabs(ref[i])))
                        << tc::simd_level_name(level) << ", " << n_tokens << " queries, output " << i;
                }
            }
        }
    }
}

// Every SIMD level and thread count gives the scalar loop's bits for every
// pair, one query and several, GQA 4 and 1.
TEST(KvTypes, EveryLevelGivesTheScalarBits) {
    uint32_t seed = 300;
    for (const tmod::CacheType type : kv_type_pairs()) {
        for (const auto& [n_head, n_head_kv] : {std::pair<int64_t, int64_t>{8, 2}, {4, 4}}) {
            for (const int64_t n_tokens : {1, 4}) {
                const Filled f = filled(type, n_head, n_head_kv, 64, 70, n_tokens, seed += 5);
                std::vector<float> ref(f.q.size() / 64 * 64), out(ref.size());
                tc::ThreadPool one(1, false);
                tc::attention(f.q.data(), f.q_pos.data(), n_tokens, f.shape, f.cache.view(), ref.data(), one,
                              tc::SimdLevel::Scalar);
                for (const tc::SimdLevel level : {tc::SimdLevel::Avx2, tc::SimdLevel::Avx512}) {
                    if (!tc::simd_level_supported(level)) continue;
                    for (int threads : {1, 2}) {
                        tc::ThreadPool pool(threads, false);
                        std::fill(out.begin(), out.end(), -1.0f);
                        tc::attention(f.q.data(), f.q_pos.data(), n_tokens, f.shape, f.cache.view(), out.data(), pool,
                                      level);
                        for (size_t i = 0; i < out.size(); ++i) {
                            ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(ref[i]))
                                << tmod::cache_type_name(type) << ", " << tc::simd_level_name(level) << ", " << threads
                                << " threads, " << n_head << "/" << n_head_kv << " heads, " << n_tokens
                                << " queries, output " << i;
                        }
                    }
                }
            }
        }
    }
}

// Q and K turned by H_64, V by H_64, the output turned back: over an f32
// cache, the attention of the plain rows within roundings (H orthonormal:
// Q.K and the weighted sum of V are kept).
TEST(KvRotation, RotatedAttentionIsThePlainOne) {
    const int64_t n_head = 8, n_head_kv = 2, dim = 128, n_cells = 40;
    const int64_t k_dim = n_head_kv * dim, q_dim = n_head * dim;
    const tmod::CacheType f32{tq::Type::F32, tq::Type::F32};
    tandem::LayerKvCache plain(f32, n_cells, k_dim, k_dim), turned(f32, n_cells, k_dim, k_dim);
    const auto turn = [](std::vector<float> x, int64_t block) {
        for (size_t i = 0; i < x.size(); i += static_cast<size_t>(block)) tq::hadamard_block(x.data() + i, block);
        return x;
    };
    for (int32_t p = 0; p < n_cells; ++p) {
        const auto k = random_floats(static_cast<size_t>(k_dim), 1000 + 2 * static_cast<uint32_t>(p));
        const auto v = random_floats(static_cast<size_t>(k_dim), 1001 + 2 * static_cast<uint32_t>(p));
        plain.store(p, k.data(), v.data());
        turned.store(p, turn(k, 128).data(), turn(v, 64).data());
    }
    const auto q = random_floats(static_cast<size_t>(q_dim), 77, 2.0f);
    const int32_t pos = n_cells - 1;
    const tc::AttentionShape shape{n_head, n_head_kv, dim, dim, 0, 1.0f / std::sqrt(128.0f)};
    tc::ThreadPool pool(2, false);
    std::vector<float> a(static_cast<size_t>(q_dim)), b(a.size());
    tc::attention(q.data(), &pos, 1, shape, plain.view(), a.data(), pool, tc::best_simd_level());
    const auto q_turned = turn(q, 128);
    tc::attention(q_turned.data(), &pos, 1, shape, turned.view(), b.data(), pool, tc::best_simd_level());
    b = turn(b, 64);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(b[i], a[i], 2e-5) << i;
}
