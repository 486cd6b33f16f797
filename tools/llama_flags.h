// Flags as llama.cpp users type them. llama-cli, llama-bench and
// llama-server spell many flags with one dash and several letters (-ngl,
// -ctk, -fa); CLI11 reads a one-dash name as one letter plus a value, so
// rewrite_llama_flags turns those exact tokens into their long names before
// parsing (one table, for every command). add_llama_compat_flags registers
// the llama.cpp flags a command has no flag of its own for: each is either
// accepted (with the same meaning, or ignored where Tandem has nothing to
// change) or refused with one line naming the Tandem equivalent. Every
// parse error is one line too (parse_error_line), and exits 1.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

namespace tandem::tools {

// llama.cpp's one-dash, several-letter names and the long names Tandem
// registers for them.
struct LlamaSpelling {
    std::string_view llama;
    std::string_view tandem;
};
const std::vector<LlamaSpelling>& llama_spellings();

// The arguments after argv[0], with every token that is exactly one of
// llama_spellings() replaced by its long name (values that only contain one
// are left alone).
std::vector<std::string> rewrite_llama_flags(std::vector<std::string> args);

// One line for a CLI11 parse error of `command` ("" when the error came
// before any subcommand), e.g. "unknown flag '--foo'; see tandem run --help".
// `args` are the arguments as typed: an unknown one-dash word such as -xyz,
// which CLI11 misreads as -x with the value yz, is named as what it is.
std::string parse_error_line(const CLI::ParseError& e, const std::string& command,
                             const std::vector<std::string>& args);

// `s` cut at each of the characters in `seps` ("1,0" -> "1", "0"), untrimmed.
std::vector<std::string_view> split_items(std::string_view s, std::string_view seps = ",");

enum class LlamaTool { Run, Bench };

// Registers, in the group "llama.cpp flags", the flags of llama-cli (Run)
// or llama-bench (Bench), and llama-server's common ones, that the command
// does not define itself. Accepted ones take their llama.cpp values; a
// refused one throws tandem::Error with one line when given.
void add_llama_compat_flags(CLI::App& cmd, LlamaTool tool);

// A --help footer paragraph: the llama.cpp one-dash spellings `cmd`
// accepts (those whose long name it defines), call after registering.
std::string llama_spellings_help(const CLI::App& cmd);

// A 0/1 style switch value as llama.cpp takes it: "" (the flag alone), 1,
// on, true, enabled -> true; 0, off, false, disabled -> false. Anything
// else is a tandem::Error naming `flag`.
bool parse_switch(std::string_view flag, const std::string& value);

}  // namespace tandem::tools
