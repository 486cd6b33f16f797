#include "runtime/quant/imatrix_file.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <span>
#include <utility>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/quant/quant_types.h"

namespace tandem::quant {
namespace {

constexpr std::string_view kSumsSuffix = ".in_sum2";
constexpr std::string_view kCountsSuffix = ".counts";
constexpr char kGgufMagic[4] = {'G', 'G', 'U', 'F'};

std::vector<float> read_f32(const gguf::File& file, const gguf::TensorInfo& t) {
    if (t.type != Type::F32) {
        throw Error(fmt::format("{}: tensor '{}': expected F32, found {}", file.name(), t.name, traits(t.type).name));
    }
    const auto bytes = file.tensor_data(t);
    std::vector<float> out(bytes.size() / sizeof(float));
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
    return out;
}

// in_sum2[j][i] / counts[j], or 1 for a matrix that saw no token (as
// llama-quantize does, the count an integer).
std::vector<float> mean_squares(const StoredImatrix::Sums& e) {
    const size_t per_mat = e.sums.size() / e.counts.size();
    std::vector<float> out(e.sums.size());
    for (size_t j = 0; j < e.counts.size(); ++j) {
        const auto count = static_cast<float>(e.counts[j]);
        for (size_t i = 0; i < per_mat; ++i) out[j * per_mat + i] = count > 0.0f ? e.sums[j * per_mat + i] / count : 1.0f;
    }
    return out;
}

// The legacy values divided by their call count.
std::vector<float> legacy_means(std::vector<float> values, int64_t ncall) {
    if (ncall > 0) {
        for (float& v : values) v /= static_cast<float>(ncall);
    }
    return values;
}

uint32_t required_u32(const gguf::File& file, std::string_view key) {
    const auto v = file.find_uint(key);
    if (!v || *v > UINT32_MAX) {
        throw Error(fmt::format("{}: expected the key {} (an unsigned integer) of llama-imatrix's format, found {}",
                                file.name(), key, v ? std::to_string(*v) : "no such key"));
    }
    return static_cast<uint32_t>(*v);
}

StoredImatrix load_gguf(const std::filesystem::path& path) {
    const gguf::File file = gguf::File::open(path);
    StoredImatrix m;
    const gguf::Value* datasets = file.find("imatrix.datasets");
    const gguf::Array* list = datasets != nullptr ? datasets->as_array() : nullptr;
    if (list == nullptr) {
        throw Error(fmt::format("{}: expected the key imatrix.datasets (an array of strings) of llama-imatrix's "
                                "format, found {}",
                                file.name(), datasets ? gguf::to_display_string(*datasets) : "no such key"));
    }
    for (const auto& item : list->items) {
        if (const std::string* s = item.as_string()) m.datasets.push_back(*s);
    }
    m.chunk_count = required_u32(file, "imatrix.chunk_count");
    m.chunk_size = required_u32(file, "imatrix.chunk_size");

    // Pair each W.in_sum2 with its W.counts.
    std::map<std::string, std::pair<const gguf::TensorInfo*, const gguf::TensorInfo*>, std::less<>> pairs;
    for (const auto& t : file.tensors()) {
        if (t.name.ends_with(kSumsSuffix)) {
            pairs[t.name.substr(0, t.name.size() - kSumsSuffix.size())].first = &t;
        } else if (t.name.ends_with(kCountsSuffix)) {
            pairs[t.name.substr(0, t.name.size() - kCountsSuffix.size())].second = &t;
        }
    }
    if (pairs.empty()) {
        throw Error(fmt::format("{}: expected <weight>.in_sum2 and <weight>.counts tensors, found none", file.name()));
    }
    for (const auto& [name, pair] : pairs) {
        if (pair.first == nullptr || pair.second == nullptr) {
            throw Error(fmt::format("{}: weight '{}' has {} but no {}", file.name(), name,
                                    pair.first ? kSumsSuffix : kCountsSuffix, pair.first ? kCountsSuffix : kSumsSuffix));
        }
        std::vector<float> sums = read_f32(file, *pair.first);
        const std::vector<float> counts = read_f32(file, *pair.second);
        if (counts.empty() || sums.empty() || sums.size() % counts.size() != 0) {
            throw Error(fmt::format("{}: weight '{}': expected in_sum2 to hold a whole number of rows of one value a "
                                    "column for each of its {} counts, found {} values",
                                    file.name(), name, counts.size(), sums.size()));
        }
        StoredImatrix::Sums& e = m.entries[name];
        e.sums = std::move(sums);
        for (const float c : counts) e.counts.push_back(std::lround(c));
    }
    return m;
}

// The legacy binary: int32 n_entries; per entry int32 name length, the name,
// int32 ncall, int32 nval, nval floats (sums already divided by the token
// count, times ncall); then optionally int32 chunk count, int32 length and
// the dataset name.
class LegacyReader {
public:
    LegacyReader(std::string name, std::vector<char> bytes) : name_(std::move(name)), bytes_(std::move(bytes)) {}

    bool at_end() const { return pos_ == bytes_.size(); }

    int32_t i32(std::string_view what) {
        int32_t v = 0;
        std::memcpy(&v, take(sizeof v, what), sizeof v);
        return v;
    }
    const char* take(size_t n, std::string_view what) {
        if (bytes_.size() - pos_ < n) {
            throw Error(fmt::format("{}: legacy importance matrix truncated at byte {} (reading {})", name_, pos_, what));
        }
        const char* p = bytes_.data() + pos_;
        pos_ += n;
        return p;
    }
    int32_t positive(std::string_view what) {
        const int32_t v = i32(what);
        if (v < 1) throw Error(fmt::format("{}: legacy importance matrix: expected {} >= 1, found {}", name_, what, v));
        return v;
    }

private:
    std::string name_;
    std::vector<char> bytes_;
    size_t pos_ = 0;
};

StoredImatrix load_legacy(const std::filesystem::path& path, std::vector<char> bytes) {
    LegacyReader in(path.string(), std::move(bytes));
    StoredImatrix m;
    m.legacy = true;
    const int32_t n_entries = in.positive("the entry count");
    for (int32_t e = 0; e < n_entries; ++e) {
        const int32_t len = in.positive("a name length");
        std::string name(in.take(static_cast<size_t>(len), "a name"), static_cast<size_t>(len));
        const int32_t ncall = in.i32("a call count");
        const int32_t nval = in.positive("a value count");
        std::vector<float> values(static_cast<size_t>(nval));
        std::memcpy(values.data(), in.take(values.size() * sizeof(float), "the values"), values.size() * sizeof(float));
        m.entries.insert_or_assign(std::move(name), StoredImatrix::Sums{std::move(values), {ncall}});
    }
    if (!in.at_end()) {
        m.chunk_count = static_cast<uint32_t>(std::max(0, in.i32("the chunk count")));
        if (!in.at_end()) {
            const int32_t len = in.i32("the dataset name length");
            if (len > 0) m.datasets.emplace_back(in.take(static_cast<size_t>(len), "the dataset name"), static_cast<size_t>(len));
        }
    }
    return m;
}

// The sums finite, so are the importances (a finite sum over a count >= 1).
void check_finite(const std::filesystem::path& path, const StoredImatrix& m) {
    for (const auto& [name, entry] : m.entries) {
        const std::vector<float>& values = entry.sums;
        for (size_t i = 0; i < values.size(); ++i) {
            if (!std::isfinite(values[i])) {
                throw Error(fmt::format("{}: weight '{}', value {}: expected a finite importance, found {}",
                                        path.string(), name, i, values[i]));
            }
        }
    }
}

}  // namespace

const std::vector<float>* ImportanceMatrix::find(std::string_view weight_name) const {
    const auto it = weights.find(weight_name);
    return it == weights.end() ? nullptr : &it->second;
}

StoredImatrix read_stored_imatrix(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(fmt::format("{}: cannot open the importance matrix", path.string()));
    char magic[4] = {};
    in.read(magic, sizeof magic);
    StoredImatrix m;
    if (in.gcount() == 4 && std::memcmp(magic, kGgufMagic, 4) == 0) {
        in.close();
        m = load_gguf(path);
    } else {
        in.clear();
        in.seekg(0);
        std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        m = load_legacy(path, std::move(bytes));
    }
    check_finite(path, m);
    return m;
}

ImportanceMatrix load_importance_matrix(const std::filesystem::path& path) {
    StoredImatrix stored = read_stored_imatrix(path);
    ImportanceMatrix m;
    m.datasets = std::move(stored.datasets);
    m.chunk_count = stored.chunk_count;
    m.chunk_size = stored.chunk_size;
    m.legacy = stored.legacy;
    for (auto& [name, e] : stored.entries) {
        m.weights.emplace(name, stored.legacy ? legacy_means(std::move(e.sums), e.counts[0]) : mean_squares(e));
    }
    return m;
}

}  // namespace tandem::quant
