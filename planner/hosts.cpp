#include "planner/hosts.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/common/memory_ledger.h"

namespace tandem::planner {

model::ModelSpec stage_spec(const model::ModelSpec& spec, int64_t first, int64_t end) {
    model::ModelSpec s = spec;
    s.layers.assign(spec.layers.begin() + first, spec.layers.begin() + end);
    s.hp.n_layer = end - first;
    s.hp.n_layer_dense_lead = std::clamp<int64_t>(spec.hp.n_layer_dense_lead - first, 0, end - first);
    return s;
}

namespace {

std::string gpu_names(size_t n) {
    std::string out;
    for (size_t i = 0; i < n; ++i) out += fmt::format("{}cuda{}", i ? "," : "", i);
    return out;
}

uint64_t sum(const std::vector<uint64_t>& v) {
    uint64_t s = 0;
    for (const uint64_t x : v) s += x;
    return s;
}

// Each host's stage under one share of the layers; nullopt when a host
// gets none.
std::optional<HostsPlan> plan_split(const model::ModelSpec& spec, const std::vector<Host>& hosts, const Link& link,
                                    const PlanInputs& base, const std::vector<double>& shares, const std::string& rule) {
    const int64_t n_layer = spec.hp.n_layer;
    const auto n_hosts = static_cast<int64_t>(hosts.size());
    std::vector<int64_t> bounds(hosts.size() + 1, 0);
    for (int64_t il = 0; il < n_layer; ++il) {
        const int h = layer_device(il, n_layer, n_hosts, shares) - 1;
        bounds[static_cast<size_t>(h) + 1] = il + 1;
    }
    for (size_t h = 1; h < bounds.size(); ++h) {
        if (bounds[h] <= bounds[h - 1]) return std::nullopt;  // a host without a layer
    }
    HostsPlan out;
    out.split_rule = rule;
    double decode = 0, slowest_batch = 0;
    for (size_t h = 0; h < hosts.size(); ++h) {
        HostStage st;
        st.host = hosts[h].name;
        st.first = bounds[h];
        st.end = bounds[h + 1];
        const model::ModelSpec sub = stage_spec(spec, st.first, st.end);
        PlanInputs in = base;
        in.stage_embeds = h == 0;
        in.stage_outputs = h + 1 == hosts.size();
        in.first_layer = st.first;
        in.host_ram = hosts[h].ram;
        in.device_capacity.reset();
        in.device_capacities.clear();
        if (hosts[h].vram.size() == 1) {
            in.device_capacity = hosts[h].vram[0];
            in.device_name = "cuda0";
        } else if (hosts[h].vram.size() > 1) {
            in.device_capacities = hosts[h].vram;
            in.device_name = gpu_names(hosts[h].vram.size());
        }
        st.plan = plan(sub, in);
        st.decode_s = st.plan.predicted.tg_tps > 0 ? 1.0 / st.plan.predicted.tg_tps : 0;
        st.batch_s = st.plan.predicted.pp_tps > 0 ? static_cast<double>(st.plan.n_ubatch) / st.plan.predicted.pp_tps : 0;
        decode += st.decode_s;
        slowest_batch = std::max(slowest_batch, st.batch_s);
        out.fits = out.fits && st.plan.fits;
        out.stages.push_back(std::move(st));
    }
    const double hidden = static_cast<double>(spec.hp.n_embd) * sizeof(float);
    const double logits = static_cast<double>(spec.hp.n_vocab) * sizeof(float);
    const double hop = link.latency_s + hidden / link.bytes_per_s;
    out.link_s = static_cast<double>(n_hosts - 1) * hop + link.latency_s + logits / link.bytes_per_s;
    out.tg_tps = 1.0 / (decode + out.link_s);
    out.link_share = out.link_s / (decode + out.link_s);
    const auto n_ubatch = static_cast<double>(out.stages.front().plan.n_ubatch);
    const double batch_hop = link.latency_s + n_ubatch * hidden / link.bytes_per_s;
    out.pp_tps = n_ubatch / std::max(slowest_batch, batch_hop);
    return out;
}

}  // namespace

HostsPlan plan_hosts(const model::ModelSpec& spec, const std::vector<Host>& hosts, const Link& link,
                     const PlanInputs& base) {
    if (hosts.empty()) throw Error("--hosts: the file names no host");
    if (static_cast<int64_t>(hosts.size()) > spec.hp.n_layer) {
        throw Error(fmt::format("--hosts: {} hosts for a model of {} layers", hosts.size(), spec.hp.n_layer));
    }
    if (!(link.bytes_per_s > 0) || !(link.latency_s >= 0)) {
        throw Error("--hosts: the link needs a bandwidth above 0 and a latency of 0 or more");
    }
    struct Rule {
        std::string name;
        std::vector<double> shares;
    };
    std::vector<Rule> rules;
    std::vector<double> by_vram, by_memory;
    for (const Host& h : hosts) {
        by_vram.push_back(static_cast<double>(sum(h.vram)));
        by_memory.push_back(static_cast<double>(sum(h.vram) + h.ram));
    }
    if (std::any_of(by_vram.begin(), by_vram.end(), [](double x) { return x > 0; })) {
        rules.push_back({"by each host's VRAM", by_vram});
    }
    rules.push_back({"by each host's VRAM and RAM", by_memory});
    rules.push_back({"equal", std::vector<double>(hosts.size(), 1.0)});
    std::optional<HostsPlan> best;
    std::vector<std::string> weighed;
    for (const Rule& r : rules) {
        std::optional<HostsPlan> p = plan_split(spec, hosts, link, base, r.shares, r.name);
        if (!p) continue;
        weighed.push_back(fmt::format("layers {}: {:.2f} tok/s decode{}", r.name, p->tg_tps, p->fits ? "" : " (does not fit)"));
        if (!best || (p->fits && !best->fits) || (p->fits == best->fits && p->tg_tps > best->tg_tps)) best = std::move(p);
    }
    if (!best) throw Error("--hosts: no share of the layers gives every host one");
    best->reasons.push_back(fmt::format("layers shared {}: {:.2f} tok/s decode, {:.1f} tok/s prefill predicted; the "
                                        "link takes {:.2f} ms of each token ({:.3f}%)",
                                        best->split_rule, best->tg_tps, best->pp_tps, best->link_s * 1e3,
                                        100.0 * best->link_share));
    for (std::string& w : weighed) best->reasons.push_back("weighed: " + w);
    return *best;
}

nlohmann::json to_json(const HostsPlan& p) {
    nlohmann::json stages = nlohmann::json::array();
    for (const HostStage& s : p.stages) {
        nlohmann::json j = to_json(s.plan);
        j["host"] = s.host;
        j["layers"] = {s.first, s.end};
        j["decode_ms"] = s.decode_s * 1e3;
        j["batch_ms"] = s.batch_s * 1e3;
        stages.push_back(std::move(j));
    }
    return {{"stages", stages},         {"split", p.split_rule},     {"tg_tps", p.tg_tps},
            {"pp_tps", p.pp_tps},       {"link_ms", p.link_s * 1e3}, {"link_share", p.link_share},
            {"fits", p.fits},           {"reasons", p.reasons}};
}

}  // namespace tandem::planner
