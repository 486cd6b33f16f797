#include "planner/calibration.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "runtime/common/atomic_file.h"
#include "runtime/common/error.h"

namespace tandem::planner {
namespace {

std::optional<double> positive_number(const nlohmann::json& j, const char* key) {
    if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
    if (!j.at(key).is_number()) throw Error(fmt::format("calibration: '{}' is not a number", key));
    const double v = j.at(key).get<double>();
    if (!(v > 0.0)) throw Error(fmt::format("calibration: '{}' must be positive, found {}", key, v));
    return v;
}

std::optional<double> non_negative(const nlohmann::json& j, const char* key) {
    if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
    if (!j.at(key).is_number()) throw Error(fmt::format("calibration: '{}' is not a number", key));
    const double v = j.at(key).get<double>();
    if (!(v >= 0.0)) throw Error(fmt::format("calibration: '{}' must be >= 0, found {}", key, v));
    return v;
}

nlohmann::json rates_json(const std::map<quant::Type, double>& m) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [type, rate] : m) j[std::string(quant::traits(type).name)] = rate;
    return j;
}

std::map<quant::Type, double> rates_from_json(const nlohmann::json& j, const char* key) {
    std::map<quant::Type, double> m;
    if (!j.contains(key) || j.at(key).is_null()) return m;
    if (!j.at(key).is_object()) throw Error(fmt::format("calibration: '{}' is not an object of type: rate", key));
    for (const auto& [name, value] : j.at(key).items()) {
        const auto type = quant::type_from_name(name);
        if (!type) throw Error(fmt::format("calibration: '{}' names an unknown weight type '{}'", key, name));
        if (!value.is_number() || !(value.get<double>() > 0.0)) {
            throw Error(fmt::format("calibration: '{}.{}' must be a positive number", key, name));
        }
        m[*type] = value.get<double>();
    }
    return m;
}

// Attention's seconds per head and position, by head dimension: {"64": s}.
nlohmann::json attn_json(const std::map<int64_t, double>& m) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [hd, sec] : m) j[std::to_string(hd)] = sec;
    return j;
}

// A key that names a size: digits only, in (0, max]. `where` and `what`
// name the object and what its keys are, for the error.
int64_t size_key(const std::string& name, const std::string& where, const char* what, long long max) {
    char* end = nullptr;
    const long long v = std::strtoll(name.c_str(), &end, 10);
    if (name.empty() || *end != '\0' || v <= 0 || v > max) {
        throw Error(fmt::format("calibration: '{}' expects {} as keys, found '{}'", where, what, name));
    }
    return static_cast<int64_t>(v);
}

std::map<int64_t, double> attn_from_json(const nlohmann::json& j, const char* key) {
    std::map<int64_t, double> m;
    if (!j.contains(key) || j.at(key).is_null()) return m;
    if (!j.at(key).is_object()) throw Error(fmt::format("calibration: '{}' is not an object of head dimension: seconds", key));
    for (const auto& [name, value] : j.at(key).items()) {
        const int64_t hd = size_key(name, key, "head dimensions", 1 << 20);
        if (!value.is_number() || !(value.get<double>() >= 0.0)) {
            throw Error(fmt::format("calibration: '{}.{}' must be a number >= 0", key, name));
        }
        m[hd] = value.get<double>();
    }
    return m;
}

// Rates by row width per type: {"Q4_K": {"2048": GFLOP/s}}.
nlohmann::json rates_by_cols_json(const std::map<quant::Type, std::map<int64_t, double>>& m) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [type, by] : m) {
        nlohmann::json row = nlohmann::json::object();
        for (const auto& [cols, rate] : by) row[std::to_string(cols)] = rate;
        j[std::string(quant::traits(type).name)] = row;
    }
    return j;
}

std::map<quant::Type, std::map<int64_t, double>> rates_by_cols_from_json(const nlohmann::json& j, const char* key) {
    std::map<quant::Type, std::map<int64_t, double>> m;
    if (!j.contains(key) || j.at(key).is_null()) return m;
    if (!j.at(key).is_object()) {
        throw Error(fmt::format("calibration: '{}' is not an object of type: {{columns: rate}}", key));
    }
    for (const auto& [name, row] : j.at(key).items()) {
        const auto type = quant::type_from_name(name);
        if (!type) throw Error(fmt::format("calibration: '{}' names an unknown weight type '{}'", key, name));
        if (!row.is_object()) throw Error(fmt::format("calibration: '{}.{}' is not an object of columns: rate", key, name));
        for (const auto& [width, value] : row.items()) {
            const int64_t cols = size_key(width, fmt::format("{}.{}", key, name), "row widths", 1 << 24);
            if (!value.is_number() || !(value.get<double>() > 0.0)) {
                throw Error(fmt::format("calibration: '{}.{}.{}' must be a positive number", key, name, width));
            }
            m[*type][cols] = value.get<double>();
        }
    }
    return m;
}

std::string by_cols_key() { return fmt::format("gemm{}_gflops_by_cols", kGemmSmallBatch); }

nlohmann::json kernels_json(const KernelCosts& k, int threads) {
    auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
    return {{"threads", threads},
            {"matvec_gbps", rates_json(k.matvec_gbps)},
            {"matvec_cached_gbps", rates_json(k.matvec_cached_gbps)},
            {"cache_bytes", k.cache_bytes ? nlohmann::json(*k.cache_bytes) : nlohmann::json(nullptr)},
            {fmt::format("gemm{}_gflops", kGemmSmallBatch), rates_json(k.gemm_small_gflops)},
            {fmt::format("gemm{}_gflops", kGemmLargeBatch), rates_json(k.gemm_large_gflops)},
            {"matvec_narrow_gbps", rates_json(k.matvec_narrow_gbps)},
            {fmt::format("gemm{}_narrow_gflops", kGemmSmallBatch), rates_json(k.gemm_small_narrow_gflops)},
            {fmt::format("gemm{}_gflops", kGemmFewBatch), rates_json(k.gemm_few_gflops)},
            {by_cols_key(), rates_by_cols_json(k.gemm_small_by_cols)},
            {"matmul_call_s", opt(k.matmul_call_s)},
            {"batch_call_s", opt(k.batch_call_s)},
            {"pool_op_s", opt(k.pool_op_s)},
            {"inline_op_s", opt(k.inline_op_s)},
            {"batch_s", opt(k.batch_s)},
            {"inline_op_elem_s", opt(k.inline_op_elem_s)},
            {"pool_op_elem_s", opt(k.pool_op_elem_s)},
            {"attn_pos_s", attn_json(k.attn_pos_s)},
            {"crossing_s", opt(k.crossing_s)},
            {"copy_gbps", opt(k.copy_gbps)}};
}

KernelCosts kernels_from_json(const nlohmann::json& j, int* threads) {
    if (!j.is_object()) throw Error("calibration: 'cpu_kernels' is not an object");
    KernelCosts k;
    if (j.contains("threads") && j.at("threads").is_number_integer()) *threads = j.at("threads").get<int>();
    k.matvec_gbps = rates_from_json(j, "matvec_gbps");
    k.matvec_cached_gbps = rates_from_json(j, "matvec_cached_gbps");
    k.gemm_small_gflops = rates_from_json(j, fmt::format("gemm{}_gflops", kGemmSmallBatch).c_str());
    k.gemm_large_gflops = rates_from_json(j, fmt::format("gemm{}_gflops", kGemmLargeBatch).c_str());
    k.matvec_narrow_gbps = rates_from_json(j, "matvec_narrow_gbps");
    k.gemm_small_narrow_gflops = rates_from_json(j, fmt::format("gemm{}_narrow_gflops", kGemmSmallBatch).c_str());
    k.gemm_few_gflops = rates_from_json(j, fmt::format("gemm{}_gflops", kGemmFewBatch).c_str());
    k.gemm_small_by_cols = rates_by_cols_from_json(j, by_cols_key().c_str());
    if (const auto c = positive_number(j, "cache_bytes")) k.cache_bytes = static_cast<uint64_t>(*c);
    k.matmul_call_s = non_negative(j, "matmul_call_s");
    k.batch_call_s = non_negative(j, "batch_call_s");
    k.pool_op_s = non_negative(j, "pool_op_s");
    k.inline_op_s = non_negative(j, "inline_op_s");
    k.batch_s = non_negative(j, "batch_s");
    k.inline_op_elem_s = non_negative(j, "inline_op_elem_s");
    k.pool_op_elem_s = non_negative(j, "pool_op_elem_s");
    k.attn_pos_s = attn_from_json(j, "attn_pos_s");
    k.crossing_s = non_negative(j, "crossing_s");
    k.copy_gbps = positive_number(j, "copy_gbps");
    return k;
}

}  // namespace

std::filesystem::path cache_dir() {
    if (const char* d = std::getenv("TANDEM_CACHE_DIR"); d && *d) return d;
    if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::filesystem::path(d) / "tandem";
    if (const char* d = std::getenv("HOME"); d && *d) return std::filesystem::path(d) / ".cache" / "tandem";
    throw Error("no cache directory: set TANDEM_CACHE_DIR, XDG_CACHE_HOME or HOME");
}

std::filesystem::path calibration_path() { return cache_dir() / "calibration.json"; }

nlohmann::json to_json(const Calibration& c) {
    auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
    nlohmann::json j = {{"version", 2},
                        {"cpu_model", c.cpu_model},
                        {"physical_cores", c.physical_cores},
                        {"cpu_gbps", opt(c.cpu_gbps)},
                        {"gpu_gbps", opt(c.gpu_gbps)},
                        {"pcie_gbps", opt(c.pcie_gbps)}};
    if (!c.cpu_kernels.empty()) j["cpu_kernels"] = kernels_json(c.cpu_kernels, c.kernel_threads);
    return j;
}

Calibration calibration_from_json(const nlohmann::json& j) {
    if (!j.is_object()) throw Error("calibration: expected a JSON object");
    Calibration c;
    if (j.contains("cpu_model") && j.at("cpu_model").is_string()) c.cpu_model = j.at("cpu_model").get<std::string>();
    if (j.contains("physical_cores") && j.at("physical_cores").is_number_integer()) {
        c.physical_cores = j.at("physical_cores").get<int>();
    }
    c.cpu_gbps = positive_number(j, "cpu_gbps");
    c.gpu_gbps = positive_number(j, "gpu_gbps");
    c.pcie_gbps = positive_number(j, "pcie_gbps");
    // Version 1 files stop here: the kernels keep the defaults.
    if (j.contains("cpu_kernels") && !j.at("cpu_kernels").is_null()) {
        c.cpu_kernels = kernels_from_json(j.at("cpu_kernels"), &c.kernel_threads);
    }
    return c;
}

std::string read_text_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(fmt::format("cannot read {}", path.string()));
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_text_file_atomic(const std::filesystem::path& path, const std::string& text) {
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec) throw Error(fmt::format("cannot create {}: {}", path.parent_path().string(), ec.message()));
    write_file_atomic(path, text);
}

void save_calibration(const Calibration& c, const std::filesystem::path& path) {
    write_text_file_atomic(path, to_json(c).dump(2) + "\n");
}

std::optional<Calibration> load_calibration(const std::filesystem::path& path, std::string* warning) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return std::nullopt;
    try {
        const nlohmann::json j = nlohmann::json::parse(read_text_file(path));
        return calibration_from_json(j);
    } catch (const std::exception& e) {
        if (warning) {
            // nlohmann's messages can span lines; keep the warning to one.
            std::string why = e.what();
            for (char& ch : why) {
                if (ch == '\n' || ch == '\r') ch = ' ';
            }
            *warning = fmt::format("ignoring damaged calibration file {} ({}); using defaults", path.string(), why);
        }
        return std::nullopt;
    }
}

KernelCosts standin_costs(const Calibration& c) { return c.cpu_kernels; }

Calibration at_bandwidth(const Calibration& c, double gbps) {
    Calibration out = c;
    if (!c.cpu_gbps || *c.cpu_gbps <= 0.0 || !(gbps > 0.0)) return out;
    const double f = gbps / *c.cpu_gbps;
    out.cpu_gbps = gbps;
    for (auto& [type, rate] : out.cpu_kernels.matvec_gbps) rate *= f;
    if (out.cpu_kernels.copy_gbps) *out.cpu_kernels.copy_gbps *= f;
    return out;
}

namespace {

// a takes b's value where a has none or b's is better.
template <class Better>
void keep(std::optional<double>& a, const std::optional<double>& b, Better better) {
    if (b && (!a || better(*b, *a))) a = b;
}
template <typename Key, class Better>
void keep(std::map<Key, double>& a, const std::map<Key, double>& b, Better better) {
    for (const auto& [key, v] : b) {
        const auto it = a.find(key);
        if (it == a.end() || better(v, it->second)) a[key] = v;
    }
}
constexpr std::greater<double> kHigher;
constexpr std::less<double> kLower;

}  // namespace

Calibration best_of(const Calibration& a, const Calibration& b) {
    Calibration out = a;
    keep(out.cpu_gbps, b.cpu_gbps, kHigher);
    keep(out.gpu_gbps, b.gpu_gbps, kHigher);
    keep(out.pcie_gbps, b.pcie_gbps, kHigher);
    KernelCosts& k = out.cpu_kernels;
    const KernelCosts& o = b.cpu_kernels;
    for (auto [dst, src] : {std::pair{&k.matvec_gbps, &o.matvec_gbps}, {&k.matvec_cached_gbps, &o.matvec_cached_gbps},
                            {&k.gemm_small_gflops, &o.gemm_small_gflops}, {&k.gemm_large_gflops, &o.gemm_large_gflops},
                            {&k.matvec_narrow_gbps, &o.matvec_narrow_gbps},
                            {&k.gemm_small_narrow_gflops, &o.gemm_small_narrow_gflops},
                            {&k.gemm_few_gflops, &o.gemm_few_gflops}}) {
        keep(*dst, *src, kHigher);
    }
    for (const auto& [type, by] : o.gemm_small_by_cols) keep(k.gemm_small_by_cols[type], by, kHigher);
    keep(k.copy_gbps, o.copy_gbps, kHigher);
    for (auto [dst, src] : {std::pair{&k.matmul_call_s, &o.matmul_call_s}, {&k.batch_call_s, &o.batch_call_s},
                            {&k.pool_op_s, &o.pool_op_s}, {&k.inline_op_s, &o.inline_op_s}, {&k.batch_s, &o.batch_s},
                            {&k.inline_op_elem_s, &o.inline_op_elem_s}, {&k.pool_op_elem_s, &o.pool_op_elem_s},
                            {&k.crossing_s, &o.crossing_s}}) {
        keep(*dst, *src, kLower);
    }
    keep(k.attn_pos_s, o.attn_pos_s, kLower);
    if (!k.cache_bytes) k.cache_bytes = o.cache_bytes;
    return out;
}

Calibration combine_rounds(const std::vector<Calibration>& rounds) {
    if (rounds.empty()) throw Error("calibration: no rounds to combine");
    Calibration out = rounds.front();
    for (size_t i = 1; i < rounds.size(); ++i) out = best_of(out, rounds[i]);
    // The lower middle of the values the rounds have.
    const auto middle = [](std::vector<double> v) -> std::optional<double> {
        if (v.empty()) return std::nullopt;
        std::sort(v.begin(), v.end());
        return v[(v.size() - 1) / 2];
    };
    const auto middle_of = [&](const auto& get) {
        std::vector<double> v;
        for (const Calibration& c : rounds) {
            if (const std::optional<double> x = get(c)) v.push_back(*x);
        }
        return middle(std::move(v));
    };
    out.cpu_gbps = middle_of([](const Calibration& c) { return c.cpu_gbps; });
    out.cpu_kernels.copy_gbps = middle_of([](const Calibration& c) { return c.cpu_kernels.copy_gbps; });
    for (auto& [type, rate] : out.cpu_kernels.matvec_gbps) {
        rate = *middle_of([&, t = type](const Calibration& c) -> std::optional<double> {
            const auto it = c.cpu_kernels.matvec_gbps.find(t);
            return it == c.cpu_kernels.matvec_gbps.end() ? std::nullopt : std::optional<double>(it->second);
        });
    }
    return out;
}

std::vector<std::string> apply_calibration(const Calibration& c, PlanInputs& in) {
    std::vector<std::string> filled;
    auto fill = [&](std::optional<double>& dst, const std::optional<double>& v, const char* name) {
        if (!dst && v) {
            dst = v;
            filled.emplace_back(name);
        }
    };
    fill(in.cpu_gbps, c.cpu_gbps, "cpu_gbps");
    fill(in.gpu_gbps, c.gpu_gbps, "gpu_gbps");
    fill(in.pcie_gbps, c.pcie_gbps, "pcie_gbps");
    // The kernels as a whole: a caller who set any of them keeps its own.
    if (in.host_costs.empty() && !c.cpu_kernels.empty()) {
        in.host_costs = c.cpu_kernels;
        for (const auto& [name, v] : {std::pair<const char*, std::optional<double>>{"cpu_matmul_call_s",
                                                                                    c.cpu_kernels.matmul_call_s},
                                      {"cpu_pool_op_s", c.cpu_kernels.pool_op_s},
                                      {"batch_s", c.cpu_kernels.batch_s}}) {
            if (v) filled.emplace_back(name);
        }
    }
    return filled;
}

}  // namespace tandem::planner
