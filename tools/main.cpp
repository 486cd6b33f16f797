// `tandem`: one binary, one subcommand per tool.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <system_error>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include <algorithm>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "runtime/common/error.h"
#include "tools/commands.h"
#include "tools/field_flags.h"
#include "tools/llama_flags.h"
#include "tools/pipeline.h"

namespace {

// CLI11 takes the vector back to front.
std::vector<std::string> reversed(std::vector<std::string> args) {
    std::reverse(args.begin(), args.end());
    return args;
}

// One line on stderr that cannot throw: a closed or full stderr loses the
// message, never the exit status.
void report(std::string_view prefix, std::string_view text) {
    std::fflush(stdout);
    std::string line(prefix);
    line.append(text);
    line += '\n';
    const char* p = line.data();
    size_t n = line.size();
    while (n > 0) {
        const ssize_t w = ::write(STDERR_FILENO, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        p += w;
        n -= static_cast<size_t>(w);
    }
}

// Status 1: bad input (a flag, a file, a prompt). Status 2: a bug in Tandem.
constexpr int kUserError = 1;
constexpr int kInternalError = 2;

int run_command(CLI::App& app, const std::vector<std::string>& typed) {
    try {
        // An empty value ("--vram ''", "--dump-logits=") is never meant:
        // refused here, for every flag, instead of read as "not given".
        for (size_t i = 0; i < typed.size(); ++i) {
            const std::string& a = typed[i];
            // (An empty prompt is llama.cpp's "start from BOS".)
            const bool prompt = i > 0 && (typed[i - 1] == "-p" || typed[i - 1] == "--prompt");
            const bool empty_after_flag =
                a.empty() && i > 0 && !prompt && typed[i - 1].size() > 1 && typed[i - 1][0] == '-';
            if (empty_after_flag || (a.size() > 2 && a.rfind("--", 0) == 0 && a.back() == '=')) {
                const std::string flag = a.empty() ? typed[i - 1] : a.substr(0, a.size() - 1);
                throw tandem::Error(fmt::format("{}: expected a value, found an empty one", flag));
            }
        }
        // llama.cpp's one-dash words (-ngl, -ctk, -fa) become long names.
        auto args = reversed(tandem::tools::rewrite_llama_flags(typed));
        app.parse(args);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        // One line and status 1, whatever CLI11's own code (104, 109, ...).
        const bool known = !typed.empty() && !app.get_subcommands([&](CLI::App* s) {
                                                  return s->get_name() == typed.front();
                                              }).empty();
        const std::string command = known ? typed.front() : "";
        report("tandem: error: ", tandem::tools::parse_error_line(e, command, typed));
        return kUserError;
    } catch (const tandem::FieldError& e) {
        report("tandem: error: ", tandem::tools::in_flags(e));
        return kUserError;
    } catch (const tandem::Error& e) {
        report("tandem: error: ", e.what());
        return kUserError;
    } catch (const tandem::InternalError& e) {
        report("tandem: ", e.what());
        return kInternalError;
    } catch (const std::bad_alloc&) {
        report("tandem: error: ", "out of host memory");
        return kUserError;
    } catch (const std::system_error& e) {
        // fmt's failed writes to stdout, and other calls into the system.
        report("tandem: error: ", e.what());
        return kUserError;
    } catch (const std::exception& e) {
        report("tandem: error: ", e.what());
        return kUserError;
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    // Under mpirun with --pipeline, ranks above 0 serve their stage only;
    // rank 0 runs the command (tools/pipeline.h).
    std::optional<tandem::tools::PipelineWorld> world;
    if (tandem::tools::wants_pipeline(std::vector<std::string>(argv + 1, argv + argc))) {
        try {
            world.emplace(argc, argv);
        } catch (const std::exception& e) {
            report("tandem: error: ", e.what());
            return kUserError;
        }
        if (world->rank() > 0) return world->serve_stage();
    }
    CLI::App app{"Tandem: GGUF language models split between one GPU and the CPU"};
    app.name("tandem");
    app.require_subcommand(1);
    app.set_version_flag("--version", "tandem 0.1.0");
    tandem::tools::add_run_command(app);
    tandem::tools::add_plan_command(app);
    tandem::tools::add_inspect_command(app);
    tandem::tools::add_quantize_command(app);
    tandem::tools::add_synth_command(app);
    tandem::tools::add_tokenize_command(app);
    tandem::tools::add_bench_command(app);
    tandem::tools::add_tune_command(app);
    tandem::tools::add_perplexity_command(app);
    tandem::tools::add_imatrix_command(app);
    tandem::tools::add_serve_command(app);
    tandem::tools::add_chat_command(app);
    const int status = run_command(app, std::vector<std::string>(argv + 1, argv + argc));
    // Output that never arrived (stdout closed, a full disk, a dead pipe)
    // is a failure, not a success.
    errno = 0;
    const bool flushed = std::fflush(stdout) == 0 && !std::ferror(stdout);
    const int flush_errno = errno;
    if (!flushed || std::fclose(stdout) != 0) {
        const int err = flushed ? errno : flush_errno;
        report("tandem: error: ", std::string("cannot write the output to stdout: ") +
                                      (err != 0 ? std::strerror(err) : "write error"));
        return status != 0 ? status : kUserError;
    }
    return status;
}
