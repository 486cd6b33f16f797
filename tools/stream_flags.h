// --no-stream and --stream-min-batch, shared by every command that opens a
// session or plans one (run, perplexity, tune, plan; bench parses its own),
// so that the plan and the session always see the same streaming choice;
// and --no-host-copy, where the CPU's weight matrices live. PlacementFlags:
// the per-tensor placement flags of llama.cpp (-ot, --cpu-moe, --n-cpu-moe,
// -nkvo), shared by every command that opens a session.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "runtime/serving/split.h"

namespace tandem::tools {

struct StreamFlags {
    bool no_stream = false;
    int64_t min_batch = 32;
    bool no_host_copy = false;
};

void add_stream_flags(CLI::App& cmd, StreamFlags& flags);

struct PlacementFlags {
    std::vector<std::string> overrides;  // each "REGEX=DEVICE[,...]"
    bool cpu_moe = false;
    int64_t n_cpu_moe = 0;
    bool no_kv_offload = false;
};

void add_placement_flags(CLI::App& cmd, PlacementFlags& flags);
// The serving library's words for the flags' choices (runtime/serving/split.h).
serving::StreamOptions stream_options(const StreamFlags& f);
serving::PlacementOptions placement_options(const PlacementFlags& f);

}  // namespace tandem::tools
