// `tandem`: one binary, one subcommand per tool.
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include <algorithm>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "runtime/common/error.h"
#include "tools/commands.h"
#include "tools/llama_flags.h"

namespace {

// CLI11 takes the vector back to front.
std::vector<std::string> reversed(std::vector<std::string> args) {
    std::reverse(args.begin(), args.end());
    return args;
}

}  // namespace

int main(int argc, char** argv) {
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
    const std::vector<std::string> typed(argv + 1, argv + argc);
    try {
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
        std::fflush(stdout);
        fmt::print(stderr, "tandem: error: {}\n", tandem::tools::parse_error_line(e, command, typed));
        return 1;
    } catch (const tandem::Error& e) {
        std::fflush(stdout);
        fmt::print(stderr, "tandem: error: {}\n", e.what());
        return 1;
    } catch (const tandem::InternalError& e) {
        std::fflush(stdout);
        fmt::print(stderr, "tandem: {}\n", e.what());
        return 3;
    } catch (const std::bad_alloc&) {
        std::fflush(stdout);
        fmt::print(stderr, "tandem: error: out of host memory\n");
        return 1;
    } catch (const std::exception& e) {
        std::fflush(stdout);
        fmt::print(stderr, "tandem: error: {}\n", e.what());
        return 1;
    }
    return 0;
}
