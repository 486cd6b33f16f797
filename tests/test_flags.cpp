// Flags as llama.cpp users type them (tools/llama_flags.h): every flag in
// the tables below is either accepted (the command runs on the tiny model)
// or refused with exit 1 and one line naming the Tandem equivalent. Parse
// errors of any kind are one line and exit 1 too; --help exits 0.
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels_cuda/cuda_api.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"
#include "tools/llama_flags.h"
#include "tools/split.h"

namespace tandem::tools {
namespace {

using testing::contains;
using testing::error_of;
using testing::run_tandem;
using testing::shell_quote;
namespace tq = tandem::quant;

std::string tiny() { return shell_quote(testing::test_data("tiny-llama-Q4_K_M.gguf").string()); }

// Accepted: the command runs to the end, and says nothing is wrong.
void expect_runs(const testing::CommandResult& r, const std::string& what) {
    EXPECT_FALSE(r.signaled) << what << ": signal " << r.signal;
    EXPECT_EQ(r.exit_code, 0) << what << ": " << r.err;
    EXPECT_FALSE(contains(r.err, "error")) << what << ": " << r.err;
}

struct Refused {
    const char* args;
    const char* needle;  // what the one line must name
};

// ---- the rewrite and the small parsers ----

TEST(LlamaFlags, RewritesExactOneDashWordsOnly) {
    const auto out = rewrite_llama_flags({"run", "-ngl", "99", "-ctk", "q8_0", "-p", "-fa is text", "-fa"});
    EXPECT_EQ(out, (std::vector<std::string>{"run", "--n-gpu-layers", "99", "--cache-type-k", "q8_0", "-p",
                                             "-fa is text", "--flash-attn"}));
    for (const LlamaSpelling& s : llama_spellings()) {
        EXPECT_EQ(s.llama.substr(0, 1), "-");
        EXPECT_NE(s.llama.substr(0, 2), "--") << s.llama;
        EXPECT_EQ(s.tandem.substr(0, 2), "--") << s.tandem;
    }
}

TEST(LlamaFlags, SwitchValuesAsLlamaCppTakesThem) {
    for (const char* on : {"", "1", "on", "true", "enabled", "ON"}) EXPECT_TRUE(parse_switch("-fa", on)) << on;
    for (const char* off : {"0", "off", "false", "disabled"}) EXPECT_FALSE(parse_switch("-fa", off)) << off;
    EXPECT_TRUE(contains(error_of([] { parse_switch("-mmp", "2"); }), "-mmp"));
}

TEST(LlamaFlags, CacheTypesKAndVApart) {
    using tandem::model::CacheType;
    using tq::Type;
    EXPECT_EQ(cache_type_of({}), (CacheType{Type::F16, Type::F16}));
    EXPECT_EQ(cache_type_of({"q4_0", "", ""}), (CacheType{Type::Q4_0, Type::Q4_0}));
    EXPECT_EQ(cache_type_of({"f16", "q8_0", ""}), (CacheType{Type::Q8_0, Type::F16}));
    EXPECT_EQ(cache_type_of({"f16", "", "q5_1"}), (CacheType{Type::F16, Type::Q5_1}));
    EXPECT_EQ(cache_type_of({"q4_0", "iq4_nl", "bf16"}), (CacheType{Type::IQ4_NL, Type::BF16}));
    // Every name llama.cpp's --cache-type-k takes.
    const std::pair<const char*, Type> names[] = {{"f32", Type::F32},   {"f16", Type::F16},       {"bf16", Type::BF16},
                                                  {"q8_0", Type::Q8_0}, {"q4_0", Type::Q4_0},     {"q4_1", Type::Q4_1},
                                                  {"iq4_nl", Type::IQ4_NL}, {"q5_0", Type::Q5_0}, {"q5_1", Type::Q5_1}};
    for (const auto& [name, type] : names) EXPECT_EQ(cache_type_of({"f16", name, name}).k, type) << name;
    const std::string e = error_of([] { cache_type_of({"f16", "q3_K", ""}); });
    EXPECT_TRUE(contains(e, "-ctk: expected a KV cache type")) << e;
    EXPECT_TRUE(contains(e, "found 'q3_K'")) << e;
    EXPECT_TRUE(contains(e, "iq4_nl")) << e;
    EXPECT_TRUE(contains(error_of([] { cache_type_of({"q4", "", ""}); }), "--cache-type: expected")) << e;
    EXPECT_TRUE(contains(error_of([] { cache_type_of({"f16,q8_0", "", ""}); }), "found a list"));
    // bench's lists cross, K outer, as llama-bench's.
    const auto pairs = cache_types_of({"f16", "f16,q8_0", "q4_0,q5_0"});
    ASSERT_EQ(pairs.size(), 4u);
    EXPECT_EQ(pairs[1], (CacheType{Type::F16, Type::Q5_0}));
    EXPECT_EQ(pairs[2], (CacheType{Type::Q8_0, Type::Q4_0}));
}

// ---- tandem run ----

TEST(RunFlags, LlamaCliFlagsAreAccepted) {
    const auto dir = testing::scratch_dir();
    const std::string base = "run -m " + tiny() + " -p Hello -n 1 --temp 0 ";
    for (const char* flags : {
             "-fa", "-fa on", "-fa off", "-fa auto", "--flash-attn", "-ctk f16", "-ctk q8_0 -ctv q8_0",
             "--cache-type-k q8_0 --cache-type-v q8_0", "--cache-type q8_0", "-ts 1", "-ts 1,0", "-sm none",
             "-sm layer", "-mg 0", "-nkvo", "-nkvo 1", "--no-kv-offload", "--no-warmup", "--no-mmap", "--mmap",
             "-b 512", "-ub 64", "-c 256", "-t 1", "-s 42", "--seed 42", "-s -1", "-no-cnv", "-st", "-co",
             "-ngl 0", "--top-k 10 --top-p 0.9 --min-p 0.1 --repeat-penalty 1.1", "--ignore-eos",
             "--no-display-prompt", "-dev cpu2 --vram 1GiB -ngl 1", "-cmoe", "-ncmoe 0", "-ot blk=cpu",
         }) {
        expect_runs(run_tandem(base + flags, dir), flags);
    }
}

TEST(RunFlags, NumaIsAcceptedWithOneNote) {
    const auto dir = testing::scratch_dir();
    const auto r = run_tandem("run -m " + tiny() + " -p Hello -n 1 --temp 0 --numa distribute", dir);
    expect_runs(r, "--numa");
    EXPECT_TRUE(contains(r.err, "tandem: warning: --numa is ignored")) << r.err;
}

TEST(RunFlags, LlamaCliFlagsWithoutAnEquivalentAreRefusedOnOneLine) {
    const auto dir = testing::scratch_dir();
    const std::string base = "run -m " + tiny() + " -p Hello -n 1 ";
    const Refused cases[] = {
        {"-cnv", "-cnv (--conversation): tandem run completes one prompt"},
        {"--conversation", "use tandem chat"},
        {"-i", "tandem chat"},
        {"--interactive", "tandem chat"},
        {"-if", "tandem chat"},
        {"-sys 'Be brief'", "-sys (--system-prompt)"},
        {"--system-prompt x", "tandem chat -sys TEXT"},
        {"-md draft.gguf", "draft.gguf"},
        {"--model-draft draft.gguf", "draft.gguf"},
        {"-ctk q3_K", "-ctk: expected a KV cache type (f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1), found 'q3_K'"},
        {"-ctv q4", "-ctv: expected a KV cache type"},
        {"--cache-type f8", "found 'f8'"},
        {"-ts 1,1", "--device names 0"},
        {"-ts 0,1,2", "-ts 0,1,2 shares the layers between 3 devices"},
        {"--device cpu2,cpu3 -ts 1,1,1", "between 3 devices, but --device names 2"},
        {"--device cpu2,cpu2", "names cpu2 twice"},
        {"--device cpu2,cpu3 -sm none", "-sm none uses one device"},
        {"--device cpu2,cpu3 --vram 1G,1G,1G", "one per device of --device (2)"},
        {"-sm row", "row is not supported"},
        {"-mg 1", "--device cuda1"},
        {"-fa maybe", "expected on, off or auto"},
        {"-nkvo 2", "-nkvo"},
        {"-tb 4", "give -t"},
        {"-hf org/model", "give it with -m"},
        {"--lora a.gguf", "LoRA"},
        {"--port 8080", "tandem serve -m MODEL takes it"},
        {"-np 4", "tandem serve"},
        {"--chat-template chatml", "tandem chat and tandem serve apply"},
        {"--mirostat 2", "--temp, --top-k"},
        {"-n -2", "-n"},
        {"-s abc", "--seed"},
        {"-c abc", "--ctx-size"},
        {"--foo", "unknown flag '--foo'; see tandem run --help"},
        {"--flash-attention", "unknown flag '--flash-attention'"},
        {"-xyz", "unknown flag '-xyz'"},
        {"-p again", "--prompt given more than once"},
    };
    for (const Refused& c : cases) {
        SCOPED_TRACE(c.args);
        testing::expect_one_line_error(run_tandem(base + c.args, dir), c.needle);
    }
}

TEST(RunFlags, HelpNamesTheLlamaCppSpellings) {
    const auto dir = testing::scratch_dir();
    const auto r = run_tandem("run --help", dir);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    for (const char* s : {"-ngl", "-ctk", "-ctv", "-fa", "-nkvo", "-ub", "-ts", "-sm", "-mg", "flash-style",
                          "llama.cpp flags", "--numa", "-cnv", "-md"}) {
        EXPECT_TRUE(contains(r.out, s)) << s;
    }
}

TEST(RunFlags, PromptFromStdinAndUntilTheEnd) {
    const auto dir = testing::scratch_dir();
    const auto prompt = dir / "prompt.txt";
    std::ofstream(prompt) << "Once upon a time";
    const std::string cmd = shell_quote(testing::tandem_binary().string()) + " run -m " + tiny() +
                            " -f - -n 2 --temp 0 <" + shell_quote(prompt.string()) + " >" +
                            shell_quote((dir / "out.txt").string()) + " 2>" + shell_quote((dir / "err.txt").string());
    ASSERT_EQ(std::system(cmd.c_str()), 0) << testing::slurp(dir / "err.txt");
    EXPECT_TRUE(contains(testing::slurp(dir / "out.txt"), "Once upon a time"));
    // -n -1: until the end of the text or of the context.
    const auto r = run_tandem("run -m " + tiny() + " -p Hello -n -1 -c 12 --temp 0", dir);
    expect_runs(r, "-n -1");
}

TEST(RunFlags, ADrawnSeedIsPrinted) {
    const auto dir = testing::scratch_dir();
    const auto drawn = run_tandem("run -m " + tiny() + " -p Hello -n 1 --temp 0.8", dir);
    expect_runs(drawn, "no seed");
    EXPECT_TRUE(contains(drawn.err, "seed: ")) << drawn.err;
    const auto given = run_tandem("run -m " + tiny() + " -p Hello -n 1 --temp 0.8 -s 7", dir);
    expect_runs(given, "-s 7");
    EXPECT_FALSE(contains(given.err, "seed: ")) << given.err;
}

// Without a usable GPU, -ngl N and --device cuda0 cost one warning naming
// the reason, never a CUDA call or a source path, and the CPU runs.
TEST(RunFlags, NoGpuIsOneWarningAndTheCpu) {
    setenv("TANDEM_CUDA_EMULATE", "0", 1);  // in the emulated build: the real plugin, which finds no GPU here
    std::string why;
    if (!cuda::list_devices(&why).empty()) GTEST_SKIP() << "a GPU is present here";
    const auto dir = testing::scratch_dir();
    for (const char* flags : {"-ngl 99", "--device cuda0", "--device cuda0 --vram 1GiB", "--device cuda0 -ngl 5"}) {
        const auto r = run_tandem("run -m " + tiny() + " -p Hello -n 1 --temp 0 " + flags, dir);
        expect_runs(r, flags);
        EXPECT_TRUE(contains(r.err, "tandem: warning: ")) << r.err;
        EXPECT_TRUE(contains(r.err, "running on the CPU")) << r.err;
        EXPECT_FALSE(contains(r.err, "CUDA call")) << r.err;
        EXPECT_FALSE(contains(r.err, ".cpp")) << r.err;
        EXPECT_FALSE(contains(r.err, ".cu:")) << r.err;
    }
}

// ---- tandem bench ----

TEST(BenchFlags, LlamaBenchFlagsAreAccepted) {
    const auto dir = testing::scratch_dir();
    const std::string base = "bench -m " + tiny() + " -p 4 -n 2 -r 1 -t 1 -o json ";
    for (const char* flags : {"-fa 1", "-fa 0", "-mmp 0", "-mmp 1", "-nkvo 1", "-nkvo 0", "-ctk q8_0 -ctv q8_0",
                              "-sm layer", "-mg 0", "-ts 1", "-embd 0", "-d 2", "-pg 2,1", "-b 64 -ub 2",
                              "--numa distribute", "-ngl 0"}) {
        expect_runs(run_tandem(base + flags, dir), flags);
    }
}

TEST(BenchFlags, LlamaBenchFlagsWithoutAnEquivalentAreRefusedOnOneLine) {
    const auto dir = testing::scratch_dir();
    const std::string base = "bench -m " + tiny() + " -p 4 -n 2 -r 1 ";
    const Refused cases[] = {
        {"-mmp 2", "-mmp"},
        {"-mmp 0,1", "-mmp"},
        {"-nkvo 2", "-nkvo"},
        {"-ctk q2_K", "-ctk: expected a KV cache type"},
        {"-sm row", "row is not supported"},
        {"-mg 1", "--device cuda1"},
        {"-ts 1/1", "--device names 0"},  // as run: one proportion per device
        {"-md d.gguf", "d.gguf"},  // speculative decoding is measured: a missing draft file is named
        {"-embd 1", "embeddings"},
        {"-oe md", "-o"},
        {"--foo", "unknown flag '--foo'; see tandem bench --help"},
        {"-r x", "--repetitions"},
    };
    for (const Refused& c : cases) {
        SCOPED_TRACE(c.args);
        testing::expect_one_line_error(run_tandem(base + c.args, dir), c.needle);
    }
}

TEST(BenchFlags, HelpNamesTheLlamaBenchSpellings) {
    const auto dir = testing::scratch_dir();
    const auto r = run_tandem("bench --help", dir);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    for (const char* s : {"-mmp", "-nkvo", "-ctk", "-ctv", "-fa", "-pg", "-ngl", "-ub", "flash-style"}) {
        EXPECT_TRUE(contains(r.out, s)) << s;
    }
}

// ---- every command ----

TEST(CommandFlags, ParseErrorsAreOneLineAndStatusOne) {
    const auto dir = testing::scratch_dir();
    testing::expect_one_line_error(run_tandem("run", dir), "--model");
    testing::expect_one_line_error(run_tandem("nosuch", dir), "nosuch");
    testing::expect_one_line_error(run_tandem("plan -m " + tiny() + " --flash-attn", dir), "--flash-attn");
    testing::expect_one_line_error(run_tandem("inspect", dir), "inspect");
    EXPECT_EQ(run_tandem("--help", dir).exit_code, 0);
    EXPECT_EQ(run_tandem("bench --help", dir).exit_code, 0);
}

TEST(CommandFlags, InspectTakesTheFileEitherWay) {
    const auto dir = testing::scratch_dir();
    const auto a = run_tandem("inspect --no-tensors " + tiny(), dir);
    const auto b = run_tandem("inspect --no-tensors -m " + tiny(), dir);
    EXPECT_EQ(a.exit_code, 0) << a.err;
    EXPECT_EQ(b.exit_code, 0) << b.err;
    EXPECT_EQ(a.out, b.out);
    testing::expect_one_line_error(run_tandem("inspect -m " + tiny() + " " + tiny(), dir), "once");
}

TEST(CommandFlags, CacheTypeKAndVOnPlanAndPerplexity) {
    const auto dir = testing::scratch_dir();
    expect_runs(run_tandem("plan -m " + tiny() + " -ctk q8_0 -ctv q8_0", dir), "plan -ctk");
    expect_runs(run_tandem("plan -m " + tiny() + " -ctk q4_0 -ctv q5_1", dir), "plan -ctk q4_0 -ctv q5_1");
    testing::expect_one_line_error(run_tandem("plan -m " + tiny() + " -ctk q4_K", dir), "found 'q4_K'");
}

}  // namespace
}  // namespace tandem::tools
