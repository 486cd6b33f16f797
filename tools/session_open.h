// Opening a Session for a tool the way `run` does (serving::open_session:
// one layer fewer when the accelerator runs out of memory at load), with
// the warnings on stderr in flags and progress bars there.
#pragma once

#include <memory>

#include "runtime/serving/open_session.h"

namespace tandem::tools {

// Progress bars on stderr: the weight upload's, and the CPU weights'
// copy where it is 1 GiB or more (smaller copies take no time to watch).
serving::ProgressFactory progress_bars();

std::unique_ptr<Session> open_session_stepping_down(const gguf::File& file, const model::ModelSpec& spec,
                                                    SessionOptions& so, bool check_every_row = false);

}  // namespace tandem::tools
