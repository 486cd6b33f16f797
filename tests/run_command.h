// Runs the `tandem` binary (or any command) from a test and captures what
// it printed, its exit code, and whether it died from a signal, so CLI tests
// can tell a clean error (exit 1, one line) from a crash.
#pragma once

#include <sys/wait.h>

#include <algorithm>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/test_paths.h"

namespace tandem::testing {

struct CommandResult {
    int exit_code = -1;   // valid when !signaled
    bool signaled = false;
    int signal = 0;
    std::string out;
    std::string err;
};

inline std::string shell_quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) {
        if (c == '\'') q += "'\\''";
        else q += c;
    }
    return q + "'";
}

inline std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// `args` is appended to the quoted binary path as is: quote each argument
// with shell_quote. Output goes through files in the test's scratch dir.
inline CommandResult run_tandem(const std::string& args, const std::filesystem::path& dir) {
    const auto out = dir / "stdout.txt";
    const auto err = dir / "stderr.txt";
    const std::string cmd = shell_quote(tandem_binary().string()) + " " + args + " >" + shell_quote(out.string()) +
                            " 2>" + shell_quote(err.string()) + " </dev/null";
    const int status = std::system(cmd.c_str());
    CommandResult r;
    if (WIFEXITED(status)) {
        r.exit_code = WEXITSTATUS(status);
        // The shell reports a child killed by signal N as exit 128 + N.
        if (r.exit_code > 128 && r.exit_code < 160) {
            r.signaled = true;
            r.signal = r.exit_code - 128;
        }
    } else if (WIFSIGNALED(status)) {
        r.signaled = true;
        r.signal = WTERMSIG(status);
    }
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
}

inline size_t count_lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

// A clean failure: exit 1, no signal, one line on stderr in main()'s
// "tandem: error: " form, naming `needle` when one is given.
inline void expect_one_line_error(const CommandResult& r, const std::string& needle = "") {
    EXPECT_FALSE(r.signaled) << "signal " << r.signal << "; stderr: " << r.err;
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(count_lines(r.err), 1u) << r.err;
    EXPECT_EQ(r.err.rfind("tandem: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
}

}  // namespace tandem::testing
