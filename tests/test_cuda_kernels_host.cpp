// The CUDA kernels' own arithmetic run on the host (matmul_math.h,
// op_math.h, model/device_layout.h) against the CPU kernels, for what a reading
// of the never-run CUDA path found: the cuBLAS path's activations, the Q8_0
// KV cache's quantizer, the cache arrays' alignment, SwiGLU by rows. (The
// products' arithmetic is the CPU's own, dot_order.h: the emulated
// CudaMatmul tests check the kernels' bits.)
// Each loop over types or shapes reports every case (EXPECT, SCOPED_TRACE).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels_cpu/elementwise.h"
#include "kernels_cpu/matmul.h"
#include "kernels_cpu/thread_pool.h"
#include "kernels_cuda/cuda_kernels.h"
#include "kernels_cuda/matmul_math.h"
#include "kernels_cuda/matmul_types.h"
#include "kernels_cuda/op_math.h"
#include "runtime/model/device_layout.h"
#include "runtime/quant/quant_types.h"
#include "tests/test_cuda_inputs.h"

namespace tq = tandem::quant;
namespace tc = tandem::cpu;
namespace cm = tandem::cuda::math;
namespace el = tandem::quant::element;

namespace {

using tandem::testing::random_floats;

}  // namespace

// The batch path's activations (device_matmul.cpp) are the values the CPU
// multiplies: each block quantized as the CPU's quantizer does, read back.
TEST(CudaKernelsHost, ActivationRoundTripIsTheCpuQuantizerReadBack) {
    constexpr int64_t kN = 4 * 256;
    auto x = random_floats(kN, 5, 3.0f);
    x[3] = 0.0f;
    for (int j = 32; j < 64; ++j) x[static_cast<size_t>(j)] = 0.0f;  // an all-zero block
    for (const tq::Type a : {tq::Type::Q8_0, tq::Type::Q8_1, tq::Type::Q8_K, tq::Type::F16, tq::Type::BF16}) {
        SCOPED_TRACE(tq::traits(a).name);
        std::vector<uint8_t> q(*tq::row_bytes(a, kN));
        tq::quantize_row(a, x.data(), q.data(), kN);
        std::vector<float> want(kN), got(kN);
        tq::dequantize_row(a, q.data(), want.data(), kN);
#define TANDEM_RT(At)                                                                                       \
    if (a == tq::Type::At) {                                                                                \
        constexpr int qk = cm::act_block_elems<tq::Type::At>();                                             \
        for (int64_t b = 0; b < kN / qk; ++b) cm::act_roundtrip<tq::Type::At>(x.data() + b * qk, got.data() + b * qk); \
    }
        TANDEM_RT(F16)
        TANDEM_RT(BF16)
        TANDEM_RT(Q8_0)
        TANDEM_RT(Q8_1)
        TANDEM_RT(Q8_K)
#undef TANDEM_RT
        int misses = 0;
        for (int64_t i = 0; i < kN; ++i) misses += want[static_cast<size_t>(i)] == got[static_cast<size_t>(i)] ? 0 : 1;
        // Q8_0/Q8_1: the CPU's activation quantizer (127/amax, half to even)
        // is not quantize_row's weight reference; compare with it instead.
        if (a == tq::Type::Q8_0 || a == tq::Type::Q8_1) {
            misses = 0;
            for (int64_t b = 0; b < kN / 32; ++b) {
                int8_t qs[32];
                int sum = 0;
                const float d = el::half_to_float(el::float_to_half(el::act_q8_32(x.data() + b * 32, qs, &sum)));
                for (int j = 0; j < 32; ++j) {
                    misses += got[static_cast<size_t>(b * 32 + j)] == d * static_cast<float>(qs[j]) ? 0 : 1;
                }
            }
        }
        EXPECT_EQ(misses, 0);
    }
}

// The CPU's Q8_0 cache rows come from quantize_row (1/d, half away from
// zero); the device's kv_store must write the same bytes. Before the fix
// it used the activation quantizer (127/amax, half to even).
TEST(CudaKernelsHost, KvCacheQ8BlocksMatchCpuCacheRowsByteForByte) {
    constexpr int64_t kN = 64 * 32;
    std::vector<std::vector<float>> rows;
    for (uint32_t seed = 1; seed <= 8; ++seed) rows.push_back(random_floats(kN, seed, seed % 2 ? 1.0f : 1e-3f));
    // Exact ties: amax 127 makes d = 1, so x.5 must round away from zero.
    std::vector<float> ties(kN, 0.0f);
    for (int64_t b = 0; b < kN / 32; ++b) {
        ties[static_cast<size_t>(b * 32)] = 127.0f;
        for (int j = 1; j < 32; ++j) ties[static_cast<size_t>(b * 32 + j)] = 0.5f + static_cast<float>((j + b) % 9) - 4.0f;
    }
    rows.push_back(ties);
    for (size_t r = 0; r < rows.size(); ++r) {
        SCOPED_TRACE("row " + std::to_string(r));
        std::vector<tq::block_q8_0> cpu(kN / 32), dev(kN / 32);
        tq::quantize_row(tq::Type::Q8_0, rows[r].data(), cpu.data(), kN);
        for (int64_t b = 0; b < kN / 32; ++b) cm::kv_q8_0_block(rows[r].data() + b * 32, dev[static_cast<size_t>(b)]);
        int differing = 0;
        for (int64_t b = 0; b < kN / 32; ++b) {
            differing += std::memcmp(&cpu[static_cast<size_t>(b)], &dev[static_cast<size_t>(b)], sizeof(tq::block_q8_0)) ? 1 : 0;
        }
        EXPECT_EQ(differing, 0) << "blocks of " << kN / 32;
    }
}

// Every array of a device KV cache starts on a 256-byte boundary, also
// when a Q8_0 row has an odd number of blocks and the cell count is odd
// (K and V then end 2 bytes past a multiple of 4), and they do not overlap.
TEST(CudaKernelsHost, KvCacheArraysAreAlignedAndDisjoint) {
    for (const bool q8 : {true, false}) {
        for (const int64_t dim : {int64_t{32}, int64_t{96}, int64_t{160}, int64_t{4096}}) {
            for (const int64_t cells : {int64_t{1}, int64_t{5}, int64_t{33}, int64_t{4097}}) {
                SCOPED_TRACE(std::string(q8 ? "Q8_0" : "F16") + " dim " + std::to_string(dim) + " cells " +
                             std::to_string(cells));
                tandem::cuda::kernels::KvCache kv;
                kv.q8_0 = q8;
                kv.k_dim = dim;
                kv.v_dim = dim + (q8 ? 32 : 2);
                kv.n_cells = cells;
                const auto l = tandem::model::kv_layout(static_cast<uint64_t>(kv.k_row_bytes()),
                                                        static_cast<uint64_t>(kv.v_row_bytes()), cells, 17);
                for (const uint64_t off : {l.k, l.v, l.cell_pos, l.token_cells}) EXPECT_EQ(off % 256, 0u) << off;
                EXPECT_GE(l.v, l.k + static_cast<uint64_t>(cells * kv.k_row_bytes()));
                EXPECT_GE(l.cell_pos, l.v + static_cast<uint64_t>(cells * kv.v_row_bytes()));
                EXPECT_GE(l.token_cells, l.cell_pos + static_cast<uint64_t>(cells) * 4);
                EXPECT_EQ(l.bytes, l.token_cells + 17u * 4);
            }
        }
    }
}

// SwiGLU over a batch is the CPU's row by row: each row of n_ff has its
// own polynomial part and expf tail (n_ff % 16 elements).
TEST(CudaKernelsHost, SwigluRowsMatchCpuRowByRow) {
    constexpr int64_t kRowLen = 100, kRows = 5;
    const auto gate = random_floats(kRowLen * kRows, 7, 3.0f);
    const auto up = random_floats(kRowLen * kRows, 8);
    for (const auto level : {tc::SimdLevel::Scalar, tc::best_simd_level()}) {
        SCOPED_TRACE("level " + std::to_string(static_cast<int>(level)));
        std::vector<float> cpu(gate.size());
        for (int64_t r = 0; r < kRows; ++r) {
            tc::swiglu(gate.data() + r * kRowLen, up.data() + r * kRowLen, cpu.data() + r * kRowLen, kRowLen, level);
        }
        int misses = 0;
        for (int64_t i = 0; i < kRowLen * kRows; ++i) {
            misses += cm::swiglu_rows_element(gate.data(), up.data(), i, kRowLen) == cpu[static_cast<size_t>(i)] ? 0 : 1;
        }
        EXPECT_EQ(misses, 0) << "of " << kRowLen * kRows;
    }
}
