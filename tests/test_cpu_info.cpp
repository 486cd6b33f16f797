#include <gtest/gtest.h>

#include <thread>

#include "kernels_cpu/cpu_info.h"

TEST(CpuInfo, PhysicalCoresWithinLogicalCount) {
    const int cores = tandem::cpu::physical_core_count();
    EXPECT_GE(cores, 1);
    const unsigned logical = std::thread::hardware_concurrency();
    if (logical > 0) {
        EXPECT_LE(static_cast<unsigned>(cores), logical);
    }
}

TEST(CpuInfo, FeatureImplicationsHold) {
    const auto f = tandem::cpu::detect_cpu_features();
    // Every AVX-512 extension presupposes the foundation, and the kernels
    // rely on that when they dispatch.
    if (f.avx512bw || f.avx512vl || f.avx512_vnni) {
        EXPECT_TRUE(f.avx512f);
    }
#if defined(__x86_64__)
    EXPECT_EQ(f.avx2, static_cast<bool>(__builtin_cpu_supports("avx2")));
    EXPECT_EQ(f.avx512f, static_cast<bool>(__builtin_cpu_supports("avx512f")));
    EXPECT_EQ(f.bmi2, static_cast<bool>(__builtin_cpu_supports("bmi2")));
    // A fast pdep is BMI2's, and every AVX-512 CPU's (the avx2w builds use it).
    if (f.fast_pdep) EXPECT_TRUE(f.bmi2);
    if (f.avx512f) EXPECT_TRUE(f.fast_pdep);
#endif
    EXPECT_FALSE(tandem::cpu::describe(f).empty());
}
