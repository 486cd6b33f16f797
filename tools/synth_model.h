// Writing a synthetic GGUF (the body of `tandem synth`, tools/cmd_synth.cpp),
// for the tools that need a model of a given shape without a file to hand:
// bench --calibrate times the engine's own per-step cost on a minimal one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/gguf/gguf_value.h"
#include "runtime/model/model_shapes.h"
#include "runtime/quant/quant_mix.h"

namespace tandem::tools {

struct SynthStats {
    size_t n_tensors = 0;
    uint64_t n_params = 0, total_bytes = 0;
};

// Writes `shape` with seeded random weights quantized by the mix of
// `file_type` (or only the header), with the tokenizer keys `vocab_keys`,
// to `out` (atomically: nothing is left half-written). threads 0: all
// cores; progress: a bar on stderr. Throws tandem::Error.
SynthStats write_synth_model(const model::ModelShape& shape, quant::FileType file_type,
                             std::vector<gguf::KeyValue> vocab_keys, const std::string& out, uint64_t seed,
                             bool header_only, unsigned threads, bool progress);

}  // namespace tandem::tools
