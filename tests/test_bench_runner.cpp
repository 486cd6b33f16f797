// `tandem bench` end to end on the committed tiny model: the runner in
// process (rows, fields, splits that do not fit) and the command through
// the binary (stdout holds only results, bad input is one line). Nothing
// here depends on how fast the machine is: only that speeds are positive.
#include "tools/bench_runner.h"

#include <cstdlib>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace tandem::tools {
namespace {

using testing::contains;
using testing::run_tandem;
using testing::shell_quote;

std::string tiny_model() { return testing::test_data("tiny-llama-Q4_K_M.gguf").string(); }

// -p 8 -n 4 -r 2 on the stand-in device with 2 MiB.
BenchConfig small_config() {
    BenchArgs a;
    a.models = {tiny_model()};
    a.n_prompt = {"8"};
    a.n_gen = {"4"};
    a.repetitions = 2;
    a.threads = {"1"};
    a.device = "cpu2";
    a.vram = "2MiB";
    a.n_gpu_layers = {"0,2"};
    return make_bench_config(a);
}

void expect_measured(const BenchRow& r) {
    EXPECT_TRUE(r.fits);
    ASSERT_EQ(r.samples.size(), 2u) << r.test;
    for (double s : r.samples) EXPECT_GT(s, 0.0);
    ASSERT_TRUE(r.tps_mean && r.tps_sd && r.gbps);
    EXPECT_GT(*r.tps_mean, 0.0);
    EXPECT_GE(*r.tps_sd, 0.0);
    EXPECT_GT(*r.gbps, 0.0);
    ASSERT_TRUE(r.predicted_tps);
    EXPECT_GT(*r.predicted_tps, 0.0);
}

TEST(BenchRunner, MeasuresEveryTestAtEverySplit) {
    planner::Calibration cal;
    cal.cpu_gbps = 10.0;
    size_t announced = 0, reported = 0;
    BenchHooks hooks;
    hooks.on_start = [&](size_t n) { announced = n; };
    hooks.on_row = [&](const BenchRow&) { ++reported; };
    const BenchResult result = run_bench(small_config(), cal, hooks);
    ASSERT_EQ(result.rows.size(), 4u);  // 2 splits x (pp8, tg4)
    EXPECT_EQ(announced, 4u);
    EXPECT_EQ(reported, 4u);
    const std::vector<std::pair<int64_t, std::string>> expected{{0, "pp8"}, {0, "tg4"}, {2, "pp8"}, {2, "tg4"}};
    for (size_t i = 0; i < expected.size(); ++i) {
        const BenchRow& r = result.rows[i];
        EXPECT_EQ(r.ngl, expected[i].first);
        EXPECT_EQ(r.test, expected[i].second);
        EXPECT_EQ(r.model, "tiny-llama-Q4_K_M.gguf");
        EXPECT_EQ(r.model_type, "Q4_K_M");
        EXPECT_GT(r.model_size, 0u);
        EXPECT_GT(r.model_params, 0u);
        EXPECT_EQ(r.device, "cpu2");
        EXPECT_EQ(r.backend, r.ngl == 0 ? "cpu" : "split");
        EXPECT_EQ(r.threads, 1);
        EXPECT_EQ(r.cache_type, "f16");
        ASSERT_TRUE(r.pct_bandwidth);  // calibrated: the column is filled
        EXPECT_GT(*r.pct_bandwidth, 0.0);
        expect_measured(r);
    }
    EXPECT_EQ(result.rows[0].n_prompt, 8);
    EXPECT_EQ(result.rows[1].n_gen, 4);
    ASSERT_EQ(result.models.size(), 1u);
    EXPECT_EQ(result.models[0].n_layer, 4);
    EXPECT_TRUE(result.models[0].fit_limit.has_value());
}

// bench --calibrate-each: the bandwidth is measured right before and right
// after every test, and % bw is against their mean, with or without a
// stored calibration (here none; on cpu2 the device's roofline is the
// CPU's too, so every row's % is its GB/s over the mean).
TEST(BenchRunner, CalibrateEachMeasuresAroundEveryTest) {
    int calls = 0;
    BenchHooks hooks;
    hooks.measure_cpu_gbps = [&] { return ++calls % 2 == 1 ? 30.0 : 50.0; };
    const BenchResult result = run_bench(small_config(), std::nullopt, hooks);
    ASSERT_EQ(result.rows.size(), 4u);
    EXPECT_EQ(calls, 8);
    for (const BenchRow& r : result.rows) {
        expect_measured(r);
        ASSERT_TRUE(r.cpu_gbps_before && r.cpu_gbps_after) << r.test;
        EXPECT_EQ(*r.cpu_gbps_before, 30.0);
        EXPECT_EQ(*r.cpu_gbps_after, 50.0);
        ASSERT_TRUE(r.pct_bandwidth) << r.test;
        EXPECT_NEAR(*r.pct_bandwidth, *r.gbps / 40.0 * 100.0, 1e-6 * *r.pct_bandwidth) << r.test << " ngl " << r.ngl;
    }
    const std::string table = format_markdown(result.rows, false);
    EXPECT_TRUE(contains(table, "bw now")) << table;
    EXPECT_TRUE(contains(table, "30.0/50.0")) << table;
    const auto j = nlohmann::json::parse(format_json(result.rows));
    EXPECT_EQ(j[0]["cpu_gbps_before"].get<double>(), 30.0);
    EXPECT_EQ(j[0]["cpu_gbps_after"].get<double>(), 50.0);
    // Without the hook the fields stay empty, and so does the column.
    const BenchResult plain = run_bench(small_config(), std::nullopt);
    EXPECT_FALSE(plain.rows[0].cpu_gbps_before.has_value());
    EXPECT_FALSE(contains(format_markdown(plain.rows, false), "bw now"));
}

TEST(BenchRunner, SweepReportsSplitsThatDoNotFitWithoutRunningThem) {
    BenchArgs a;
    a.models = {tiny_model()};
    a.n_prompt = {"8"};
    a.n_gen = {"4"};
    a.repetitions = 1;
    a.threads = {"1"};
    a.device = "cpu2";
    a.vram = "2MiB";
    a.sweep = true;
    a.sweep_step = "2";
    const BenchResult result = run_bench(make_bench_config(a), std::nullopt);
    const std::vector<int64_t> ngls{0, 2, 4, 5};  // steps of 2, and n_layer + 1 always
    ASSERT_EQ(result.rows.size(), ngls.size() * 2);
    const int64_t limit = result.models.at(0).fit_limit.value();
    EXPECT_GE(limit, 2);  // 2 MiB holds a few layers of the tiny model, not its head
    EXPECT_LT(limit, 5);
    for (size_t i = 0; i < result.rows.size(); ++i) {
        const BenchRow& r = result.rows[i];
        EXPECT_EQ(r.ngl, ngls[i / 2]);
        EXPECT_FALSE(r.pct_bandwidth.has_value());  // no calibration
        ASSERT_TRUE(r.predicted_tps);
        EXPECT_GT(*r.predicted_tps, 0.0);
        if (r.ngl <= limit) {
            EXPECT_TRUE(r.fits) << r.ngl;
            EXPECT_EQ(r.samples.size(), 1u);
        } else {
            EXPECT_FALSE(r.fits) << r.ngl;
            EXPECT_TRUE(r.samples.empty());
            EXPECT_FALSE(r.tps_mean.has_value());
            EXPECT_EQ(r.backend, "-");
        }
    }
    EXPECT_EQ(result.rows.back().backend, "-");
}

TEST(BenchRunner, SweepValuesIncludeBothEnds) {
    EXPECT_EQ(sweep_ngl_values(4, 1), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(sweep_ngl_values(4, 2), (std::vector<int64_t>{0, 2, 4, 5}));
    EXPECT_EQ(sweep_ngl_values(4, 10), (std::vector<int64_t>{0, 5}));
}

TEST(BenchRunner, RooflinePercentAddsTheDevicesTimes) {
    // 1 GB at 10 GB/s and 1 GB at 100 GB/s: 0.11 s ideal; 0.22 s measured.
    EXPECT_NEAR(percent_of_roofline(1e9, 1e9, 10.0, 100.0, 0.22), 50.0, 1e-9);
    EXPECT_NEAR(percent_of_roofline(2e9, 0.0, 20.0, 1.0, 0.1), 100.0, 1e-9);
}

TEST(BenchRunner, MissingModelIsAnError) {
    BenchConfig c = small_config();
    c.models = {"/nonexistent/model.gguf"};
    EXPECT_TRUE(contains(testing::error_of([&] { run_bench(c, std::nullopt); }), "/nonexistent/model.gguf"));
}

class BenchCommand : public ::testing::Test {
protected:
    // The children inherit an empty cache (no calibration); the variable is
    // put back afterwards, since later tests in this process may rely on it.
    void SetUp() override {
        dir_ = testing::scratch_dir();
        if (const char* v = std::getenv("TANDEM_CACHE_DIR")) saved_cache_dir_ = v;
        ::setenv("TANDEM_CACHE_DIR", (dir_ / "cache").c_str(), 1);
    }
    void TearDown() override {
        if (saved_cache_dir_) {
            ::setenv("TANDEM_CACHE_DIR", saved_cache_dir_->c_str(), 1);
        } else {
            ::unsetenv("TANDEM_CACHE_DIR");
        }
    }
    std::filesystem::path dir_;
    std::optional<std::string> saved_cache_dir_;
};

TEST_F(BenchCommand, JsonOnStdoutProgressOnStderr) {
    const auto r = run_tandem("bench -m " + shell_quote(tiny_model()) + " -p 8 -n 4 -r 1 -t 1 -o json", dir_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);  // nothing but the array on stdout
    ASSERT_EQ(j.size(), 2u);
    EXPECT_EQ(j[0]["test"], "pp8");
    EXPECT_EQ(j[1]["test"], "tg4");
    EXPECT_EQ(j[0]["backend"], "cpu");
    EXPECT_TRUE(j[0]["pct_bandwidth"].is_null());
    EXPECT_TRUE(contains(r.err, "bench --calibrate"));
}

TEST_F(BenchCommand, LlamaStyleFlagsReachTheRunner) {
    const auto r = run_tandem("bench -m " + shell_quote(tiny_model()) +
                                  " -p 8 -n 0 -pg 4,2 -r 1 -t 1 -ngl 0-1 -ub 4 --device cpu2 --vram 64MiB -o csv",
                              dir_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(testing::count_lines(r.out), 1u + 4u) << r.out;  // header + 2 splits x (pp8, pp4+tg2)
    EXPECT_TRUE(contains(r.out, ",4,f16,pp8,8,0,0,true,"));  // ... test, n_prompt, n_gen, n_depth, fits
    EXPECT_TRUE(contains(r.out, "pp4+tg2"));
    EXPECT_TRUE(contains(r.out, ",split,1,"));

    // -d: generation after 6 cached tokens, named as llama-bench names it.
    const auto d = run_tandem("bench -m " + shell_quote(tiny_model()) + " -p 0 -n 2 -d 6 -r 1 -t 1 -o json", dir_);
    ASSERT_EQ(d.exit_code, 0) << d.err;
    const auto j = nlohmann::json::parse(d.out);
    ASSERT_EQ(j.size(), 1u);
    EXPECT_EQ(j[0]["test"], "tg2 @ d6");
    EXPECT_EQ(j[0]["n_depth"], 6);
    EXPECT_GT(j[0]["tps_mean"].get<double>(), 0.0);
}

TEST_F(BenchCommand, BadInputIsOneLine) {
    const std::string m = " -m " + shell_quote(tiny_model());
    testing::expect_one_line_error(run_tandem("bench -m /nonexistent/x.gguf -r 1", dir_), "/nonexistent/x.gguf");
    testing::expect_one_line_error(run_tandem("bench" + m + " -p 5,,x", dir_), "-p");
    testing::expect_one_line_error(run_tandem("bench" + m + " -r 0", dir_), "-r");
    testing::expect_one_line_error(run_tandem("bench" + m + " -o xml", dir_), "-o");
    testing::expect_one_line_error(run_tandem("bench" + m + " -ngl 0-x --device cpu2", dir_), "-ngl");
    testing::expect_one_line_error(
        run_tandem("bench" + m + " --device cpu2 --vram 2MiB --sweep-ngl --plot " + shell_quote((dir_ / "c.png").string()),
                   dir_),
        ".svg");
}

TEST_F(BenchCommand, SweepWritesThePlot) {
    const auto svg = dir_ / "sweep.svg";
    const auto r = run_tandem("bench -m " + shell_quote(tiny_model()) +
                                  " -p 8 -n 4 -r 1 -t 1 --device cpu2 --vram 2MiB --sweep-ngl 3 --plot " +
                                  shell_quote(svg.string()) + " -o jsonl",
                              dir_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(testing::count_lines(r.out), 6u);  // ngl 0, 3 and 5 (n_layer + 1), x (pp8, tg4)
    const std::string text = testing::slurp(svg);
    EXPECT_EQ(text.rfind("<svg", 0), 0u);
    EXPECT_TRUE(contains(text, "fit-limit"));
}

}  // namespace
}  // namespace tandem::tools
