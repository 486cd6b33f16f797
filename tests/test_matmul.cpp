// CPU matmul kernels: every SIMD level against the scalar reference, and
// matmul() against a float reference built from the reference
// (de)quantizers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels_cpu/blas_matmul.h"
#include "kernels_cpu/cpu_info.h"
#include "kernels_cpu/matmul.h"
#include "kernels_cpu/kernel_table.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/common/error.h"
#include "runtime/quant/fp16.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_types.h"
#include "tests/matmul_test_helpers.h"
#include "tests/random_blocks.h"

namespace {

using namespace tandem;
using namespace tandem::testing;
using tandem::cpu::SimdLevel;
using tandem::quant::Type;

// Row lengths for the vec_dot comparison: the sizes of real models (4096,
// 11008) plus small ones and, for block formats, odd block counts (the
// AVX-512 legacy kernels pair blocks; float kernels have element tails).
std::vector<int64_t> row_lengths(Type t) {
    const int64_t be = block_elems(t);
    if (be == 1) return {1, 7, 15, 17, 33, 100, 4096, 11007};
    if (be == 32) return {32, 64, 96, 224, 4096, 11008};
    return {256, 768, 4096, 11008};
}

std::vector<float> dequantize(Type t, const uint8_t* data, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    quant::dequantize_row(t, data, out.data(), n);
    return out;
}

float dot_at(Type w_type, const void* w, const void* a, int64_t n, SimdLevel level) {
    return cpu::vec_dot(w_type, w, a, n, level);
}

// Every SIMD build of a type's kernel this CPU can run, including the
// AVX-512 build without VNNI that matmul only picks on CPUs lacking VNNI.
struct Variant {
    std::string name;
    cpu::detail::DotFn fn;
};
std::vector<Variant> simd_variants(Type t) {
    const cpu::detail::WeightKernels* row = cpu::detail::weight_kernels(t);
    std::vector<Variant> out;
    if (row == nullptr) return out;
    const cpu::detail::LevelKernels* k = &row->dot;
    if (cpu::simd_level_supported(SimdLevel::Avx2) && k->avx2) out.push_back({"avx2", k->avx2});
    if (cpu::simd_level_supported(SimdLevel::Avx512)) {
        if (k->avx512nv) out.push_back({"avx512-novnni", k->avx512nv});
        if (k->avx512 && cpu::simd_level_supported(SimdLevel::Avx512Vnni)) out.push_back({"avx512", k->avx512});
    }
    return out;
}

// ---- Exact agreement of the integer parts ----------------------------------------------
// Raw random codes and scales, but every float scale (d, dmin, m, the
// activation d) set to 1 and small activation codes: then each kernel's
// float arithmetic only ever sees integers below 2^24, so any correct
// summation order gives exactly the scalar result, and a single wrong code,
// scale or bit position shows up as a mismatch.

template <class B, class F>
void set_fields(void* row, int64_t nb, F f) {
    auto* b = static_cast<B*>(row);
    for (int64_t i = 0; i < nb; ++i) f(b[i]);
}

void unit_weight_scales(Type t, void* row, int64_t n) {
    using namespace tandem::quant;
    const fp16_bits one = fp32_to_fp16(1.0f);
    const int64_t nb = n / block_elems(t);
    switch (t) {
        case Type::Q4_0: set_fields<block_q4_0>(row, nb, [one](block_q4_0& b) { b.d = one; }); break;
        case Type::Q4_1: set_fields<block_q4_1>(row, nb, [one](block_q4_1& b) { b.d = b.m = one; }); break;
        case Type::Q5_0: set_fields<block_q5_0>(row, nb, [one](block_q5_0& b) { b.d = one; }); break;
        case Type::Q5_1: set_fields<block_q5_1>(row, nb, [one](block_q5_1& b) { b.d = b.m = one; }); break;
        case Type::Q8_0: set_fields<block_q8_0>(row, nb, [one](block_q8_0& b) { b.d = one; }); break;
        case Type::Q2_K: set_fields<block_q2_K>(row, nb, [one](block_q2_K& b) { b.d = b.dmin = one; }); break;
        case Type::Q3_K: set_fields<block_q3_K>(row, nb, [one](block_q3_K& b) { b.d = one; }); break;
        case Type::Q4_K: set_fields<block_q4_K>(row, nb, [one](block_q4_K& b) { b.d = b.dmin = one; }); break;
        case Type::Q5_K: set_fields<block_q5_K>(row, nb, [one](block_q5_K& b) { b.d = b.dmin = one; }); break;
        case Type::Q6_K: set_fields<block_q6_K>(row, nb, [one](block_q6_K& b) { b.d = one; }); break;
        default:
            if (!tandem::testing::tested_on_random_codes(t)) FAIL() << "no unit-scale rule for " << quant::traits(t).name;
            for (int64_t b = 0; b < nb; ++b) {
                tandem::testing::set_block_scale(t, static_cast<uint8_t*>(row) + b * quant::traits(t).block_bytes, 1.0f);
            }
    }
}

// A weight row of raw random bytes with unit scales (block formats), or
// small integers (float formats).
std::vector<uint8_t> integer_weight_row(std::mt19937& rng, Type t, int64_t n) {
    std::vector<uint8_t> row(row_size(t, n));
    if (block_elems(t) == 1) {
        std::uniform_int_distribution<int> v(-8, 8);
        std::vector<float> f(static_cast<size_t>(n));
        for (float& x : f) x = static_cast<float>(v(rng));
        quant::quantize_row(t, f.data(), row.data(), n);  // exact for small integers
        return row;
    }
    std::uniform_int_distribution<int> byte(0, 255);
    for (uint8_t& b : row) b = static_cast<uint8_t>(byte(rng));
    unit_weight_scales(t, row.data(), n);
    return row;
}

// Activation codes in [-3, 3] with unit scale and consistent sums.
std::vector<uint8_t> integer_activation_row(std::mt19937& rng, Type a, int64_t n) {
    using namespace tandem::quant;
    std::uniform_int_distribution<int> v(-3, 3);
    std::vector<float> f(static_cast<size_t>(n));
    for (float& x : f) x = static_cast<float>(v(rng));
    std::vector<uint8_t> row(row_size(a, n));
    if (block_elems(a) == 1) {
        quant::quantize_row(a, f.data(), row.data(), n);
        return row;
    }
    const int64_t nb = n / block_elems(a);
    for (int64_t i = 0; i < nb; ++i) {
        if (a == Type::Q8_K) {
            auto& b = reinterpret_cast<block_q8_K*>(row.data())[i];
            b.d = 1.0f;
            for (int j = 0; j < kQK_K; ++j) b.qs[j] = static_cast<int8_t>(f[static_cast<size_t>(i * kQK_K + j)]);
            for (int g = 0; g < kQK_K / 16; ++g) {
                int s = 0;
                for (int j = 0; j < 16; ++j) s += b.qs[16 * g + j];
                b.bsums[g] = static_cast<int16_t>(s);
            }
        } else if (a == Type::Q8_0) {
            auto& b = reinterpret_cast<block_q8_0*>(row.data())[i];
            b.d = fp32_to_fp16(1.0f);
            for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(f[static_cast<size_t>(i * 32 + j)]);
        } else {
            auto& b = reinterpret_cast<block_q8_1*>(row.data())[i];
            b.d = fp32_to_fp16(1.0f);
            int s = 0;
            for (int j = 0; j < 32; ++j) {
                b.qs[j] = static_cast<int8_t>(f[static_cast<size_t>(i * 32 + j)]);
                s += b.qs[j];
            }
            b.s = fp32_to_fp16(static_cast<float>(s));
        }
    }
    return row;
}

TEST(VecDot, IntegerPartsMatchScalarExactly) {
    std::mt19937 rng(42);
    for (Type t : kWeightTypes) {
        const Type a = cpu::activation_type(t);
        for (int64_t n : row_lengths(t)) {
            const auto w = integer_weight_row(rng, t, n);
            const auto x = integer_activation_row(rng, a, n);
            const float ref = dot_at(t, w.data(), x.data(), n, SimdLevel::Scalar);
            for (const Variant& v : simd_variants(t)) {
                EXPECT_EQ(dot_fn(v.fn, w.data(), x.data(), n), ref) << quant::traits(t).name << " n=" << n << " " << v.name;
            }
        }
    }
}

// ---- Realistic data -----------------------------------------------------------------------------

// sum |w_i a_i| over the dequantized rows: the scale of the rounding error
// any summation order can make.
double abs_dot(Type t, const uint8_t* w, Type a, const uint8_t* x, int64_t n) {
    const auto wf = dequantize(t, w, n);
    const auto xf = dequantize(a, x, n);
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += std::fabs(static_cast<double>(wf[i]) * xf[i]);
    return s;
}

TEST(VecDot, SimdMatchesScalarOnQuantizedData) {
    std::mt19937 rng(7);
    for (Type t : kWeightTypes) {
        const Type a = cpu::activation_type(t);
        for (int64_t n : row_lengths(t)) {
            const auto w = quantize(t, random_floats(rng, static_cast<size_t>(n), 0.05f), 1, n);
            const auto x = quantize(a, random_floats(rng, static_cast<size_t>(n)), 1, n);
            const float ref = dot_at(t, w.data(), x.data(), n, SimdLevel::Scalar);
            const double tol = 2e-6 * abs_dot(t, w.data(), a, x.data(), n) + 1e-9;
            for (const Variant& v : simd_variants(t)) {
                EXPECT_NEAR(dot_fn(v.fn, w.data(), x.data(), n), ref, tol) << quant::traits(t).name << " n=" << n << " " << v.name;
            }
        }
    }
}

// A tile of several tokens must give what the kernel gives token by token.
TEST(VecDot, TokenTilesMatchSingleTokens) {
    std::mt19937 rng(11);
    const int64_t n = 512;
    for (Type t : kWeightTypes) {
        const Type a = cpu::activation_type(t);
        const auto w = quantize(t, random_floats(rng, n, 0.05f), 1, n);
        const int nt = cpu::detail::kMaxTileTokens;
        const size_t stride = row_size(a, n) + 8;  // not a multiple of the row
        std::vector<uint8_t> acts(stride * nt);
        for (int i = 0; i < nt; ++i) {
            const auto row = quantize(a, random_floats(rng, n), 1, n);
            std::memcpy(acts.data() + stride * i, row.data(), row.size());
        }
        std::vector<Variant> variants = simd_variants(t);
        variants.push_back({"scalar", cpu::detail::weight_kernels(t)->dot.scalar});
        for (const Variant& v : variants) {
            for (int k = 1; k <= nt; ++k) {
                std::vector<float> y(static_cast<size_t>(3 * k), -1.0f);
                v.fn(n, w.data(), acts.data(), stride, k, y.data(), 3);
                for (int i = 0; i < k; ++i) {
                    const float single = dot_fn(v.fn, w.data(), acts.data() + stride * i, n);
                    EXPECT_EQ(y[static_cast<size_t>(3 * i)], single)
                        << quant::traits(t).name << " tile " << k << " token " << i << " " << v.name;
                    EXPECT_EQ(y[static_cast<size_t>(3 * i + 1)], -1.0f);  // ldy gaps untouched
                }
            }
        }
    }
}

// Batches with 16-bit float weights run on activations widened to f32
// once; the results must be those of the 16-bit kernel, bit for bit.
TEST(VecDot, WideFloatKernelsMatchNarrow) {
    std::mt19937 rng(13);
    for (Type t : {Type::F16, Type::BF16}) {
        for (int64_t n : {7, 64, 203, 4096}) {
            const auto w = quantize(t, random_floats(rng, static_cast<size_t>(n), 0.05f), 1, n);
            const int nt = cpu::detail::kMaxTileTokens;
            const auto x = random_floats(rng, static_cast<size_t>(n * nt));
            const auto narrow = quantize(t, x, nt, n);
            for (SimdLevel level : simd_levels()) {
                const cpu::detail::WideDot wide = cpu::detail::wide_dot_kernel(t, level);
                ASSERT_NE(wide.fn, nullptr) << cpu::simd_level_name(level);
                std::vector<float> widened(static_cast<size_t>(n * nt));
                for (int i = 0; i < nt; ++i) wide.round_row(x.data() + i * n, widened.data() + i * n, n);
                std::vector<float> a(nt), b(nt);
                cpu::detail::dot_kernel(t, level)(n, w.data(), narrow.data(), row_size(t, n), nt, a.data(), 1);
                wide.fn(n, w.data(), widened.data(), static_cast<size_t>(n) * sizeof(float), nt, b.data(), 1);
                EXPECT_EQ(a, b) << quant::traits(t).name << " n=" << n << " " << cpu::simd_level_name(level);
            }
        }
    }
}

// ---- matmul -------------------------------------------------------------------------------------

int64_t matmul_cols(Type t) {
    const int64_t be = block_elems(t);
    if (be == 1) return 203;
    if (be == 32) return 32 * 7;
    return 256 * 3;
}

// Q8_1 stores each block's sum s = d * sum(q) as fp16, and the *_1 formats
// apply their minimum to that stored sum (as ggml does), not to the sum of
// the dequantized values; the reference follows the format.
double q8_1_sum_correction(Type t, const uint8_t* w_row, const std::vector<uint8_t>& act, const float* xf, int64_t n) {
    if (cpu::activation_type(t) != Type::Q8_1) return 0.0;
    const size_t w_block = quant::traits(t).block_bytes;
    double c = 0.0;
    for (int64_t i = 0; i < n / 32; ++i) {
        // block_q4_1 and block_q5_1 both start with the fp16 pair d, m.
        quant::fp16_bits m_bits;
        std::memcpy(&m_bits, w_row + static_cast<size_t>(i) * w_block + 2, 2);
        const auto& a = reinterpret_cast<const quant::block_q8_1*>(act.data())[i];
        double sum = 0.0;
        for (int j = 0; j < 32; ++j) sum += xf[i * 32 + j];
        c += static_cast<double>(quant::fp16_to_fp32(m_bits)) * (quant::fp16_to_fp32(a.s) - sum);
    }
    return c;
}

TEST(Matmul, MatchesFloatReference) {
    std::mt19937 rng(3);
    const int64_t n_rows = 37;  // not a multiple of any chunk size
    for (Type t : kWeightTypes) {
        const Type a = cpu::activation_type(t);
        const int64_t n = matmul_cols(t);
        const auto wq = quantize(t, random_floats(rng, static_cast<size_t>(n_rows * n), 0.05f), n_rows, n);
        std::vector<float> wf(static_cast<size_t>(n_rows * n));
        for (int64_t r = 0; r < n_rows; ++r) {
            quant::dequantize_row(t, wq.data() + r * row_size(t, n), wf.data() + r * n, n);
        }
        const cpu::WeightView view{t, wq.data(), n_rows, n, row_size(t, n)};
        for (int64_t n_tokens : {1, 3, 17, 64}) {
            const int64_t ldx = n + 5, ldy = n_rows + 3;
            const auto x = random_floats(rng, static_cast<size_t>(n_tokens * ldx));
            // What the kernels see of X: each row through its activation format.
            std::vector<float> xf(static_cast<size_t>(n_tokens * n));
            std::vector<std::vector<uint8_t>> xq;
            for (int64_t tok = 0; tok < n_tokens; ++tok) {
                std::vector<float> row(x.begin() + tok * ldx, x.begin() + tok * ldx + n);
                xq.emplace_back(row_size(a, n));
                cpu::detail::scalar_activation_quantizer(a)(row.data(), xq.back().data(), n);
                quant::dequantize_row(a, xq.back().data(), xf.data() + tok * n, n);
            }
            for (SimdLevel level : supported_levels()) {
                for (int threads : {1, 2}) {
                    cpu::ThreadPool pool(threads, false);
                    std::vector<float> y(static_cast<size_t>(n_tokens * ldy), 1234.5f);
                    cpu::matmul(view, x.data(), ldx, n_tokens, y.data(), ldy, pool, level);
                    for (int64_t tok = 0; tok < n_tokens; ++tok) {
                        for (int64_t r = 0; r < ldy; ++r) {
                            const float got = y[static_cast<size_t>(tok * ldy + r)];
                            if (r >= n_rows) {
                                ASSERT_EQ(got, 1234.5f) << "wrote past n_rows";
                                continue;
                            }
                            double ref = 0.0, mag = 0.0;
                            for (int64_t k = 0; k < n; ++k) {
                                const double p = static_cast<double>(wf[r * n + k]) * xf[tok * n + k];
                                ref += p;
                                mag += std::fabs(p);
                            }
                            ref += q8_1_sum_correction(t, wq.data() + r * row_size(t, n), xq[static_cast<size_t>(tok)],
                                                       xf.data() + tok * n, n);
                            ASSERT_NEAR(got, ref, 5e-6 * mag + 1e-7)
                                << quant::traits(t).name << " tokens=" << n_tokens << " row=" << r << " tok=" << tok
                                << " threads=" << threads << " level=" << cpu::simd_level_name(level);
                        }
                    }
                }
            }
        }
    }
}

// Wide rows in a batch: matmul splits the columns into chunks (so a token
// group's activations stay in L1) and adds the partial sums.
TEST(Matmul, ColumnChunkedBatchesMatchReference) {
    std::mt19937 rng(21);
    const int64_t n = 11008, n_rows = 9, n_tokens = 6;
    for (Type t : {Type::F32, Type::F16, Type::Q8_0, Type::Q4_K, Type::Q6_K}) {
        const Type a = cpu::activation_type(t);
        const auto wq = quantize(t, random_floats(rng, static_cast<size_t>(n_rows * n), 0.05f), n_rows, n);
        const cpu::WeightView view{t, wq.data(), n_rows, n, row_size(t, n)};
        const auto x = random_floats(rng, static_cast<size_t>(n_tokens * n));
        for (SimdLevel level : supported_levels()) {
            cpu::ThreadPool pool(2, false);
            std::vector<float> y(static_cast<size_t>(n_tokens * n_rows));
            cpu::matmul(view, x.data(), n, n_tokens, y.data(), n_rows, pool, level);
            for (int64_t tok = 0; tok < n_tokens; ++tok) {
                std::vector<float> row(x.begin() + tok * n, x.begin() + (tok + 1) * n);
                const auto xq = quantize(a, row, 1, n);
                const auto xf = dequantize(a, xq.data(), n);
                for (int64_t r = 0; r < n_rows; ++r) {
                    const auto wf = dequantize(t, wq.data() + r * row_size(t, n), n);
                    double ref = 0.0, mag = 0.0;
                    for (int64_t k = 0; k < n; ++k) {
                        ref += static_cast<double>(wf[k]) * xf[k];
                        mag += std::fabs(static_cast<double>(wf[k]) * xf[k]);
                    }
                    ASSERT_NEAR(y[static_cast<size_t>(tok * n_rows + r)], ref, 5e-6 * mag)
                        << quant::traits(t).name << " " << cpu::simd_level_name(level) << " tok=" << tok << " row=" << r;
                }
            }
        }
    }
}

// Batches (dynamic items) and single tokens (ranges with stealing, 300
// rows: not a whole number of 16-row items).
TEST(Matmul, ResultIndependentOfThreadCount) {
    std::mt19937 rng(5);
    const int64_t n = 1024, n_rows = 300;
    for (int64_t n_tokens : {1, 9}) {
        for (Type t : {Type::Q4_K, Type::Q6_K, Type::Q8_0, Type::F16}) {
            const auto wq = quantize(t, random_floats(rng, static_cast<size_t>(n_rows * n), 0.05f), n_rows, n);
            const cpu::WeightView view{t, wq.data(), n_rows, n, row_size(t, n)};
            const auto x = random_floats(rng, static_cast<size_t>(n_tokens * n));
            cpu::ThreadPool one(1, false);
            std::vector<float> y1(static_cast<size_t>(n_tokens * n_rows));
            cpu::matmul(view, x.data(), n, n_tokens, y1.data(), n_rows, one, cpu::best_simd_level());
            for (int threads : {2, 3, 5}) {
                cpu::ThreadPool pool(threads, false);
                std::vector<float> y(y1.size(), -3.0f);
                cpu::matmul(view, x.data(), n, n_tokens, y.data(), n_rows, pool, cpu::best_simd_level());
                EXPECT_EQ(y1, y) << quant::traits(t).name << " tokens=" << n_tokens << " threads=" << threads;
            }
        }
    }
}

// The types that follow llama.cpp's float order (single rows, rows of
// batches of 4 or 8 and more, their tails) give the same bits at every SIMD
// level, so the golden logits do not depend on the CPU.
TEST(Matmul, LlamaOrderTypesBitIdenticalAcrossLevels) {
    std::mt19937 rng(13);
    const int64_t n = 768, n_rows = 40;
    for (Type t : kWeightTypes) {
        if (!cpu::detail::follows_llama_order(t)) continue;
        const auto wq = quantize(t, random_floats(rng, static_cast<size_t>(n_rows * n), 0.05f), n_rows, n);
        const cpu::WeightView view{t, wq.data(), n_rows, n, row_size(t, n)};
        for (int64_t n_tokens : {1, 3, 5, 8, 21, 37}) {
            const auto x = random_floats(rng, static_cast<size_t>(n_tokens * n));
            cpu::ThreadPool pool(2, false);
            std::vector<float> ref(static_cast<size_t>(n_tokens * n_rows));
            cpu::matmul(view, x.data(), n, n_tokens, ref.data(), n_rows, pool, SimdLevel::Scalar);
            for (SimdLevel level : simd_levels()) {
                std::vector<float> y(ref.size());
                cpu::matmul(view, x.data(), n, n_tokens, y.data(), n_rows, pool, level);
                EXPECT_EQ(y, ref) << quant::traits(t).name << " tokens=" << n_tokens << " level=" << cpu::simd_level_name(level);
            }
        }
    }
}

// The decode kernels' fp16 table: every value by its bits, as the
// reference conversion gives it (NaNs as NaNs), and a few values known by
// heart: 1, -2, the largest finite value, the smallest subnormal, -0, inf.
TEST(F16Table, EveryValueAsTheReferenceConversion) {
    const float* t = cpu::detail::f16_table();
    for (uint32_t i = 0; i < 65536; ++i) {
        const auto h = static_cast<quant::fp16_bits>(i);
        const float want = quant::fp16_to_fp32(h);
        if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(t[i])) << i;
        } else {
            EXPECT_EQ(std::memcmp(&t[i], &want, sizeof(float)), 0) << i;
        }
    }
    EXPECT_EQ(t[0x3C00], 1.0f);
    EXPECT_EQ(t[0xC000], -2.0f);
    EXPECT_EQ(t[0x7BFF], 65504.0f);
    EXPECT_EQ(t[0x0001], std::ldexp(1.0f, -24));
    EXPECT_TRUE(std::signbit(t[0x8000]) && t[0x8000] == 0.0f);
    EXPECT_TRUE(std::isinf(t[0x7C00]));
}

// One input, several matrices (a decode step's Q, K, V): the fused call
// gives each matrix's matmul bits, for sets that share an activation type
// (fused: Q4_K with Q6_K, whose decode kernels differ; Q4_K with Q2_K,
// two preparations; F16 with F16) and sets that do not (run apart). A
// batch (5 tokens: decode rows; 40: panels) quantizes the input once for
// the matrices that read the same bytes (IQ4_XS's panel appends
// magnitudes that Q5_K's does not; IQ4_NL's Q8_0 beside Q5_K's Q8_K).
TEST(Matmul, SharedInputMatchesSeparateProducts) {
    std::mt19937 rng(31);
    const int64_t n = 512;
    const std::vector<std::vector<Type>> sets = {{Type::Q4_K, Type::Q4_K, Type::Q6_K}, {Type::Q4_K, Type::Q2_K, Type::Q4_K},
                                                 {Type::F16, Type::F16},
                                                 {Type::Q4_0, Type::Q8_0},
                                                 {Type::Q4_K, Type::Q4_0},
                                                 {Type::IQ4_XS, Type::Q5_K, Type::IQ4_XS},
                                                 {Type::IQ4_NL, Type::IQ4_NL, Type::Q5_K}};
    for (const auto& set : sets) {
        std::vector<std::vector<uint8_t>> mats;
        std::vector<cpu::WeightView> views;
        for (size_t j = 0; j < set.size(); ++j) {
            const int64_t rows = 40 + 56 * static_cast<int64_t>(j);  // not multiples of a pass
            mats.push_back(quantize(set[j], random_floats(rng, static_cast<size_t>(rows * n), 0.05f), rows, n));
        }
        for (size_t j = 0; j < set.size(); ++j) {
            const int64_t rows = 40 + 56 * static_cast<int64_t>(j);
            views.push_back({set[j], mats[j].data(), rows, n, row_size(set[j], n)});
        }
        for (auto [n_tokens, threads] : {std::pair{1, 2}, std::pair{1, 3}, std::pair{5, 2}, std::pair{40, 2}}) {
            const auto x = random_floats(rng, static_cast<size_t>(n_tokens * n));
            // Own inputs: every other target reads its own rows (a decode
            // step's expert down products), the others the shared ones.
            std::vector<std::vector<float>> own(set.size());
            for (auto& o : own) o = random_floats(rng, static_cast<size_t>(n_tokens * n));
            cpu::ThreadPool pool(threads, false);
            for (const bool own_inputs : {false, true}) {
                const auto input = [&](size_t j) { return own_inputs && j % 2 == 1 ? own[j].data() : x.data(); };
                for (SimdLevel level : simd_levels()) {
                    std::vector<std::vector<float>> fused(set.size()), apart(set.size());
                    std::vector<cpu::MatmulTarget> targets;
                    for (size_t j = 0; j < set.size(); ++j) {
                        fused[j].assign(static_cast<size_t>(n_tokens * views[j].n_rows), -7.0f);
                        apart[j].assign(fused[j].size(), -9.0f);
                        targets.push_back({&views[j], fused[j].data(), input(j) == x.data() ? nullptr : input(j)});
                        cpu::matmul(views[j], input(j), n, n_tokens, apart[j].data(), views[j].n_rows, pool, level);
                    }
                    cpu::matmul_shared_input(targets, x.data(), n_tokens, pool, level);
                    for (size_t j = 0; j < set.size(); ++j) {
                        EXPECT_EQ(fused[j], apart[j]) << quant::traits(set[j]).name << " target " << j
                                                      << " tokens=" << n_tokens << " own inputs=" << own_inputs
                                                      << " level=" << cpu::simd_level_name(level);
                    }
                }
            }
        }
    }
}

TEST(Matmul, RejectsTypesWithoutKernel) {
    cpu::ThreadPool pool(1, false);
    std::vector<uint8_t> w(sizeof(quant::block_q8_K));
    std::vector<float> x(256), y(1);
    const cpu::WeightView view{Type::Q8_K, w.data(), 1, 256, w.size()};
    EXPECT_THROW(cpu::matmul(view, x.data(), 256, 1, y.data(), 1, pool, SimdLevel::Scalar), Error);
    EXPECT_THROW(cpu::activation_type(Type::Q8_1), Error);
}

TEST(Matmul, ActivationTypesFollowGgml) {
    EXPECT_EQ(cpu::activation_type(Type::Q4_0), Type::Q8_0);
    EXPECT_EQ(cpu::activation_type(Type::Q5_0), Type::Q8_0);
    EXPECT_EQ(cpu::activation_type(Type::Q8_0), Type::Q8_0);
    EXPECT_EQ(cpu::activation_type(Type::Q4_1), Type::Q8_1);
    EXPECT_EQ(cpu::activation_type(Type::Q5_1), Type::Q8_1);
    for (Type t : {Type::Q2_K, Type::Q3_K, Type::Q4_K, Type::Q5_K, Type::Q6_K}) {
        EXPECT_EQ(cpu::activation_type(t), Type::Q8_K);
    }
    EXPECT_EQ(cpu::activation_type(Type::F16), Type::F16);
    EXPECT_EQ(cpu::activation_type(Type::BF16), Type::BF16);
    EXPECT_EQ(cpu::activation_type(Type::F32), Type::F32);
}

// The SIMD activation quantizers must write the reference's bytes.
TEST(ActivationQuantizer, MatchesReferenceBytes) {
    std::mt19937 rng(17);
    for (Type a : {Type::Q8_0, Type::Q8_1, Type::Q8_K, Type::F16, Type::BF16}) {
        const int64_t be = std::max<int64_t>(block_elems(a), 1);
        for (int64_t blocks : {1, 3, 16, 43}) {
            const int64_t n = be == 1 ? blocks * 37 : blocks * be;  // float types: odd lengths for the tails
            std::vector<float> x = random_floats(rng, static_cast<size_t>(n));
            // Edge cases: an all-zero first block, equal +-max magnitudes
            // (the reference keeps the first), exact halves after scaling,
            // subnormals and huge values for the 16-bit formats.
            if (n >= 64) {
                std::fill(x.begin(), x.begin() + std::min<int64_t>(n, be == 1 ? 8 : be), 0.0f);
                x[static_cast<size_t>(n - 1)] = -3.0f;
                x[static_cast<size_t>(n - 2)] = 3.0f;
                x[static_cast<size_t>(n - 3)] = 3.0f * 0.5f / 127.0f;
                x[static_cast<size_t>(n - 4)] = 1e-42f;
                x[static_cast<size_t>(n - 5)] = 70000.0f * (be == 1 ? 1.0f : 0.0f);
            }
            std::vector<uint8_t> ref(row_size(a, n)), got(row_size(a, n));
            cpu::detail::scalar_activation_quantizer(a)(x.data(), ref.data(), n);
            for (SimdLevel level : simd_levels()) {
                std::fill(got.begin(), got.end(), 0xAB);
                cpu::detail::activation_quantizer(a, level)(x.data(), got.data(), n);
                EXPECT_EQ(got, ref) << quant::traits(a).name << " n=" << n << " " << cpu::simd_level_name(level);
            }
        }
    }
}

// ---- SimdLevel selection ------------------------------------------------------------------------

class EnvGuard {
public:
    explicit EnvGuard(const char* value) {
        if (const char* old = std::getenv("TANDEM_CPU")) {
            saved_ = old;
            had_ = true;
        }
        if (value) {
            setenv("TANDEM_CPU", value, 1);
        } else {
            unsetenv("TANDEM_CPU");
        }
    }
    ~EnvGuard() {
        if (had_) {
            setenv("TANDEM_CPU", saved_.c_str(), 1);
        } else {
            unsetenv("TANDEM_CPU");
        }
    }

private:
    std::string saved_;
    bool had_ = false;
};

TEST(SimdLevel, EnvironmentOverride) {
    {
        EnvGuard g(nullptr);
        EXPECT_EQ(cpu::simd_level_from_env(), cpu::best_simd_level());
    }
    {
        EnvGuard g("scalar");
        EXPECT_EQ(cpu::simd_level_from_env(), SimdLevel::Scalar);
    }
    {
        EnvGuard g("sse9");
        EXPECT_THROW(cpu::simd_level_from_env(), Error);
    }
    {
        // AVX2 with AVX-VNNI, where the CPU has it.
        EnvGuard g("avxvnni");
        if (cpu::detect_cpu_features().avx_vnni && cpu::simd_level_supported(SimdLevel::Avx2)) {
            EXPECT_EQ(cpu::simd_level_from_env(), SimdLevel::Avx2Vnni);
        } else {
            EXPECT_THROW(cpu::simd_level_from_env(), Error);
        }
    }
    for (SimdLevel l : {SimdLevel::Avx2, SimdLevel::Avx2Vnni, SimdLevel::Avx512, SimdLevel::Avx512Vnni}) {
        EnvGuard g(std::string(cpu::simd_level_name(l)).c_str());
        if (cpu::simd_level_supported(l)) {
            EXPECT_EQ(cpu::simd_level_from_env(), l);
        } else {
            EXPECT_THROW(cpu::simd_level_from_env(), Error);
        }
    }
}

TEST(SimdLevel, BestIsSupportedAndMonotonic) {
    EXPECT_TRUE(cpu::simd_level_supported(SimdLevel::Scalar));
    EXPECT_TRUE(cpu::simd_level_supported(cpu::best_simd_level()));
    if (cpu::simd_level_supported(SimdLevel::Avx512)) {
        EXPECT_TRUE(cpu::simd_level_supported(SimdLevel::Avx2));
    }
    // A VNNI level is its vector level plus VNNI; the best level takes VNNI
    // where the CPU has it.
    EXPECT_EQ(cpu::simd_level_supported(SimdLevel::Avx512Vnni),
              cpu::simd_level_supported(SimdLevel::Avx512) && cpu::detect_cpu_features().avx512_vnni);
    EXPECT_EQ(cpu::simd_level_supported(SimdLevel::Avx2Vnni),
              cpu::simd_level_supported(SimdLevel::Avx2) && cpu::detect_cpu_features().avx_vnni);
    for (SimdLevel l : {SimdLevel::Avx512Vnni, SimdLevel::Avx512, SimdLevel::Avx2Vnni, SimdLevel::Avx2}) {
        if (!cpu::simd_level_supported(l)) continue;
        EXPECT_EQ(cpu::best_simd_level(), l) << cpu::simd_level_name(l);
        break;
    }
}

}  // namespace

// OpenBLAS starts a worker per core at load, which spins ~0.1 s beside the
// pool's threads; blas_matmul.cpp stops them before main. Checked before
// anything here calls sgemm (ctest runs each test in its own process).
TEST(Matmul, OpenBlasWorkersStopBeforeMain) {
    if (!cpu::detail::blas_available()) GTEST_SKIP() << "built without OpenBLAS";
    if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one core: OpenBLAS starts no worker";
    EXPECT_EQ(cpu::detail::blas_threads(), 1);
}

// Prompt batches of float weights go to OpenBLAS where the build links it
// (blas_matmul.h): the products are the kernels' (activations rounded as
// they round them), only the order of the sums differs.
TEST(Matmul, BlasBatchesMatchTheKernelsWithinRounding) {
    if (!cpu::detail::blas_available()) GTEST_SKIP() << "built without OpenBLAS";
    std::mt19937 rng(77);
    const int64_t n = 512, rows = 96;
    cpu::ThreadPool pool(2, false);
    for (const Type t : {Type::F32, Type::F16, Type::BF16}) {
        const int64_t tokens = cpu::detail::blas_min_tokens(t);
        ASSERT_TRUE(cpu::detail::blas_wanted(t, tokens));
        EXPECT_FALSE(cpu::detail::blas_wanted(t, tokens - 1));
        const auto w = quantize(t, random_floats(rng, static_cast<size_t>(rows * n), 0.05f), rows, n);
        const cpu::WeightView view{t, w.data(), rows, n, row_size(t, n)};
        const auto x = random_floats(rng, static_cast<size_t>(tokens * n));
        for (SimdLevel level : simd_levels()) {
            std::vector<float> blas(static_cast<size_t>(tokens * rows)), native(blas.size());
            cpu::matmul(view, x.data(), n, tokens, blas.data(), rows, pool, level);  // dispatches to BLAS
            cpu::detail::native_matmul(view, x.data(), n, tokens, native.data(), rows, pool, level);
            float largest = 0.0f, diff = 0.0f;
            for (size_t i = 0; i < blas.size(); ++i) {
                largest = std::max(largest, std::fabs(native[i]));
                diff = std::max(diff, std::fabs(blas[i] - native[i]));
            }
            EXPECT_GT(largest, 0.0f);
            EXPECT_LE(diff, 1e-5f * largest) << quant::traits(t).name << " level=" << cpu::simd_level_name(level);
        }
    }
}
