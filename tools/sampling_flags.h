// The sampling flags as llama.cpp names them (--temp, --top-k, --top-p,
// --min-p, --repeat-penalty, --repeat-last-n, -s/--seed, and the output
// constraints --grammar, --grammar-file, -j/--json-schema), for every
// command that generates.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "runtime/sampler/sampler.h"
#include "runtime/tokenizer/tokenizer.h"

namespace tandem::tools {

struct SamplingFlags {
    SamplerParams params;
    std::optional<uint64_t> seed;  // nullopt: from the clock
    std::string grammar;       // --grammar: GBNF text
    std::string grammar_file;  // --grammar-file: a file of it
    std::string json_schema;   // -j/--json-schema: a JSON Schema
};

void add_sampling_flags(CLI::App& cmd, SamplingFlags& f);

// --seed N; -1, as in llama.cpp, draws one from the clock.
std::optional<uint64_t> parse_seed(const std::string& text);

// The parameters with the seed filled in (drawn from the clock when not
// given), checked: throws tandem::Error for a value out of range.
SamplerParams resolved_sampling(const SamplingFlags& f);

// The grammar the flags ask for, compiled and bound to the model's
// vocabulary (null: none given). Throws tandem::Error naming the flag for
// bad GBNF, an unreadable file, bad JSON or an unsupported schema, or more
// than one of the three flags.
std::shared_ptr<const SamplingGrammar> flag_grammar(const SamplingFlags& f, const Tokenizer& tokenizer);

}  // namespace tandem::tools
