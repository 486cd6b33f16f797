// `tandem bench` option parsing: lists, ranges, -pg pairs and the checks
// that turn bad input into one-line errors.
#include "tools/bench_args.h"

#include <gtest/gtest.h>

#include "tests/test_paths.h"

namespace tandem::tools {
namespace {

using testing::contains;
using testing::error_of;

BenchArgs args_with_model() {
    BenchArgs a;
    a.models = {"model.gguf"};
    return a;
}

TEST(BenchArgs, ParsesListsRangesAndSteps) {
    EXPECT_EQ(parse_int_list("8", "-p"), (std::vector<int64_t>{8}));
    EXPECT_EQ(parse_int_list("128,512", "-p"), (std::vector<int64_t>{128, 512}));
    EXPECT_EQ(parse_int_list("0-3", "-ngl"), (std::vector<int64_t>{0, 1, 2, 3}));
    EXPECT_EQ(parse_int_list("0-32+8", "-ngl"), (std::vector<int64_t>{0, 8, 16, 24, 32}));
    EXPECT_EQ(parse_int_list("0-10+4", "-ngl"), (std::vector<int64_t>{0, 4, 8}));  // the end need not be reached
    EXPECT_EQ(parse_int_list("1, 4-5 ,7-7", "-t"), (std::vector<int64_t>{1, 4, 5, 7}));
}

TEST(BenchArgs, RejectsBadListsWithTheFlagAndTheText) {
    for (const char* bad : {"5,,x", "", ",", "x", "-1", "3-1", "0-8+0", "0-8+", "8+2", "1.5", "0-8-9", "+3"}) {
        const std::string e = error_of([&] { parse_int_list(bad, "-p"); });
        EXPECT_TRUE(contains(e, "-p")) << bad << ": " << e;
        EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    }
    EXPECT_TRUE(contains(error_of([] { parse_int_list("0-100000000", "-ngl"); }), "more than"));
}

TEST(BenchArgs, NglListMixesAutoAndNumbers) {
    const auto v = parse_ngl_list("auto,0-2");
    ASSERT_EQ(v.size(), 4u);
    EXPECT_FALSE(v[0].has_value());
    EXPECT_EQ(v[1], 0);
    EXPECT_EQ(v[3], 2);
    EXPECT_TRUE(contains(error_of([] { parse_ngl_list("auto,x"); }), "-ngl"));
}

TEST(BenchArgs, PromptGenIsExactlyTwoPositiveNumbers) {
    EXPECT_EQ(parse_prompt_gen("512,128"), (std::pair<int64_t, int64_t>{512, 128}));
    for (const char* bad : {"512", "512,128,1", "0,128", "a,b", "512,"}) {
        EXPECT_TRUE(contains(error_of([&] { parse_prompt_gen(bad); }), "-pg")) << bad;
    }
}

TEST(BenchArgs, DefaultsAreThoseOfLlamaBench) {
    const BenchConfig c = make_bench_config(args_with_model());
    ASSERT_EQ(c.tests.size(), 2u);
    EXPECT_EQ(c.tests[0].name(), "pp512");
    EXPECT_EQ(c.tests[1].name(), "tg128");
    EXPECT_EQ(c.repetitions, 5);
    EXPECT_EQ(c.format, OutputFormat::Markdown);
    ASSERT_EQ(c.n_gpu_layers.size(), 1u);
    EXPECT_FALSE(c.n_gpu_layers[0].has_value());  // auto
    EXPECT_EQ(c.threads, (std::vector<int>{0}));
    EXPECT_EQ(c.n_ubatch, (std::vector<int64_t>{512}));
    EXPECT_EQ(c.n_ctx(), 512);
}

TEST(BenchArgs, BuildsTestsFromPromptGenAndRepeatedFlags) {
    BenchArgs a = args_with_model();
    a.n_prompt = {"16", "32"};
    a.n_gen = {"0"};  // drops tg, as llama-bench
    a.prompt_gen = {"8,4"};
    const BenchConfig c = make_bench_config(a);
    ASSERT_EQ(c.tests.size(), 3u);
    EXPECT_EQ(c.tests[0].name(), "pp16");
    EXPECT_EQ(c.tests[1].name(), "pp32");
    EXPECT_EQ(c.tests[2].name(), "pp8+tg4");
    EXPECT_EQ(c.n_ctx(), 32);
}

TEST(BenchArgs, DepthRunsEveryTestAfterThatManyCachedTokens) {
    BenchArgs a = args_with_model();
    a.n_prompt = {"64"};
    a.n_gen = {"16"};
    a.n_depth = {"0,1024"};
    const BenchConfig c = make_bench_config(a);
    ASSERT_EQ(c.tests.size(), 4u);
    EXPECT_EQ(c.tests[0].name(), "pp64");
    EXPECT_EQ(c.tests[1].name(), "pp64 @ d1024");
    EXPECT_EQ(c.tests[2].name(), "tg16");
    EXPECT_EQ(c.tests[3].name(), "tg16 @ d1024");
    EXPECT_EQ(c.tests[3].n_depth, 1024);
    EXPECT_EQ(c.n_ctx(), 1024 + 64);  // room for the depth and the longest test
    a.n_depth = {"-5"};
    EXPECT_THROW(make_bench_config(a), tandem::Error);
    a.n_depth = {"x"};
    EXPECT_THROW(make_bench_config(a), tandem::Error);
}

TEST(BenchArgs, RejectsBadInputOnOneLine) {
    const auto error_for = [](auto&& edit) {
        BenchArgs a = args_with_model();
        edit(a);
        return error_of([&] { make_bench_config(a); });
    };
    EXPECT_TRUE(contains(error_of([] { make_bench_config(BenchArgs{}); }), "no model"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) { a.repetitions = 0; }), "-r"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) { a.output = "xml"; }), "-o"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) { a.n_prompt = {"5,,x"}; }), "-p"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) { a.threads = {"0"}; }), "-t"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) { a.n_ubatch = {"0"}; }), "-ub"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) { a.cache_types.both = "q4"; }), "--cache-type"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) { a.n_gpu_layers = {"2"}; }), "--device"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) { a.device = "cpu2"; }), "--vram"));  // auto needs a capacity
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) { a.device = "tpu"; }), "--device"));
    // Several devices as run takes them: -ts and --vram one per device.
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) {
                             a.device = "cpu2,cpu3";
                             a.tensor_split = "1,2,3";
                             a.n_gpu_layers = {"99"};
                         }),
                         "-ts"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) {
                             a.device = "cpu2,cpu3";
                             a.vram = "1GiB,1GiB,1GiB";
                         }),
                         "one per device"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) {
                             a.device = "cpu2,cpu3";
                             a.split_mode = "row";
                         }),
                         "-sm row"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) {
                             a.device = "cpu2,cpu3";
                             a.n_gpu_layers = {"99"};
                             a.ref_bench = "llama-bench";
                         }),
                         "--ref-bench: compares one device"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) { a.vram = "1GiB"; }), "--device"));
    // A size without a unit is refused, not read as bytes.
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) {
                             a.device = "cpu2";
                             a.vram = "8";
                         }),
                         "--vram"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) {
                             a.n_prompt = {"0"};
                             a.n_gen = {"0"};
                         }),
                         "no test"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) { a.sweep = true; }), "--device"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) {
                             a.device = "cpu2";
                             a.sweep = true;
                             a.sweep_step = "0";
                         }),
                         "--sweep-ngl"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) {
                             a.device = "cpu2";
                             a.sweep = true;
                             a.n_gpu_layers = {"1"};
                         }),
                         "drop -ngl"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) { a.plot = "x.svg"; }), "--sweep-ngl"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) {
                             a.device = "cpu2";
                             a.sweep = true;
                             a.plot = "chart.png";
                         }),
                         ".svg"));
}

TEST(BenchArgs, ParallelListsStreamCountsFrom1To64) {
    EXPECT_EQ(parse_parallel_list("1,4"), (std::vector<int64_t>{1, 4}));
    EXPECT_EQ(parse_parallel_list("1-8+2,64"), (std::vector<int64_t>{1, 3, 5, 7, 64}));
    for (const char* bad : {"0", "65", "1,0", "1,65", "x", "", "1,,4", "-1", "4-2", "1.5", "4x"}) {
        const std::string e = error_of([&] { parse_parallel_list(bad); });
        EXPECT_TRUE(contains(e, "--parallel")) << bad << ": " << e;
        EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    }
    EXPECT_TRUE(contains(error_of([] { parse_parallel_list("0"); }), "from 1 to 64"));
    EXPECT_TRUE(contains(error_of([] { parse_parallel_list("2,100"); }), "100"));
}

TEST(BenchArgs, ParallelReplacesTheTestsAndSizesTheContext) {
    BenchArgs a = args_with_model();
    a.parallel = {"1,4"};
    BenchConfig c = make_bench_config(a);
    // Defaults: a 32-token prompt per stream, 128 decode steps.
    ASSERT_EQ(c.tests.size(), 2u);
    EXPECT_EQ(c.tests[0].name(), "tg128 x1 @ p32");
    EXPECT_EQ(c.tests[1].name(), "tg128 x4 @ p32");
    EXPECT_EQ(c.tests[1].n_parallel, 4);
    EXPECT_EQ(c.tests[1].n_prompt, 32);
    EXPECT_EQ(c.tests[1].n_gen, 128);
    EXPECT_EQ(c.tests[1].n_depth, 0);
    EXPECT_EQ(c.n_ctx(), 4 * (32 + 128));  // every stream's cells
    EXPECT_EQ(c.n_seq_max(), 4);

    a.parallel = {"2", "8"};  // repeats join
    a.n_prompt = {"8,0"};
    a.n_gen = {"4"};
    c = make_bench_config(a);
    ASSERT_EQ(c.tests.size(), 4u);
    EXPECT_EQ(c.tests[0].name(), "tg4 x2 @ p8");
    EXPECT_EQ(c.tests[1].name(), "tg4 x8 @ p8");
    EXPECT_EQ(c.tests[2].name(), "tg4 x2");  // -p 0: no prompt
    EXPECT_EQ(c.tests[3].n_parallel, 8);
    EXPECT_EQ(c.n_ctx(), 8 * (8 + 4));
    EXPECT_EQ(c.n_seq_max(), 8);

    // -d: several streams at depth, each after depth + prompt tokens.
    a.parallel = {"4"};
    a.n_prompt = {"32"};
    a.n_gen = {"16"};
    a.n_depth = {"0,4096"};
    c = make_bench_config(a);
    ASSERT_EQ(c.tests.size(), 2u);
    EXPECT_EQ(c.tests[0].name(), "tg16 x4 @ p32");
    EXPECT_EQ(c.tests[1].name(), "tg16 x4 @ p32 d4096");
    EXPECT_EQ(c.tests[1].n_depth, 4096);
    EXPECT_EQ(c.n_ctx(), 4 * (4096 + 32 + 16));

    // Without --parallel nothing changes: one sequence.
    EXPECT_EQ(make_bench_config(args_with_model()).n_seq_max(), 1);
    EXPECT_EQ(make_bench_config(args_with_model()).tests[1].n_parallel, 0);
}

TEST(BenchArgs, ParallelRejectsWhatDoesNotCombine) {
    const auto error_for = [](auto&& edit) {
        BenchArgs a = args_with_model();
        a.parallel = {"1,2"};
        edit(a);
        return error_of([&] { make_bench_config(a); });
    };
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) { a.parallel = {"0"}; }), "--parallel"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) { a.parallel = {"65"}; }), "--parallel"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) { a.parallel = {"two"}; }), "--parallel"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) { a.n_gen = {"0"}; }), "-n 0"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) { a.prompt_gen = {"8,4"}; }), "-pg"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) { a.n_depth = {"-16"}; }), "-d"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) { a.n_prompt = {"x"}; }), "-p"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& a) {
                             a.device = "cpu2";
                             a.vram = "2MiB";
                             a.sweep = true;
                             a.plot = "chart.svg";
                         }),
                         "--parallel"));
    BenchArgs zero_depth = args_with_model();
    zero_depth.parallel = {"2"};
    zero_depth.n_depth = {"0"};
    EXPECT_EQ(make_bench_config(zero_depth).tests.size(), 1u);
}

TEST(BenchArgs, SweepTakesAnOptionalStepAndAcceptsAnSvgPlot) {
    BenchArgs a = args_with_model();
    a.device = "cpu2";
    a.vram = "2MiB";
    a.sweep = true;
    a.plot = "/tmp/chart.SVG";
    BenchConfig c = make_bench_config(a);
    EXPECT_EQ(c.sweep_step, 1);
    EXPECT_EQ(c.vram, std::vector<uint64_t>{2u << 20});
    EXPECT_EQ(c.plot_path, "/tmp/chart.SVG");
    a.sweep_step = "4";
    c = make_bench_config(a);
    EXPECT_EQ(c.sweep_step, 4);
}

// --plot without --sweep-ngl draws tok/s against depth: it takes two or
// more depths and a pp or tg test, and says so otherwise.
TEST(BenchArgs, PlotWithoutSweepDrawsDepthsAndNeedsTwo) {
    BenchArgs a = args_with_model();
    a.plot = "depth.svg";
    a.n_depth = {"0,32"};
    BenchConfig c = make_bench_config(a);
    EXPECT_EQ(c.plot_path, "depth.svg");
    EXPECT_FALSE(c.sweep_step.has_value());
    a.n_depth = {"0", "4096,16384"};  // repeated -d joins
    EXPECT_EQ(make_bench_config(a).plot_path, "depth.svg");

    for (const char* one : {"", "4096", "0,0"}) {
        BenchArgs b = args_with_model();
        b.plot = "depth.svg";
        if (*one != '\0') b.n_depth = {one};
        const std::string e = error_of([&] { make_bench_config(b); });
        EXPECT_TRUE(contains(e, "expected -d with two or more depths")) << one << ": " << e;
        EXPECT_TRUE(contains(e, "--sweep-ngl")) << e;
        EXPECT_TRUE(contains(e, "found 1 depth")) << e;
        EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    }
    BenchArgs pg = args_with_model();
    pg.plot = "depth.svg";
    pg.n_depth = {"0,32"};
    pg.n_prompt = {"0"};
    pg.n_gen = {"0"};
    pg.prompt_gen = {"8,4"};
    EXPECT_TRUE(contains(error_of([&] { make_bench_config(pg); }), "only -pg tests"));
    BenchArgs par = args_with_model();
    par.plot = "depth.svg";
    par.parallel = {"1,2"};
    EXPECT_TRUE(contains(error_of([&] { make_bench_config(par); }), "drop --parallel"));
}

// --ref-bench: what llama-bench is asked for alike, and what it cannot be.
TEST(BenchArgs, RefBenchTakesWhatLlamaBenchCanCompare) {
    BenchArgs a = args_with_model();
    EXPECT_FALSE(make_bench_config(a).ref_bench.has_value());
    a.ref_bench = "/opt/llama.cpp/llama-bench";
    BenchConfig c = make_bench_config(a);
    ASSERT_TRUE(c.ref_bench.has_value());
    EXPECT_EQ(c.ref_bench->binary, "/opt/llama.cpp/llama-bench");
    EXPECT_EQ(c.ref_bench->cache_k, "");  // not given: llama-bench's default is Tandem's
    EXPECT_FALSE(c.ref_bench->pass_ubatch);
    a.cache_types.both = "q8_0";
    a.n_ubatch = {"128"};
    c = make_bench_config(a);
    EXPECT_EQ(c.ref_bench->cache_k, "q8_0");
    EXPECT_EQ(c.ref_bench->cache_v, "q8_0");
    EXPECT_TRUE(c.ref_bench->pass_ubatch);

    const auto error_for = [](auto&& edit) {
        BenchArgs b = args_with_model();
        b.ref_bench = "llama-bench";
        edit(b);
        return error_of([&] { make_bench_config(b); });
    };
    EXPECT_TRUE(contains(error_for([](BenchArgs& b) { b.parallel = {"1,2"}; }), "--parallel"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& b) { b.cache_types.both = "f16,q8_0"; }), "one cache type"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& b) { b.pipeline = true; }), "--pipeline"));
    EXPECT_TRUE(contains(error_for([](BenchArgs& b) { b.placement.cpu_moe = true; }), "--cpu-moe"));
}

}  // namespace
}  // namespace tandem::tools
