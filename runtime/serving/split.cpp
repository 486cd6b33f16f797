#include "runtime/serving/split.h"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>

#include "planner/calibration.h"
#include "planner/draft_plan.h"
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
    key.vram = r.vram.value_or(0);
    key.n_ctx = p.n_ctx;
    key.cache_type = planner::cache_type_name(r.cache_type);
    return planner::find_tune_entry(entries, key);
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
    if (!r.device.empty()) {
        in.device_capacity = r.vram;
        in.device_name = r.device;
    }
    in.rules = placement_rules(r.placement);
    in.n_ctx = r.n_ctx;
    in.n_ubatch = r.n_ubatch;
    in.n_seq = r.n_seq;
    in.cache_type = r.cache_type;
    apply_stream(r.stream, in);
    if (r.margin) in.margin = r.margin;
    if (parse_accelerator(r.device).kind == AcceleratorKind::StandIn) in.margin = 0;
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

std::optional<cuda::DeviceInfo> usable_gpu_or_cpu(std::string& device, const std::string& asked_by,
                                                  const Warn& warn) {
    const AcceleratorName a = parse_accelerator(device);
    if (a.kind != AcceleratorKind::Cuda) return std::nullopt;
    const int index = a.cuda_index;
    std::string why;
    const auto gpus = cuda::list_devices(&why);
    const auto it = std::find_if(gpus.begin(), gpus.end(), [&](const cuda::DeviceInfo& d) { return d.index == index; });
    if (it != gpus.end()) return *it;
    // The reason in a user's words: no CUDA call names or source paths.
    std::string reason;
    if (!gpus.empty()) reason = fmt::format("no GPU {} ({} found)", index, gpus.size());
    else if (why.find("no CUDA support") != std::string::npos) reason = "this build of Tandem has no CUDA support";
    else if (why.rfind("no NVIDIA driver", 0) == 0) reason = "no NVIDIA driver is installed";
    else if (why.find("plugin") != std::string::npos) reason = "the CUDA plugin of this build cannot be loaded";
    else reason = "CUDA finds no usable GPU";
    warn(fmt::format("{}: {}; running on the CPU", asked_by, reason));
    device.clear();
    return std::nullopt;
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
    if (!r.vram && gpu) r.vram = gpu->free_bytes;
    if (!r.vram) {
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
    r.vram = left.device_capacity;
    r.margin = left.margin;
    why = planner::draft_reason(p);
    return d;
}

}  // namespace

Split resolve_split(const SplitRequest& request, const gguf::File& file, const model::ModelSpec& spec,
                    const Warn& warn) {
    SplitRequest r = request;
    // -ngl N without --device means a GPU, as in llama.cpp.
    const bool implied = r.device.empty() && r.ngl && *r.ngl > 0;
    if (implied) r.device = "cuda0";
    const std::optional<cuda::DeviceInfo> gpu =
        usable_gpu_or_cpu(r.device, implied ? fmt::format("{{n_gpu_layers}} {}", *r.ngl) : "{device} " + r.device, warn);
    if (r.device.empty()) {
        r.vram.reset();
        if (r.ngl) r.ngl = 0;
    }
    Split s;
    if (r.draft) s.draft = place_draft(r, gpu, s.draft_why, warn);
    SessionOptions& so = s.so;
    so.n_ctx = r.n_ctx;
    so.n_ubatch = r.n_ubatch;
    so.cache_type = r.cache_type;
    so.device = r.device;
    so.device_capacity = r.vram;
    apply_stream(r.stream, so);
    apply_placement(r.placement, so);
    if (r.ngl) {
        so.n_gpu_layers = *r.ngl;
        s.why = "{n_gpu_layers} given";
        return s;
    }
    // Without a capacity, auto may fill what the GPU has free now; the
    // stand-in has no memory of its own to report.
    SplitRequest req = r;
    if (!req.device.empty() && !req.vram) {
        if (!gpu) {
            throw FieldError("vram", fmt::format("{{n_gpu_layers}} auto on {} needs {{vram}} SIZE (the stand-in device has "
                                                 "no memory of its own to report); or give {{n_gpu_layers}} N",
                                                 req.device));
        }
        req.vram = gpu->free_bytes;
    }
    planner::PlanInputs in = split_plan_inputs(req);
    in.candidates.assign(std::begin(planner::kAllCandidates), std::end(planner::kAllCandidates));
    const std::vector<std::string> measured = apply_stored_calibration(in, warn);
    // Measured speeds change the predicted tok/s, and so which candidate
    // wins; the verbose line says which speeds it predicted with.
    const planner::Plan p = planner::plan(spec, in);
    const std::string speeds = fmt::format("; predicted {:.1f} tok/s with {} speeds", p.predicted.tg_tps,
                                           measured.empty() ? "default" : "measured");
    if (r.tuned_model) {
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
    if (!p.user_rules) {
        // The candidate's own rules; the engine places them as it places -ot.
        so.overrides = p.rules.overrides;
        so.cpu_moe = p.rules.cpu_moe;
        so.n_cpu_moe = p.rules.n_cpu_moe;
    }
    if (p.candidate == planner::Candidate::Layers) {
        s.why = fmt::format("{{n_gpu_layers}} auto chose {} of {}: {}{}", p.ngl, spec.hp.n_layer + 1, p.reasons.front(), speeds);
    } else {
        s.why = fmt::format("{{n_gpu_layers}} auto chose {} ({}): {}{}", planner::candidate_letter(p.candidate),
                            planner::placement_flags(p), p.reasons.front(), speeds);
    }
    return s;
}

}  // namespace tandem::serving
