// The one way from a command's flags to where a model runs: -ngl (a count
// or auto), --device, --vram, the per-tensor flags (-ot, --cpu-moe,
// --n-cpu-moe, -nkvo), streaming, the tune cache and the calibration. run,
// perplexity and tune open their sessions through resolve_split; bench and
// plan build their planner inputs with split_plan_inputs. The session then
// only checks what it is given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "kernels_cuda/cuda_api.h"
#include "planner/planner.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/engine/session.h"
#include "tools/stream_flags.h"

namespace tandem::tools {

struct SplitRequest {
    std::string device;            // "", "cpu2", "cuda", "cudaN"
    std::optional<uint64_t> vram;  // --vram: what the accelerator may use
    std::optional<int64_t> ngl;    // -ngl N; nullopt: auto
    int64_t n_ctx = 0;
    int64_t n_ubatch = 512;
    int64_t n_seq = 1;  // sequences side by side (-np): the session's n_seq_max
    model::CacheType cache_type = model::CacheType::F16;
    StreamFlags stream;
    PlacementFlags placement;
    // -ngl auto may take what `tandem tune` measured for this model file
    // (run does; perplexity, all prompt processing, does not).
    std::optional<std::string> tuned_model;
    // A speculative draft beside the model (-md): planned first, with the
    // whole device (planner/draft_plan.h); the model gets what it leaves.
    const model::ModelSpec* draft = nullptr;
    std::optional<int64_t> draft_ngl;  // -ngld N; nullopt: auto
    std::optional<uint64_t> margin;    // VRAM kept free; nullopt: the default for the capacity
};

// --cache-type (K and V alike), and llama.cpp's -ctk/--cache-type-k and
// -ctv/--cache-type-v. Tandem's KV cache has one type for K and V, f16 or
// q8_0, so the two must name the same one.
struct CacheTypeFlags {
    std::string both = "f16";
    std::string k;  // "" when not given: --cache-type's
    std::string v;
};

// Registers the three flags; with `list`, each takes a comma list (bench).
void add_cache_type_flags(CLI::App& cmd, CacheTypeFlags& f, bool list = false);

// The type (with `list`-style flags, the comma list of types) the flags
// name. Throws tandem::Error with one line for a type the KV cache does
// not support (q4_0, bf16, ...) or K and V types that differ.
std::string cache_type_text(const CacheTypeFlags& f);

// Where a model runs, as the flags give it (run and perplexity take these,
// each with its own help text).
struct SplitFlags {
    std::string device;
    std::string vram;
    std::string n_gpu_layers = "auto";
    CacheTypeFlags cache;
    StreamFlags stream;
    PlacementFlags placement;
};

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

// The user's per-tensor rules (-ot, --cpu-moe, --n-cpu-moe, -nkvo) for the
// planner; throws tandem::Error for an -ot value that is not REGEX=DEVICE.
planner::PlacementRules placement_rules(const PlacementFlags& f);

// The planner's inputs for the session the request describes: the
// device's capacity and name (none without a device), context,
// micro-batch, cache type, streaming and placement rules, and no margin on
// the stand-in (its ledger is the whole truth). Whole layers are the only
// candidate (as bench and tune measure); resolve_split and plan ask for
// all. Speeds are left to the caller (apply_stored_calibration).
planner::PlanInputs split_plan_inputs(const SplitRequest& r);

// Fills the speeds `in` leaves unset from this machine's stored
// calibration, if any, and returns the names of those measured. A damaged
// or unreadable calibration costs a warning on stderr, never the plan.
std::vector<std::string> apply_stored_calibration(planner::PlanInputs& in);

struct Split {
    SessionOptions so;            // device, capacity, ngl, placement, streaming, context, cache type
    std::optional<int> threads;   // from a tune entry: used when -t is not given
    std::string why;              // one line for --verbose
    // With SplitRequest::draft: where the draft runs (device, capacity,
    // layers, rules, context, micro-batch and cache type; no streaming),
    // and why, one line.
    std::optional<SessionOptions> draft;
    std::string draft_why;
};

// The GPU `device` names ("cuda", "cudaN"), if it is usable here. Where it
// is not, one warning line says why (no CUDA support compiled in, no NVIDIA
// driver, no CUDA device, no such GPU), naming `asked_by` (e.g. "--device
// cuda0" or "-ngl 99"), and `device` is cleared: the CPU runs. Other
// devices ("", "cpu2") are left as they are, with nullopt.
std::optional<cuda::DeviceInfo> usable_gpu_or_cpu(std::string& device, const std::string& asked_by);

// -ngl N is taken as given (above 0 without --device: the first GPU, as
// llama.cpp, or the CPU with one warning where none is usable); auto
// weighs the planner's candidates (whole layers, FFN, experts; only whole
// layers, sized with them, when -ot, --cpu-moe, --n-cpu-moe or -nkvo is
// given) and takes the best, setting the -ot / --n-cpu-moe rules that
// place it; a tune entry for these options (never above the plan) decides
// when the plan chose whole layers.
// Auto on the stand-in needs --vram (it has no memory of its own to
// report); without a device auto is 0. Throws tandem::Error for flags that
// cannot be honoured.
Split resolve_split(const SplitRequest& r, const gguf::File& file, const model::ModelSpec& spec);

}  // namespace tandem::tools
