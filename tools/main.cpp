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

namespace {

// llama.cpp spells some flags with one dash and several letters (-ngl,
// -ub); CLI11 reads one-dash names as single letters, so these are
// rewritten to their long forms before parsing.
constexpr std::pair<std::string_view, std::string_view> kLlamaStyleFlags[] = {
    {"-ub", "--ubatch-size"},
    {"-ngl", "--n-gpu-layers"},
    {"-ot", "--override-tensor"},
    {"-nkvo", "--no-kv-offload"},
    {"-pg", "--prompt-gen"},
};

std::vector<std::string> normalize_args(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    for (auto& a : args) {
        for (const auto& [short_form, long_form] : kLlamaStyleFlags) {
            if (a == short_form) a = long_form;
        }
    }
    std::reverse(args.begin(), args.end());  // CLI11 takes the vector back to front
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
    try {
        auto args = normalize_args(argc, argv);
        app.parse(args);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
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
