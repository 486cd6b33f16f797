#include "planner/tune_cache.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <system_error>

#include <fmt/format.h>

#include "planner/calibration.h"
#include "runtime/common/error.h"

namespace tandem::planner {
namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;
constexpr uint64_t kPrefixBytes = 1ull << 20;

uint64_t fnv1a(uint64_t h, const unsigned char* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        h ^= p[i];
        h *= kFnvPrime;
    }
    return h;
}

TuneEntry entry_from_json(const nlohmann::json& j) {
    if (!j.is_object()) throw Error("tune cache: an entry is not a JSON object");
    TuneEntry e;
    e.key.model_key = j.at("model_key").get<std::string>();
    e.key.device = j.at("device").get<std::string>();
    e.key.vram = j.at("vram").get<uint64_t>();
    e.key.n_ctx = j.at("n_ctx").get<int64_t>();
    e.key.cache_type = j.at("cache_type").get<std::string>();
    e.ngl = j.at("ngl").get<int64_t>();
    e.threads = j.at("threads").get<int>();
    e.tg_tps = j.at("tg_tps").get<double>();
    if (e.ngl < 0 || e.threads < 1) throw Error("tune cache: an entry has a negative ngl or fewer than 1 thread");
    return e;
}

std::vector<TuneEntry> parse(const std::string& text) {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object() || !j.contains("entries") || !j.at("entries").is_array()) {
        throw Error("tune cache: expected an object with an 'entries' array");
    }
    std::vector<TuneEntry> out;
    for (const auto& item : j.at("entries")) out.push_back(entry_from_json(item));
    return out;
}

}  // namespace

std::string model_key(const std::filesystem::path& path, uint64_t header_end) {
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(path, ec);
    if (ec) throw Error(fmt::format("cannot read {}: {}", path.string(), ec.message()));
    uint64_t h = kFnvOffset;
    std::array<unsigned char, 8> size_bytes{};
    for (size_t i = 0; i < 8; ++i) size_bytes[i] = static_cast<unsigned char>(size >> (8 * i));
    h = fnv1a(h, size_bytes.data(), size_bytes.size());
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(fmt::format("cannot read {}", path.string()));
    uint64_t left = std::min(size, std::max(kPrefixBytes, header_end));
    std::vector<unsigned char> buf(1 << 16);
    while (left > 0) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
        in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(n));
        if (static_cast<size_t>(in.gcount()) != n) throw Error(fmt::format("{}: short read while hashing", path.string()));
        h = fnv1a(h, buf.data(), n);
        left -= n;
    }
    return fmt::format("{:016x}", h);
}

std::filesystem::path tune_cache_path() { return cache_dir() / "tune.json"; }

nlohmann::json to_json(const TuneEntry& e) {
    return {{"model_key", e.key.model_key}, {"device", e.key.device}, {"vram", e.key.vram},
            {"n_ctx", e.key.n_ctx},         {"cache_type", e.key.cache_type}, {"ngl", e.ngl},
            {"threads", e.threads},         {"tg_tps", e.tg_tps}};
}

std::vector<TuneEntry> load_tune_cache(const std::filesystem::path& path, std::string* warning) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return {};
    try {
        return parse(read_text_file(path));
    } catch (const std::exception& e) {
        if (warning) {
            std::string why = e.what();
            for (char& ch : why) {
                if (ch == '\n' || ch == '\r') ch = ' ';
            }
            *warning = fmt::format("ignoring damaged tune cache {} ({})", path.string(), why);
        }
        return {};
    }
}

void store_tune_entry(const std::filesystem::path& path, const TuneEntry& entry) {
    std::vector<TuneEntry> entries = load_tune_cache(path, nullptr);
    std::erase_if(entries, [&](const TuneEntry& e) { return e.key == entry.key; });
    entries.push_back(entry);
    nlohmann::json arr = nlohmann::json::array();
    for (const TuneEntry& e : entries) arr.push_back(to_json(e));
    write_text_file_atomic(path, nlohmann::json{{"version", 1}, {"entries", arr}}.dump(2) + "\n");
}

std::optional<TuneEntry> find_tune_entry(const std::vector<TuneEntry>& entries, const TuneKey& key) {
    for (const TuneEntry& e : entries) {
        if (e.key == key) return e;
    }
    return std::nullopt;
}

}  // namespace tandem::planner
