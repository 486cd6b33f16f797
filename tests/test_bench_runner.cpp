// `tandem bench` end to end on the committed tiny model: the runner in
// process (rows, fields, splits that do not fit) and the command through
// the binary (stdout holds only results, bad input is one line). Nothing
// here depends on how fast the machine is: only that speeds are positive.
#include "tools/bench_runner.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <span>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/sampler/sampler.h"
#include "tests/run_command.h"
#include "tests/scratch_cache.h"
#include "tests/test_paths.h"

namespace tandem::tools {
namespace {

using testing::contains;
using testing::run_tandem;
using testing::shell_quote;

std::string tiny_model() { return testing::test_data("tiny-llama-Q4_K_M.gguf").string(); }

// The tiny model on the stand-in device, one thread, -p/-n/-r/--vram as given.
BenchArgs stand_in_args(const char* n_prompt, const char* n_gen, int repetitions, const char* vram) {
    BenchArgs a;
    a.models = {tiny_model()};
    a.n_prompt = {n_prompt};
    a.n_gen = {n_gen};
    a.repetitions = repetitions;
    a.threads = {"1"};
    a.device = "cpu2";
    a.vram = vram;
    return a;
}

// -p 8 -n 4 -r 2 on the stand-in device with 2 MiB.
BenchConfig small_config() {
    BenchArgs a = stand_in_args("8", "4", 2, "2MiB");
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

// bench --progress: every phase of every test, in order, as llama-bench
// names them; the depth is filled once, on the first counted run, and kept.
TEST(BenchRunner, TellsEachPhaseAsItBegins) {
    BenchArgs a;
    a.models = {tiny_model()};
    a.n_prompt = {"8"};
    a.n_gen = {"4"};
    a.n_depth = {"16"};
    a.repetitions = 2;
    a.threads = {"1"};
    std::vector<std::string> told;
    BenchHooks hooks;
    hooks.on_phase = [&](size_t index, const BenchRow& r, const std::string& phase) {
        told.push_back(std::to_string(index) + " " + r.test + ": " + phase);
    };
    const BenchResult result = run_bench(make_bench_config(a), std::nullopt, hooks);
    ASSERT_EQ(result.rows.size(), 2u);
    const std::vector<std::string> expected{
        "0 pp8 @ d16: warmup prompt run",
        "0 pp8 @ d16: depth run 1/2",
        "0 pp8 @ d16: prompt run 1/2",
        "0 pp8 @ d16: depth run 2/2 (cached)",
        "0 pp8 @ d16: prompt run 2/2",
        "1 tg4 @ d16: warmup depth run (cached)",
        "1 tg4 @ d16: warmup generation run",
        "1 tg4 @ d16: depth run 1/2 (cached)",
        "1 tg4 @ d16: generation run 1/2",
        "1 tg4 @ d16: depth run 2/2 (cached)",
        "1 tg4 @ d16: generation run 2/2",
    };
    EXPECT_EQ(told, expected);
}

// Every layer on the stand-in, then -ot moving the FFN back to the host:
// the backend says where the tensors are, not where -ngl put the layers,
// and the prediction is made for the placement that ran.
TEST(BenchRunner, OverriddenTensorsMakeASplit) {
    BenchArgs a = stand_in_args("0", "2", 1, "64MiB");
    a.n_gpu_layers = {"99"};
    const BenchResult whole = run_bench(make_bench_config(a), std::nullopt, BenchHooks{});
    a.placement.overrides = {"ffn_(up|down|gate)=cpu"};
    const BenchResult ffn_host = run_bench(make_bench_config(a), std::nullopt, BenchHooks{});
    ASSERT_EQ(whole.rows.size(), 1u);
    ASSERT_EQ(ffn_host.rows.size(), 1u);
    EXPECT_EQ(whole.rows[0].backend, "gpu");
    EXPECT_EQ(ffn_host.rows[0].backend, "split");
    ASSERT_TRUE(whole.rows[0].predicted_tps && ffn_host.rows[0].predicted_tps);
    EXPECT_NE(*whole.rows[0].predicted_tps, *ffn_host.rows[0].predicted_tps);
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

// --calibrate-each with a stored calibration: each row is predicted for
// the bandwidth measured around it. The tiny model's tg4 at ngl 0 is read
// from DRAM rates here (no cache size given), so twice the bandwidth
// predicts a faster row; the same bandwidth as stored predicts the same.
TEST(BenchRunner, CalibrateEachPredictsForTheBandwidthMeasuredAroundTheTest) {
    planner::Calibration cal;
    cal.cpu_gbps = 10.0;
    cal.cpu_kernels.matvec_gbps[quant::Type::Q4_K] = 8.0;
    cal.cpu_kernels.matvec_gbps[quant::Type::Q6_K] = 8.0;
    const auto predicted = [&](double gbps_now) {
        BenchHooks hooks;
        if (gbps_now > 0) hooks.measure_cpu_gbps = [gbps_now] { return gbps_now; };
        const BenchResult r = run_bench(small_config(), cal, hooks);
        EXPECT_EQ(r.rows[1].test, "tg4");
        EXPECT_EQ(r.rows[1].ngl, 0);
        return r.rows[1].predicted_tps.value_or(0.0);
    };
    const double stored = predicted(0.0), same = predicted(10.0), doubled = predicted(20.0);
    ASSERT_GT(stored, 0.0);
    EXPECT_NEAR(same, stored, 1e-9 * stored);
    EXPECT_GT(doubled, 1.2 * stored);
}

// The hypervisor's share of the CPU time during each test's counted runs
// (steal): read before and after them, in every row, the JSON and, once it
// is noticeable, a markdown column.
TEST(BenchRunner, ReportsStealAroundEveryTest) {
    int calls = 0;
    BenchHooks hooks;
    // Each test: 1000 ticks pass, 50 (5%) of them stolen; the second test 0.
    hooks.read_cpu_times = [&]() -> std::optional<CpuTimes> {
        const int i = calls++;
        const uint64_t test = static_cast<uint64_t>(i / 2);
        return CpuTimes{10000 * (test + 1) + (i % 2) * 1000, 500 * (test + 1) + (i % 2 == 1 && test != 1 ? 50 : 0)};
    };
    const BenchResult result = run_bench(small_config(), std::nullopt, hooks);
    ASSERT_EQ(result.rows.size(), 4u);
    EXPECT_EQ(calls, 8);
    for (size_t i = 0; i < result.rows.size(); ++i) {
        ASSERT_TRUE(result.rows[i].steal_pct.has_value()) << i;
        EXPECT_DOUBLE_EQ(*result.rows[i].steal_pct, i == 1 ? 0.0 : 5.0) << i;
    }
    const std::string table = format_markdown(result.rows, false);
    EXPECT_TRUE(contains(table, "steal %")) << table;
    EXPECT_TRUE(contains(table, " 5.0 |")) << table;
    const auto j = nlohmann::json::parse(format_json(result.rows));
    EXPECT_DOUBLE_EQ(j[0]["steal_pct"].get<double>(), 5.0);
    // Unreadable counters: no value and no column.
    hooks.read_cpu_times = [] { return std::optional<CpuTimes>{}; };
    const BenchResult blind = run_bench(small_config(), std::nullopt, hooks);
    EXPECT_FALSE(blind.rows[0].steal_pct.has_value());
    EXPECT_FALSE(contains(format_markdown(blind.rows, false), "steal %"));
    EXPECT_TRUE(nlohmann::json::parse(format_json(blind.rows))[0]["steal_pct"].is_null());
}

TEST(BenchRunner, SweepReportsSplitsThatDoNotFitWithoutRunningThem) {
    BenchArgs a = stand_in_args("8", "4", 1, "2MiB");
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

// The greedy tokens one sequence gets decoded alone, one eval per token.
std::vector<int32_t> greedy_alone(const gguf::File& file, const model::ModelSpec& spec, SessionOptions opt,
                                  const std::vector<int32_t>& prompt, size_t n) {
    opt.n_seq_max = 1;
    Session s(file, spec, opt);
    std::vector<float> logits;
    s.eval(prompt, false, logits);
    std::vector<int32_t> out;
    for (size_t g = 0; g < n; ++g) {
        out.push_back(argmax(logits));
        s.eval(std::span<const int32_t>(&out.back(), 1), false, logits);
    }
    return out;
}

// Every step really decodes every stream: each sequence ends holding its
// prompt and its n tokens, and the tokens are those it gets decoded alone.
// (A Q8_0 cache: with F16 a batch's other product shapes move these random
// models' logits enough to flip a greedy choice, see test_sequences.cpp.)
TEST(BenchRunner, ParallelDecodeGivesEveryStreamItsOwnGreedyTokens) {
    const auto file = gguf::File::open(tiny_model());
    const auto spec = model::load_model_spec(file);
    SessionOptions opt;
    opt.n_ctx = 3 * (8 + 5);
    opt.n_seq_max = 3;
    opt.n_threads = 1;
    opt.cache_type = model::kCacheQ8_0;
    Session session(file, spec, opt);
    const ParallelDecode run = run_parallel_decode(session, 3, 8, 5);
    EXPECT_GT(run.seconds, 0.0);
    ASSERT_EQ(run.prompts.size(), 3u);
    ASSERT_EQ(run.tokens.size(), 3u);
    EXPECT_NE(run.prompts[0], run.prompts[1]);  // each stream its own text
    for (int32_t s = 0; s < 3; ++s) {
        const auto& prompt = run.prompts[static_cast<size_t>(s)];
        ASSERT_EQ(prompt.size(), 8u);
        EXPECT_EQ(session.seq_pos_max(s), 8 + 5 - 1) << s;
        EXPECT_EQ(run.tokens[static_cast<size_t>(s)], greedy_alone(file, spec, opt, prompt, 5)) << "stream " << s;
    }
    EXPECT_EQ(session.seq_pos_max(3), -1);
    // A second run starts over: the same tokens, no cells left behind.
    const ParallelDecode again = run_parallel_decode(session, 2, 8, 5);
    EXPECT_EQ(again.tokens[1], run.tokens[1]);
    EXPECT_EQ(session.seq_pos_max(2), -1);
    // No prompt: the steps start from a fixed token at position 0.
    const ParallelDecode bare = run_parallel_decode(session, 2, 0, 3);
    EXPECT_TRUE(bare.prompts[0].empty());
    EXPECT_EQ(bare.tokens[0].size(), 3u);
    EXPECT_EQ(session.seq_pos_max(0), 2);
    EXPECT_EQ(session.seq_pos_max(1), 2);
}

// The logits of one time_test run of depth 16, pp8 and tg4 over ids, after
// the run before left the cache `filled` (and the filled state after it).
std::pair<std::vector<float>, int64_t> depth_run(Session& session, const std::vector<int32_t>& ids, int64_t filled) {
    BenchTest t;
    t.n_depth = 16;
    t.n_prompt = 8;
    t.n_gen = 4;
    std::vector<float> logits;
    EXPECT_GT(time_test(session, t, ids, logits, filled), 0.0);
    EXPECT_EQ(session.n_past(), 16 + 8 + 4);
    return {logits, filled};
}

// A run at the depth the cache was filled to keeps the depth's cells and
// drops only what the run before added: changing the depth's ids between
// two runs changes nothing then (it would after a fill), while a run told
// the cache is not filled, or a model whose sliding window turned over the
// depth's cells, fills again and sees the new ids.
TEST(BenchRunner, ARunAtTheFilledDepthKeepsItsCells) {
    for (const auto& path : {testing::test_data("tiny-llama-Q4_K_M.gguf"), testing::shared("models/synth-gemma2-Q8_0.gguf")}) {
        if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing " << path;
        const std::string name = path.filename().string();
        const auto file = gguf::File::open(path.string());
        const auto spec = model::load_model_spec(file);
        SessionOptions opt;
        opt.n_ctx = 64;
        opt.n_ubatch = 2;  // gemma2's rings: its window of 8 + 2 cells
        opt.n_threads = 1;
        Session session(file, spec, opt);
        std::vector<int32_t> ids(32), other(32);
        for (size_t i = 0; i < ids.size(); ++i) {
            ids[i] = static_cast<int32_t>((1 + 7 * i) % session.n_vocab());
            other[i] = i < 16 ? static_cast<int32_t>((3 + 11 * i) % session.n_vocab()) : ids[i];
        }
        const auto [first, filled] = depth_run(session, ids, -1);
        EXPECT_EQ(filled, 16);
        const auto [kept, still] = depth_run(session, other, filled);
        EXPECT_EQ(still, 16);
        const auto [fresh, refilled] = depth_run(session, other, -1);
        EXPECT_EQ(refilled, 16);
        ASSERT_NE(fresh, first) << name << ": the other ids give other logits";
        if (name.starts_with("tiny")) {
            EXPECT_EQ(kept, first) << name << ": the depth's cells were kept";
        } else {
            // A ring of 10 cells: the run's 12 tokens turned it over.
            EXPECT_EQ(kept, fresh) << name << ": filled again";
        }
    }
}

TEST(BenchRunner, ParallelRowsCountEveryStreamAndCompareWithOne) {
    BenchArgs a;
    a.models = {tiny_model()};
    a.parallel = {"1,2,4"};
    a.n_prompt = {"8"};
    a.n_gen = {"4"};
    a.repetitions = 3;
    a.threads = {"1"};
    planner::Calibration cal;
    cal.cpu_gbps = 10.0;
    // The runs of the three stream counts take turns: the CPU times are
    // read once before all the rounds and once after, and every row gets
    // that steal.
    int calls = 0;
    BenchHooks hooks;
    hooks.read_cpu_times = [&]() -> std::optional<CpuTimes> {
        const int i = calls++;
        return CpuTimes{static_cast<uint64_t>(1000 * (i + 1)), static_cast<uint64_t>(i % 2 == 1 ? 50 * (i + 1) : 0)};
    };
    const BenchResult result = run_bench(make_bench_config(a), cal, hooks);
    EXPECT_EQ(calls, 2);
    ASSERT_EQ(result.rows.size(), 3u);
    const std::vector<int64_t> streams{1, 2, 4};
    for (size_t i = 0; i < 3; ++i) {
        const BenchRow& r = result.rows[i];
        EXPECT_EQ(r.n_parallel, streams[i]);
        EXPECT_EQ(r.test, fmt::format("tg4 x{} @ p8", streams[i]));
        EXPECT_EQ(r.n_prompt, 8);
        EXPECT_EQ(r.n_gen, 4);
        EXPECT_EQ(r.backend, "cpu");
        ASSERT_EQ(r.samples.size(), 3u);
        ASSERT_TRUE(r.tps_mean && r.tps_sd && r.stream_tps && r.speedup && r.gbps && r.pct_bandwidth) << r.test;
        EXPECT_TRUE(r.in_turn);
        ASSERT_TRUE(r.steal_pct.has_value());
        EXPECT_DOUBLE_EQ(*r.steal_pct, 100.0 * 100.0 / 1000.0);
        EXPECT_GT(*r.tps_mean, 0.0);
        EXPECT_DOUBLE_EQ(*r.stream_tps, *r.tps_mean / static_cast<double>(streams[i]));
        // The median of the rounds' ratios to the one-stream run.
        std::vector<double> ratios;
        for (size_t k = 0; k < 3; ++k) ratios.push_back(r.samples[k] / result.rows[0].samples[k]);
        std::sort(ratios.begin(), ratios.end());
        EXPECT_DOUBLE_EQ(*r.speedup, ratios[1]);
        EXPECT_FALSE(r.predicted_tps.has_value());  // the planner does not model batched decode
        // The weights are read once per step for all streams: GB/s is the
        // step rate (t/s over the streams) times one token's bytes.
        EXPECT_NEAR(*r.gbps / *r.stream_tps, *result.rows[0].gbps / *result.rows[0].stream_tps,
                    1e-9 * *r.gbps / *r.stream_tps);
    }
    EXPECT_DOUBLE_EQ(*result.rows[0].speedup, 1.0);
    const std::string md = format_markdown(result.rows, false);
    EXPECT_TRUE(contains(md, "t/s/stream")) << md;
    EXPECT_TRUE(contains(md, "speed-up")) << md;
    EXPECT_TRUE(contains(md, "1.00x")) << md;

    // The 1 may come anywhere in the list; without one there is no speed-up.
    a.parallel = {"2,1"};
    a.repetitions = 1;
    const BenchResult reversed = run_bench(make_bench_config(a), std::nullopt);
    ASSERT_EQ(reversed.rows.size(), 2u);
    ASSERT_TRUE(reversed.rows[0].speedup);
    EXPECT_DOUBLE_EQ(*reversed.rows[0].speedup, reversed.rows[0].samples[0] / reversed.rows[1].samples[0]);
    a.parallel = {"2"};
    const BenchResult alone = run_bench(make_bench_config(a), std::nullopt);
    ASSERT_EQ(alone.rows.size(), 1u);
    EXPECT_TRUE(alone.rows[0].stream_tps.has_value());
    EXPECT_FALSE(alone.rows[0].speedup.has_value());
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
        cache_.emplace(dir_);
    }
    void TearDown() override { cache_.reset(); }
    std::filesystem::path dir_;
    std::optional<testing::ScratchCache> cache_;
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
    EXPECT_TRUE(contains(r.out, ",4,f16,pp8,8,0,0,0,true,"));  // ... test, n_prompt, n_gen, n_depth, n_parallel, fits
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

// Several devices, as run takes them: the layers shared as -ts says, each
// row naming the devices; -ngl auto with one --vram each plans over both.
TEST_F(BenchCommand, SeveralDevicesShareTheLayers) {
    const auto r = run_tandem("bench -m " + shell_quote(tiny_model()) +
                                  " -p 8 -n 2 -r 1 -t 1 --device cpu2,cpu3 -ts 1,1 -ngl 99 -o json",
                              dir_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j.size(), 2u);
    for (const auto& row : j) {
        EXPECT_EQ(row["device"], "cpu2,cpu3");
        EXPECT_EQ(row["backend"], "gpu");
        EXPECT_TRUE(row["fits"].get<bool>());
        EXPECT_GT(row["tps_mean"].get<double>(), 0.0);
    }
    // 4 layers and the head, 5 units in halves: 3 on cpu2, 2 on cpu3.
    EXPECT_TRUE(contains(r.err, "ngl 99 over cpu2,cpu3: blk 0-2: cpu2 | blk 3: cpu3 | output: cpu3")) << r.err;

    const auto a = run_tandem("bench -m " + shell_quote(tiny_model()) +
                                  " -p 8 -n 0 -r 1 -t 1 --device cpu2,cpu3 --vram 64MiB,64MiB -o md",
                              dir_);
    ASSERT_EQ(a.exit_code, 0) << a.err;
    EXPECT_TRUE(contains(a.out, "cpu2,cpu3")) << a.out;
    EXPECT_TRUE(contains(a.err, "-ngl auto chose 5 of 5")) << a.err;
}

// --parallel through the binary: one row per stream count in the JSON,
// each with its total and per-stream speed and its speed-up over one.
TEST_F(BenchCommand, ParallelRowsInJson) {
    const auto r = run_tandem(
        "bench -m " + shell_quote(tiny_model()) + " --parallel 1,2 -n 4 -p 8 -r 1 -t 1 -o json", dir_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j.size(), 2u) << r.out;
    for (size_t i = 0; i < 2; ++i) {
        const auto& row = j[i];
        const int64_t streams = static_cast<int64_t>(i) + 1;
        EXPECT_EQ(row["test"], fmt::format("tg4 x{} @ p8", streams));
        EXPECT_EQ(row["n_parallel"], streams);
        EXPECT_EQ(row["n_prompt"], 8);
        EXPECT_EQ(row["n_gen"], 4);
        EXPECT_EQ(row["backend"], "cpu");
        EXPECT_EQ(row["threads"], 1);
        EXPECT_TRUE(row["fits"].get<bool>());
        ASSERT_EQ(row["samples"].size(), 1u);
        const double tps = row["tps_mean"].get<double>();
        EXPECT_GT(tps, 0.0);
        EXPECT_LT(tps, 1e7);  // 8 tokens in under a microsecond is no decode
        EXPECT_DOUBLE_EQ(row["samples"][0].get<double>(), tps);
        EXPECT_DOUBLE_EQ(row["stream_tps"].get<double>(), tps / static_cast<double>(streams));
        EXPECT_GT(row["gbps"].get<double>(), 0.0);
        EXPECT_GT(row["speedup"].get<double>(), 0.0);
    }
    EXPECT_DOUBLE_EQ(j[0]["speedup"].get<double>(), 1.0);
    EXPECT_DOUBLE_EQ(j[1]["speedup"].get<double>(), j[1]["tps_mean"].get<double>() / j[0]["tps_mean"].get<double>());

    // The other formats carry the same rows.
    const auto csv = run_tandem("bench -m " + shell_quote(tiny_model()) + " --parallel 2 -n 2 -p 4 -r 1 -t 1 -o csv", dir_);
    ASSERT_EQ(csv.exit_code, 0) << csv.err;
    EXPECT_EQ(testing::count_lines(csv.out), 2u) << csv.out;
    EXPECT_TRUE(contains(csv.out, ",tg2 x2 @ p4,4,2,0,2,true,")) << csv.out;
    const auto md = run_tandem("bench -m " + shell_quote(tiny_model()) + " -np 1,2 -n 2 -p 4 -r 1 -t 1", dir_);
    ASSERT_EQ(md.exit_code, 0) << md.err;
    EXPECT_TRUE(contains(md.out, "t/s/stream")) << md.out;
    EXPECT_TRUE(contains(md.out, "tg2 x2 @ p4")) << md.out;
}

TEST_F(BenchCommand, BadInputIsOneLine) {
    const std::string m = " -m " + shell_quote(tiny_model());
    testing::expect_one_line_error(run_tandem("bench -m /nonexistent/x.gguf -r 1", dir_), "/nonexistent/x.gguf");
    testing::expect_one_line_error(run_tandem("bench" + m + " -p 5,,x", dir_), "-p");
    testing::expect_one_line_error(run_tandem("bench" + m + " -r 0", dir_), "-r");
    testing::expect_one_line_error(run_tandem("bench" + m + " -o xml", dir_), "-o");
    testing::expect_one_line_error(run_tandem("bench" + m + " -ngl 0-x --device cpu2", dir_), "-ngl");
    testing::expect_one_line_error(run_tandem("bench" + m + " --parallel 0", dir_), "--parallel");
    testing::expect_one_line_error(run_tandem("bench" + m + " --parallel 1,65", dir_), "--parallel");
    testing::expect_one_line_error(run_tandem("bench" + m + " --parallel 1,x", dir_), "--parallel");
    testing::expect_one_line_error(run_tandem("bench" + m + " --parallel 2 -pg 8,4", dir_), "-pg");
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

namespace tandem::tools {
namespace {

// bench --spec-ngram / -md: two rows per model, plain then speculative,
// with acceptance and tokens per pass, and the same greedy tokens.
TEST_F(BenchCommand, SpeculativeRowsBesidePlain) {
    const std::string m = "bench -m " + shell_quote(tiny_model()) + " -n 24 -r 2 -t 1 -o json";
    const auto r = run_tandem(m + " --spec-ngram 2 --spec-prompt " +
                                  shell_quote("one two three one two three one two three one two three one two"),
                              dir_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j.size(), 2u);
    EXPECT_EQ(j[0]["mode"], "plain");
    EXPECT_EQ(j[0]["samples_tps"].size(), 2u);
    EXPECT_EQ(j[1]["n_gen"], 24);
    EXPECT_TRUE(j[1]["same_tokens"].get<bool>());
    EXPECT_GT(j[1]["proposed"].get<int64_t>(), 0);
    EXPECT_GE(j[1]["tokens_per_pass"].get<double>(), 1.0);
    EXPECT_GT(j[1]["tps_mean"].get<double>(), 0.0);
    // The model as its own draft (proposing whatever its confidence):
    // its drafts are the target's tokens, so nearly all are kept (a draft
    // cut short by the end of generation counts as not kept).
    const auto d = run_tandem(m + " -md " + shell_quote(tiny_model()) + " --draft-max 4 --draft-p-min 0", dir_);
    ASSERT_EQ(d.exit_code, 0) << d.err;
    const auto jd = nlohmann::json::parse(d.out);
    ASSERT_EQ(jd.size(), 2u);
    EXPECT_TRUE(jd[1]["same_tokens"].get<bool>());
    EXPECT_GE(jd[1]["acceptance"].get<double>(), 0.9);
    EXPECT_GT(jd[1]["tokens_per_pass"].get<double>(), 2.0);
    // Markdown names the columns.
    const auto md = run_tandem("bench -m " + shell_quote(tiny_model()) + " -n 8 -r 1 -t 1 --spec-ngram", dir_);
    ASSERT_EQ(md.exit_code, 0) << md.err;
    EXPECT_TRUE(contains(md.out, "tokens/pass")) << md.out;
    EXPECT_TRUE(contains(md.out, "same tokens")) << md.out;
}

TEST_F(BenchCommand, SpeculativeBadInputIsOneLine) {
    const std::string m = "bench -m " + shell_quote(tiny_model()) + " -n 8 -r 1 -t 1";
    testing::expect_one_line_error(run_tandem(m + " --spec-ngram 2 --parallel 2", dir_), "--parallel");
    testing::expect_one_line_error(run_tandem(m + " --spec-ngram 2 -md " + shell_quote(tiny_model()), dir_), "-md");
    testing::expect_one_line_error(run_tandem(m + " --spec-ngram 2 --draft-max 64 -ub 32", dir_), "--draft-max");
    testing::expect_one_line_error(run_tandem(m + " -md " + shell_quote((dir_ / "none.gguf").string()), dir_),
                                   "none.gguf");
}

}  // namespace
}  // namespace tandem::tools
