// `tandem imatrix --show-statistics`: llama-imatrix's per-tensor statistics
// of an importance matrix, with its float arithmetic and its table.
//
// Per weight, over the values in_sum2 / count of its matrices that saw a
// token (the mean squared activation of each column): their sum Σ(Act²),
// min, max, mean μ, standard deviation σ, the share above 1e-5 (% Active),
// their number N, the entropy of value / sum (bits, and as a share of
// log2 N), ZD the share with a z-score above 1, and CosSim the cosine of
// the weight's raw sums with those of the same weight one block earlier
// (0 for block 0 and weights outside the blocks). Sorted by tensor kind,
// then Σ(Act²) from largest; then per block, the averages of Σ(Act²), ZD
// and CosSim weighted by N.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/imatrix.h"

namespace tandem::tools::imatrix {

struct TensorStats {
    std::string name;   // the weight, e.g. blk.0.attn_k.weight
    std::string layer;  // "0", or "-" outside the blocks
    std::string kind;   // attn_k
    float sum = 0.0f, min = 0.0f, max = 0.0f, mean = 0.0f, stddev = 0.0f;
    float active = 0.0f;  // fraction
    int n = 0;
    float entropy = 0.0f;  // bits
    float zd = 0.0f;       // fraction
    float cossim = 0.0f;
};

struct LayerStats {
    int layer = 0;
    float sum = 0.0f, zd = 0.0f, cossim = 0.0f;  // averages weighted by N
};

struct Statistics {
    std::vector<TensorStats> tensors;  // in llama-imatrix's order
    std::vector<LayerStats> layers;    // by block number
};

// Weights whose every matrix saw no token are left out, as llama-imatrix
// does. An Error when nothing is left.
Statistics compute_statistics(const Entries& entries);

// llama-imatrix's two tables (its format strings), `source` named in the
// first line.
std::string format_statistics(const Statistics& s, const std::string& source);
nlohmann::json statistics_json(const Statistics& s, const std::string& source);

}  // namespace tandem::tools::imatrix
