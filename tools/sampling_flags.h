// The sampling flags as llama.cpp names them (--temp, --top-k, --top-p,
// --min-p, --repeat-penalty, --repeat-last-n, -s/--seed), for every command
// that generates.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "runtime/sampler/sampler.h"

namespace tandem::tools {

struct SamplingFlags {
    SamplerParams params;
    std::optional<uint64_t> seed;  // nullopt: from the clock
};

void add_sampling_flags(CLI::App& cmd, SamplingFlags& f);

// --seed N; -1, as in llama.cpp, draws one from the clock.
std::optional<uint64_t> parse_seed(const std::string& text);

// The parameters with the seed filled in (drawn from the clock when not
// given), checked: throws tandem::Error for a value out of range.
SamplerParams resolved_sampling(const SamplingFlags& f);

}  // namespace tandem::tools
