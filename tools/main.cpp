// `tandem`: one binary, one subcommand per tool.
#include <cstdio>
#include <exception>
#include <new>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "runtime/common/error.h"
#include "tools/commands.h"

int main(int argc, char** argv) {
    CLI::App app{"Tandem: GGUF language models split between one GPU and the CPU"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "tandem 0.1.0");
    tandem::tools::add_inspect_command(app);
    tandem::tools::add_quantize_command(app);
    tandem::tools::add_synth_command(app);
    tandem::tools::add_tokenize_command(app);
    try {
        app.parse(argc, argv);
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
