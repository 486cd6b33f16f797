// The math the CUDA kernels share with the host (act_element.h, op_math.h,
// matmul_types.h), compiled for the host and checked against the CPU
// kernels: this runs everywhere, so a GPU session only has to confirm that
// the device compiles the same functions to the same results.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels_cpu/attention.h"
#include "kernels_cpu/f16_accumulate.h"
#include "kernels_cpu/elementwise.h"
#include "kernels_cpu/vec_dot.h"
#include "kernels_cuda/matmul_types.h"
#include "kernels_cuda/op_math.h"
#include "runtime/engine/kv_cache.h"
#include "runtime/quant/act_element.h"
#include "runtime/quant/quant_types.h"

namespace tq = tandem::quant;
namespace el = tandem::quant::element;
namespace cm = tandem::cuda::math;

namespace {

std::vector<float> random_row(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = dist(rng) * (seed % 3 == 0 ? 1e-3f : 3.0f);
    // An all-zero block and exact ties at .5 after scaling exercise the
    // edge paths (amax 0, round half to even).
    for (int j = 0; j < 32; ++j) x[static_cast<size_t>(j)] = 0.0f;
    x[40] = 127.0f;
    x[41] = 0.5f;
    x[42] = -1.5f;
    return x;
}

// The host twin of the device activation quantizer: act_block per block.
template <class Block>
void device_style_quantize(const float* x, void* dst, int64_t n, int qk) {
    auto* out = static_cast<Block*>(dst);
    for (int64_t b = 0; b < n / qk; ++b) el::act_block(x + b * qk, out[b]);
}

}  // namespace

TEST(CudaMathHost, ActivationBlocksMatchCpuQuantizersByteForByte) {
    constexpr int64_t kN = 4 * 256;
    for (uint32_t seed = 1; seed <= 12; ++seed) {
        const auto x = random_row(kN, seed);
        for (const tq::Type a : {tq::Type::Q8_0, tq::Type::Q8_1, tq::Type::Q8_K, tq::Type::F16, tq::Type::BF16,
                                 tq::Type::F32}) {
            SCOPED_TRACE(std::string(tq::traits(a).name) + " seed " + std::to_string(seed));
            const size_t bytes = *tq::row_bytes(a, kN);
            std::vector<uint8_t> cpu(bytes, 0xAB), dev(bytes, 0xCD);
            tandem::cpu::detail::scalar_activation_quantizer(a)(x.data(), cpu.data(), kN);
            switch (a) {
                case tq::Type::Q8_0: device_style_quantize<tq::block_q8_0>(x.data(), dev.data(), kN, 32); break;
                case tq::Type::Q8_1: device_style_quantize<tq::block_q8_1>(x.data(), dev.data(), kN, 32); break;
                case tq::Type::Q8_K: device_style_quantize<tq::block_q8_K>(x.data(), dev.data(), kN, 256); break;
                case tq::Type::F16: device_style_quantize<tq::fp16_bits>(x.data(), dev.data(), kN, 1); break;
                case tq::Type::F32: device_style_quantize<float>(x.data(), dev.data(), kN, 1); break;
                case tq::Type::BF16: {
                    auto* out = reinterpret_cast<tq::bf16_bits*>(dev.data());
                    for (int64_t i = 0; i < kN; ++i) el::act_block_bf16(&x[static_cast<size_t>(i)], out[i]);
                    break;
                }
                default: FAIL();
            }
            ASSERT_EQ(0, std::memcmp(cpu.data(), dev.data(), bytes));
        }
    }
}

TEST(CudaMathHost, MatmulActivationTypesAreTheCpus) {
    int n = 0;
#define CHECK_PAIR(W)                                                                      \
    {                                                                                      \
        tq::Type a = tq::Type::F32;                                                        \
        ASSERT_TRUE(tandem::cuda::matmul_activation_type(tq::Type::W, a));                 \
        EXPECT_EQ(a, tandem::cpu::activation_type(tq::Type::W)) << #W;                     \
        ++n;                                                                               \
    }
    TANDEM_CUDA_MATMUL_TYPES(CHECK_PAIR)
#undef CHECK_PAIR
#define COUNT_DOT(T, name) --n;
    TANDEM_DOT_TYPES(COUNT_DOT)
#undef COUNT_DOT
    EXPECT_EQ(n, 0) << "every CPU weight type needs a CUDA matmul";
}

TEST(CudaMathHost, GluMatchesCpu) {
    auto gate = random_row(4096, 7);
    for (int i = 0; i < 64; ++i) gate[static_cast<size_t>(i)] = -12.0f + 0.4f * static_cast<float>(i);
    const auto up = random_row(4096, 8);
    std::vector<float> cpu(gate.size());
    tandem::cpu::geglu(gate.data(), up.data(), cpu.data(), static_cast<int64_t>(gate.size()));
    for (size_t i = 0; i < gate.size(); ++i) ASSERT_EQ(cm::gelu_f16(gate[i]) * up[i], cpu[i]) << i;
    for (const auto level : {tandem::cpu::SimdLevel::Scalar, tandem::cpu::best_simd_level()}) {
        // 4096 - 7: a tail that takes expf instead of the polynomial.
        const auto n = static_cast<int64_t>(gate.size()) - 7;
        tandem::cpu::swiglu(gate.data(), up.data(), cpu.data(), n, level);
        for (int64_t i = 0; i < n; ++i) {
            ASSERT_EQ(cm::silu_mul(gate[static_cast<size_t>(i)], up[static_cast<size_t>(i)], i, n), cpu[static_cast<size_t>(i)]) << i;
        }
    }
}

// Plain, linearly scaled and YaRN-scaled (gpt-oss's factor 32 from 4096).
TEST(CudaMathHost, RopeAnglesMatchCpu) {
    for (const bool yarn : {false, true}) {
        for (const bool neox : {false, true}) {
            constexpr int64_t kHeads = 3, kDim = 64, kRot = 48;
            std::vector<float> ff(kRot / 2);
            for (size_t i = 0; i < ff.size(); ++i) ff[i] = 1.0f + 0.1f * static_cast<float>(i);
            for (const int64_t pos : {0, 1, 17, 4095, 70000}) {
                auto x = random_row(kHeads * kDim, static_cast<uint32_t>(pos + 3));
                auto ref = x;
                tandem::cpu::RopeParams p;
                p.mode = neox ? tandem::cpu::RopeMode::Neox : tandem::cpu::RopeMode::Norm;
                p.n_rot = kRot;
                p.freq_base = yarn ? 150000.0f : 10000.0f;
                p.freq_scale = yarn ? 1.0f / 32.0f : 0.5f;
                p.freq_factors = ff.data();
                if (yarn) {
                    p.ext_factor = 1.0f;
                    p.attn_factor = 0.9f;
                    tandem::cpu::rope_yarn_corr_dims(kRot, 4096, p.freq_base, 32.0f, 1.0f, p.corr_dims);
                    ASSERT_LT(p.corr_dims[0], p.corr_dims[1]);  // some pairs are blended
                }
                tandem::cpu::rope_heads(ref.data(), kHeads, kDim, pos, p);
                const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(kRot));
                const float mscale = cm::rope_mscale(p.attn_factor, p.ext_factor, p.freq_scale);
                for (int64_t h = 0; h < kHeads; ++h) {
                    for (int64_t i = 0; i < kRot / 2; ++i) {
                        float c = 0.0f, s = 0.0f;
                        cm::rope_cos_sin(pos, i, theta_scale, p.freq_scale, ff.data(), p.ext_factor, p.corr_dims, mscale,
                                         c, s);
                        float* v = x.data() + h * kDim;
                        const int64_t a = neox ? i : 2 * i, b = neox ? i + kRot / 2 : 2 * i + 1;
                        cm::rope_rotate(v[a], v[b], c, s);
                    }
                }
                for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], ref[i]) << "pos " << pos << " element " << i;
            }
        }
    }
}

// gpt-oss's clamped SwiGLU, both clamps included.
TEST(CudaMathHost, SwigluOaiMatchesCpu) {
    std::vector<float> gate = random_row(4096, 11), up = random_row(4096, 12);
    for (size_t i = 0; i < gate.size(); ++i) {
        gate[i] *= 12.0f;
        up[i] *= 12.0f;
    }
    std::vector<float> ref(gate.size());
    tandem::cpu::swiglu_oai(gate.data(), up.data(), ref.data(), static_cast<int64_t>(gate.size()));
    int clamped = 0;
    for (size_t i = 0; i < gate.size(); ++i) {
        ASSERT_EQ(cm::swiglu_oai(gate[i], up[i]), ref[i]) << i;
        clamped += gate[i] > 7.0f || std::fabs(up[i]) > 7.0f;
    }
    EXPECT_GT(clamped, 100);
}

// The per-(token, head) loop of the CUDA attention kernel, run on the host
// with the shared step functions, against the scalar CPU attention (whose
// F16 dot product also sums exact half products in double).
TEST(CudaMathHost, AttentionLoopMatchesCpu) {
    constexpr int64_t kHead = 4, kHeadKv = 2, kDim = 64, kCells = 24, kTokens = 5;
    tandem::LayerKvCache cache(tq::Type::F16, kCells, kHeadKv * kDim, kHeadKv * kDim);
    for (int32_t p = 0; p < 20; ++p) {
        const auto k = random_row(kHeadKv * kDim, 100 + static_cast<uint32_t>(p));
        const auto v = random_row(kHeadKv * kDim, 200 + static_cast<uint32_t>(p));
        cache.store(p, k.data(), v.data());
    }
    const auto q = random_row(kTokens * kHead * kDim, 5);
    const int32_t q_pos[kTokens] = {15, 16, 17, 18, 19};
    tandem::cpu::AttentionShape shape;
    shape.n_head = kHead;
    shape.n_head_kv = kHeadKv;
    shape.head_dim_k = kDim;
    shape.head_dim_v = kDim;
    shape.window = 8;
    shape.scale = 0.125f;
    // Gemma 2 soft-caps the scores (math::attention_score); a cap of 5
    // bends most of these.
    for (const float cap : {0.0f, 5.0f}) {
        shape.softcap = cap;
        std::vector<float> ref(kTokens * kHead * kDim), mine(ref.size());
        tandem::cpu::ThreadPool pool(1, false);
        const auto kv = cache.view();
        tandem::cpu::attention(q.data(), q_pos, kTokens, shape, kv, ref.data(), pool, tandem::cpu::SimdLevel::Scalar);
        for (int64_t t = 0; t < kTokens; ++t) {
            for (int64_t h = 0; h < kHead; ++h) {
                const int64_t g = h / (kHead / kHeadKv);
                std::vector<float> qh(kDim);
                for (int64_t d = 0; d < kDim; ++d) {
                    qh[d] = el::half_to_float(el::float_to_half(q[(t * kHead + h) * kDim + d]));
                }
                std::vector<tq::fp16_bits> acc(kDim, 0);
                float running_max = -std::numeric_limits<float>::infinity(), running_sum = 0.0f;
                for (int64_t c = 0; c < kv.n_cells; ++c) {
                    const int32_t kp = kv.cell_pos[c];
                    if (kp < 0 || kp > q_pos[t] || q_pos[t] - kp >= shape.window) continue;
                    const auto* kh = reinterpret_cast<const tq::fp16_bits*>(kv.k + c * kv.k_row_bytes) + g * kDim;
                    const auto* vh = reinterpret_cast<const tq::fp16_bits*>(kv.v + c * kv.v_row_bytes) + g * kDim;
                    // Q.K in the CPU's order (ggml's); the GPU kernel sums it
                    // in double instead, which this loop does not model.
                    std::vector<tq::fp16_bits> qb(kDim);
                    for (int64_t d = 0; d < kDim; ++d) qb[d] = el::float_to_half(qh[d]);
                    const float qk = tandem::cpu::detail::f16_dot_ggml_scalar(kh, qb.data(), kDim);
                    const float s = cm::attention_score(qk, shape.scale, cap);
                    const bool rescale = s > running_max;
                    const cm::SoftmaxStep st = cm::softmax_step(s, running_max, running_sum);
                    for (int64_t d = 0; d < kDim; ++d) {
                        if (rescale) acc[d] = cm::f16_scale(acc[d], st.ms);
                        acc[d] = cm::f16_mad(acc[d], vh[d], st.vs);
                    }
                }
                for (int64_t d = 0; d < kDim; ++d) {
                    mine[(t * kHead + h) * kDim + d] = el::half_to_float(acc[d]) * (1.0f / running_sum);
                }
            }
        }
        for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(mine[i], ref[i]) << i << " softcap " << cap;
    }
}
