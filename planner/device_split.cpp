#include "planner/device_split.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include <fmt/format.h>

#include "planner/layout.h"
#include "runtime/common/error.h"
#include "runtime/common/memory_ledger.h"
#include "runtime/model/device_layout.h"

namespace tandem::planner::detail {
std::vector<std::string> device_names(const std::string& list) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= list.size()) {
        const size_t comma = std::min(list.find(',', start), list.size());
        out.push_back(list.substr(start, comma - start));
        start = comma + 1;
    }
    return out;
}

namespace {

// What a session reserves on device d of the placement: the footprint of a
// layout in which d holds what the placement gives it and the host the rest.
DeviceBytes device_part(const model::ModelSpec& spec, const Tables& t, const Placement& p, int d) {
    const auto on = [d](int x) { return x == d ? kAccelDevice : kHostDevice; };
    const Mode m = make_mode(
        spec, t, [&](int64_t il, model::LayerTensor r) { return on(p.of(spec.layers[static_cast<size_t>(il)].get(r))); },
        [&](int64_t il) { return on(p.kv.at(static_cast<size_t>(il))); });
    const Layout l{&m, &m, t.n_layer, on(p.of(spec.get(model::GlobalTensor::OutputNorm))), on(p.head)};
    return footprint(spec, t, l, false).vram;
}

// Shares of the offloaded units (layers, then the head) that give each
// device bytes in proportion to its room: the units' bytes on the one
// device of `one` (weights and cache), walked in order, each device taking
// units up to its part of the total. Returned as unit counts, which
// layer_device() reproduces exactly.
std::vector<double> balanced_shares(const model::ModelSpec& spec, const Tables& t, const Placement& one,
                                    const std::vector<uint64_t>& room, int64_t ngl) {
    const int64_t n_units = std::min(ngl, t.n_layer + 1);
    std::vector<double> bytes(static_cast<size_t>(std::max<int64_t>(n_units, 0)), 0.0);
    for (int64_t i = 0; i < n_units; ++i) {
        double& b = bytes[static_cast<size_t>(i)];
        if (i == t.n_layer) {
            b = static_cast<double>((one.head != kHostDevice ? t.head_bytes : 0) + t.norm_bytes);
            continue;
        }
        for (const gguf::TensorInfo* w : spec.layers[static_cast<size_t>(i)].tensors) {
            if (w && one.of(w) != kHostDevice) b += static_cast<double>(w->n_bytes);
        }
        if (one.kv[static_cast<size_t>(i)] != kHostDevice) b += static_cast<double>(t.kv[static_cast<size_t>(i)]);
    }
    const double total = std::accumulate(bytes.begin(), bytes.end(), 0.0);
    const double rooms = static_cast<double>(std::accumulate(room.begin(), room.end(), uint64_t{0}));
    std::vector<double> counts(room.size(), 0.0);
    if (n_units <= 0 || rooms <= 0) {
        counts.assign(room.size(), 1.0);
        return counts;
    }
    size_t k = 0;
    double cum = 0, target = total * static_cast<double>(room[0]) / rooms;
    for (const double b : bytes) {
        // The next device once this unit would end further past the target
        // than it starts short of it.
        while (k + 1 < room.size() && cum + b / 2 > target) {
            ++k;
            target += total * static_cast<double>(room[k]) / rooms;
        }
        counts[k] += 1;
        cum += b;
    }
    return counts;
}

std::string layer_runs(const model::ModelSpec& spec, const Placement& p, int d) {
    std::string out;
    for (int64_t il = 0; il < spec.hp.n_layer;) {
        if (p.layer[static_cast<size_t>(il)] != d) {
            ++il;
            continue;
        }
        int64_t end = il;
        while (end < spec.hp.n_layer && p.layer[static_cast<size_t>(end)] == d) ++end;
        out += fmt::format("{}[{}, {})", out.empty() ? "" : " ", il, end);
        il = end;
    }
    if (p.head == d) out += out.empty() ? "the output head" : " and the output head";
    return out.empty() ? "nothing" : "layers " + out;
}

}  // namespace

Plan plan_devices(const model::ModelSpec& spec, const PlanInputs& in) {
    const std::vector<std::string> names = device_names(in.device_name);
    const size_t n = in.device_capacities.size();
    if (names.size() != n) {
        throw Error(fmt::format("plan: {} device capacities for {} devices ({})", n, names.size(), in.device_name));
    }
    if (!in.tensor_split.empty() && in.tensor_split.size() != n) {
        throw Error(fmt::format("-ts: expected {} proportions, one per device, found {}", n, in.tensor_split.size()));
    }
    std::vector<uint64_t> margins(n), room(n);
    for (size_t i = 0; i < n; ++i) {
        const uint64_t cap = in.device_capacities[i];
        margins[i] = std::min(cap, in.margin ? *in.margin : default_margin(cap));
        room[i] = cap - margins[i];
    }
    std::vector<double> shares = in.tensor_split;
    Tables t = make_tables(spec, in.n_ctx, in.n_ubatch, in.cache_type, in.n_seq);
    trim_for_stage(t, spec, in.stage_embeds, in.stage_outputs);

    PlanInputs one = in;
    one.device_capacities.clear();
    one.tensor_split.clear();
    one.margin = 0;
    one.weight_stream = false;
    uint64_t combined = std::accumulate(room.begin(), room.end(), uint64_t{0});
    Plan p;
    Placement placement;
    std::vector<DeviceBytes> parts(n);
    // Each round gives up at least one device's overflow; a plan with
    // nothing on the devices fits, so the rounds end.
    for (int round = 0;; ++round) {
        one.device_capacity = combined;
        p = plan(spec, one);
        PlacementRequest req;
        req.devices = {names[0]};
        req.n_gpu_layers = p.ngl;
        req.overrides = p.rules.overrides;
        req.cpu_moe = p.rules.cpu_moe;
        req.n_cpu_moe = p.rules.n_cpu_moe;
        req.spec_first_layer = in.first_layer;
        req.kv_offload = p.rules.kv_offload;
        if (in.tensor_split.empty()) shares = balanced_shares(spec, t, place_tensors(spec, req), room, p.ngl);
        req.devices = names;
        req.split = shares;
        placement = place_tensors(spec, req);
        uint64_t over = 0;
        for (size_t i = 0; i < n; ++i) {
            parts[i] = device_part(spec, t, placement, static_cast<int>(i) + 1);
            const uint64_t need = parts[i].total() + margins[i];
            over = std::max(over, need > in.device_capacities[i] ? need - in.device_capacities[i] : 0);
        }
        if (over == 0 || combined == 0 || in.ngl || round > 4 * (t.n_layer + 2)) break;
        combined -= std::min(combined, std::max<uint64_t>(over, 1 << 20));
    }

    // The one-device plan's numbers, made the devices'.
    p.has_device = true;
    p.tensor_split = shares;
    p.capacity = std::accumulate(in.device_capacities.begin(), in.device_capacities.end(), uint64_t{0});
    p.margin = std::accumulate(margins.begin(), margins.end(), uint64_t{0});
    p.vram = {};
    p.devices.clear();
    int used = 0;
    bool all_fit = true;
    for (size_t i = 0; i < n; ++i) {
        Plan::DevicePart part{names[i], in.device_capacities[i], margins[i], parts[i], true};
        part.fits = parts[i].total() + margins[i] <= in.device_capacities[i];
        all_fit = all_fit && part.fits;
        used += parts[i].total() > 0 ? 1 : 0;
        p.vram.weights += parts[i].weights;
        p.vram.kv += parts[i].kv;
        p.vram.compute += parts[i].compute;
        p.vram.staging += parts[i].staging;
        p.vram.overhead += parts[i].overhead;
        p.devices.push_back(part);
    }
    // Every accelerator in use keeps its own pinned upload buffers on the host.
    if (used > 1) p.ram.staging += static_cast<uint64_t>(used - 1) * model::kAcceleratorStagingBytes;
    p.ram_fits = !in.host_ram || p.ram.total() <= *in.host_ram;
    p.vram_fits = all_fit;
    p.fits = p.vram_fits && p.ram_fits;
    p.weight_stream = false;
    p.stream_bytes = 0;
    // Each boundary between two devices: the hidden state through the host.
    const double pcie = in.pcie_gbps.value_or(kDefaultPcieGBps) * 1e9;
    const double latency = in.device_costs.crossing_s.value_or(kHandOverLatencyS);
    const double boundaries = used > 1 ? static_cast<double>(used - 1) : 0.0;
    const auto hidden = static_cast<double>(t.hidden_bytes);
    if (p.predicted.tg_tps > 0) {
        p.predicted.tg_tps = 1.0 / (1.0 / p.predicted.tg_tps + boundaries * 2.0 * (latency + hidden / pcie));
    }
    if (p.predicted.pp_tps > 0) {
        const auto nb = static_cast<double>(t.n_ubatch);
        p.predicted.pp_tps = nb / (nb / p.predicted.pp_tps + boundaries * 2.0 * (latency + nb * hidden / pcie));
    }
    std::string per_device;
    for (size_t i = 0; i < n; ++i) {
        const Plan::DevicePart& d = p.devices[i];
        per_device += fmt::format("{}{}: {}, {} + margin {} of {}{}", i ? "; " : "", d.name,
                                  layer_runs(spec, placement, static_cast<int>(i) + 1), format_bytes(d.vram.total()),
                                  format_bytes(d.margin), format_bytes(d.capacity), d.fits ? "" : " (does not fit)");
    }
    p.reasons.insert(p.reasons.begin(),
                     fmt::format("{} devices share the layers (-ts {}{}), planned as one device of their combined "
                                 "room, {}: {}; each boundary hands the hidden state over through the host, {} per "
                                 "token; weight streaming is off with several devices",
                                 n, tensor_split_text(shares), in.tensor_split.empty() ? ", by their room" : "",
                                 format_bytes(combined), per_device,
                                 used > 1 ? fmt::format("{} hand-overs", 2 * (used - 1)) : "no extra hand-over"));
    // The host's staging grew with the devices: its line says the new total.
    for (std::string& r : p.reasons) {
        if (in.host_ram && r.rfind("host RAM", 0) == 0) {
            r = p.ram_fits ? fmt::format("host RAM: {} of {}", format_bytes(p.ram.total()), format_bytes(*in.host_ram))
                           : fmt::format("host RAM short, so this does not fit: {} needed but {} given",
                                         format_bytes(p.ram.total()), format_bytes(*in.host_ram));
        }
    }
    return p;
}

}  // namespace tandem::planner::detail
