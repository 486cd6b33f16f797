// The CUDA kernels' own arithmetic run on the host (matmul_math.h,
// op_math.h, model/device_layout.h) against the CPU kernels, for what a reading
// of the never-run CUDA path found: the cuBLAS path's activations, the KV
// cache's store of every type, the cache arrays' alignment, SwiGLU by rows. (The
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
#include "kernels_cpu/vec_dot.h"
#include "kernels_cuda/cuda_kernels.h"
#include "kernels_cuda/kv_types.h"
#include "kernels_cuda/matmul_math.h"
#include "kernels_cuda/matmul_types.h"
#include "kernels_cuda/op_math.h"
#include "runtime/model/device_layout.h"
#include "runtime/model/model_spec.h"
#include "runtime/quant/quant_types.h"
#include "tests/kv_type_inputs.h"
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

namespace {

// One row through the device's store (math::kv_store_block<T>, block by
// block, run here on the host).
template <tq::Type T>
std::vector<uint8_t> device_cache_row(const std::vector<float>& x) {
    using Block = typename cm::Elem<T>::block;
    constexpr int kElems = cm::Elem<T>::qk();
    std::vector<Block> blocks(x.size() / kElems);
    for (size_t b = 0; b < blocks.size(); ++b) cm::kv_store_block<T>(x.data() + b * kElems, blocks[b]);
    std::vector<uint8_t> bytes(blocks.size() * sizeof(Block));
    std::memcpy(bytes.data(), blocks.data(), bytes.size());
    return bytes;
}

std::vector<uint8_t> device_cache_row(tq::Type t, const std::vector<float>& x) {
#define TANDEM_ROW_OF(T) \
    if (t == tq::Type::T) return device_cache_row<tq::Type::T>(x);
    TANDEM_FOR_EACH_KV_TYPE(TANDEM_ROW_OF)
#undef TANDEM_ROW_OF
    return {};
}

}  // namespace

// The device stores every cache type's rows with the bytes of the CPU's
// cache (cpu::detail::cache_row_quantizer, at every SIMD level): Q8_0 by
// the activation quantizer (127 / amax, half to even; the device's store
// of before used the reference's 1/d and half away, which the exact ties
// below tell apart), IQ4_NL by its plain row conversion, the others by
// their reference quantizers; F16 and BF16 rounded.
TEST(CudaKernelsHost, KvStoreBlocksMatchCpuCacheRowsByteForByte) {
    constexpr int64_t kN = 64 * 32;
    std::vector<std::vector<float>> rows;
    for (uint32_t seed = 1; seed <= 8; ++seed) rows.push_back(random_floats(kN, seed, seed % 2 ? 1.0f : 1e-3f));
    rows.push_back(tandem::testing::q8_ties_row(kN));
    rows.push_back(std::vector<float>(kN, 0.0f));  // blocks of zeros: scale 0
    for (const tq::Type t : tandem::model::cache_element_types()) {
        for (const tc::SimdLevel level : {tc::SimdLevel::Scalar, tc::best_simd_level()}) {
            for (size_t r = 0; r < rows.size(); ++r) {
                SCOPED_TRACE(std::string(tq::traits(t).name) + " " + std::string(tc::simd_level_name(level)) + " row " +
                             std::to_string(r));
                std::vector<uint8_t> cpu(*tq::row_bytes(t, kN));
                tc::detail::cache_row_quantizer(t, level)(rows[r].data(), cpu.data(), kN);
                const std::vector<uint8_t> dev = device_cache_row(t, rows[r]);
                ASSERT_EQ(dev.size(), cpu.size()) << "no device store for the type";
                EXPECT_EQ(std::memcmp(dev.data(), cpu.data(), cpu.size()), 0);
            }
        }
    }
}

// Every array of a device KV cache starts on a 256-byte boundary, for
// every cache type, also when a row has an odd number of blocks and the
// cell count is odd (K and V then end 2 bytes past a multiple of 4), and
// they do not overlap; the rows are the planner's size.
TEST(CudaKernelsHost, KvCacheArraysAreAlignedAndDisjoint) {
    for (const tq::Type t : tandem::model::cache_element_types()) {
        for (const int64_t dim : {int64_t{32}, int64_t{96}, int64_t{160}, int64_t{4096}}) {
            for (const int64_t cells : {int64_t{1}, int64_t{5}, int64_t{33}, int64_t{4097}}) {
                SCOPED_TRACE(std::string(tq::traits(t).name) + " dim " + std::to_string(dim) + " cells " +
                             std::to_string(cells));
                tandem::cuda::kernels::KvCache kv;
                kv.k_type = t;
                kv.v_type = t == tq::Type::F16 ? tq::Type::Q4_0 : tq::Type::F16;
                kv.k_dim = dim;
                kv.v_dim = dim + 32;
                // The device's row sizes are the planner's (quant::row_bytes).
                EXPECT_EQ(kv.k_row_bytes(), static_cast<int64_t>(*tq::row_bytes(t, dim)));
                EXPECT_EQ(kv.v_row_bytes(), static_cast<int64_t>(*tq::row_bytes(kv.v_type, dim + 32)));
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
