// Files and faults: the commands never destroy an input, never leave half a
// file, and report why a write failed. Every output goes through one
// writer (runtime/common/atomic_file.h): a unique temp file beside the
// target, refused when the target is an input, renamed only when whole,
// removed on errors and on SIGINT/SIGTERM/SIGHUP.
#include <gtest/gtest.h>

#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/common/atomic_file.h"
#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/gguf/gguf_writer.h"
#include "runtime/quant/quant_types.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace {

namespace fs = std::filesystem;
using tandem::testing::expect_one_line_error;
using tandem::testing::run_tandem;
using tandem::testing::shell_quote;
using tandem::testing::slurp;
using tandem::testing::temp_files_of;

fs::path scratch(const std::string& name) {
    const fs::path dir = fs::temp_directory_path() / ("tandem_faults_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

// A small F16 model to quantize: synth writes it in well under a second.
fs::path small_f16(const fs::path& dir, const std::string& name = "m.gguf") {
    const fs::path p = dir / name;
    const auto r = run_tandem("synth --embd 128 --ff 256 --layers 2 --heads 4 --kv-heads 2 --vocab-size 512 --ctx 256 --type F16 -o " +
                                  shell_quote(p.string()),
                              dir);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return p;
}

std::string q(const fs::path& p) { return shell_quote(p.string()); }

TEST(AtomicFile, WritesWholeFilesAndRemovesItsTempFileOnError) {
    const fs::path dir = scratch("atomic");
    const fs::path target = dir / "out.bin";
    {
        tandem::AtomicFile f(target);
        f.write("hello ");
        f.write(std::string(3u << 20, 'x'));  // past the buffer: written through
        EXPECT_FALSE(fs::exists(target));
        EXPECT_EQ(temp_files_of(target).size(), 1u);
        f.commit();
    }
    EXPECT_EQ(fs::file_size(target), 6u + (3u << 20));
    EXPECT_TRUE(temp_files_of(target).empty());
    {
        tandem::AtomicFile f(target);
        f.write("unfinished");
    }  // no commit: the target keeps the old bytes, the temp file is gone
    EXPECT_EQ(fs::file_size(target), 6u + (3u << 20));
    EXPECT_TRUE(temp_files_of(target).empty());
    // A directory, an empty path: one clear error each.
    EXPECT_THROW(tandem::AtomicFile f(dir), tandem::Error);
    EXPECT_THROW(tandem::AtomicFile f(""), tandem::Error);
    // An input of this process is never replaced.
    {
        const tandem::InputFile input(target);
        try {
            tandem::AtomicFile f(target);
            ADD_FAILURE() << "an input was accepted as the output";
        } catch (const tandem::Error& e) {
            EXPECT_NE(std::string(e.what()).find("is also an input"), std::string::npos) << e.what();
        }
    }
    tandem::AtomicFile after(target);  // released: writable again
    fs::remove_all(dir);
}

// Case 1 of the issue: the old fixed name OUT.partial destroyed an input
// of that name, and an output naming the model replaced it.
TEST(Faults, AnInputIsNeverTheOutputOrItsTempFile) {
    const fs::path dir = scratch("inputs");
    const fs::path model = small_f16(dir);
    const std::string model_bytes = slurp(model);
    // An input named like the old temp file of the output.
    const fs::path partial = dir / "m2.gguf.partial";
    fs::copy_file(model, partial);
    auto r = run_tandem("quantize " + q(partial) + " " + q(dir / "m2.gguf") + " Q4_0", dir);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(slurp(partial), model_bytes);
    // The output is the input: refused before anything is written.
    r = run_tandem("quantize " + q(model) + " " + q(model) + " Q4_0", dir);
    expect_one_line_error(r, "input");
    EXPECT_EQ(slurp(model), model_bytes);
    // Through another name (a hard link) too: the same inode.
    fs::create_hard_link(model, dir / "link.gguf");
    r = run_tandem("quantize " + q(model) + " " + q(dir / "link.gguf") + " Q8_0", dir);
    expect_one_line_error(r, "input");
    EXPECT_EQ(slurp(model), model_bytes);
    // run --dump-logits onto the model it runs.
    r = run_tandem("run -m " + q(model) + " -p hi -n 1 --dump-logits " + q(model), dir);
    expect_one_line_error(r, "is also an input");
    EXPECT_EQ(slurp(model), model_bytes);
    // synth --vocab copies a vocabulary: not onto itself.
    r = run_tandem("synth --shape tiny --vocab " + q(model) + " -o " + q(model), dir);
    expect_one_line_error(r, "is also an input");
    EXPECT_EQ(slurp(model), model_bytes);
    EXPECT_TRUE(temp_files_of(model).empty());
    fs::remove_all(dir);
}

// Two writers into one target: each writes its own temp file, the last
// rename wins, the target is one of the two whole files.
TEST(Faults, ConcurrentWritersLeaveOneWholeFile) {
    const fs::path dir = scratch("concurrent");
    const fs::path model = small_f16(dir);
    const fs::path out = dir / "out.gguf";
    std::vector<std::string> alone;
    for (const char* type : {"Q4_0", "Q8_0"}) {
        const fs::path p = dir / (std::string(type) + ".gguf");
        ASSERT_EQ(run_tandem("quantize " + q(model) + " " + q(p) + " " + type, dir).exit_code, 0);
        alone.push_back(slurp(p));
    }
    const std::string bin = shell_quote(tandem::testing::tandem_binary().string());
    const std::string cmd = bin + " quantize " + q(model) + " " + q(out) + " Q4_0 >/dev/null 2>&1 & " + bin +
                            " quantize " + q(model) + " " + q(out) + " Q8_0 >/dev/null 2>&1 & wait";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    const std::string result = slurp(out);
    EXPECT_TRUE(result == alone[0] || result == alone[1]) << "the output matches neither writer's file";
    EXPECT_TRUE(temp_files_of(out).empty());
    fs::remove_all(dir);
}

// SIGINT and SIGTERM in the middle of a long write: no temp file left, no
// output under the real name, the input unchanged; the exit says the signal.
TEST(Faults, InterruptedWritesLeaveNoTempFile) {
    const fs::path dir = scratch("signals");
    const fs::path model = small_f16(dir);
    const std::string model_bytes = slurp(model);
    const std::string bin = tandem::testing::tandem_binary().string();
    struct Case {
        const char* what;
        std::vector<std::string> args;
        int sig;
        int delay_ms;
    };
    const fs::path out = dir / "big.gguf";
    const std::vector<Case> cases = {
        {"synth, SIGINT early", {"synth", "--shape", "llama-1b", "--type", "Q4_K_M", "-o", out.string()}, SIGINT, 300},
        {"synth, SIGTERM later", {"synth", "--shape", "llama-1b", "--type", "Q4_K_M", "-o", out.string()}, SIGTERM, 1500},
        {"synth, SIGHUP", {"synth", "--shape", "llama-1b", "--type", "Q8_0", "-o", out.string()}, SIGHUP, 800},
    };
    // quantize of the shared F16 model (about a second): the signal may
    // come after it finished on a fast machine; that case is not counted.
    const fs::path f16 = tandem::testing::shared("models/tiny-llama-F16.gguf");
    const std::vector<Case> quantize_cases = {
        {"quantize, SIGINT", {"quantize", f16.string(), out.string(), "Q4_K_M"}, SIGINT, 150},
        {"quantize, SIGTERM", {"quantize", f16.string(), out.string(), "Q6_K"}, SIGTERM, 400},
    };
    std::vector<Case> all = cases;
    if (fs::exists(f16)) all.insert(all.end(), quantize_cases.begin(), quantize_cases.end());
    const std::string f16_sum = fs::exists(f16) ? std::to_string(std::hash<std::string>{}(slurp(f16))) : "";
    for (const Case& c : all) {
        SCOPED_TRACE(c.what);
        const pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            std::vector<char*> argv{const_cast<char*>(bin.c_str())};
            for (const auto& a : c.args) argv.push_back(const_cast<char*>(a.c_str()));
            argv.push_back(nullptr);
            std::freopen("/dev/null", "w", stderr);
            std::freopen("/dev/null", "w", stdout);
            ::execv(bin.c_str(), argv.data());
            ::_exit(127);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(c.delay_ms));
        ASSERT_EQ(::kill(pid, c.sig), 0);
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        // A quantize that finished before the signal: nothing to check. It
        // may also have put its whole output in place and been killed on
        // its way out (seen under a loaded parallel ctest): then the file
        // must be a complete GGUF, never a partial one.
        const bool finished = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (c.args[0] == "quantize" && (finished || (WIFSIGNALED(status) && fs::exists(out)))) {
            if (!finished) {
                EXPECT_NO_THROW((void)tandem::gguf::File::open(out)) << "a partial output under the real name";
            }
            fs::remove(out);
            continue;
        }
        ASSERT_TRUE(WIFSIGNALED(status)) << "finished before the signal came: make the job longer";
        EXPECT_EQ(WTERMSIG(status), c.sig);
        EXPECT_FALSE(fs::exists(out));
        // Nothing new in the folder, whatever its name (the old writer
        // left OUT.partial).
        for (const auto& e : fs::directory_iterator(dir)) {
            const std::string name = e.path().filename().string();
            EXPECT_TRUE(name == "m.gguf" || name == "stdout.txt" || name == "stderr.txt") << "left behind: " << name;
        }
    }
    EXPECT_EQ(slurp(model), model_bytes);
    if (!f16_sum.empty()) {
        EXPECT_EQ(std::to_string(std::hash<std::string>{}(slurp(f16))), f16_sum);
    }
    fs::remove_all(dir);
}

// A full disk: the error names the path and says why; nothing is left.
TEST(Faults, AFullDiskIsOneLineNamingThePath) {
    const fs::path dir = scratch("full");
    const fs::path model = small_f16(dir);
    const fs::path mnt = dir / "tiny_fs";
    fs::create_directories(mnt);
    if (::geteuid() != 0 || ::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0) {
        fs::remove_all(dir);
        GTEST_SKIP() << "cannot mount a small tmpfs here (needs root and mount rights)";
    }
    // The error is the last line (progress lines may come before it).
    const auto expect_disk_full = [](const tandem::testing::CommandResult& r, const fs::path& path) {
        EXPECT_EQ(r.exit_code, 1) << r.err;
        const size_t last = r.err.rfind("tandem: error: ");
        ASSERT_NE(last, std::string::npos) << r.err;
        const std::string line = r.err.substr(last);
        EXPECT_EQ(tandem::testing::count_lines(line), 1u) << r.err;
        EXPECT_NE(line.find(path.string()), std::string::npos) << line;
        EXPECT_NE(line.find("No space left on device"), std::string::npos) << line;
        EXPECT_FALSE(fs::exists(path));
        EXPECT_TRUE(temp_files_of(path).empty());
    };
    const fs::path out = mnt / "out.gguf";
    expect_disk_full(run_tandem("quantize " + q(model) + " " + q(out) + " Q8_0", dir), out);
    // Fill the disk, then a logits dump finds no room.
    {
        std::ofstream filler(mnt / "filler", std::ios::binary);
        const std::string block(4096, 'f');
        while (filler.write(block.data(), static_cast<std::streamsize>(block.size())) && filler.flush()) {
        }
    }
    const fs::path logits = mnt / "logits.bin";
    expect_disk_full(run_tandem("run -m " + q(model) + " -p hello -n 1 --dump-logits " + q(logits), dir), logits);
    ::umount(mnt.c_str());
    fs::remove_all(dir);
}

}  // namespace

namespace {

// A model truncated under a running generation: one line naming the file,
// exit 1, instead of a bare SIGBUS.
TEST(Faults, AModelTruncatedWhileMappedIsOneLine) {
#if defined(__SANITIZE_ADDRESS__)
    GTEST_SKIP() << "AddressSanitizer handles SIGBUS itself in this build";
#endif
    const fs::path dir = scratch("truncate");
    const fs::path model = dir / "m.gguf";
    fs::copy_file(tandem::testing::test_data("tiny-llama-Q4_K_M.gguf"), model);
    for (const char* mode : {"", "--no-host-copy"}) {
        SCOPED_TRACE(*mode ? mode : "host copy");
        fs::copy_file(tandem::testing::test_data("tiny-llama-Q4_K_M.gguf"), model, fs::copy_options::overwrite_existing);
        const std::string cmd = shell_quote(tandem::testing::tandem_binary().string()) + " run -m " + q(model) +
                                " -p 'Once upon a time' -n 2000 -c 2048 --temp 0 " + mode + " >/dev/null 2>" +
                                q(dir / "err.txt") + " & pid=$!; sleep 1; truncate -s 4096 " + q(model) +
                                "; wait $pid; echo $? > " + q(dir / "rc.txt");
        ASSERT_EQ(std::system(cmd.c_str()), 0);
        const std::string rc = slurp(dir / "rc.txt");
        const std::string err = slurp(dir / "err.txt");
        if (rc == "0\n") {
            GTEST_SKIP() << "the run finished before the file was cut";
        }
        EXPECT_EQ(rc, "1\n") << err;
        EXPECT_NE(err.find("tandem: error: " + model.string() + ": the file changed on disk while in use"),
                  std::string::npos)
            << err;
    }
    fs::remove_all(dir);
}

}  // namespace

namespace {

// Status of a shell command line (its last command's exit status).
int shell_status(const std::string& cmd) {
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Output that never arrived is a failure (exit 1), and an unwritable
// stderr never turns an error into an abort (std::terminate, 134).
TEST(Faults, LostOutputIsAnErrorAndAClosedStderrNoAbort) {
    if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
    const std::string t = shell_quote(tandem::testing::tandem_binary().string());
    const std::string m = q(tandem::testing::test_data("tiny-llama-Q4_K_M.gguf"));
    struct Case {
        const char* what;
        std::string cmd;
        int status;
    };
    const std::vector<Case> cases = {
        {"inspect, stdout full", t + " inspect " + m + " >/dev/full 2>/dev/null", 1},
        {"plan --json, stdout full", t + " plan -m " + m + " --json >/dev/full 2>/dev/null", 1},
        {"plan --json, stdout closed", t + " plan -m " + m + " --json >&- 2>/dev/null", 1},
        {"run, stdout full", t + " run -m " + m + " -p hi -n 2 >/dev/full 2>/dev/null", 1},
        {"tokenize, stdout full", t + " tokenize -m " + m + " -p hello >/dev/full 2>/dev/null", 1},
        {"an error with stderr closed", t + " inspect /nonexistent 2>&-", 1},
        {"an error with stderr full", t + " inspect /nonexistent 2>/dev/full", 1},
        {"--help, stdout full", t + " --help >/dev/full 2>/dev/null", 1},
        {"a good run still succeeds", t + " inspect " + m + " >/dev/null 2>&1", 0},
    };
    for (const Case& c : cases) EXPECT_EQ(shell_status(c.cmd), c.status) << c.what << ": " << c.cmd;
}

}  // namespace

namespace {

// Bounds on numbers and sizes from the command line: one line, exit 1.
TEST(Faults, FlagsAndTextsAreBounded) {
    const fs::path dir = scratch("bounds");
    const std::string m = q(tandem::testing::test_data("tiny-llama-Q4_K_M.gguf"));
    const std::string run = "run -m " + m + " -p hi -n 1 ";
    struct Case {
        std::string args;
        std::string needle;
    };
    const std::vector<Case> cases = {
        {run + "-t 100000000", "-t/--threads: expected 1 to"},
        {run + "-t -2", "-t/--threads"},
        {run + "-ngl -3", "-ngl: expected auto or a layer count >= 0"},
        {run + "--vram ''", "--vram: expected a value, found an empty one"},
        {run + "--dump-logits ''", "--dump-logits: expected a value"},
        {run + "--vram=", "--vram: expected a value"},
        {"run -m " + m + " -n 1 -f /dev/zero", "longer than 64 MiB; set TANDEM_MAX_TEXT_MB"},
        {"run -m " + m + " -n 1 -f " + q(dir), "is a directory"},
        {"tokenize -m " + m + " -f /dev/zero", "longer than 64 MiB"},
        {"perplexity -m " + m + " -f /dev/zero", "longer than 64 MiB"},
        {run + "--device bogus", "--device: expected cuda, cudaN (a GPU) or cpuN with N >= 2"},
        {"synth --layers 5000 --embd 256 --ff 512 --heads 4 --kv-heads 4 --vocab-size 1000 --ctx 256 --header-only -o " +
             q(dir / "s.gguf"),
         "n_layer must be at most 4096"},
        {"synth --layers 2 --embd 20000000 --ff 512 --heads 4 --kv-heads 4 --vocab-size 1000 --ctx 256 --header-only "
         "-o " + q(dir / "s.gguf"),
         "n_embd must be at most"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.args);
        expect_one_line_error(run_tandem(c.args, dir), c.needle);
    }
    // More threads than cores runs, with a warning.
    const int over = static_cast<int>(std::thread::hardware_concurrency()) * 2;
    const auto r = run_tandem(run + "-t " + std::to_string(over), dir);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("physical cores"), std::string::npos) << r.err;
    fs::remove_all(dir);
}

}  // namespace

namespace {

// A header-only copy of src with the string array `key` passed through edit.
fs::path with_tokens(const fs::path& src, const fs::path& out,
                     const std::function<void(std::vector<std::string>&)>& edit) {
    const auto file = tandem::gguf::File::open(src);
    tandem::gguf::Writer w(out);
    for (const auto& kv : file.metadata()) {
        if (kv.key == "general.alignment") continue;
        if (kv.key == "tokenizer.ggml.tokens") {
            std::vector<std::string> tokens;
            for (const auto& item : kv.value.as_array()->items) tokens.push_back(std::get<std::string>(item.data));
            edit(tokens);
            w.set(kv.key, tandem::gguf::Value::string_array(tokens));
        } else if (kv.key == "tokenizer.ggml.scores" || kv.key == "tokenizer.ggml.token_type") {
            continue;  // optional; they would disagree in length with a cut list
        } else {
            w.set(kv.key, kv.value);
        }
    }
    w.set(std::string(tandem::gguf::kHeaderOnlyKey), tandem::gguf::Value::boolean(true));
    for (const auto& t : file.tensors()) w.add_tensor({t.name, t.shape, t.type});
    w.finish();
    return out;
}

std::string tokenizer_error(const fs::path& path) {
    try {
        (void)tandem::Tokenizer::from_gguf(tandem::gguf::File::open(path));
    } catch (const tandem::Error& e) {
        return e.what();
    }
    return "(loaded)";
}

// Checks at load time, not mid-generation: the vocabulary against the
// embedding rows.
TEST(Faults, VocabularyMismatchesFailAtLoad) {
    const fs::path dir = scratch("vocab");
    const fs::path short_vocab = with_tokens(tandem::testing::test_data("tiny-llama-Q4_K_M.gguf"), dir / "short.gguf",
                                             [](std::vector<std::string>& t) { t.resize(1000); });
    const std::string err = tokenizer_error(short_vocab);
    EXPECT_NE(err.find("expected 32000 tokens, one for each row of token_embd.weight, found 1000"), std::string::npos)
        << err;
    const fs::path gpt2 = tandem::testing::test_data("vocab/ggml-vocab-gpt-2.gguf");
    const fs::path no_a = with_tokens(gpt2, dir / "no_a.gguf", [](std::vector<std::string>& t) {
        for (auto& s : t) {
            if (s == "A") s = "A-gone";
        }
    });
    // A byte-level vocabulary lacking a byte's token still loads (SmolLM2's
    // lacks 0x04 and others); text holding that byte loses it, as in the
    // reference, which drops the bytes it finds no token for.
    EXPECT_EQ(tokenizer_error(no_a), "(loaded)");
    const tandem::Tokenizer tok = tandem::Tokenizer::from_gguf(tandem::gguf::File::open(no_a));
    EXPECT_EQ(tok.decode(tok.encode("A", false)), "");
    EXPECT_EQ(tokenizer_error(gpt2), "(loaded)");
    fs::remove_all(dir);
}

}  // namespace

namespace {

// A copy of src whose tensor `name` has the float at element `at` set to NaN
// (the tensor must be F32 or F16).
fs::path with_nan(const fs::path& src, const fs::path& out, const std::string& name, int64_t at) {
    const auto file = tandem::gguf::File::open(src);
    tandem::gguf::Writer w(out);
    for (const auto& kv : file.metadata()) {
        if (kv.key != "general.alignment") w.set(kv.key, kv.value);
    }
    for (const auto& t : file.tensors()) w.add_tensor({t.name, t.shape, t.type});
    w.write_header();
    for (const auto& t : file.tensors()) {
        const auto bytes = file.tensor_data(t);
        std::vector<uint8_t> data(bytes.begin(), bytes.end());
        if (t.name == name) {
            if (t.type == tandem::quant::Type::F32) {
                const float nan = std::nanf("");
                std::memcpy(data.data() + at * 4, &nan, 4);
            } else {
                const uint16_t nan16 = 0x7e00;
                std::memcpy(data.data() + at * 2, &nan16, 2);
            }
        }
        w.write_tensor_data(data);
    }
    w.finish();
    return out;
}

// NaN weights: a warning naming the tensor at load, not silent text.
TEST(Faults, NonFiniteWeightsAreNamedAtLoad) {
    const fs::path dir = scratch("nan");
    const fs::path model = small_f16(dir);
    const fs::path bad_norm = with_nan(model, dir / "norm.gguf", "blk.1.attn_norm.weight", 5);
    auto r = run_tandem("run -m " + q(bad_norm) + " -p hi -n 1", dir);
    EXPECT_NE(r.err.find("tandem: warning: tensor 'blk.1.attn_norm.weight' holds NaN or Inf values"),
              std::string::npos)
        << r.err;
    // A middle row of a matrix: found by --check-tensors, which reads every row.
    const fs::path bad_row = with_nan(model, dir / "row.gguf", "blk.0.ffn_up.weight", 128 * 100 + 7);
    r = run_tandem("run -m " + q(bad_row) + " -p hi -n 1", dir);
    EXPECT_EQ(r.err.find("holds NaN"), std::string::npos) << r.err;
    r = run_tandem("run -m " + q(bad_row) + " -p hi -n 1 --check-tensors", dir);
    EXPECT_NE(r.err.find("tensor 'blk.0.ffn_up.weight' holds NaN or Inf values (row 100)"), std::string::npos) << r.err;
    r = run_tandem("run -m " + q(model) + " -p hi -n 1 --check-tensors", dir);
    EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
    fs::remove_all(dir);
}

}  // namespace
