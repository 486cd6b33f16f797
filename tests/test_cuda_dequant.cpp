// CUDA dequantization against the CPU reference, for every type. Skipped
// cleanly where no GPU is usable (no driver, no device, or a CPU-only build).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels_cuda/cuda_api.h"
#include "tests/cuda_ops/cuda_test_ops.h"
#include "runtime/quant/quant_types.h"
#include "tests/random_blocks.h"
#include "tests/test_cuda_inputs.h"

namespace tq = tandem::quant;

TEST(CudaDevices, ListingNeverThrowsWithoutAGpu) {
    std::string why;
    std::vector<tandem::cuda::DeviceInfo> devices;
    EXPECT_NO_THROW(devices = tandem::cuda::list_devices(&why));
    if (devices.empty()) {
        EXPECT_FALSE(why.empty()) << "an empty device list must say why";
    } else {
        EXPECT_GT(devices[0].total_bytes, 0u);
    }
}

TEST(CudaDequantize, MatchesCpuReferenceForEveryType) {
    std::string why;
    const auto devices = tandem::cuda::list_devices(&why);
    if (devices.empty()) TANDEM_CUDA_SKIP("no GPU: " << why);
    constexpr int64_t kN = 64 * 256;
    std::mt19937 rng(42);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(kN);
    for (auto& v : x) v = dist(rng);
    for (const auto& tr : tq::all_traits()) {
        SCOPED_TRACE(std::string(tr.name));
        std::vector<uint8_t> blocks(*tq::row_bytes(tr.type, kN));
        if (!tandem::testing::tested_on_random_codes(tr.type)) {
            tq::quantize_row(tr.type, x.data(), blocks.data(), kN);
        } else {
            tandem::testing::fill_random_blocks(tr.type, kN, 42, blocks.data());
        }
        std::vector<float> ref(kN), gpu(kN);
        tq::dequantize_row(tr.type, blocks.data(), ref.data(), kN);
        tandem::cuda::dequantize_row_on_device(devices[0].index, tr.type, blocks.data(), gpu.data(), kN);
        // The GPU may fuse d*q - m into one FMA: allow one rounding step.
        for (int64_t i = 0; i < kN; ++i) {
            ASSERT_NEAR(gpu[i], ref[i], 1e-6f * std::max(1.0f, std::fabs(ref[i]))) << "element " << i;
        }
    }
}
