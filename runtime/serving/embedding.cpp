#include "runtime/serving/embedding.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "runtime/common/error.h"

namespace tandem::serve {

Pooling parse_pooling(std::string_view name) {
    if (name == "none") return Pooling::None;
    if (name == "mean") return Pooling::Mean;
    if (name == "cls") return Pooling::Cls;
    if (name == "last") return Pooling::Last;
    if (name == "rank") {
        throw Error("--pooling rank: not supported (a reranker's classifier head); expected none, mean, cls or last");
    }
    throw Error(fmt::format("--pooling: expected none, mean, cls or last, found '{}'", name));
}

std::string_view pooling_name(Pooling p) {
    switch (p) {
        case Pooling::None: return "none";
        case Pooling::Mean: return "mean";
        case Pooling::Cls: return "cls";
        case Pooling::Last: return "last";
    }
    return "?";
}

Pooling pooling_from_gguf(uint64_t value) {
    constexpr Pooling kByValue[] = {Pooling::None, Pooling::Mean, Pooling::Cls, Pooling::Last};
    if (value < std::size(kByValue)) return kByValue[value];
    if (value == 4) {
        throw Error("pooling_type 4 (rank): a reranker, whose classifier head this runtime does not run; give "
                    "--pooling mean, cls or last to pool its hidden states instead");
    }
    throw Error(fmt::format("pooling_type: expected 0 (none), 1 (mean), 2 (cls) or 3 (last), found {}", value));
}

std::vector<float> normalize_embedding(std::span<const float> v, int norm) {
    double sum = 0.0;
    if (norm < -1) throw Error(fmt::format("embd_normalize: expected -1, 0 or a p-norm >= 1, found {}", norm));
    if (norm == -1) {
        sum = 1.0;
    } else if (norm == 0) {
        for (const float x : v) sum = std::max(sum, static_cast<double>(std::abs(x)));
        sum /= 32760.0;
    } else if (norm == 2) {
        for (const float x : v) sum += static_cast<double>(x * x);  // llama.cpp squares in float
        sum = std::sqrt(sum);
    } else {
        for (const float x : v) sum += std::pow(std::abs(x), norm);
        sum = std::pow(sum, 1.0 / norm);
    }
    const auto scale = sum > 0.0 ? static_cast<float>(1.0 / sum) : 0.0f;
    std::vector<float> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = v[i] * scale;
    return out;
}

Pooler::Pooler(Pooling pooling, int64_t n_embd, int64_t n_tokens)
    : pooling_(pooling), n_embd_(n_embd), n_tokens_(n_tokens), sum_(static_cast<size_t>(n_embd), 0.0) {
    TANDEM_CHECK(pooling != Pooling::None, "a pooler pools");
    TANDEM_CHECK(n_tokens >= 1 && n_embd >= 1, "a pooler needs tokens");
}

bool Pooler::wants(int64_t pos) const {
    switch (pooling_) {
        case Pooling::Mean: return true;
        case Pooling::Cls: return pos == 0;
        case Pooling::Last: return pos == n_tokens_ - 1;
        case Pooling::None: break;
    }
    return false;
}

void Pooler::add(int64_t pos, std::span<const float> row) {
    TANDEM_CHECK(wants(pos) && static_cast<int64_t>(row.size()) == n_embd_, "a row the pooler did not ask for");
    for (size_t i = 0; i < row.size(); ++i) sum_[i] += row[i];
    ++added_;
}

std::vector<float> Pooler::pooled() const {
    const int64_t expected = pooling_ == Pooling::Mean ? n_tokens_ : 1;
    TANDEM_CHECK(added_ == expected, "pooled before every row was added");
    std::vector<float> out(sum_.size());
    for (size_t i = 0; i < sum_.size(); ++i) out[i] = static_cast<float>(sum_[i] / static_cast<double>(added_));
    return out;
}

}  // namespace tandem::serve
