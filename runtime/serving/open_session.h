// Opening a Session so that lack of VRAM never stops a run: when the
// accelerator runs out of memory at load, one layer fewer, with a warning,
// rather than failing (the plan should make this rare). Weights that are
// NaN or Inf get a warning each (model/tensor_check.h: norms and biases
// whole, matrices by their first and last rows, or every row with
// check_every_row).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/serving/split.h"

namespace tandem::serving {

// Where the bytes of one long load step stand (cumulative done, total).
using ByteProgress = std::function<void(uint64_t done, uint64_t total)>;
// A fresh ByteProgress for a step named `label` ("upload to cuda0", "copy
// CPU weights"), asked once per attempt: a step-down moves bytes between
// the two. May return an empty function (no progress shown).
using ProgressFactory = std::function<ByteProgress(const std::string& label)>;

// The label of the step that copies the CPU's weights into huge pages.
inline constexpr const char* kCopyStep = "copy CPU weights";

// so.n_gpu_layers is lowered to what was finally loaded. Progress goes to
// `progress` where so has no callback of its own.
std::unique_ptr<Session> open_session(const gguf::File& file, const model::ModelSpec& spec, SessionOptions& so,
                                      const Warn& warn, const ProgressFactory& progress = {},
                                      bool check_every_row = false);

}  // namespace tandem::serving
