// The flags that say where a model runs (-ngl, a count or auto; --device,
// --vram, the cache types, the per-tensor flags -ot, --cpu-moe,
// --n-cpu-moe, -nkvo, and streaming), mapped to the serving library's
// SplitRequest (runtime/serving/split.h), which holds the policy: run,
// perplexity and tune open their sessions through serving::resolve_split;
// bench and plan build their planner inputs with split_plan_inputs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "runtime/serving/split.h"
#include "tools/stream_flags.h"

namespace tandem::tools {

using serving::apply_stored_calibration;
using serving::resolve_split;
using serving::Split;
using serving::split_plan_inputs;
using serving::SplitRequest;
using serving::usable_gpu_or_cpu;

// --cache-type (K and V alike), and llama.cpp's -ctk/--cache-type-k and
// -ctv/--cache-type-v, which override it for K or V.
struct CacheTypeFlags {
    std::string both = "f16";
    std::string k;  // "" when not given: --cache-type's
    std::string v;
};

// Registers the three flags; with `list`, each takes a comma list (bench).
void add_cache_type_flags(CLI::App& cmd, CacheTypeFlags& f, bool list = false);

// The K and V types the flags name. Throws tandem::Error with one line for
// a name that is not a cache type, or a list.
model::CacheType cache_type_of(const CacheTypeFlags& f);
// With `list`-style flags: every (K, V) pair of the lists, K outer, as
// llama-bench crosses -ctk and -ctv.
std::vector<model::CacheType> cache_types_of(const CacheTypeFlags& f);

// Where a model runs, as the flags give it (run and perplexity take these,
// each with its own help text).
struct SplitFlags {
    std::string device;
    std::string vram;
    std::string n_gpu_layers = "auto";
    std::string tensor_split;         // -ts A,B,...: "" none
    std::string split_mode = "layer"; // -sm: none or layer (row is refused)
    bool pipeline = false;            // --pipeline: pipeline stages under mpirun (tools/pipeline.h)
    CacheTypeFlags cache;
    StreamFlags stream;
    PlacementFlags placement;
};

// Registers --device, --vram, -ngl, -ts and -sm, with one help text for
// every command that runs a model (run, perplexity, chat, serve).
void add_device_flags(CLI::App& cmd, SplitFlags& f);

// --vram's value: one size, or a comma list of one size per device of
// --device. Throws tandem::Error naming the flag for a size it cannot read.
std::vector<uint64_t> parse_vram_list(std::string_view flag, const std::string& text);

// -ts's value: proportions such as 3,1 (llama.cpp also takes / and ;
// between them). Throws tandem::Error for anything else.
std::vector<double> parse_tensor_split(const std::string& text);

// The request those flags make for a session of n_ctx and n_ubatch; throws
// tandem::Error for a bad size, -ngl or cache type.
SplitRequest split_request(const SplitFlags& f, int64_t n_ctx, int64_t n_ubatch);

// The value of a size flag (--vram, --margin, --host-ram): a number with
// a unit, 8G, 8GiB, 8GB, 512M, 512MiB, 1.5G (G and GiB are 2^30 bytes, GB
// 10^9, B bytes), or 0. A number without a unit is refused (a plain "8"
// would mean 8 bytes), as is anything else, with one tandem::Error line
// naming the flag, what was found and the accepted forms.
uint64_t parse_size_flag(std::string_view flag, std::string_view text);

// "auto" -> nullopt, a count -> it; anything else is a tandem::Error
// naming `flag`.
std::optional<int64_t> parse_ngl(const std::string& text, std::string_view flag = "-ngl");

}  // namespace tandem::tools
