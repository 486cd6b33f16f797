// Inputs of the CUDA tests: random floats, and where they find their models. The device machine receives the
// checkout alone (not ../shared beside it), so a model is looked for in
// $TANDEM_SHARED_DIR/models, then <checkout>/shared/models (a shared/
// folder inside the checkout travels with it; scripts/device-check.md says
// how to fill it), then the build's ../shared/models, then tests/data.
// A test whose model is in none of them skips and names it: never a pass.
// Where a GPU is required (the emulated build sets TANDEM_CUDA_EMULATE=1;
// scripts/device-check.sh sets TANDEM_EXPECT_GPU=1), a CUDA test that would
// skip for want of a GPU or a model fails instead.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tests/test_paths.h"

namespace tandem::testing {

// n normally distributed floats (mean 0, deviation scale) from a seed.
inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> x(n);
    for (auto& v : x) v = dist(rng);
    return x;
}

// The folders a shared/ subfolder (models, golden) is looked for in, in order.
inline std::vector<std::filesystem::path> shared_dirs(const std::string& sub) {
    std::vector<std::filesystem::path> dirs;
    if (const char* env = std::getenv("TANDEM_SHARED_DIR"); env && *env) dirs.emplace_back(std::filesystem::path(env) / sub);
    dirs.emplace_back(std::filesystem::path(TANDEM_SOURCE_DIR) / "shared" / sub);
    dirs.emplace_back(shared(sub));
    return dirs;
}

// Models may also be the committed ones in tests/data.
inline std::vector<std::filesystem::path> model_dirs() {
    std::vector<std::filesystem::path> dirs = shared_dirs("models");
    dirs.emplace_back(test_data(""));
    return dirs;
}

inline std::optional<std::filesystem::path> find_in(const std::vector<std::filesystem::path>& dirs,
                                                    const std::string& name) {
    for (const auto& d : dirs) {
        if (std::filesystem::exists(d / name)) return d / name;
    }
    return std::nullopt;
}

inline std::optional<std::filesystem::path> find_model(const std::string& name) { return find_in(model_dirs(), name); }
inline std::optional<std::filesystem::path> find_golden(const std::string& name) {
    return find_in(shared_dirs("golden"), name);
}

inline std::string searched_model_dirs() {
    std::string s;
    for (const auto& d : model_dirs()) s += (s.empty() ? "" : ", ") + d.string();
    return s;
}

// Whether a missing GPU or model fails a CUDA test instead of skipping it.
inline bool gpu_required() {
    for (const char* name : {"TANDEM_CUDA_EMULATE", "TANDEM_EXPECT_GPU"}) {
        const char* v = std::getenv(name);
        if (v && std::string(v) == "1") return true;
    }
    return false;
}

// CUDA attention against the CPU's, relative to max(1, |ref|): the CPU's
// bits on the emulator (the same exp, chunks and merge:
// runtime/quant/attention_order.h); on a GPU an ulp of difference in exp
// may move an fp16 V sum by a couple of steps.
#if defined(TANDEM_CUDA_EMULATED)
inline constexpr float kCudaAttentionTol = 0.0f;
#else
inline constexpr float kCudaAttentionTol = 2e-3f;
#endif

}  // namespace tandem::testing

// Skips the test with the reason, or fails it where a GPU is required.
#define TANDEM_CUDA_SKIP(why)                                                                            \
    do {                                                                                                  \
        if (tandem::testing::gpu_required()) FAIL() << why << " (a GPU and its inputs are required here)"; \
        GTEST_SKIP() << why;                                                                              \
    } while (0)

// Binds `var` to the model's path or skips the test, naming the places searched.
#define TANDEM_REQUIRE_MODEL(var, name)                                                                       \
    const auto var##_found_ = tandem::testing::find_model(name);                                              \
    if (!var##_found_) TANDEM_CUDA_SKIP("model " << (name) << " not found in " << tandem::testing::searched_model_dirs()); \
    const std::filesystem::path var = *var##_found_

// Binds `var` to the first GPU's index or skips the test (fails where a GPU
// is required).
#define TANDEM_REQUIRE_GPU(var)                                          \
    std::string why_no_gpu_;                                             \
    const auto devices_ = tandem::cuda::list_devices(&why_no_gpu_);      \
    if (devices_.empty()) TANDEM_CUDA_SKIP("no GPU: " << why_no_gpu_);   \
    const int var = devices_[0].index
