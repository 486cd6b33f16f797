#include "tools/plan_hosts.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/common/memory_ledger.h"
#include "tools/llama_flags.h"
#include "tools/split.h"

namespace tandem::tools {
namespace {

// A number and its unit: "10Gbit" -> {10, "gbit"}.
std::pair<double, std::string> number_unit(const std::string& text) {
    size_t used = 0;
    double x = 0;
    try {
        x = std::stod(text, &used);
    } catch (const std::exception&) {
        return {-1, ""};
    }
    std::string unit = text.substr(used);
    for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return {x, unit};
}

double parse_bandwidth(const std::string& text) {
    const auto [x, unit] = number_unit(text);
    const std::pair<const char*, double> units[] = {{"gbit", 1e9 / 8},  {"gbit/s", 1e9 / 8}, {"gbps", 1e9 / 8},
                                                    {"mbit", 1e6 / 8},  {"mbit/s", 1e6 / 8}, {"mbps", 1e6 / 8},
                                                    {"gb/s", 1e9},      {"mb/s", 1e6}};
    for (const auto& [name, scale] : units) {
        if (unit == name && x > 0) return x * scale;
    }
    throw Error(fmt::format("expected a bandwidth such as 10Gbit, 100Mbit or 1.2GB/s, found '{}'", text));
}

double parse_time(const std::string& text) {
    const auto [x, unit] = number_unit(text);
    const std::pair<const char*, double> units[] = {{"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}};
    for (const auto& [name, scale] : units) {
        if (unit == name && x >= 0) return x * scale;
    }
    throw Error(fmt::format("expected a time such as 50us, 0.2ms or 1s, found '{}'", text));
}

}  // namespace

HostsFile read_hosts_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw Error(fmt::format("--hosts: cannot read '{}'", path));
    HostsFile f;
    bool have_link = false;
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
        if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
        std::istringstream words(line);
        std::vector<std::string> w;
        for (std::string s; words >> s;) w.push_back(s);
        if (w.empty()) continue;
        const auto where = [&](const std::string& what) {
            return Error(fmt::format("--hosts {} line {}: {}", path, number, what));
        };
        try {
            if (w[0] == "link") {
                if (w.size() < 2 || w.size() > 3) throw Error("expected link BANDWIDTH [latency=TIME]");
                f.link.bytes_per_s = parse_bandwidth(w[1]);
                if (w.size() == 3) {
                    if (w[2].rfind("latency=", 0) != 0) throw Error(fmt::format("expected latency=TIME, found '{}'", w[2]));
                    f.link.latency_s = parse_time(w[2].substr(8));
                }
                have_link = true;
                continue;
            }
            planner::Host h;
            h.name = w[0];
            bool have_ram = false;
            for (size_t i = 1; i < w.size(); ++i) {
                if (w[i].rfind("ram=", 0) == 0) {
                    h.ram = parse_size_flag("ram", w[i].substr(4));
                    have_ram = true;
                } else if (w[i].rfind("vram=", 0) == 0) {
                    h.vram = parse_vram_list("vram", w[i].substr(5));
                } else {
                    throw Error(fmt::format("expected ram=SIZE or vram=SIZE[,SIZE...], found '{}'", w[i]));
                }
            }
            if (!have_ram) throw Error(fmt::format("host {} needs ram=SIZE", h.name));
            f.hosts.push_back(std::move(h));
        } catch (const Error& e) {
            throw where(e.what());
        }
    }
    if (f.hosts.empty()) throw Error(fmt::format("--hosts {}: expected a line per host (NAME ram=SIZE [vram=SIZE])", path));
    if (!have_link && f.hosts.size() > 1) {
        throw Error(fmt::format("--hosts {}: expected a line 'link BANDWIDTH [latency=TIME]' for {} hosts", path,
                                f.hosts.size()));
    }
    if (!have_link) f.link.bytes_per_s = 1e12;  // one host: no hop but the logits'
    return f;
}

void print_hosts_plan(const std::string& path, const std::string& model_name, const model::ModelSpec& spec,
                      const planner::PlanInputs& base, bool json) {
    const HostsFile f = read_hosts_file(path);
    const planner::HostsPlan p = planner::plan_hosts(spec, f.hosts, f.link, base);
    if (json) {
        fmt::print("{}\n", planner::to_json(p).dump(2));
        return;
    }
    fmt::print("model: {} ({}, {} layers) over {} hosts, link {:.2f} GB/s, latency {:.0f} us\n", model_name,
               spec.hp.arch, spec.hp.n_layer, f.hosts.size(), f.link.bytes_per_s / 1e9, f.link.latency_s * 1e6);
    constexpr const char* kRow = "{:<10} {:>5} {:<12} {:<22} {:>22} {:>10} {:>11} {:>10}  {}\n";
    fmt::print(kRow, "host", "rank", "layers", "placement", "VRAM used", "RAM used", "ms/token", "ms/batch", "fits");
    for (size_t r = 0; r < p.stages.size(); ++r) {
        const planner::HostStage& s = p.stages[r];
        std::string vram = s.plan.has_device ? format_bytes(s.plan.vram.total()) : "-";
        if (!s.plan.devices.empty()) {
            vram.clear();
            for (const auto& d : s.plan.devices) vram += (vram.empty() ? "" : "+") + format_bytes(d.vram.total());
        }
        // The candidate's label: its flags would name the stage's own layer numbers.
        const std::string placement = !s.plan.has_device ? "CPU"
                                      : s.plan.weighed.empty() ? fmt::format("ngl {}", s.plan.ngl)
                                                               : planner::option_label(s.plan.weighed.front(), s.end - s.first);
        fmt::print(kRow, s.host, r, fmt::format("[{}, {})", s.first, s.end), placement, vram,
                   format_bytes(s.plan.ram.total()), fmt::format("{:.2f}", s.decode_s * 1e3),
                   fmt::format("{:.1f}", s.batch_s * 1e3), s.plan.fits ? "yes" : "no");
    }
    fmt::print("\npredicted: {:.2f} tok/s decode, {:.1f} tok/s prefill (micro-batches in flight in every stage); the "
               "link takes {:.2f} ms of each token's {:.2f} ms ({:.3f}%){}\n",
               p.tg_tps, p.pp_tps, p.link_s * 1e3, 1e3 / p.tg_tps, 100.0 * p.link_share, p.fits ? "" : "; DOES NOT FIT");
    fmt::print("run it: mpirun -np {} --host {} tandem run -m MODEL --pipeline (ranks in this order)\n", p.stages.size(),
               [&] {
                   std::string h;
                   for (const auto& s : p.stages) h += (h.empty() ? "" : ",") + s.host;
                   return h;
               }());
    fmt::print("\nwhy:\n");
    for (const std::string& r : p.reasons) fmt::print("  - {}\n", r);
    for (size_t r = 0; r < p.stages.size(); ++r) {
        fmt::print("  {} (rank {}, layers [{}, {})):\n", p.stages[r].host, r, p.stages[r].first, p.stages[r].end);
        for (const std::string& why : p.stages[r].plan.reasons) fmt::print("    - {}\n", why);
    }
}

}  // namespace tandem::tools
