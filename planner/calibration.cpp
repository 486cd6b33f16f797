#include "planner/calibration.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <system_error>

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
    return {{"version", 1},
            {"cpu_model", c.cpu_model},
            {"physical_cores", c.physical_cores},
            {"cpu_gbps", opt(c.cpu_gbps)},
            {"gpu_gbps", opt(c.gpu_gbps)},
            {"pcie_gbps", opt(c.pcie_gbps)}};
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
    return filled;
}

}  // namespace tandem::planner
