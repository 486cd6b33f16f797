// `tandem bench --calibrate`, `tandem tune` and the caches they leave for
// `plan` and `run -ngl auto`. Every test points TANDEM_CACHE_DIR at its own
// scratch directory so nothing touches the user's ~/.cache.
#include <cstdlib>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include <optional>
#include <nlohmann/json.hpp>

#include "planner/calibration.h"
#include "planner/tune_cache.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace tandem {
namespace {

using testing::contains;
using testing::run_tandem;
using testing::shell_quote;

class TuneTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = testing::scratch_dir();
        cache_ = dir_ / "cache";
        // The child processes inherit the variable; TearDown restores the
        // value the suite started with (ctest sets one for every test, so
        // later tests must not fall back to the user's ~/.cache).
        if (const char* before = std::getenv("TANDEM_CACHE_DIR")) saved_ = before;
        ::setenv("TANDEM_CACHE_DIR", cache_.c_str(), 1);
    }
    void TearDown() override {
        if (saved_) {
            ::setenv("TANDEM_CACHE_DIR", saved_->c_str(), 1);
        } else {
            ::unsetenv("TANDEM_CACHE_DIR");
        }
    }
    std::optional<std::string> saved_;

    static std::string model() { return shell_quote(testing::test_data("tiny-llama-Q4_K_M.gguf").string()); }
    static void write(const std::filesystem::path& p, const std::string& text) {
        std::filesystem::create_directories(p.parent_path());
        std::ofstream(p) << text;
    }
    static size_t lines_with(const std::string& s, const std::string& needle) {
        size_t n = 0, pos = 0;
        while ((pos = s.find(needle, pos)) != std::string::npos) {
            ++n;
            pos += needle.size();
        }
        return n;
    }

    std::filesystem::path dir_, cache_;
};

TEST_F(TuneTest, CalibrateStoresCpuBandwidthAndPlanReportsItMeasured) {
    // The CPU's calibration with no GPU to measure (in the emulated build
    // too: the emulated GPU's copies would be timed, and said measured).
    setenv("TANDEM_CUDA_EMULATE", "0", 1);
    // One round: the default three take half a minute here and minutes
    // under the sanitizer (best_of is checked in test_prediction). On a
    // Xeon whose AVX-512 F32 products run ~30x slower under AddressSanitizer
    // one round passed 10 minutes: the release run measures it.
#if defined(__SANITIZE_ADDRESS__)
    GTEST_SKIP() << "bench --calibrate under AddressSanitizer takes over 10 minutes on some CPUs; the release run checks it";
#endif
    const auto r = run_tandem("bench --calibrate --calibrate-rounds 1 --json", dir_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto file = cache_ / "calibration.json";
    ASSERT_TRUE(std::filesystem::exists(file));
    const auto j = nlohmann::json::parse(testing::slurp(file));
    EXPECT_GT(j.at("cpu_gbps").get<double>(), 0.0);
    // The batch's own cost: measured end to end (a decode step of a
    // one-layer model less its predicted kernels), never below zero.
    ASSERT_TRUE(j.at("cpu_kernels").at("batch_s").is_number()) << j.at("cpu_kernels").dump();
    EXPECT_GE(j.at("cpu_kernels").at("batch_s").get<double>(), 0.0);
    EXPECT_GE(j.at("physical_cores").get<int>(), 1);
    EXPECT_FALSE(j.at("cpu_model").get<std::string>().empty());

    const auto p = run_tandem("plan -m " + model() + " --vram 64MiB --json", dir_);
    ASSERT_EQ(p.exit_code, 0) << p.err;
    const auto pj = nlohmann::json::parse(p.out);
    const auto& cpu = pj.at("assumptions").at("cpu_gbps");
    EXPECT_EQ(cpu.at("source"), "measured");
    EXPECT_FALSE(cpu.at("default").get<bool>());
    EXPECT_DOUBLE_EQ(cpu.at("value").get<double>(), j.at("cpu_gbps").get<double>());
    // Nothing measured the GPU here: still the default, and said so.
    EXPECT_EQ(pj.at("assumptions").at("gpu_gbps").at("source"), "default");

    // A flag wins over the measurement.
    const auto f = run_tandem("plan -m " + model() + " --vram 64MiB --cpu-gbps 7 --json", dir_);
    ASSERT_EQ(f.exit_code, 0) << f.err;
    EXPECT_EQ(nlohmann::json::parse(f.out).at("assumptions").at("cpu_gbps").at("source"), "given");
}

TEST_F(TuneTest, BenchWithoutCalibrateIsAOneLineError) {
    testing::expect_one_line_error(run_tandem("bench", dir_), "--calibrate");
}

TEST_F(TuneTest, CalibrateRoundsOutOfRangeAreRefusedBeforeMeasuring) {
    for (const char* n : {"0", "-1", "21"}) {
        testing::expect_one_line_error(run_tandem(std::string("bench --calibrate --calibrate-rounds ") + n, dir_),
                                       "--calibrate-rounds");
        EXPECT_FALSE(std::filesystem::exists(cache_ / "calibration.json")) << n;
    }
}

TEST_F(TuneTest, DamagedCalibrationWarnsAndUsesDefaults) {
    write(cache_ / "calibration.json", "{\"cpu_gbps\": \"fast\"");
    const auto r = run_tandem("plan -m " + model() + " --vram 64MiB --json", dir_);
    ASSERT_FALSE(r.signaled);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(testing::count_lines(r.err), 1u) << r.err;
    EXPECT_TRUE(contains(r.err, "warning")) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out).at("assumptions").at("cpu_gbps").at("source"), "default");
}

TEST_F(TuneTest, DryRunListsCandidatesAtAndBelowThePlan) {
    const auto r = run_tandem("tune -m " + model() + " --device cpu2 --vram 64MiB --dry-run --json", dir_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    const int64_t plan_ngl = j.at("plan_ngl").get<int64_t>();
    const auto& cands = j.at("candidates");
    ASSERT_FALSE(cands.empty());
    for (const auto& c : cands) {
        EXPECT_LE(c.at("ngl").get<int64_t>(), plan_ngl);
        EXPECT_GE(c.at("ngl").get<int64_t>(), std::max<int64_t>(0, plan_ngl - 2));
        EXPECT_GE(c.at("threads").get<int>(), 1);
    }
    EXPECT_FALSE(std::filesystem::exists(cache_ / "tune.json")) << "a dry run measures and stores nothing";

    const auto text = run_tandem("tune -m " + model() + " --device cpu2 --vram 64MiB --dry-run", dir_);
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_TRUE(contains(text.out, "would measure")) << text.out;
    EXPECT_EQ(lines_with(text.out, "threads"), cands.size()) << text.out;
}

TEST_F(TuneTest, TuneStoresAnEntryThatRunAutoUses) {
    const std::string opts = " --device cpu2 --vram 64MiB -c 256";
    const auto t = run_tandem("tune -m " + model() + opts + " --json --gen 16", dir_);
    ASSERT_EQ(t.exit_code, 0) << t.err;
    const auto tj = nlohmann::json::parse(t.out);
    const auto& best = tj.at("best");
    EXPECT_GT(best.at("tg_tps").get<double>(), 0.0);
    EXPECT_LE(best.at("ngl").get<int64_t>(), tj.at("plan_ngl").get<int64_t>());

    const auto entries = planner::load_tune_cache(cache_ / "tune.json", nullptr);
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_EQ(entries[0].key.device, "cpu2");
    EXPECT_EQ(entries[0].key.vram, 64ull << 20);
    EXPECT_EQ(entries[0].key.n_ctx, 256);
    EXPECT_EQ(entries[0].key.cache_type, "f16");

    const auto r = run_tandem("run -m " + model() + opts + " -p hello -n 2 --temp 0 --verbose", dir_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "using the tuned entry")) << r.err;
    EXPECT_TRUE(contains(r.err, std::to_string(entries[0].threads) + " threads")) << r.err;

    // An explicit -t wins over the tuned thread count.
    const auto t1 = run_tandem("run -m " + model() + opts + " -p hello -n 2 -t 1 --verbose", dir_);
    ASSERT_EQ(t1.exit_code, 0) << t1.err;
    EXPECT_TRUE(contains(t1.err, "context 256, 1 threads")) << t1.err;

    // Other options do not match the entry: the plan decides.
    const auto other = run_tandem("run -m " + model() + " --device cpu2 --vram 64MiB -c 512 -p hello -n 2 --verbose",
                                  dir_);
    ASSERT_EQ(other.exit_code, 0) << other.err;
    EXPECT_FALSE(contains(other.err, "using the tuned entry")) << other.err;
    EXPECT_TRUE(contains(other.err, "-ngl auto chose")) << other.err;
}

TEST_F(TuneTest, DamagedTuneCacheWarnsOnceAndFallsBackToThePlan) {
    write(cache_ / "tune.json", "{\"entries\": [ {\"ngl\": ");
    const auto r = run_tandem("run -m " + model() + " --device cpu2 --vram 64MiB -p hello -n 2 --verbose", dir_);
    ASSERT_FALSE(r.signaled) << r.err;
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(lines_with(r.err, "warning"), 1u) << r.err;
    EXPECT_TRUE(contains(r.err, "-ngl auto chose")) << r.err;

    // Well-formed JSON of the wrong shape is damage too.
    write(cache_ / "tune.json", "{\"entries\": [ {\"ngl\": -3} ]}");
    const auto s = run_tandem("run -m " + model() + " --device cpu2 --vram 64MiB -p hello -n 2 --verbose", dir_);
    ASSERT_EQ(s.exit_code, 0) << s.err;
    EXPECT_EQ(lines_with(s.err, "warning"), 1u) << s.err;

    // tune replaces a damaged cache instead of failing on it.
    const auto t = run_tandem("tune -m " + model() + " --device cpu2 --vram 64MiB -c 256 --gen 4 --repeats 1", dir_);
    ASSERT_EQ(t.exit_code, 0) << t.err;
    std::string warning;
    EXPECT_EQ(planner::load_tune_cache(cache_ / "tune.json", &warning).size(), 1u);
    EXPECT_TRUE(warning.empty()) << warning;
}

TEST_F(TuneTest, ModelKeyHashesAPrefixNotTheWholeFile) {
    const auto a = dir_ / "a.bin";
    const auto b = dir_ / "b.bin";
    std::string bytes(3 << 20, 'x');
    write(a, bytes);
    bytes.back() = 'y';  // beyond the hashed prefix: same size, same key
    write(b, bytes);
    EXPECT_EQ(planner::model_key(a, 100), planner::model_key(b, 100));
    EXPECT_NE(planner::model_key(a, 100), planner::model_key(b, bytes.size()));  // header reaching the change
    bytes[10] = 'z';
    write(b, bytes);
    EXPECT_NE(planner::model_key(a, 100), planner::model_key(b, 100));
    bytes.push_back('x');
    write(b, bytes);
    EXPECT_NE(planner::model_key(a, 100), planner::model_key(b, 100));  // the size is part of the key
    EXPECT_EQ(planner::model_key(a, 100).size(), 16u);
}

TEST_F(TuneTest, StoringTheSameKeyReplacesTheEntry) {
    const auto path = cache_ / "tune.json";
    planner::TuneEntry e{{"k", "cpu2", 1, 256, "f16"}, 2, 1, 10.0};
    planner::store_tune_entry(path, e);
    e.ngl = 3;
    planner::store_tune_entry(path, e);
    planner::TuneEntry other = e;
    other.key.n_ctx = 512;
    planner::store_tune_entry(path, other);
    const auto entries = planner::load_tune_cache(path, nullptr);
    ASSERT_EQ(entries.size(), 2u);
    const auto found = planner::find_tune_entry(entries, e.key);
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->ngl, 3);
}

}  // namespace
}  // namespace tandem
