// `tandem bench --ref-bench`: llama-bench's JSON read back, the arguments
// it is given for each row, the child process run without a shell, clean
// one-line errors for every way llama-bench can fail, and the command end
// to end against a fake llama-bench (a shell script that records its
// arguments and prints fixed JSON for the test it is asked for).
#include "tools/bench_ref.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/run_command.h"
#include "tests/scratch_cache.h"
#include "tests/test_paths.h"

namespace tandem::tools {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::error_of;
using testing::run_tandem;
using testing::shell_quote;

// As llama-bench b5163 prints -o json (fields abridged from its README's
// example; the parser reads only the test's shape and its speeds).
constexpr const char* kSample = R"([
  {
    "build_commit": "8cf427ff",
    "build_number": 5163,
    "cpu_info": "AMD Ryzen 7 7800X3D 8-Core Processor",
    "gpu_info": "",
    "backends": "CPU",
    "model_filename": "models/tiny-llama-Q8_0.gguf",
    "model_type": "llama ?B Q8_0",
    "model_size": 12582912,
    "model_n_params": 11340000,
    "n_batch": 2048,
    "n_ubatch": 512,
    "n_threads": 8,
    "type_k": "f16",
    "type_v": "f16",
    "n_gpu_layers": 0,
    "n_prompt": 512,
    "n_gen": 0,
    "n_depth": 4096,
    "test_time": "2025-04-24T11:58:50Z",
    "avg_ns": 72135640,
    "stddev_ns": 1453752,
    "avg_ts": 7100.002165,
    "stddev_ts": 140.341520,
    "samples_ns": [ 74601900, 71632900, 71745200, 71952700, 70745500 ],
    "samples_ts": [ 6863.1, 7147.55, 7136.37, 7115.79, 7237.21 ]
  },
  {
    "build_commit": "8cf427ff",
    "n_prompt": 0,
    "n_gen": 128,
    "n_depth": 0,
    "avg_ts": 118.881588,
    "stddev_ts": 1.041811,
    "samples_ns": [ 1075361300, 1065089400, 1071761200, 1081934900, 1089692600 ],
    "samples_ts": [ 119.03, 120.178, 119.43, 118.307, 117.464 ]
  }
]
)";

TEST(LlamaBenchJson, ParsesItsOutput) {
    const auto r = parse_llama_bench_json(kSample);
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0].n_prompt, 512);
    EXPECT_EQ(r[0].n_gen, 0);
    EXPECT_EQ(r[0].n_depth, 4096);
    EXPECT_DOUBLE_EQ(r[0].avg_ts, 7100.002165);
    EXPECT_DOUBLE_EQ(r[0].stddev_ts, 140.341520);
    ASSERT_EQ(r[0].samples_ts.size(), 5u);
    EXPECT_DOUBLE_EQ(r[0].samples_ts[4], 7237.21);
    EXPECT_EQ(r[1].n_gen, 128);
    EXPECT_DOUBLE_EQ(r[1].avg_ts, 118.881588);
    // A line printed before the array is skipped; n_depth is 0 where absent
    // (llama-bench before -d).
    const auto noted = parse_llama_bench_json(
        "warning: not compiled with GPU offload support\n"
        R"([{"n_prompt": 0, "n_gen": 16, "avg_ts": 5.5, "stddev_ts": 0, "samples_ts": [5.5]}])");
    ASSERT_EQ(noted.size(), 1u);
    EXPECT_EQ(noted[0].n_depth, 0);
    EXPECT_TRUE(parse_llama_bench_json("[]").empty());
}

TEST(LlamaBenchJson, RefusesWhatIsNotItsOutputOnOneLine) {
    const std::pair<const char*, const char*> cases[] = {
        {"", "found nothing"},
        {"| model | size |\n| --- | --- |\n", "a JSON array of test results"},
        {R"({"n_prompt": 16})", "a JSON array"},
        {"[\n  {\"n_prompt\": 16, \"n_gen\": 0,", "a JSON array"},  // cut short
        {R"([{"n_gen": 0, "avg_ts": 1, "stddev_ts": 0, "samples_ts": []}])", "\"n_prompt\" of result 1"},
        {R"([{"n_prompt": -1, "n_gen": 0, "avg_ts": 1, "stddev_ts": 0, "samples_ts": []}])", "whole number >= 0"},
        {R"([{"n_prompt": 16, "n_gen": 0, "avg_ts": "fast", "stddev_ts": 0, "samples_ts": []}])", "\"avg_ts\""},
        {R"([{"n_prompt": 16, "n_gen": 0, "avg_ts": 1, "stddev_ts": 0}])", "\"samples_ts\""},
        {R"([{"n_prompt": 16, "n_gen": 0, "avg_ts": 1, "stddev_ts": 0, "samples_ts": ["x"]}])", "numbers in"},
        {R"([7])", "an object as result 1"},
    };
    for (const auto& [text, needle] : cases) {
        const std::string e = error_of([&] { parse_llama_bench_json(text); });
        EXPECT_TRUE(contains(e, "--ref-bench: expected llama-bench -o json to print")) << text << ": " << e;
        EXPECT_TRUE(contains(e, needle)) << text << ": " << e;
        EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    }
}

BenchConfig ref_config(const std::string& device = "") {
    BenchConfig c;
    c.device = device;
    c.repetitions = 3;
    c.ref_bench = RefBenchConfig{"/x/llama-bench", "", "", false};
    return c;
}

BenchRow ref_row(int64_t n_prompt, int64_t n_gen, int64_t n_depth) {
    BenchRow r;
    r.n_prompt = n_prompt;
    r.n_gen = n_gen;
    r.n_depth = n_depth;
    r.test = BenchTest{n_prompt, n_gen, n_depth, 0}.name();
    r.threads = 6;
    r.ngl = 12;
    r.n_ubatch = 256;
    return r;
}

using Args = std::vector<std::string>;

TEST(LlamaBenchArgs, AskForTheRowsTestAlike) {
    const BenchConfig cpu = ref_config();
    EXPECT_EQ(llama_bench_args(cpu, "/m/a b.gguf", ref_row(512, 0, 4096)),
              (Args{"-m", "/m/a b.gguf", "-p", "512", "-n", "0", "-d", "4096", "-t", "6", "-r", "3", "-ngl", "0", "-o",
                    "json"}));
    EXPECT_EQ(llama_bench_args(cpu, "m.gguf", ref_row(0, 128, 0)),
              (Args{"-m", "m.gguf", "-p", "0", "-n", "128", "-d", "0", "-t", "6", "-r", "3", "-ngl", "0", "-o", "json"}));
    // pgP,N: llama-bench's -pg, with its default pp and tg tests turned off.
    EXPECT_EQ(llama_bench_args(cpu, "m.gguf", ref_row(16, 4, 0)),
              (Args{"-m", "m.gguf", "-p", "0", "-n", "0", "-pg", "16,4", "-d", "0", "-t", "6", "-r", "3", "-ngl", "0",
                    "-o", "json"}));
    // The stand-in device is host memory: llama-bench stays on the CPU.
    EXPECT_EQ(llama_bench_args(ref_config("cpu2"), "m.gguf", ref_row(0, 8, 0))[13], "0");
    // On a GPU the row's layers; -ub, -ctk and -ctv where given.
    BenchConfig gpu = ref_config("cuda0");
    gpu.ref_bench = RefBenchConfig{"/x/llama-bench", "q8_0", "q8_0", true};
    EXPECT_EQ(llama_bench_args(gpu, "m.gguf", ref_row(0, 8, 0)),
              (Args{"-m", "m.gguf", "-p", "0", "-n", "8", "-d", "0", "-t", "6", "-r", "3", "-ngl", "12", "-ub", "256",
                    "-ctk", "q8_0", "-ctv", "q8_0", "-o", "json"}));
}

void write_script(const fs::path& path, const std::string& body) {
    std::ofstream(path) << "#!/bin/sh\n" << body;
    fs::permissions(path, fs::perms::owner_all);
}

TEST(RefBenchBinary, MissingOrNotExecutableIsOneLine) {
    const auto dir = testing::scratch_dir();
    const std::string missing = error_of([&] { check_ref_bench_binary((dir / "none").string()); });
    EXPECT_TRUE(contains(missing, "--ref-bench: expected a llama-bench binary, found no file")) << missing;
    EXPECT_TRUE(contains(missing, (dir / "none").string())) << missing;
    EXPECT_TRUE(contains(error_of([&] { check_ref_bench_binary(dir.string()); }), "is not a file"));
    std::ofstream(dir / "plain") << "not a program\n";
    fs::permissions(dir / "plain", fs::perms::owner_read | fs::perms::owner_write);
    EXPECT_TRUE(contains(error_of([&] { check_ref_bench_binary((dir / "plain").string()); }), "is not executable"));
    write_script(dir / "ok", "exit 0\n");
    EXPECT_EQ(error_of([&] { check_ref_bench_binary((dir / "ok").string()); }), "<no error>");
}

// Arguments reach the program as they are: no shell reads them.
TEST(RunProcess, PassesArgumentsVerbatimAndCollectsBothStreams) {
    const auto dir = testing::scratch_dir();
    write_script(dir / "echo.sh", "printf '%s\\n' \"$@\"\necho 'to stderr' >&2\nexit 3\n");
    const Args args{"a b", "$(touch pwned)", "; touch pwned2", "'q'\"", ""};
    Args argv{(dir / "echo.sh").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    const ProcessResult r = run_process(argv);
    EXPECT_EQ(r.exit_code, 3);
    EXPECT_EQ(r.signal, 0);
    std::string expected;
    for (const std::string& a : args) expected += a + "\n";
    EXPECT_EQ(r.out, expected);
    EXPECT_EQ(r.err, "to stderr\n");
    EXPECT_FALSE(fs::exists("pwned"));
    EXPECT_FALSE(fs::exists("pwned2"));
    // More output than a pipe holds, on both streams at once.
    write_script(dir / "big.sh", "head -c 300000 /dev/zero | tr '\\0' a\nhead -c 300000 /dev/zero | tr '\\0' b >&2\n");
    const ProcessResult big = run_process({(dir / "big.sh").string()});
    EXPECT_EQ(big.exit_code, 0);
    EXPECT_EQ(big.out.size(), 300000u);
    EXPECT_EQ(big.err.size(), 300000u);
    write_script(dir / "killed.sh", "kill -9 $$\n");
    EXPECT_EQ(run_process({(dir / "killed.sh").string()}).signal, 9);
    EXPECT_TRUE(contains(error_of([&] { run_process({(dir / "none").string()}); }), "cannot start"));
}

TEST(RunRefBench, FillsTheRowOrFailsOnOneLine) {
    const auto dir = testing::scratch_dir();
    BenchConfig c = ref_config();
    const auto with = [&](const std::string& body) {
        write_script(dir / "lb.sh", body);
        c.ref_bench->binary = (dir / "lb.sh").string();
    };
    BenchRow row = ref_row(0, 128, 0);
    with(fmt::format("cat <<'EOF'\n{}EOF\n", kSample));
    run_ref_bench(c, "m.gguf", row);
    EXPECT_DOUBLE_EQ(row.llama_tps_mean.value_or(0), 118.881588);
    EXPECT_DOUBLE_EQ(row.llama_tps_sd.value_or(0), 1.041811);
    EXPECT_EQ(row.llama_samples.size(), 5u);

    BenchRow other = ref_row(16, 0, 32);
    const std::string none = error_of([&] { run_ref_bench(c, "m.gguf", other); });
    EXPECT_TRUE(contains(none, "expected llama-bench's result for pp16 @ d32 (n_prompt 16, n_gen 0, n_depth 32), "
                               "found pp512 @ d4096, tg128"))
        << none;
    with("echo 'llama_model_load: error loading model: tensor type 41 not supported' >&2\nexit 2\n");
    const std::string failed = error_of([&] { run_ref_bench(c, "m.gguf", other); });
    EXPECT_TRUE(contains(failed, "to exit 0 for pp16 @ d32, found exit 2 (llama_model_load: error loading model"))
        << failed;
    with("echo 'not json'\n");
    EXPECT_TRUE(contains(error_of([&] { run_ref_bench(c, "m.gguf", other); }), "found 'not json'"));
    with("kill -9 $$\n");
    EXPECT_TRUE(contains(error_of([&] { run_ref_bench(c, "m.gguf", other); }), "found signal 9"));
    for (const std::string& e : {none, failed}) EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

// A fake llama-bench: records each run's arguments (args.1, args.2, ...)
// and prints one result for the test asked for, 1000 t/s for pp and 100
// for tg at depth 0, 100 less and 10 less at any other depth.
constexpr const char* kFakeLlamaBench = R"SH(dir=$(dirname "$0")
n=$(cat "$dir/count" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$dir/count"
printf '%s\n' "$@" > "$dir/args.$n"
p=512; g=128; d=0; pg=""
while [ $# -gt 0 ]; do
  case "$1" in
    -p) p=$2; shift;; -n) g=$2; shift;; -d) d=$2; shift;; -pg) pg=$2; shift;;
  esac
  shift
done
if [ -n "$pg" ]; then p=${pg%,*}; g=${pg#*,}; fi
if [ "$g" = 0 ]; then ts=1000; else ts=100; fi
if [ "$d" != 0 ]; then ts=$((ts - ts / 10)); fi
echo "llama-bench: loading model" >&2
cat <<EOF
[
  {"build_commit": "fake", "n_threads": 1, "n_prompt": $p, "n_gen": $g, "n_depth": $d, "avg_ts": $ts.5, "stddev_ts": 1.25, "samples_ns": [1], "samples_ts": [$ts.5]}
]
EOF
)SH";

class BenchRefCommand : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = testing::scratch_dir();
        cache_.emplace(dir_);
        fake_ = dir_ / "fake" / "llama-bench";
        fs::create_directories(fake_.parent_path());
        write_script(fake_, kFakeLlamaBench);
        // A model path a shell would misread: it must reach llama-bench whole.
        const fs::path odd_dir = dir_ / "models; touch pwned-by-model-path #";
        fs::create_directories(odd_dir);
        model_ = odd_dir / "tiny 'llama'.gguf";
        fs::copy_file(testing::test_data("tiny-llama-Q4_K_M.gguf"), model_);
    }
    void TearDown() override { cache_.reset(); }
    Args recorded(int run) const {
        std::ifstream in(fake_.parent_path() / fmt::format("args.{}", run));
        Args out;
        for (std::string line; std::getline(in, line);) out.push_back(line);
        return out;
    }
    std::string bench(const std::string& rest) const {
        return "bench -m " + shell_quote(model_.string()) + " --ref-bench " + shell_quote(fake_.string()) + " " + rest;
    }
    fs::path dir_, fake_, model_;
    std::optional<testing::ScratchCache> cache_;
};

TEST_F(BenchRefCommand, TakesTurnsWithLlamaBenchAndMergesItsRows) {
    const auto svg = dir_ / "depth.svg";
    const auto r = run_tandem(bench("-p 16 -n 4 -d 0,32 -r 1 -t 1 -o json --plot " + shell_quote(svg.string())), dir_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j.size(), 4u);
    const std::pair<const char*, double> expected[] = {
        {"pp16", 1000.5}, {"pp16 @ d32", 900.5}, {"tg4", 100.5}, {"tg4 @ d32", 90.5}};
    for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(j[i]["test"], expected[i].first);
        EXPECT_DOUBLE_EQ(j[i]["llama_tps_mean"].get<double>(), expected[i].second) << i;
        EXPECT_DOUBLE_EQ(j[i]["llama_tps_sd"].get<double>(), 1.25);
        EXPECT_EQ(j[i]["llama_samples"], nlohmann::json::array({expected[i].second}));
        EXPECT_DOUBLE_EQ(j[i]["tps_vs_llama"].get<double>(), j[i]["tps_mean"].get<double>() / expected[i].second);
    }
    // One llama-bench run per test, in Tandem's order, each asked for that
    // test alike.
    const std::string m = model_.string();
    EXPECT_EQ(recorded(1), (Args{"-m", m, "-p", "16", "-n", "0", "-d", "0", "-t", "1", "-r", "1", "-ngl", "0", "-o", "json"}));
    EXPECT_EQ(recorded(2), (Args{"-m", m, "-p", "16", "-n", "0", "-d", "32", "-t", "1", "-r", "1", "-ngl", "0", "-o", "json"}));
    EXPECT_EQ(recorded(3), (Args{"-m", m, "-p", "0", "-n", "4", "-d", "0", "-t", "1", "-r", "1", "-ngl", "0", "-o", "json"}));
    EXPECT_EQ(recorded(4), (Args{"-m", m, "-p", "0", "-n", "4", "-d", "32", "-t", "1", "-r", "1", "-ngl", "0", "-o", "json"}));
    EXPECT_TRUE(recorded(5).empty());
    EXPECT_FALSE(fs::exists("pwned-by-model-path"));
    // Turns: each test's Tandem row comes before llama-bench's next test.
    const std::string name = model_.filename().string();
    size_t at = 0;
    for (const char* test : {"pp16", "pp16 @ d32", "tg4", "tg4 @ d32"}) {
        const size_t llama = r.err.find(fmt::format("llama-bench {} {}\n", name, test), at);
        ASSERT_NE(llama, std::string::npos) << test << " in " << r.err;
        const size_t tandem = r.err.find(fmt::format("{}: ", test), llama);
        ASSERT_NE(tandem, std::string::npos) << test << " in " << r.err;
        EXPECT_TRUE(contains(r.err.substr(tandem, r.err.find('\n', tandem) - tandem), "llama.cpp")) << r.err;
        at = tandem;
    }
    EXPECT_FALSE(contains(r.err, "loading model"));  // llama-bench's own log stays out
    // The chart: both lines in both panels.
    const std::string text = testing::slurp(svg);
    for (const char* line : {"tandem-pp16", "llama-pp16", "tandem-tg4", "llama-tg4"}) {
        EXPECT_TRUE(contains(text, fmt::format("<polyline class=\"{}\"", line))) << line;
    }

    const auto md = run_tandem(bench("-p 8 -n 0 -r 1 -t 1"), dir_);
    ASSERT_EQ(md.exit_code, 0) << md.err;
    EXPECT_TRUE(contains(md.out, "llama.cpp t/s")) << md.out;
    EXPECT_TRUE(contains(md.out, "tandem/llama")) << md.out;
    EXPECT_TRUE(contains(md.out, "1000.50 ± 1.25")) << md.out;
    const auto csv = run_tandem(bench("-p 8 -n 0 -r 1 -t 1 -o csv"), dir_);
    ASSERT_EQ(csv.exit_code, 0) << csv.err;
    EXPECT_TRUE(contains(csv.out, ",1000.5,1.25,")) << csv.out;
}

TEST_F(BenchRefCommand, BadReferenceIsAOneLineError) {
    testing::expect_one_line_error(
        run_tandem("bench -m " + shell_quote(model_.string()) + " -p 8 -n 0 -r 1 --ref-bench " +
                       shell_quote((dir_ / "none").string()),
                   dir_),
        "--ref-bench: expected a llama-bench binary, found no file");
    testing::expect_one_line_error(run_tandem(bench("--parallel 1,2 -n 4 -r 1"), dir_), "--parallel");
    testing::expect_one_line_error(run_tandem(bench("-p 8 -n 0 -r 1 --plot " + shell_quote((dir_ / "d.svg").string())), dir_),
                                   "expected -d with two or more depths");
    // llama-bench failing mid-run: exit 1 and the error as the last line,
    // after the progress lines of what ran.
    write_script(fake_, "echo 'error: failed to load model' >&2\nexit 2\n");
    const auto r = run_tandem(bench("-p 8 -n 0 -r 1 -t 1"), dir_);
    EXPECT_FALSE(r.signaled) << r.err;
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    const std::string last = r.err.substr(r.err.rfind('\n', r.err.size() - 2) + 1);
    EXPECT_EQ(last.rfind("tandem: error: --ref-bench: expected", 0), 0u) << r.err;
    EXPECT_TRUE(contains(last, "found exit 2 (error: failed to load model)")) << r.err;
    write_script(fake_, "echo '| model | t/s |'\n");
    const auto md = run_tandem(bench("-p 8 -n 0 -r 1 -t 1"), dir_);
    EXPECT_EQ(md.exit_code, 1) << md.err;
    EXPECT_TRUE(contains(md.err, "tandem: error: --ref-bench: expected llama-bench -o json to print a JSON array"))
        << md.err;
}

}  // namespace
}  // namespace tandem::tools
