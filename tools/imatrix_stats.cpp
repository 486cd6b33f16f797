#include "tools/imatrix_stats.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "runtime/common/error.h"

namespace tandem::tools::imatrix {
namespace {

// llama-imatrix's process_tensor_name: the part after "blk" is the layer
// ("-" without one), the part before "weight" the kind (else the name).
void split_name(const std::string& name, std::string& layer, std::string& kind) {
    std::vector<std::string> parts;
    std::istringstream in(name);
    for (std::string p; std::getline(in, p, '.');) parts.push_back(p);
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
        if (parts[i] == "blk") {
            layer = parts[i + 1];
            break;
        }
    }
    for (size_t i = 1; i < parts.size(); ++i) {
        if (parts[i] == "weight") {
            kind = parts[i - 1];
            break;
        }
    }
    if (kind.empty()) kind = name;
    if (layer.empty()) layer = "-";
}

// Float sums in order, as llama-imatrix's std::accumulate / inner_product.
float dot(const std::vector<float>& a, const std::vector<float>& b) {
    float s = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) s = s + a[i] * b[i];
    return s;
}

// One weight's row of the table (llama-imatrix's compute_statistics);
// false when no matrix saw a token.
bool tensor_stats(const std::string& name, const Entry& e, TensorStats& ts) {
    const size_t n_mat = e.counts.size();
    if (n_mat == 0 || e.in_sum2.size() % n_mat != 0) return false;
    const size_t row = e.in_sum2.size() / n_mat;
    std::vector<float> act;
    act.reserve(e.in_sum2.size());
    for (size_t i = 0; i < n_mat; ++i) {
        if (e.counts[i] == 0) continue;
        const auto count = static_cast<float>(e.counts[i]);
        for (size_t j = 0; j < row; ++j) act.push_back(e.in_sum2[i * row + j] / count);
    }
    if (act.empty()) return false;
    const auto n = static_cast<float>(act.size());
    float total = 0.0f;
    for (const float a : act) total = total + a;
    const float mean = total / n;
    const float var = dot(act, act) / n - mean * mean;
    const float dev = std::sqrt(std::max(0.0f, var));
    const auto inactive = std::count_if(act.begin(), act.end(), [](float v) { return std::fabs(v) <= 1e-5f; });
    float entropy = 0.0f;
    if (total > 0.0f) {
        for (const float a : act) {
            if (const float p = a / total; p > 0.0f) entropy -= p * std::log2(p);
        }
    }
    int above = 0;
    if (dev > 0.0f) {
        for (const float a : act) above += (a - mean) / dev > 1.0f ? 1 : 0;
    }
    ts.name = name;
    split_name(name, ts.layer, ts.kind);
    ts.sum = total;
    ts.min = *std::min_element(act.begin(), act.end());
    ts.max = *std::max_element(act.begin(), act.end());
    ts.mean = mean;
    ts.stddev = dev;
    ts.active = 1.0f - static_cast<float>(inactive) / n;
    ts.n = static_cast<int>(act.size());
    ts.entropy = entropy;
    ts.zd = static_cast<float>(above) / static_cast<float>(ts.n);
    return true;
}

// The cosine of each weight's raw sums with the same weight's one block
// earlier (llama-imatrix's compute_cossim).
void add_cossim(std::vector<TensorStats>& ts, const Entries& entries) {
    static const std::regex kBlock(R"(blk\.(\d+)\.)");
    for (TensorStats& t : ts) {
        std::smatch m;
        if (!std::regex_search(t.name, m, kBlock)) continue;
        std::string prev = t.name;
        prev.replace(static_cast<size_t>(m.position(1)), static_cast<size_t>(m.length(1)),
                     std::to_string(std::stoi(m[1]) - 1));
        const bool listed = std::any_of(ts.begin(), ts.end(), [&](const TensorStats& o) { return o.name == prev; });
        if (!listed) continue;
        const std::vector<float>& a = entries.at(t.name).in_sum2;
        const std::vector<float>& b = entries.at(prev).in_sum2;
        if (a.size() != b.size()) continue;  // llama-imatrix would read past the shorter
        t.cossim = dot(a, b) / (std::sqrt(dot(a, a)) * std::sqrt(dot(b, b)));
    }
}

int block_of(const std::string& layer) {
    try {
        return std::stoi(layer);
    } catch (const std::exception&) {
        return -1;
    }
}

}  // namespace

Statistics compute_statistics(const Entries& entries) {
    Statistics s;
    for (const auto& [name, e] : entries) {
        if (TensorStats ts; tensor_stats(name, e, ts)) s.tensors.push_back(std::move(ts));
    }
    if (s.tensors.empty()) throw Error("imatrix: expected a weight with sums over at least one token, found none");
    add_cossim(s.tensors, entries);
    std::stable_sort(s.tensors.begin(), s.tensors.end(), [](const TensorStats& a, const TensorStats& b) {
        return a.kind < b.kind || (a.kind == b.kind && a.sum > b.sum);
    });
    // Per block, in the table's order: sums of N times each value.
    struct Weighted {
        float sum = 0.0f, zd = 0.0f, cossim = 0.0f;
        int n = 0;
    };
    std::map<int, Weighted> blocks;
    for (const TensorStats& t : s.tensors) {
        Weighted& w = blocks[block_of(t.layer)];
        w.sum += static_cast<float>(t.n) * t.sum;
        w.zd += static_cast<float>(t.n) * t.zd;
        w.cossim += static_cast<float>(t.n) * t.cossim;
        w.n += t.n;
    }
    for (const auto& [layer, w] : blocks) {
        if (layer < 0 || w.n == 0) continue;
        const auto n = static_cast<float>(w.n);
        s.layers.push_back({layer, w.sum / n, w.zd / n, w.cossim / n});
    }
    return s;
}

std::string format_statistics(const Statistics& s, const std::string& source) {
    std::string out = fmt::format("Computing statistics for {} ({} tensors)\n", source, s.tensors.size());
    out += fmt::format("\n{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n", " Layer", "       Tensor",
                       "          Σ(Act²)", "  Min", "            Max", "           μ", "   σ", " % Active", "N",
                       "   Entropy", "E (norm)", "ZD", "  CosSim");
    out += std::string(169, '=') + "\n";
    for (const TensorStats& t : s.tensors) {
        // In double, as llama-imatrix's std::log2 of an int makes it.
        const double e_norm = t.n > 0 ? 100.0f * (t.entropy / std::log2(t.n)) : 0.0;
        out += fmt::format("{:>5}\t{:<20}\t{:10.2f}\t{:8.4f}\t{:11.4f}\t{:6.2f}\t{:6.2f}\t{:8.2f}%\t{:6}\t{:10.4f}\t{:6.2f}%"
                           "\t{:10.2f}%\t{:8.4f}\n",
                           t.layer, t.kind, double(t.sum), double(t.min), double(t.max), double(t.mean),
                           double(t.stddev), double(t.active * 100.0f), t.n, double(t.entropy), e_norm,
                           double(100.0f * t.zd), double(t.cossim));
    }
    out += fmt::format("\nComputing weighted average statistics per layer ({} layers)\n", s.layers.size());
    out += fmt::format("\n{}\t{}\t{}\t{}\n", "  Layer", "     μΣ(Act²)", "      μZD", "μCosSim");
    out += std::string(48, '=') + "\n";
    for (const LayerStats& l : s.layers) {
        out += fmt::format("{:5}\t{:14.2f}\t{:10.4f}%\t{:6.4f}\n", l.layer, double(l.sum), double(100.0f * l.zd),
                           double(l.cossim));
    }
    return out + "\n";
}

nlohmann::json statistics_json(const Statistics& s, const std::string& source) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const TensorStats& t : s.tensors) {
        tensors.push_back({{"name", t.name},
                           {"layer", t.layer},
                           {"tensor", t.kind},
                           {"sum_act2", t.sum},
                           {"min", t.min},
                           {"max", t.max},
                           {"mean", t.mean},
                           {"stddev", t.stddev},
                           {"active", t.active},
                           {"n", t.n},
                           {"entropy", t.entropy},
                           {"entropy_norm", t.n > 1 ? t.entropy / std::log2(t.n) : 0.0},
                           {"zd", t.zd},
                           {"cossim", t.cossim}});
    }
    nlohmann::json layers = nlohmann::json::array();
    for (const LayerStats& l : s.layers) {
        layers.push_back({{"layer", l.layer}, {"mean_sum_act2", l.sum}, {"mean_zd", l.zd}, {"mean_cossim", l.cossim}});
    }
    return {{"file", source}, {"tensors", tensors}, {"layers", layers}};
}

}  // namespace tandem::tools::imatrix
