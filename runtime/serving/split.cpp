#include "runtime/serving/split.h"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>

#include "planner/calibration.h"
#include "planner/draft_plan.h"
#include "planner/hosts.h"
#include "planner/tune_cache.h"
#include "runtime/common/error.h"
#include "runtime/engine/device_registry.h"
#include "runtime/placement/placement.h"

namespace tandem::serving {
namespace {

// The entry `tandem tune` stored for this model, device, capacity, context
// and cache type, if any. A damaged cache costs only the entry: one warning
// line, then the plan decides as if nothing had been tuned.
std::optional<planner::TuneEntry> tuned_entry(const SplitRequest& r, const gguf::File& file, const planner::Plan& p,
                                              const Warn& warn) {
    std::string warning;
    std::vector<planner::TuneEntry> entries;
    try {
        entries = planner::load_tune_cache(planner::tune_cache_path(), &warning);
    } catch (const Error& e) {
        warning = e.what();  // no cache directory can be derived
    }
    if (!warning.empty()) warn(warning + "; using the plan");
    if (entries.empty()) return std::nullopt;
    planner::TuneKey key;
    key.model_key = planner::model_key(*r.tuned_model, file.data_offset());
    key.device = r.device;
    for (const uint64_t v : r.vram) key.vram += v;
    key.n_ctx = p.n_ctx;
    key.cache_type = planner::cache_type_name(r.cache_type);
    return planner::find_tune_entry(entries, key);
}

// Why GPU `index` cannot be used, in a user's words: no CUDA call names or
// source paths.
std::string gpu_missing_reason(int index, const std::vector<cuda::DeviceInfo>& gpus, const std::string& why) {
    std::string reason;
    if (!gpus.empty()) reason = fmt::format("no GPU {} ({} found)", index, gpus.size());
    else if (why.find("no CUDA support") != std::string::npos) reason = "this build of Tandem has no CUDA support";
    else if (why.rfind("no NVIDIA driver", 0) == 0) reason = "no NVIDIA driver is installed";
    else if (why.find("plugin") != std::string::npos) reason = "the CUDA plugin of this build cannot be loaded";
    else reason = "CUDA finds no usable GPU";
    return reason;
}

}  // namespace

void apply_stream(const StreamOptions& s, SessionOptions& so) {
    so.weight_stream = s.weight_stream;
    so.stream_min_batch = s.min_batch;
    so.copy_host_weights = s.copy_host_weights;
}

void apply_stream(const StreamOptions& s, planner::PlanInputs& in) {
    in.weight_stream = s.weight_stream;
    in.stream_min_batch = s.min_batch;
}

void apply_placement(const PlacementOptions& p, SessionOptions& so) {
    so.overrides.clear();
    for (const std::string& text : p.overrides) {
        for (TensorOverride& o : parse_tensor_overrides(text)) so.overrides.push_back(std::move(o));
    }
    so.cpu_moe = p.cpu_moe;
    so.n_cpu_moe = p.n_cpu_moe;
    so.kv_offload = p.kv_offload;
}

planner::PlacementRules placement_rules(const PlacementOptions& f) {
    planner::PlacementRules rules;
    for (const std::string& text : f.overrides) {
        for (TensorOverride& o : parse_tensor_overrides(text)) rules.overrides.push_back(std::move(o));
    }
    rules.cpu_moe = f.cpu_moe;
    rules.n_cpu_moe = f.n_cpu_moe;
    rules.kv_offload = f.kv_offload;
    return rules;
}

planner::PlanInputs split_plan_inputs(const SplitRequest& r) {
    planner::PlanInputs in;
    const std::vector<std::string> names = parse_accelerators(r.device);
    if (names.size() == 1) {
        if (!r.vram.empty()) in.device_capacity = r.vram[0];
        in.device_name = names[0];
    } else if (names.size() > 1) {
        // One capacity each; the planner splits the layers between them.
        if (!r.vram.empty()) in.device_capacities = capacities_of(r.vram, names.size());
        in.device_name = r.device;
        in.tensor_split = r.tensor_split;
    }
    in.rules = placement_rules(r.placement);
    in.n_ctx = r.n_ctx;
    in.n_ubatch = r.n_ubatch;
    in.n_seq = r.n_seq;
    in.cache_type = r.cache_type;
    apply_stream(r.stream, in);
    if (r.margin) in.margin = r.margin;
    if (all_stand_ins(r.device)) in.margin = 0;
    return in;
}

std::vector<std::string> apply_stored_calibration(planner::PlanInputs& in, const Warn& warn) {
    std::string warning;
    std::vector<std::string> measured;
    try {
        if (const auto cal = planner::load_calibration(planner::calibration_path(), &warning)) {
            measured = planner::apply_calibration(*cal, in);
        }
    } catch (const Error& e) {
        warning = e.what();  // no cache directory can be derived
    }
    if (!warning.empty()) warn(warning);
    return measured;
}

std::vector<uint64_t> capacities_of(const std::vector<uint64_t>& vram, size_t n_devices) {
    if (vram.size() == 1) return std::vector<uint64_t>(n_devices, vram[0]);
    if (vram.size() != n_devices) {
        throw FieldError("vram", fmt::format("{{vram}}: expected one size, or one per device ({}), found {}", n_devices,
                                             vram.size()));
    }
    return vram;
}

std::vector<std::optional<cuda::DeviceInfo>> usable_devices_or_cpu(std::string& device, const std::string& asked_by,
                                                                   const Warn& warn) {
    const std::vector<std::string> names = parse_accelerators(device);
    std::vector<std::optional<cuda::DeviceInfo>> out(names.size());
    std::string why;
    std::vector<cuda::DeviceInfo> gpus;
    bool listed = false;
    for (size_t i = 0; i < names.size(); ++i) {
        const AcceleratorName a = parse_accelerator(names[i]);
        if (a.kind != AcceleratorKind::Cuda) continue;
        if (!listed) gpus = cuda::list_devices(&why);
        listed = true;
        const auto it = std::find_if(gpus.begin(), gpus.end(), [&](const cuda::DeviceInfo& d) { return d.index == a.cuda_index; });
        if (it != gpus.end()) {
            out[i] = *it;
            continue;
        }
        warn(fmt::format("{}: {}; running on the CPU", asked_by, gpu_missing_reason(a.cuda_index, gpus, why)));
        device.clear();
        return {};
    }
    return out;
}

std::optional<cuda::DeviceInfo> usable_gpu_or_cpu(std::string& device, const std::string& asked_by,
                                                  const Warn& warn) {
    const auto all = usable_devices_or_cpu(device, asked_by, warn);
    return all.empty() ? std::nullopt : all[0];
}

namespace {


// The draft's session options, planned first with the whole device
// (planner/draft_plan.h); r.vram and r.margin become what the model may
// use beside it. `why` gets one line.
SessionOptions place_draft(SplitRequest& r, const std::optional<cuda::DeviceInfo>& gpu, std::string& why,
                           const Warn& warn) {
    SessionOptions d;
    d.n_ctx = r.n_ctx;
    d.n_ubatch = r.n_ubatch;
    d.cache_type = r.cache_type;
    d.device = r.device;
    d.weight_stream = false;
    if (r.device.empty()) {
        why = "the draft model runs on the CPU (no accelerator)";
        return d;
    }
    if (parse_accelerators(r.device).size() > 1) {
        throw FieldError("model_draft", fmt::format("a draft model beside several devices ({{device}} {}) is not "
                                                    "supported yet; give one device",
                                                    r.device));
    }
    if (r.vram.empty() && gpu) r.vram = {gpu->free_bytes};
    if (r.vram.empty()) {
        // The stand-in without --vram: no limit to share.
        d.n_gpu_layers = r.draft_ngl.value_or(r.draft->hp.n_layer + 1);
        why = fmt::format("the draft model: {{draft_ngl}} {} on {} (no {{vram}}: nothing to share)", d.n_gpu_layers, r.device);
        return d;
    }
    planner::PlanInputs in = split_plan_inputs(r);
    apply_stored_calibration(in, warn);
    const planner::Plan p = planner::plan(*r.draft, planner::draft_inputs(in, r.draft_ngl));
    d.device_capacity = r.vram;
    d.n_gpu_layers = p.ngl;
    d.overrides = p.rules.overrides;
    d.cpu_moe = p.rules.cpu_moe;
    d.n_cpu_moe = p.rules.n_cpu_moe;
    const planner::PlanInputs left = planner::inputs_beside_draft(in, p);
    r.vram = {left.device_capacity.value_or(0)};
    r.margin = left.margin;
    why = planner::draft_reason(p);
    return d;
}

// The flags as given, for the later stages of a pipeline to plan from.
StageAutoPlacement stage_auto_placement(const SplitRequest& r) {
    StageAutoPlacement a;
    a.device = r.device;
    a.capacity = r.vram;
    a.tensor_split = r.tensor_split;
    a.overrides = r.placement.overrides;
    a.cpu_moe = r.placement.cpu_moe;
    a.n_cpu_moe = r.placement.n_cpu_moe;
    return a;
}

}  // namespace

Split resolve_split(const SplitRequest& request, const gguf::File& file, const model::ModelSpec& spec,
                    const Warn& warn) {
    SplitRequest r = request;
    // -ngl N without --device means a GPU, as in llama.cpp.
    const bool implied = r.device.empty() && r.ngl && *r.ngl > 0;
    if (implied) r.device = "cuda0";
    const std::vector<std::optional<cuda::DeviceInfo>> gpus = usable_devices_or_cpu(
        r.device, implied ? fmt::format("{{n_gpu_layers}} {}", *r.ngl) : "{device} " + r.device, warn);
    const std::optional<cuda::DeviceInfo> gpu = gpus.empty() ? std::nullopt : gpus[0];
    if (r.device.empty()) {
        r.vram.clear();
        r.tensor_split.clear();
        if (r.ngl) r.ngl = 0;
    }
    if (!r.tensor_split.empty() && r.tensor_split.size() != gpus.size()) {
        throw FieldError("tensor_split", fmt::format("{{tensor_split}}: expected {} proportions, one per device of "
                                                     "{{device}}, found {}",
                                                     gpus.size(), r.tensor_split.size()));
    }
    Split s;
    if (r.draft) s.draft = place_draft(r, gpu, s.draft_why, warn);
    SessionOptions& so = s.so;
    so.n_ctx = r.n_ctx;
    so.n_ubatch = r.n_ubatch;
    so.cache_type = r.cache_type;
    so.device = r.device;
    so.device_capacity = r.vram;
    so.next_stages = r.pipeline;
    apply_stream(r.stream, so);
    apply_placement(r.placement, so);
    // Without a capacity, auto may fill what the GPUs have free now; a
    // stand-in has no memory of its own to report.
    const bool all_free_known =
        !gpus.empty() && std::all_of(gpus.begin(), gpus.end(), [](const auto& g) { return g.has_value(); });
    std::vector<uint64_t> vram = r.vram;
    if (vram.empty() && all_free_known) {
        for (const auto& g : gpus) vram.push_back(g->free_bytes);
    }
    // Several devices share the layers as -ts says, else by capacity (as
    // llama.cpp's default, by free memory), else equally.
    so.tensor_split = r.tensor_split;
    if (so.tensor_split.empty() && gpus.size() > 1 && !vram.empty()) {
        for (const uint64_t v : capacities_of(vram, gpus.size())) so.tensor_split.push_back(static_cast<double>(v));
    }
    if (r.ngl) {
        so.n_gpu_layers = *r.ngl;
        s.why = "{n_gpu_layers} given";
        return s;
    }
    // A pipeline: this stage's layers alone (more stages than layers: the
    // link's open says so).
    const int64_t n_layer = spec.hp.n_layer;
    std::optional<std::pair<int64_t, int64_t>> stage = r.stage;
    if (!stage && r.pipeline) stage = stage_layers(n_layer, 0, r.pipeline->n_stages());
    if (stage && stage->first >= stage->second) stage.reset();
    if (r.pipeline) so.stage_auto = stage_auto_placement(request);
    SplitRequest req = r;
    if (!req.device.empty() && vram.empty()) {
        throw FieldError("vram", fmt::format("{{n_gpu_layers}} auto on {} needs {{vram}} SIZE (a stand-in device has "
                                             "no memory of its own to report); or give {{n_gpu_layers}} N",
                                             req.device));
    }
    req.vram = vram;
    planner::PlanInputs in = split_plan_inputs(req);
    in.candidates.assign(std::begin(planner::kAllCandidates), std::end(planner::kAllCandidates));
    const std::vector<std::string> measured = apply_stored_calibration(in, warn);
    std::optional<model::ModelSpec> staged;
    std::string of_stage;
    int64_t n_units = n_layer + 1;  // what "ngl N of M" counts: the layers and the head
    if (stage) {
        staged = planner::stage_spec(spec, stage->first, stage->second);
        in.stage_embeds = stage->first == 0;
        in.stage_outputs = stage->second == n_layer;
        in.first_layer = stage->first;
        so.n_gpu_layers_from = stage->first;
        n_units = stage->second - stage->first + (in.stage_outputs ? 1 : 0);
        of_stage = fmt::format(" (this stage's layers [{}, {}){}, counted from layer {})", stage->first, stage->second,
                               in.stage_outputs ? " and the head" : "", stage->first);
    }
    // Measured speeds change the predicted tok/s, and so which candidate
    // wins; the verbose line says which speeds it predicted with.
    const planner::Plan p = planner::plan(staged ? *staged : spec, in);
    const std::string speeds = fmt::format("; predicted {:.1f} tok/s with {} speeds", p.predicted.tg_tps,
                                           measured.empty() ? "default" : "measured");
    if (r.tuned_model && !stage) {
        // A tune entry measured whole layers: it decides when the plan
        // chose whole layers too, never above the plan's count, so that a
        // stale entry cannot push the device out of memory.
        const auto t = tuned_entry(r, file, p, warn);
        if (t && p.candidate == planner::Candidate::Layers) {
            so.n_gpu_layers = r.device.empty() ? 0 : std::min(t->ngl, p.ngl);
            s.threads = t->threads;
            s.why = fmt::format("{{n_gpu_layers}} auto: using the tuned entry (model {}): ngl {} of {}, {} threads, {:.2f} tok/s "
                                "measured",
                                t->key.model_key, so.n_gpu_layers, spec.hp.n_layer + 1, t->threads, t->tg_tps);
            return s;
        }
        if (t) s.threads = t->threads;
    }
    if (r.device.empty()) {
        s.why = "{n_gpu_layers} auto: no accelerator, every layer on the CPU" + speeds;
        return s;
    }
    so.n_gpu_layers = p.ngl;
    if (!p.tensor_split.empty()) so.tensor_split = p.tensor_split;
    if (!p.user_rules) {
        // The candidate's own rules; the engine places them as it places -ot.
        so.overrides = p.rules.overrides;
        so.cpu_moe = p.rules.cpu_moe;
        so.n_cpu_moe = p.rules.n_cpu_moe;
    }
    if (p.candidate == planner::Candidate::Layers) {
        s.why = fmt::format("{{n_gpu_layers}} auto chose {} of {}{}: {}{}", so.n_gpu_layers, n_units, of_stage,
                            p.reasons.front(), speeds);
    } else {
        s.why = fmt::format("{{n_gpu_layers}} auto chose {} ({}){}: {}{}", planner::candidate_letter(p.candidate),
                            planner::placement_flags(p), of_stage, p.reasons.front(), speeds);
    }
    return s;
}

}  // namespace tandem::serving
