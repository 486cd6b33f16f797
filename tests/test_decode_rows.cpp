// The decode-rows kernels (vec_dot.h DecodeRows): called directly against
// the row kernels they stand in for, and through matmul() against each
// token alone and the scalar reference, bit for bit.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels_cpu/cpu_info.h"
#include "kernels_cpu/kernel_table.h"
#include "kernels_cpu/matmul.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/quant_types.h"
#include "tests/matmul_test_helpers.h"

namespace {

using namespace tandem;
using namespace tandem::testing;
using tandem::cpu::SimdLevel;
using tandem::quant::Type;

// The several-rows kernels called directly, for every type that has them:
// one token over 1..kDecodeRows rows (fn), and 1..kMaxDecodeTokens tokens
// over 1..kDecodeRows rows (multi, and multi_batch where the batch form has
// one), each output the bits of the row kernel it stands in for (the
// single-row kernel; the batch form's for multi_batch), the outputs past
// n_rows and the ldy gaps untouched.
TEST(VecDot, DecodeRowsMatchRowKernels) {
    namespace d = cpu::detail;
    std::mt19937 rng(17);
    const int64_t n = 1024;
    const int kRows = d::kDecodeRows, kTokens = d::kMaxDecodeTokens;
    const int64_t ldy = kRows + 3;
    int checked = 0;
    for (Type t : kWeightTypes) {
        if (block_elems(t) == 1) continue;
        const Type at = cpu::activation_type(t);
        const size_t w_stride = row_size(t, n) + 32;  // rows apart by more than a row
        std::vector<uint8_t> w(w_stride * kRows);
        const auto wq = quantize(t, tandem::testing::random_floats(rng, static_cast<size_t>(kRows * n), 0.05f), kRows, n);
        for (int r = 0; r < kRows; ++r) std::memcpy(w.data() + w_stride * r, wq.data() + row_size(t, n) * r, row_size(t, n));
        std::vector<std::vector<uint8_t>> acts;
        for (int k = 0; k < kTokens; ++k) acts.push_back(quantize(at, tandem::testing::random_floats(rng, static_cast<size_t>(n)), 1, n));
        for (SimdLevel level : simd_levels()) {
            const std::string what = std::string(quant::traits(t).name) + " " + std::string(cpu::simd_level_name(level));
            const d::DotFn single = d::dot_kernel(t, level);
            const d::DotFn batch = d::batch_form(t, level).fn;
            // Each kernel's activations, prepared where it wants them so (at
            // 64-byte boundaries, as matmul puts them), else rows apart by
            // more than a row.
            std::vector<uint8_t> a_bytes;
            const auto prepared = [&](const d::DecodeRows& rows, size_t& stride) {
                stride = rows.prepare != nullptr ? (rows.prepared_bytes(n) + 63) / 64 * 64 : row_size(at, n) + 8;
                a_bytes.assign(stride * kTokens + 64, 0);
                uint8_t* out = a_bytes.data() + (64 - reinterpret_cast<uintptr_t>(a_bytes.data()) % 64) % 64;
                for (int k = 0; k < kTokens; ++k) {
                    if (rows.prepare != nullptr) {
                        rows.prepare(acts[k].data(), n, out + stride * k);
                    } else {
                        std::memcpy(out + stride * k, acts[k].data(), acts[k].size());
                    }
                }
                return out;
            };
            const auto want = [&](d::DotFn fn, int r, int k) { return dot_fn(fn, w.data() + w_stride * r, acts[k].data(), n); };
            const d::DecodeRows one = d::decode_rows_kernel(t, level);
            if (one.fn != nullptr) {
                size_t stride = 0;
                const uint8_t* a = prepared(one, stride);
                for (int nr = 1; nr <= kRows; ++nr) {
                    std::vector<float> y(kRows, -1.0f);
                    one.fn(n, w.data(), w_stride, nr, a, y.data());
                    for (int r = 0; r < kRows; ++r) {
                        EXPECT_EQ(y[r], r < nr ? want(single, r, 0) : -1.0f) << what << " fn rows=" << nr << " row " << r;
                    }
                }
                ++checked;
            }
            const d::DecodeRows several = d::decode_rows_kernel(t, level, true);
            for (const auto& [fn, row_fn, name] : {std::tuple{several.multi, single, "multi"}, std::tuple{several.multi_batch, batch, "multi_batch"}}) {
                if (fn == nullptr) continue;
                ASSERT_NE(row_fn, nullptr) << what << " " << name;
                size_t stride = 0;
                const uint8_t* a = prepared(several, stride);
                for (int nt = 1; nt <= kTokens; ++nt) {
                    for (int nr = 1; nr <= kRows; ++nr) {
                        std::vector<float> y(static_cast<size_t>(ldy * kTokens), -1.0f);
                        fn(n, w.data(), w_stride, nr, a, stride, nt, y.data(), ldy);
                        for (int k = 0; k < kTokens; ++k) {
                            for (int r = 0; r < ldy; ++r) {
                                const float got = y[static_cast<size_t>(k * ldy + r)];
                                EXPECT_EQ(got, k < nt && r < nr ? want(row_fn, r, k) : -1.0f)
                                    << what << " " << name << " tokens=" << nt << " rows=" << nr << " token " << k << " row " << r;
                            }
                        }
                    }
                }
                ++checked;
            }
        }
    }
    if (!simd_levels().empty()) {
        EXPECT_GT(checked, 0);
    }
}

// Small batches (a serving step: one token per stream, 2..8 tokens) go
// through the several-rows decode kernels, several tokens at once where a
// type has such a kernel; each token must get exactly (memcmp) the floats
// it gets alone, except the tokens the type's batch form takes in the
// Fastest order (Q4_K and Q2_K from 4 tokens, Q3_K/Q5_K/Q6_K and the
// 256-element i-quants at 8), which must get the batch form's bits (the
// scalar reference's); in the single-token order every token gets its own
// bits. Row counts not multiples of a pass
// (8 or 16 rows), rows shorter and longer than one span of super-blocks,
// and (32-element blocks) rows of whole chunks of 8 blocks and a tail of 3.
TEST(Matmul, SmallBatchesMatchSingleTokenBits) {
    std::mt19937 rng(41);
    for (Type t : {Type::Q4_K, Type::Q6_K, Type::Q8_0, Type::Q4_0, Type::Q4_1, Type::Q5_0, Type::Q5_1, Type::Q2_K,
                   Type::Q3_K, Type::Q5_K, Type::IQ4_NL, Type::MXFP4, Type::IQ2_XXS, Type::IQ2_XS, Type::IQ2_S,
                   Type::IQ3_XXS, Type::IQ3_S, Type::IQ1_S, Type::IQ1_M, Type::IQ4_XS}) {
        for (int64_t n : {768, 9216, 864}) {
            if (n % block_elems(t) != 0) continue;
            for (int64_t n_rows : {5, 13, 77}) {
                const auto wq = quantize(t, tandem::testing::random_floats(rng, static_cast<size_t>(n_rows * n), 0.05f), n_rows, n);
                const cpu::WeightView view{t, wq.data(), n_rows, n, row_size(t, n)};
                const auto x = tandem::testing::random_floats(rng, static_cast<size_t>(24 * n));
                // The batch form's bits (the scalar reference's) by batch
                // size, made on first use.
                std::map<int64_t, std::vector<float>> batch_ref;
                for (int threads : {1, 3}) {
                    cpu::ThreadPool pool(threads, false);
                    for (SimdLevel level : simd_levels()) {
                        // Each token alone.
                        std::vector<float> alone(static_cast<size_t>(24 * n_rows));
                        for (int64_t tok = 0; tok < 24; ++tok) {
                            cpu::matmul(view, x.data() + tok * n, n, 1, alone.data() + tok * n_rows, n_rows, pool, level);
                        }
                        const cpu::detail::BatchForm form = cpu::detail::batch_form(t, level);
                        for (const cpu::MatmulOrder order : {cpu::MatmulOrder::Fastest, cpu::MatmulOrder::SingleToken})
                        for (int64_t n_tokens : {2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 17, 24}) {
                            // The single-token order never takes the batch
                            // form: the same paths as the Fastest order for a
                            // type without one.
                            if (order == cpu::MatmulOrder::SingleToken && form.fn == nullptr) continue;
                            const int64_t batch_end =
                                order == cpu::MatmulOrder::Fastest && form.fn != nullptr && n_tokens >= form.min_tokens
                                    ? n_tokens - n_tokens % form.group
                                    : 0;
                            std::vector<float> y(static_cast<size_t>(n_tokens * n_rows), -5.0f);
                            cpu::matmul(view, x.data(), n, n_tokens, y.data(), n_rows, pool, level, order);
                            std::vector<float>& ref = batch_ref[n_tokens];
                            if (batch_end > 0 && ref.empty()) {
                                ref.assign(y.size(), -6.0f);
                                cpu::matmul(view, x.data(), n, n_tokens, ref.data(), n_rows, pool, SimdLevel::Scalar);
                            }
                            for (int64_t tok = 0; tok < n_tokens; ++tok) {
                                const float* want = tok < batch_end ? ref.data() + tok * n_rows : alone.data() + tok * n_rows;
                                EXPECT_EQ(std::memcmp(y.data() + tok * n_rows, want, static_cast<size_t>(n_rows) * sizeof(float)), 0)
                                    << quant::traits(t).name << " n=" << n << " rows=" << n_rows << " tokens=" << n_tokens
                                    << " token " << tok << (tok < batch_end ? " (batch form)" : "") << " threads=" << threads
                                    << " level=" << cpu::simd_level_name(level)
                                    << (order == cpu::MatmulOrder::SingleToken ? " single-token order" : "");
                            }
                        }
                    }
                }
            }
        }
    }
}

// The several-rows decode kernels (Q4_K four rows a pass at AVX2, eight at
// AVX-512 as Q2_K and Q4_0, eight for Q4_0/IQ4_NL/MXFP4 and
// Q4_1/Q5_0/Q5_1/Q8_0 at AVX2, one after another for
// Q3_K, Q5_K, Q6_K and the 256-element i-quants; prepared activation,
// spans of 128 to 256 blocks) against the scalar single-row
// kernels, bit for bit: rows that are not a multiple of the pass, rows made
// of a tail only, of whole chunks and a tail, and longer than one span.
TEST(Matmul, DecodeRowsKernelsMatchSingleRowBits) {
    std::mt19937 rng(21);
    for (Type t : {Type::Q4_0, Type::Q4_1, Type::Q5_0, Type::Q5_1, Type::Q8_0, Type::Q4_K, Type::Q2_K, Type::Q3_K, Type::Q5_K, Type::Q6_K,
                   Type::IQ4_NL, Type::MXFP4, Type::IQ2_XXS, Type::IQ2_XS, Type::IQ2_S, Type::IQ3_XXS, Type::IQ3_S,
                   Type::IQ1_S, Type::IQ1_M, Type::IQ4_XS}) {
        for (int64_t n : {224, 640, 2048, 8544, 11264, 34816}) {
            if (n % quant::traits(t).block_elems != 0) continue;
            for (int64_t n_rows : {1, 5, 8, 13, 16, 40}) {
                const auto wq = quantize(t, tandem::testing::random_floats(rng, static_cast<size_t>(n_rows * n), 0.05f), n_rows, n);
                const cpu::WeightView view{t, wq.data(), n_rows, n, row_size(t, n)};
                const auto x = tandem::testing::random_floats(rng, static_cast<size_t>(n));
                cpu::ThreadPool pool(2, false);
                std::vector<float> ref(static_cast<size_t>(n_rows)), y(ref.size());
                cpu::matmul(view, x.data(), n, 1, ref.data(), n_rows, pool, SimdLevel::Scalar);
                for (SimdLevel level : simd_levels()) {
                    cpu::matmul(view, x.data(), n, 1, y.data(), n_rows, pool, level);
                    EXPECT_EQ(y, ref) << quant::traits(t).name << " n=" << n << " rows=" << n_rows
                                      << " level=" << cpu::simd_level_name(level);
                }
            }
        }
    }
}

}  // namespace
