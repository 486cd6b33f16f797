// Opening a Session for a tool the way `run` does: when the accelerator
// runs out of memory at load, one layer fewer, with a warning, rather than
// failing (lack of VRAM never stops a run; the plan should make this rare).
#pragma once

#include <memory>

#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/engine/session.h"

namespace tandem::tools {

// so.n_gpu_layers is lowered to what was finally loaded. With an
// accelerator, a progress bar on stderr follows the weight uploads. Weights
// that are NaN or Inf get a warning line each (model/tensor_check.h: norms
// and biases whole, matrices by their first and last rows, or every row
// with check_every_row).
std::unique_ptr<Session> open_session_stepping_down(const gguf::File& file, const model::ModelSpec& spec,
                                                    SessionOptions& so, bool check_every_row = false);


}  // namespace tandem::tools
