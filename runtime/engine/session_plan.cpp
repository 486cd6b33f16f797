#include "runtime/engine/session_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/engine/device_registry.h"
#include "runtime/model/device_layout.h"

namespace tandem {
namespace {

void check_sizes(const model::ModelSpec& spec, SessionOptions& opt) {
    const model::HParams& hp = spec.hp;
    if (opt.n_ctx <= 0) opt.n_ctx = std::min<int64_t>(hp.n_ctx_train, 4096);
    if (opt.n_ubatch <= 0) throw Error(fmt::format("micro-batch size must be positive, found {}", opt.n_ubatch));
    opt.n_ubatch = std::min(opt.n_ubatch, opt.n_ctx);
    if (opt.n_seq_max < 1 || opt.n_seq_max > kMaxSequences) {
        throw Error(fmt::format("parallel sequences: expected a value in [1, {}], found {}", kMaxSequences,
                                opt.n_seq_max));
    }
    model::check_cache_type(hp, opt.cache_type);
}

Placement place(const model::ModelSpec& spec, const SessionOptions& opt) {
    PlacementRequest req;
    req.devices = parse_accelerators(opt.device);  // a bad name fails before anything loads
    req.split = opt.tensor_split;
    // Without a device a negative count means nothing; a positive one is an error there.
    req.n_gpu_layers = opt.device.empty() ? std::max<int64_t>(opt.n_gpu_layers, 0) : opt.n_gpu_layers;
    req.first_layer = opt.n_gpu_layers_from;
    req.overrides = opt.overrides;
    req.cpu_moe = opt.cpu_moe;
    req.n_cpu_moe = opt.n_cpu_moe;
    req.kv_offload = opt.kv_offload;
    return place_tensors(spec, req);
}

// The first layer from which every layer's streamed matrices are on the
// host (n_layer when none).
int64_t first_streamable_layer(const model::ModelSpec& spec, const Placement& placement) {
    int64_t first = spec.hp.n_layer;
    for (int64_t il = spec.hp.n_layer - 1; il >= 0; --il) {
        const auto& ls = spec.layers[static_cast<size_t>(il)];
        const bool all_host = std::all_of(std::begin(model::kStreamedMatrices), std::end(model::kStreamedMatrices),
                                          [&](model::LayerTensor r) {
                                              return !ls.get(r) || placement.of(ls.get(r)) == kHostDevice;
                                          });
        if (!all_host) break;
        first = il;
    }
    return first;
}

}  // namespace

SessionPlan plan_session(const model::ModelSpec& spec, const SessionOptions& options, bool mapped,
                         std::optional<uint64_t> free_ram) {
    SessionPlan p;
    p.opt = options;
    check_sizes(spec, p.opt);
    const SessionOptions& opt = p.opt;
    p.placement = place(spec, opt);
    p.n_device_layers = opt.device.empty() ? 0 : std::min(opt.n_gpu_layers, spec.hp.n_layer);
    for (size_t d = kAccelDevice; d < p.placement.devices.size(); ++d) {
        p.accel_holds |= p.placement.uses(static_cast<int>(d));
    }
    const size_t n_accel = p.placement.devices.size() - 1;
    if (!opt.device_capacity.empty() && opt.device_capacity.size() != 1 && opt.device_capacity.size() != n_accel) {
        throw Error(fmt::format("--vram: expected one size, or one per device of --device ({}), found {}", n_accel,
                                opt.device_capacity.size()));
    }
    p.stream_first = first_streamable_layer(spec, p.placement);
    // Streaming goes through one accelerator; with several it is off (the
    // planner, planner/device_split.h, counts it so).
    p.wants_stream = p.placement.devices.size() == 2 && opt.weight_stream && p.stream_first < spec.hp.n_layer &&
                     opt.n_ubatch >= opt.stream_min_batch;
    // What the host would copy: its matrices (norms are float copies either way).
    p.host_matrix_bytes = p.placement.head == kHostDevice ? spec.output_head().n_bytes : 0;
    for (const auto& [t, d] : p.placement.tensor) {
        p.host_matrix_bytes += d == kHostDevice && t->n_rows() > 1 ? t->n_bytes : 0;
    }
    p.copy_host_weights = opt.copy_host_weights && mapped;
    if (p.copy_host_weights && free_ram &&
        static_cast<double>(p.host_matrix_bytes) > 0.9 * static_cast<double>(*free_ram)) {
        p.copy_host_weights = false;
        p.host_copy_note = fmt::format("CPU weights multiplied from the mapped file: a copy ({:.2f} GiB) would not "
                                       "fit in the free RAM ({:.2f} GiB)",
                                       static_cast<double>(p.host_matrix_bytes) / (1 << 30),
                                       static_cast<double>(*free_ram) / (1 << 30));
    }
    return p;
}

}  // namespace tandem
