#include "tools/session_open.h"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/backend/memory_ledger.h"

namespace tandem::tools {

std::unique_ptr<Session> open_session_stepping_down(const gguf::File& file, const model::ModelSpec& spec,
                                                    SessionOptions& so) {
    while (true) {
        try {
            return std::make_unique<Session>(file, spec, so);
        } catch (const OutOfDeviceMemory& e) {
            if (so.n_gpu_layers <= 0) throw;
            const int64_t next = std::min(so.n_gpu_layers, spec.hp.n_layer + 1) - 1;
            fmt::print(stderr, "tandem: warning: {}; retrying with -ngl {}\n", e.what(), next);
            so.n_gpu_layers = next;
        }
    }
}

}  // namespace tandem::tools
