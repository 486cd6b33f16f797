// How a plan is told: names of the candidates, the rules and flags that
// place it, its tensor-class ranges, and its JSON form.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "planner/layout.h"
#include "planner/planner.h"

namespace tandem::planner {
namespace {

struct CandidateRow {
    Candidate candidate;
    const char* name;
    const char* letter;
    const char* short_class;  // in labels: "(b) ffn 60/80"
    const char* json_class;   // the tensor class a range names
    const char* rest_class;   // what stays on the accelerator in every layer
};

constexpr CandidateRow kCandidates[] = {
    {Candidate::Layers, "layers", "(a)", "ngl", "layer", ""},
    {Candidate::Ffn, "ffn", "(b)", "ffn", "ffn", "attention"},
    {Candidate::Experts, "experts", "(c)", "exps", "experts", "non_expert"},
};

const CandidateRow& row(Candidate c) {
    return *std::find_if(std::begin(kCandidates), std::end(kCandidates),
                         [c](const CandidateRow& r) { return r.candidate == c; });
}

// Digits lo..hi as a regex piece: "3" or "[0-6]".
std::string digits(int64_t lo, int64_t hi) { return lo == hi ? std::to_string(lo) : fmt::format("[{}-{}]", lo, hi); }

// A regex alternation matching exactly the decimal numbers [0, n), n >= 1:
// "[0-9]|1[0-9]|2[0-3]" for 24.
std::string below(int64_t n) {
    std::string out;
    for (int64_t tens = 0; tens * 10 < n; ++tens) {
        const int64_t hi = std::min<int64_t>(9, n - 1 - tens * 10);
        if (!out.empty()) out += "|";
        out += (tens == 0 ? "" : std::to_string(tens)) + digits(0, hi);
    }
    return out;
}

// The distinct name suffixes of the FFN roles: "ffn_norm|ffn_gate|...".
std::string ffn_suffixes() {
    std::vector<std::string> seen;
    for (int r = 0; r < model::kLayerTensorCount; ++r) {
        const auto role = static_cast<model::LayerTensor>(r);
        if (!detail::is_ffn_role(role)) continue;
        const std::string s(model::layer_tensor_rule(role).suffix);
        if (std::find(seen.begin(), seen.end(), s) == seen.end()) seen.push_back(s);
    }
    std::string out;
    for (const std::string& s : seen) out += (out.empty() ? "" : "|") + s;
    return out;
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

nlohmann::json range(const char* tensors, int64_t first, int64_t last, bool on_gpu) {
    return {{"tensors", tensors}, {"first_layer", first}, {"last_layer", last}, {"device", on_gpu ? "gpu" : "cpu"}};
}

// Which tensors sit where, as runs of layers per tensor class.
nlohmann::json ranges(const Option& o, int64_t n) {
    nlohmann::json out = nlohmann::json::array();
    const CandidateRow& r = row(o.candidate);
    if (o.candidate == Candidate::Layers) {
        const int64_t d = std::min(o.ngl, n);
        if (d > 0) out.push_back(range(r.json_class, 0, d - 1, true));
        if (d < n) out.push_back(range(r.json_class, d, n - 1, false));
    } else {
        out.push_back(range(r.rest_class, 0, n - 1, true));
        out.push_back(range(r.json_class, 0, o.host_layers - 1, false));
        if (o.host_layers < n) out.push_back(range(r.json_class, o.host_layers, n - 1, true));
    }
    out.push_back({{"tensors", "output"}, {"device", o.output_on_gpu ? "gpu" : "cpu"}});
    return out;
}

nlohmann::json bytes_json(const DeviceBytes& b) {
    return nlohmann::json{{"weights", b.weights}, {"kv", b.kv},           {"compute", b.compute},
                          {"staging", b.staging}, {"overhead", b.overhead}, {"total", b.total()}};
}

std::string rules_flags(int64_t ngl, const PlacementRules& rules) {
    std::string out = fmt::format("-ngl {}", ngl);
    for (const TensorOverride& o : rules.overrides) out += " -ot " + quoted(o.pattern + "=" + o.device);
    if (rules.cpu_moe) out += " --cpu-moe";
    if (rules.n_cpu_moe > 0) out += fmt::format(" --n-cpu-moe {}", rules.n_cpu_moe);
    if (!rules.kv_offload) out += " -nkvo";
    return out;
}

}  // namespace

// Layers [first, first + n) as a regex alternation: below(n) from 0,
// else the numbers one by one (a pipeline stage's own layers).
std::string layer_numbers(int64_t first, int64_t n) {
    if (first == 0) return below(n);
    std::string out;
    for (int64_t il = first; il < first + n; ++il) out += (out.empty() ? "" : "|") + std::to_string(il);
    return out;
}

PlacementRules option_rules(const Option& o, int64_t first_layer) {
    PlacementRules r;
    if (o.candidate == Candidate::Experts && first_layer == 0) r.n_cpu_moe = o.host_layers;
    if (o.candidate == Candidate::Experts && first_layer > 0 && o.host_layers > 0) {
        r.overrides.push_back({fmt::format(R"(^blk\.({})\.ffn_(up|down|gate)_exps)",
                                           layer_numbers(first_layer, o.host_layers)),
                               "cpu"});
    }
    if (o.candidate == Candidate::Ffn) r.overrides.push_back(ffn_override(o.host_layers, first_layer));
    return r;
}

std::string candidate_name(Candidate c) { return row(c).name; }
std::string candidate_letter(Candidate c) { return row(c).letter; }

TensorOverride ffn_override(int64_t host_layers, int64_t first_layer) {
    return {fmt::format(R"(^blk\.({})\.({})\.)", layer_numbers(first_layer, std::max<int64_t>(host_layers, 1)),
                        ffn_suffixes()),
            "cpu"};
}

std::string placement_flags(const Plan& p) {
    return rules_flags(p.ngl, p.rules) + (p.tensor_split.empty() ? "" : " -ts " + tensor_split_text(p.tensor_split));
}

std::string tensor_split_text(const std::vector<double>& shares) {
    // Small numbers: each over the smallest above 0.
    double unit = 0;
    for (const double x : shares) unit = x > 0 && (unit == 0 || x < unit) ? x : unit;
    std::string out;
    for (const double x : shares) out += fmt::format("{}{:.6g}", out.empty() ? "" : ",", unit > 0 ? x / unit : x);
    return out;
}

std::string option_label(const Option& o, int64_t n) {
    const CandidateRow& r = row(o.candidate);
    if (o.candidate == Candidate::Layers) return fmt::format("{} ngl {}/{}", r.letter, o.ngl, n + 1);
    return fmt::format("{} {} {}/{}{}", r.letter, r.short_class, n - o.host_layers, n,
                       o.output_on_gpu ? "" : ", head cpu");
}

std::string option_text(const Option& o, int64_t n) {
    const CandidateRow& r = row(o.candidate);
    if (o.candidate == Candidate::Layers) {
        if (o.ngl > n) return fmt::format("{} all {} layers and the output head on the accelerator", r.letter, n);
        if (o.ngl == n) {
            return fmt::format("{} all {} layers on the accelerator, the output head on the CPU", r.letter, n);
        }
        if (o.ngl == 0) return fmt::format("{} every layer on the CPU", r.letter);
        return fmt::format("{} layers [0, {}) on the accelerator, the rest on the CPU", r.letter, o.ngl);
    }
    const bool experts = o.candidate == Candidate::Experts;
    const std::string rest = experts ? fmt::format("everything but the experts of all {} layers", n)
                                     : fmt::format("the attention and KV cache of all {} layers", n);
    const std::string head = o.output_on_gpu ? " and the output head" : "";
    const std::string head_cpu = o.output_on_gpu ? "" : " (the output head on the CPU)";
    const char* what = experts ? "experts" : "FFN";
    if (o.host_layers >= n) {
        return fmt::format("{} {}{} on the accelerator, every layer's {} on the CPU{}", r.letter, rest, head, what,
                           head_cpu);
    }
    return fmt::format("{} {}{} on the accelerator, with the {} of layers [{}, {}){}", r.letter, rest, head, what,
                       o.host_layers, n, head_cpu);
}

nlohmann::json to_json(const Option& o, int64_t n_layer) {
    return {
        {"candidate", candidate_name(o.candidate)},
        {"label", option_label(o, n_layer)},
        {"text", option_text(o, n_layer)},
        {"ngl", o.ngl},
        {"host_layers", o.host_layers},
        {"output_on_gpu", o.output_on_gpu},
        {"flags", rules_flags(o.ngl, option_rules(o))},
        {"ranges", ranges(o, n_layer)},
        {"fits", o.vram_fits && o.ram_fits},
        {"vram_fits", o.vram_fits},
        {"ram_fits", o.ram_fits},
        {"weight_stream", {{"enabled", o.weight_stream}, {"bytes", o.stream_bytes}}},
        {"vram", bytes_json(o.vram)},
        {"ram", bytes_json(o.ram)},
        {"predicted", {{"tg_tps", o.predicted.tg_tps}, {"pp_tps", o.predicted.pp_tps}}},
    };
}

nlohmann::json to_json(const Plan& p) {
    nlohmann::json assumptions = nlohmann::json::object();
    for (const Assumption& a : p.assumptions) {
        assumptions[a.name] = {{"value", a.value}, {"default", a.is_default}};
    }
    nlohmann::json placement = p.weighed.empty() ? nlohmann::json(nullptr) : to_json(p.weighed.front(), p.n_layer);
    if (!p.weighed.empty()) {
        placement["flags"] = placement_flags(p);
        placement["user_rules"] = p.user_rules;
    }
    nlohmann::json weighed = nlohmann::json::array();
    for (const Option& o : p.weighed) weighed.push_back(to_json(o, p.n_layer));
    nlohmann::json runner_up = p.runner_up ? to_json(*p.runner_up, p.n_layer) : nlohmann::json(nullptr);
    if (p.runner_up && p.predicted.tg_tps > 0 && p.runner_up->predicted.tg_tps > 0) {
        runner_up["tg_ratio"] = p.predicted.tg_tps / p.runner_up->predicted.tg_tps;
        runner_up["pp_ratio"] = p.predicted.pp_tps / p.runner_up->predicted.pp_tps;
    }
    nlohmann::json devices = nlohmann::json::array();
    for (const Plan::DevicePart& d : p.devices) {
        devices.push_back({{"name", d.name},
                           {"capacity", d.capacity},
                           {"margin", d.margin},
                           {"fits", d.fits},
                           {"vram", bytes_json(d.vram)}});
    }
    return {
        {"devices", devices},
        {"tensor_split", p.tensor_split},
        {"ngl", p.ngl},
        {"n_layer", p.n_layer},
        {"output_on_gpu", p.output_on_gpu},
        {"candidate", candidate_name(p.candidate)},
        {"host_layers", p.host_layers},
        {"fits", p.fits},
        {"vram_fits", p.vram_fits},
        {"ram_fits", p.ram_fits},
        {"forced", p.forced},
        {"has_device", p.has_device},
        {"capacity", p.capacity ? nlohmann::json(*p.capacity) : nlohmann::json(nullptr)},
        {"host_ram", p.host_ram ? nlohmann::json(*p.host_ram) : nlohmann::json(nullptr)},
        {"margin", p.margin},
        {"n_ctx", p.n_ctx},
        {"n_ubatch", p.n_ubatch},
        {"cache_type", cache_type_name(p.cache_type)},
        {"cache_type_k", model::cache_element_name(p.cache_type.k)},
        {"cache_type_v", model::cache_element_name(p.cache_type.v)},
        {"kv_rotation", {{"k", p.kv_rotation.k}, {"v", p.kv_rotation.v}}},
        {"kv", {{"total", p.vram.kv + p.ram.kv}, {"gpu", p.vram.kv}, {"cpu", p.ram.kv}}},
        {"weight_stream", {{"enabled", p.weight_stream}, {"min_batch", p.stream_min_batch}, {"bytes", p.stream_bytes}}},
        {"vram", bytes_json(p.vram)},
        {"ram", bytes_json(p.ram)},
        {"predicted", {{"tg_tps", p.predicted.tg_tps}, {"pp_tps", p.predicted.pp_tps}}},
        {"placement", placement},
        {"runner_up", runner_up},
        {"weighed", weighed},
        {"assumptions", assumptions},
        {"reasons", p.reasons},
    };
}

}  // namespace tandem::planner
