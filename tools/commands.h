// Each subcommand lives in its own tools/cmd_*.cpp and registers itself on
// the CLI11 app through one of these functions. A command's callback throws
// tandem::Error for bad input; main() prints it on one line and exits 1.
#pragma once

#include <CLI/CLI.hpp>

namespace tandem::tools {

void add_inspect_command(CLI::App& app);
void add_quantize_command(CLI::App& app);
void add_synth_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_tune_command(CLI::App& app);
void add_perplexity_command(CLI::App& app);
void add_imatrix_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_chat_command(CLI::App& app);

}  // namespace tandem::tools
