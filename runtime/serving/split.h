// Where a model runs: the request (device, capacity, layers on it or auto,
// context, micro-batch, sequences, cache type, streaming, per-tensor rules,
// a draft beside it) becomes the SessionOptions that place it. -ngl auto
// weighs the planner's candidates with this machine's stored calibration
// and `tandem tune`'s entry for the model; the session then only checks
// what it is given. Prints nothing: warnings go to a callback, in messages
// that name the request's fields in braces, as FieldError's do
// (runtime/common/error.h: spell_fields says them in a front-end's words).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kernels_cuda/cuda_api.h"
#include "planner/planner.h"
#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"

namespace tandem::serving {

// A warning for the user, naming fields as {field}.
using Warn = std::function<void(const std::string& message)>;

// Streaming the CPU layers' weights to the accelerator for long prompt
// micro-batches, and where the CPU's weight matrices live.
struct StreamOptions {
    bool weight_stream = true;
    int64_t min_batch = 32;          // micro-batches of at least this many tokens stream
    bool copy_host_weights = true;   // false: multiply from the mapped file
};

// Per-tensor placement, as llama.cpp's -ot, --cpu-moe, --n-cpu-moe, -nkvo.
struct PlacementOptions {
    std::vector<std::string> overrides;  // each "REGEX=DEVICE[,...]"
    bool cpu_moe = false;
    int64_t n_cpu_moe = 0;
    bool kv_offload = true;
};

void apply_stream(const StreamOptions& s, SessionOptions& so);
void apply_stream(const StreamOptions& s, planner::PlanInputs& in);
// Throws tandem::Error for an override that is not REGEX=DEVICE.
void apply_placement(const PlacementOptions& p, SessionOptions& so);
planner::PlacementRules placement_rules(const PlacementOptions& p);

struct SplitRequest {
    std::string device;            // "", "cpu2", "cuda", "cudaN", or a comma list of them
    // What each accelerator may use: empty: not given; one size: each;
    // else one per device of the list.
    std::vector<uint64_t> vram;
    std::optional<int64_t> ngl;    // layers on them; nullopt: auto
    // Several accelerators: their shares of the layers (-ts); empty: by
    // vram where known, else equal.
    std::vector<double> tensor_split;
    // The later stages of a pipeline (tools/pipeline.h); null: none. Auto
    // then plans the first stage's share of the layers alone, and each
    // later stage plans its own on its own host (SessionOptions::stage_auto).
    std::shared_ptr<StageLink> pipeline;
    // A later pipeline stage's layers [first, end) (tools/pipeline.cpp):
    // auto plans them alone, as the model this host runs.
    std::optional<std::pair<int64_t, int64_t>> stage;
    int64_t n_ctx = 0;
    int64_t n_ubatch = 512;
    int64_t n_seq = 1;  // sequences side by side: the session's n_seq_max
    model::CacheType cache_type = model::kCacheF16;
    StreamOptions stream;
    PlacementOptions placement;
    // Auto may take what `tandem tune` measured for this model file (run
    // does; perplexity, all prompt processing, does not).
    std::optional<std::string> tuned_model;
    // A speculative draft beside the model: planned first, with the whole
    // device (planner/draft_plan.h); the model gets what it leaves.
    const model::ModelSpec* draft = nullptr;
    std::optional<int64_t> draft_ngl;  // nullopt: auto
    std::optional<uint64_t> margin;    // VRAM kept free; nullopt: the default for the capacity
};

// The planner's inputs for the session the request describes: the
// device's capacity and name (none without a device), context,
// micro-batch, cache type, streaming and placement rules, and no margin on
// the stand-in (its ledger is the whole truth). Whole layers are the only
// candidate (as bench and tune measure); resolve_split and plan ask for
// all. Speeds are left to the caller (apply_stored_calibration).
planner::PlanInputs split_plan_inputs(const SplitRequest& r);

// Fills the speeds `in` leaves unset from this machine's stored
// calibration, if any, and returns the names of those measured. A damaged
// or unreadable calibration costs a warning, never the plan.
std::vector<std::string> apply_stored_calibration(planner::PlanInputs& in, const Warn& warn);

// --vram's sizes as one per device: a single size is each device's.
// Throws FieldError for another count.
std::vector<uint64_t> capacities_of(const std::vector<uint64_t>& vram, size_t n_devices);

struct Split {
    SessionOptions so;            // device, capacity, ngl, placement, streaming, context, cache type
    std::optional<int> threads;   // from a tune entry: used when no thread count is given
    std::string why;              // one line, naming fields as {field}
    // With SplitRequest::draft: where the draft runs (device, capacity,
    // layers, rules, context, micro-batch and cache type; no streaming),
    // and why, one line.
    std::optional<SessionOptions> draft;
    std::string draft_why;
};

// Each device of a --device list, with its GPU's information where it is
// a GPU ("cuda", "cudaN") usable here; stand-ins get nullopt. Where a GPU
// of the list is not usable, one warning says why (no CUDA support
// compiled in, no NVIDIA driver, no CUDA device, no such GPU), naming
// `asked_by` (e.g. "{device} cuda0"), and `device` is cleared: the CPU
// runs (the result is empty).
std::vector<std::optional<cuda::DeviceInfo>> usable_devices_or_cpu(std::string& device, const std::string& asked_by,
                                                                   const Warn& warn);
// The first device's, as usable_devices_or_cpu.
std::optional<cuda::DeviceInfo> usable_gpu_or_cpu(std::string& device, const std::string& asked_by,
                                                  const Warn& warn);

// A layer count is taken as given (above 0 without a device: the first
// GPU, as llama.cpp, or the CPU with one warning where none is usable);
// auto weighs the planner's candidates (whole layers, FFN, experts; only
// whole layers, sized with them, when per-tensor rules are given) and
// takes the best, setting the rules that place it; a tune entry for these
// options (never above the plan) decides when the plan chose whole layers.
// Auto on the stand-in needs `vram` (it has no memory of its own to
// report); without a device auto is 0. Under a pipeline auto plans only
// this stage's layers (planner::stage_spec), as `tandem plan --hosts`
// plans each host's; the count then runs from the stage's first layer
// (SessionOptions::n_gpu_layers_from), and no tune entry (measured over
// the whole model) is used. Throws FieldError for a request that cannot be
// honoured.
Split resolve_split(const SplitRequest& r, const gguf::File& file, const model::ModelSpec& spec, const Warn& warn);

}  // namespace tandem::serving
