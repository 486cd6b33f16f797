// Weights that are not numbers: a NaN or Inf in a norm or a weight makes
// every output meaningless while the run "succeeds". Checked at load, on
// every norm and bias and on the first and last row of each matrix (cheap:
// a few pages), or on every row when asked (llama.cpp's --check-tensors).
#pragma once

#include <string>
#include <vector>

#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"

namespace tandem::model {

// One line per tensor holding a NaN or Inf in the rows checked, naming
// the tensor and the first such row; empty when all are finite.
std::vector<std::string> find_non_finite_tensors(const gguf::File& file, const ModelSpec& spec, bool every_row);

}  // namespace tandem::model
