#include "runtime/placement/placement.h"

#include <algorithm>
#include <cctype>
#include <regex>

#include <fmt/format.h>

#include "runtime/common/error.h"

namespace tandem {
namespace {

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

std::string trim(const std::string& s) {
    const auto b = s.find_first_not_of(" \t");
    const auto e = s.find_last_not_of(" \t");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::regex compile(const std::string& pattern) {
    try {
        return std::regex(pattern);
    } catch (const std::regex_error& e) {
        throw Error(fmt::format("-ot: '{}' is not a valid regular expression ({})", pattern, e.what()));
    }
}

// The device index a rule's name means: "cpu" (any case, as llama.cpp's
// "CPU") is the host; an accelerator by its name, "cuda" meaning cuda0.
int device_index(const std::string& name, const std::vector<std::string>& accels) {
    std::string n = lower(name);
    if (n == "cpu" || n == "host") return kHostDevice;
    if (n == "cuda") n = "cuda0";
    for (size_t i = 0; i < accels.size(); ++i) {
        std::string a = lower(accels[i]);
        if (a == "cuda") a = "cuda0";
        if (n == a) return static_cast<int>(i) + 1;
    }
    std::string in_use = "cpu";
    for (const std::string& a : accels) in_use += ", " + a;
    throw Error(fmt::format("-ot: device '{}' is not in use; expected {}{}", name, in_use,
                            accels.empty() ? " (no accelerator: --device is not set)" : ""));
}

struct Rule {
    std::regex re;
    int device;
};

const char* role_group(model::LayerTensor r) { return model::is_ffn_role(r) ? "ffn" : "attn"; }

}  // namespace

std::vector<TensorOverride> parse_tensor_overrides(const std::string& text) {
    std::vector<TensorOverride> out;
    size_t start = 0;
    while (start <= text.size()) {
        const size_t comma = text.find(',', start);
        const std::string part = trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        start = comma == std::string::npos ? text.size() + 1 : comma + 1;
        if (part.empty()) continue;
        const size_t eq = part.rfind('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == part.size()) {
            throw Error(fmt::format("-ot: expected REGEX=DEVICE (e.g. \"blk\\.[0-9]+\\.ffn_.*=cpu\"), found '{}'", part));
        }
        TensorOverride o{trim(part.substr(0, eq)), trim(part.substr(eq + 1))};
        compile(o.pattern);
        out.push_back(std::move(o));
    }
    if (out.empty()) throw Error(fmt::format("-ot: expected REGEX=DEVICE[,REGEX=DEVICE...], found '{}'", text));
    return out;
}

int Placement::of(const gguf::TensorInfo* t) const {
    if (!t) return kHostDevice;
    const auto it = tensor.find(t);
    return it == tensor.end() ? kHostDevice : it->second;
}

bool Placement::uses(int device) const {
    if (head == device) return true;
    if (std::find(kv.begin(), kv.end(), device) != kv.end()) return true;
    return std::any_of(tensor.begin(), tensor.end(), [&](const auto& e) { return e.second == device; });
}

uint64_t Placement::weight_bytes(int device) const {
    uint64_t total = 0;
    for (const auto& [t, d] : tensor) total += d == device ? t->n_bytes : 0;
    if (device == kHostDevice && embd_tensor) total += embd_tensor->n_bytes;
    const bool head_is_embd = head_tensor == embd_tensor;
    if (head_tensor && head == device && !(head_is_embd && device == kHostDevice)) total += head_tensor->n_bytes;
    return total;
}

int layer_device(int64_t i, int64_t n, int64_t n_devices, const std::vector<double>& split) {
    if (!split.empty() && static_cast<int64_t>(split.size()) != n_devices) {
        throw Error(fmt::format("-ts: expected {} proportions, one per device of --device, found {}", n_devices,
                                split.size()));
    }
    double total = 0;
    for (const double x : split) {
        if (!(x >= 0)) throw Error(fmt::format("-ts: expected proportions >= 0, found {}", x));
        total += x;
    }
    if (!split.empty() && !(total > 0)) throw Error("-ts: expected a proportion above 0");
    // i / n < cum / total, compared as i * total < cum * n (exact for
    // whole-number proportions).
    double cum = 0;
    for (int64_t k = 0; k < n_devices; ++k) {
        cum += split.empty() ? 1.0 : split[static_cast<size_t>(k)];
        const double sum = split.empty() ? static_cast<double>(n_devices) : total;
        if (static_cast<double>(i) * sum < cum * static_cast<double>(n)) return static_cast<int>(k) + 1;
    }
    return static_cast<int>(n_devices);
}

Placement place_tensors(const model::ModelSpec& spec, const PlacementRequest& req) {
    const int64_t n_layer = spec.hp.n_layer;
    if (req.n_gpu_layers < 0) throw Error(fmt::format("-ngl: expected a value >= 0, found {}", req.n_gpu_layers));
    if (req.n_cpu_moe < 0) throw Error(fmt::format("--n-cpu-moe: expected a value >= 0, found {}", req.n_cpu_moe));
    if (req.devices.empty() && req.n_gpu_layers > 0) {
        throw Error(fmt::format("-ngl {} asks for layers on an accelerator, but none is available", req.n_gpu_layers));
    }
    Placement p;
    p.devices.push_back("cpu");
    for (const std::string& d : req.devices) p.devices.push_back(d);
    const auto n_accel = static_cast<int64_t>(req.devices.size());
    if (req.first_layer < 0 || req.first_layer >= std::max<int64_t>(n_layer, 1)) {
        throw Error(fmt::format("-ngl: expected a first layer in [0, {}), found {}", n_layer, req.first_layer));
    }
    // The units -ngl offloads: the leading layers from first_layer, and the
    // output as the unit after the last layer.
    const int64_t n_units = std::min(req.n_gpu_layers, n_layer - req.first_layer + 1);
    auto unit_device = [&](int64_t il) {
        const int64_t i = il - req.first_layer;
        return i >= 0 && i < n_units ? layer_device(i, n_units, n_accel, req.split) : kHostDevice;
    };
    if (n_accel > 0) (void)layer_device(0, 1, n_accel, req.split);  // a bad split fails even with -ngl 0

    // Expert rules come before the user's -ot, as llama.cpp appends them
    // to its override list in that order.
    std::vector<Rule> rules;
    if (req.cpu_moe) rules.push_back({compile(R"(\.ffn_(up|down|gate)_exps)"), kHostDevice});
    // --n-cpu-moe counts the model's layers, as the tensors' names do.
    const int64_t moe_end = std::min(req.n_cpu_moe, req.spec_first_layer + n_layer);
    for (int64_t il = req.spec_first_layer; il < moe_end; ++il) {
        rules.push_back({compile(fmt::format(R"(^blk\.{}\.ffn_(up|down|gate)_exps)", il)), kHostDevice});
    }
    for (const TensorOverride& o : req.overrides) rules.push_back({compile(o.pattern), device_index(o.device, req.devices)});
    auto decide = [&](const std::string& name, int base) {
        for (const Rule& r : rules) {
            if (std::regex_search(name, r.re)) {
                p.overridden |= r.device != base;
                return r.device;
            }
        }
        return base;
    };

    for (int64_t il = 0; il < n_layer; ++il) {
        const int base = unit_device(il);
        p.layer.push_back(base);
        const model::LayerSpec& ls = spec.layers.at(static_cast<size_t>(il));
        for (const gguf::TensorInfo* t : ls.tensors) {
            if (t) p.tensor[t] = decide(t->name, base);
        }
        // K's product writes the cache.
        const model::LayerTensor k = ls.k_writer();
        const int kv_dev = p.of(k != model::LayerTensor::Count ? ls.get(k) : nullptr);
        p.kv.push_back(req.kv_offload ? kv_dev : kHostDevice);
        // What an op reads beside its weight lives where the op runs: an
        // expert product's bias with its weight, the sinks with the cache.
        for (const model::LayerOp& op : ls.ops) {
            if (op.kind == model::OpKind::Attention && op.weight[0] != model::kNoTensor) {
                p.tensor[ls.get(op.weight[0])] = p.kv.back();
            }
            for (size_t i = 0; i < op.bias.size(); ++i) {
                if (op.bias[i] != model::kNoTensor) p.tensor[ls.get(op.bias[i])] = p.of(ls.get(op.weight[i]));
            }
        }
    }
    const int out_base = unit_device(n_layer);
    if (const gguf::TensorInfo* norm = spec.get(model::GlobalTensor::OutputNorm)) p.tensor[norm] = decide(norm->name, out_base);
    p.head_tensor = &spec.output_head();
    p.embd_tensor = spec.get(model::GlobalTensor::TokenEmbd);
    p.head = decide(model::global_tensor_name(model::GlobalTensor::Output), out_base);
    return p;
}

std::string describe_placement(const model::ModelSpec& spec, const Placement& p) {
    // One label per layer, then runs of equal labels.
    auto dev = [&](int d) { return p.devices.at(static_cast<size_t>(d)); };
    std::vector<std::string> labels;
    for (int64_t il = 0; il < spec.hp.n_layer; ++il) {
        std::vector<std::pair<std::string, int>> groups;  // "attn"/"ffn" -> device, -1 when mixed
        const model::LayerSpec& ls = spec.layers[static_cast<size_t>(il)];
        for (int r = 0; r < model::kLayerTensorCount; ++r) {
            const gguf::TensorInfo* t = ls.tensors[static_cast<size_t>(r)];
            if (!t) continue;
            const std::string g = role_group(static_cast<model::LayerTensor>(r));
            auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& e) { return e.first == g; });
            if (it == groups.end()) {
                groups.emplace_back(g, p.of(t));
            } else if (it->second != p.of(t)) {
                it->second = -1;
            }
        }
        const int kv = p.kv[static_cast<size_t>(il)];
        const bool uniform = std::all_of(groups.begin(), groups.end(), [&](const auto& e) { return e.second == kv; });
        std::string label;
        if (uniform) {
            label = dev(kv);
        } else {
            for (const auto& [g, d] : groups) label += fmt::format("{} {}, ", g, d < 0 ? "mixed" : dev(d));
            label += "kv " + dev(kv);
        }
        labels.push_back(label);
    }
    std::string out;
    for (size_t i = 0; i < labels.size();) {
        size_t j = i;
        while (j + 1 < labels.size() && labels[j + 1] == labels[i]) ++j;
        if (!out.empty()) out += " | ";
        out += i == j ? fmt::format("blk {}: {}", i, labels[i]) : fmt::format("blk {}-{}: {}", i, j, labels[i]);
        i = j + 1;
    }
    const int norm = p.of(spec.get(model::GlobalTensor::OutputNorm));
    out += fmt::format(" | output: {}", norm == p.head ? dev(p.head) : "norm " + dev(norm) + ", head " + dev(p.head));
    return out;
}

}  // namespace tandem
