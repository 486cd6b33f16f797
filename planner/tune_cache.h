// The results of `tandem tune`: for one model file, device, capacity,
// context and cache type, the split and thread count that decoded fastest.
// `run -ngl auto` prefers a matching entry over the plan, because a
// measurement on this machine beats a prediction from assumed speeds.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::planner {

struct TuneKey {
    std::string model_key;   // model_key() of the file
    std::string device;      // "", "cpu2", "cuda0"
    uint64_t vram = 0;       // capacity given to the device (0 without one)
    int64_t n_ctx = 0;       // the context the plan resolved (never 0)
    std::string cache_type;  // "f16", "q8_0"
    bool operator==(const TuneKey&) const = default;
};

struct TuneEntry {
    TuneKey key;
    int64_t ngl = 0;
    int threads = 1;
    double tg_tps = 0.0;
};

// Identifies a model file without reading all of it (models are tens of
// GB): a 64-bit FNV-1a hash of the file size, then the first
// max(1 MiB, header_end) bytes, which hold the GGUF header (every tensor's
// name, type, shape and offset) and the start of the data. header_end is
// the file's data offset. Returns 16 hex digits; throws tandem::Error when
// the file cannot be read.
std::string model_key(const std::filesystem::path& path, uint64_t header_end);

std::filesystem::path tune_cache_path();  // cache_dir() / "tune.json"

// All entries; an absent file gives none. A damaged file also gives none,
// with a one-line reason in *warning, so `run` falls back to the plan.
std::vector<TuneEntry> load_tune_cache(const std::filesystem::path& path, std::string* warning);

// Adds the entry, replacing one with the same key. A damaged file is
// replaced rather than trusted. Throws tandem::Error when it cannot write.
void store_tune_entry(const std::filesystem::path& path, const TuneEntry& entry);

std::optional<TuneEntry> find_tune_entry(const std::vector<TuneEntry>& entries, const TuneKey& key);

nlohmann::json to_json(const TuneEntry& e);

}  // namespace tandem::planner
