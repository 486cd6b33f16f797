#include "tools/bench_ref.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/engine/device_registry.h"

extern char** environ;

namespace tandem::tools {
namespace {

// At most `n` characters of `s` on one line, for an error message.
std::string snippet(std::string_view s, size_t n = 80) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    std::string out;
    for (char c : s.substr(0, n)) out += c == '\n' || c == '\r' || c == '\t' ? ' ' : c;
    if (s.size() > n) out += "...";
    return out;
}

// The last line of `s` with anything but spaces on it, or "".
std::string last_line(std::string_view s) {
    while (!s.empty()) {
        const size_t nl = s.find_last_of('\n', s.size() - 1);
        std::string_view line = nl == std::string_view::npos ? s : s.substr(nl + 1);
        if (line.find_first_not_of(" \t\r") != std::string_view::npos) return snippet(line, 200);
        if (nl == std::string_view::npos) break;
        s = s.substr(0, nl);
    }
    return "";
}

[[noreturn]] void bad_json(std::string_view expected, const std::string& found) {
    throw Error(fmt::format("--ref-bench: expected llama-bench -o json to print {}, found {}", expected, found));
}

double number_field(const nlohmann::json& o, const char* name, size_t index) {
    const auto it = o.find(name);
    if (it == o.end() || !it->is_number()) {
        bad_json(fmt::format("a number in \"{}\" of result {}", name, index + 1),
                 it == o.end() ? std::string("no such field") : snippet(it->dump()));
    }
    return it->get<double>();
}

int64_t count_field(const nlohmann::json& o, const char* name, size_t index) {
    const auto it = o.find(name);
    if (it == o.end() || !it->is_number_integer() || it->get<int64_t>() < 0) {
        bad_json(fmt::format("a whole number >= 0 in \"{}\" of result {}", name, index + 1),
                 it == o.end() ? std::string("no such field") : snippet(it->dump()));
    }
    return it->get<int64_t>();
}

// "pp512 @ d4096" for what a result (or a request) measured.
std::string test_name(int64_t n_prompt, int64_t n_gen, int64_t n_depth) {
    return BenchTest{n_prompt, n_gen, n_depth, 0}.name();
}

// Closes an fd when it leaves scope.
struct Fd {
    int fd = -1;
    explicit Fd(int f) : fd(f) {}
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd() {
        if (fd >= 0) close(fd);
    }
    void reset() {
        if (fd >= 0) close(fd);
        fd = -1;
    }
};

// Both ends of a pipe, close-on-exec so no other child inherits them.
std::array<Fd, 2> make_pipe() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw Error(fmt::format("--ref-bench: cannot make a pipe: {}", std::strerror(errno)));
    return {Fd{fds[0]}, Fd{fds[1]}};
}

// Reads the child's stdout and stderr until both close; poll, so that a
// child filling one pipe while we wait on the other cannot stall both.
void drain(Fd& out_fd, Fd& err_fd, std::string& out, std::string& err) {
    char buf[65536];
    while (out_fd.fd >= 0 || err_fd.fd >= 0) {
        pollfd fds[2] = {{out_fd.fd, POLLIN, 0}, {err_fd.fd, POLLIN, 0}};
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            throw Error(fmt::format("--ref-bench: cannot read llama-bench's output: {}", std::strerror(errno)));
        }
        for (int i = 0; i < 2; ++i) {
            Fd& fd = i == 0 ? out_fd : err_fd;
            if (fd.fd < 0 || fds[i].revents == 0) continue;
            const ssize_t n = read(fd.fd, buf, sizeof buf);
            if (n > 0) {
                (i == 0 ? out : err).append(buf, static_cast<size_t>(n));
            } else if (n == 0 || errno != EINTR) {
                fd.reset();
            }
        }
    }
}

}  // namespace

std::vector<LlamaBenchResult> parse_llama_bench_json(std::string_view text) {
    // The array opens on a line of its own; skip anything printed before it.
    size_t start = 0;
    while (start < text.size()) {
        const size_t first = text.find_first_not_of(" \t\r", start);
        if (first != std::string_view::npos && text[first] == '[') {
            start = first;
            break;
        }
        const size_t nl = text.find('\n', start);
        start = nl == std::string_view::npos ? text.size() : nl + 1;
    }
    const std::string_view body = text.substr(start);
    const auto j = nlohmann::json::parse(body.begin(), body.end(), nullptr, false);
    if (j.is_discarded() || !j.is_array()) {
        bad_json("a JSON array of test results",
                 text.find_first_not_of(" \t\r\n") == std::string_view::npos ? std::string("nothing")
                                                                               : fmt::format("'{}'", snippet(text)));
    }
    std::vector<LlamaBenchResult> out;
    for (size_t i = 0; i < j.size(); ++i) {
        const nlohmann::json& o = j[i];
        if (!o.is_object()) bad_json(fmt::format("an object as result {}", i + 1), snippet(o.dump()));
        LlamaBenchResult r;
        r.n_prompt = count_field(o, "n_prompt", i);
        r.n_gen = count_field(o, "n_gen", i);
        r.n_depth = o.contains("n_depth") ? count_field(o, "n_depth", i) : 0;
        r.avg_ts = number_field(o, "avg_ts", i);
        r.stddev_ts = number_field(o, "stddev_ts", i);
        const auto samples = o.find("samples_ts");
        if (samples == o.end() || !samples->is_array()) {
            bad_json(fmt::format("an array in \"samples_ts\" of result {}", i + 1),
                     samples == o.end() ? std::string("no such field") : snippet(samples->dump()));
        }
        for (const nlohmann::json& s : *samples) {
            if (!s.is_number()) bad_json(fmt::format("numbers in \"samples_ts\" of result {}", i + 1), snippet(s.dump()));
            r.samples_ts.push_back(s.get<double>());
        }
        out.push_back(std::move(r));
    }
    return out;
}

std::vector<std::string> llama_bench_args(const BenchConfig& c, const std::string& model_path, const BenchRow& r) {
    const RefBenchConfig& ref = c.ref_bench.value();
    std::vector<std::string> a{"-m", model_path};
    if (r.n_prompt > 0 && r.n_gen > 0) {
        a.insert(a.end(), {"-p", "0", "-n", "0", "-pg", fmt::format("{},{}", r.n_prompt, r.n_gen)});
    } else {
        a.insert(a.end(), {"-p", std::to_string(r.n_prompt), "-n", std::to_string(r.n_gen)});
    }
    // llama-bench's default -ngl puts every layer on a GPU it was built
    // for; Tandem's CPU (and its stand-in device) is host memory.
    const bool cuda = parse_accelerator(c.device).kind == AcceleratorKind::Cuda;
    a.insert(a.end(), {"-d", std::to_string(r.n_depth), "-t", std::to_string(r.threads), "-r",
                       std::to_string(c.repetitions), "-ngl", std::to_string(cuda ? r.ngl : 0)});
    if (ref.pass_ubatch) a.insert(a.end(), {"-ub", std::to_string(r.n_ubatch)});
    if (!ref.cache_k.empty()) a.insert(a.end(), {"-ctk", ref.cache_k});
    if (!ref.cache_v.empty()) a.insert(a.end(), {"-ctv", ref.cache_v});
    a.insert(a.end(), {"-o", "json"});
    return a;
}

void check_ref_bench_binary(const std::string& path) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
        throw Error(fmt::format("--ref-bench: expected a llama-bench binary, found no file {} ({})", path,
                                std::strerror(errno)));
    }
    if (!S_ISREG(st.st_mode)) throw Error(fmt::format("--ref-bench: expected a llama-bench binary, found {} is not a file", path));
    if (access(path.c_str(), X_OK) != 0) {
        throw Error(fmt::format("--ref-bench: expected an executable llama-bench, found {} is not executable", path));
    }
}

ProcessResult run_process(const std::vector<std::string>& argv) {
    if (argv.empty()) throw Error("run_process: no program");
    auto out_pipe = make_pipe();
    auto err_pipe = make_pipe();
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, out_pipe[1].fd, STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err_pipe[1].fd, STDERR_FILENO);
    std::vector<char*> args;
    for (const std::string& s : argv) args.push_back(const_cast<char*>(s.c_str()));
    args.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw Error(fmt::format("--ref-bench: cannot start {}: {}", argv[0], std::strerror(rc)));
    // Our copies of the write ends: the reads end when the child's close.
    out_pipe[1].reset();
    err_pipe[1].reset();
    ProcessResult r;
    std::optional<Error> failed;
    try {
        drain(out_pipe[0], err_pipe[0], r.out, r.err);
    } catch (const Error& e) {
        failed = e;  // still reap the child
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (failed) throw *failed;
    if (WIFSIGNALED(status)) {
        r.signal = WTERMSIG(status);
    } else {
        r.exit_code = WEXITSTATUS(status);
    }
    return r;
}

void run_ref_bench(const BenchConfig& c, const std::string& model_path, BenchRow& r) {
    const std::string& binary = c.ref_bench.value().binary;
    std::vector<std::string> argv{binary};
    const auto args = llama_bench_args(c, model_path, r);
    argv.insert(argv.end(), args.begin(), args.end());
    const ProcessResult p = run_process(argv);
    if (p.signal != 0 || p.exit_code != 0) {
        const std::string how = p.signal != 0 ? fmt::format("signal {}", p.signal) : fmt::format("exit {}", p.exit_code);
        const std::string why = last_line(p.err);
        throw Error(fmt::format("--ref-bench: expected {} to exit 0 for {}, found {}{}", binary, r.test, how,
                                why.empty() ? "" : fmt::format(" ({})", why)));
    }
    const auto results = parse_llama_bench_json(p.out);
    std::string found;
    for (const LlamaBenchResult& l : results) {
        if (l.n_prompt == r.n_prompt && l.n_gen == r.n_gen && l.n_depth == r.n_depth) {
            r.llama_tps_mean = l.avg_ts;
            r.llama_tps_sd = l.stddev_ts;
            r.llama_samples = l.samples_ts;
            return;
        }
        found += fmt::format("{}{}", found.empty() ? "" : ", ", test_name(l.n_prompt, l.n_gen, l.n_depth));
    }
    throw Error(fmt::format("--ref-bench: expected llama-bench's result for {} (n_prompt {}, n_gen {}, n_depth {}), "
                            "found {}",
                            r.test, r.n_prompt, r.n_gen, r.n_depth, found.empty() ? "no results" : found));
}

}  // namespace tandem::tools
