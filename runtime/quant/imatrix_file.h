// Importance matrices as llama-quantize reads them: the GGUF files of
// llama-imatrix (and `tandem imatrix`), and the older binary `.dat` files.
//
// A GGUF importance matrix holds, for each weight matrix W of n_per_row
// columns (n_mat of them for a 3-D expert tensor), two F32 tensors:
// `W.in_sum2` (n_per_row x n_mat: per column, the sum over the calibration
// tokens of the squared activation that column multiplied) and `W.counts`
// (n_mat: how many tokens each matrix saw). The quantizers' importance
// weight for column i of matrix j is in_sum2[j][i] / counts[j], and 1 for a
// matrix that saw no token (an expert never routed to). The legacy format
// stores the same per name as sums already divided, times a call count.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::quant {

struct ImportanceMatrix {
    // Weight name -> n_per_row * n_mat importance weights, matrix j's at
    // [j * n_per_row, (j + 1) * n_per_row).
    std::map<std::string, std::vector<float>, std::less<>> weights;
    std::vector<std::string> datasets;  // the calibration texts, as recorded
    uint32_t chunk_count = 0;
    uint32_t chunk_size = 0;  // tokens a chunk (0 in the legacy format)
    bool legacy = false;

    // nullptr when the matrix has no entry for this weight.
    const std::vector<float>* find(std::string_view weight_name) const;
};

// A file's contents as stored, for adding files together (`tandem imatrix
// --in-file`): per weight, GGUF's raw sums and counts (the counts rounded
// to integers, as llama.cpp reads them), or the legacy format's values
// (already divided, times the call count) and its one call count.
struct StoredImatrix {
    struct Sums {
        std::vector<float> sums;
        std::vector<int64_t> counts;
    };
    std::map<std::string, Sums, std::less<>> entries;
    std::vector<std::string> datasets;
    uint32_t chunk_count = 0;
    uint32_t chunk_size = 0;  // 0 in the legacy format
    bool legacy = false;
};

// Reads and checks a file as load_importance_matrix does, without dividing.
StoredImatrix read_stored_imatrix(const std::filesystem::path& path);

// Reads and checks a file; a file that is neither format, is truncated, is
// missing llama-imatrix's metadata keys, pairs sums and counts badly or holds
// a non-finite value is an Error naming the file and what was expected.
ImportanceMatrix load_importance_matrix(const std::filesystem::path& path);

}  // namespace tandem::quant
