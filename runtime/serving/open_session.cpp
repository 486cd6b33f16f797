#include "runtime/serving/open_session.h"

#include <algorithm>
#include <thread>

#include <fmt/format.h>

#include "kernels_cpu/cpu_info.h"
#include "runtime/model/tensor_check.h"

namespace tandem::serving {

std::unique_ptr<Session> open_session(const gguf::File& file, const model::ModelSpec& spec, SessionOptions& so,
                                      const Warn& warn, const ProgressFactory& progress, bool check_every_row) {
    // (Past 4x the logical CPUs the thread pool refuses the count instead.)
    const int cores = cpu::physical_core_count();
    const auto logical = static_cast<int>(std::thread::hardware_concurrency());
    if (so.n_threads > cores && so.n_threads <= 4 * std::max(1, logical)) {
        warn(fmt::format("{{n_threads}} {} is more than the {} physical cores: threads then share cores, which "
                         "usually slows decoding",
                         so.n_threads, cores));
    }
    if (!file.header_only()) {
        for (const std::string& w : model::find_non_finite_tensors(file, spec, check_every_row)) warn(w);
    }
    const bool own_upload = progress && !so.device.empty() && !so.upload_progress;
    const bool own_copy = progress && so.copy_host_weights && !so.host_copy_progress;
    while (true) {
        if (own_copy) so.host_copy_progress = progress(kCopyStep);
        if (own_upload) so.upload_progress = progress("upload to " + so.device);
        try {
            return std::make_unique<Session>(file, spec, so);
        } catch (const OutOfDeviceMemory& e) {
            if (so.n_gpu_layers <= 0) throw;
            const int64_t next = std::min(so.n_gpu_layers, spec.hp.n_layer + 1) - 1;
            warn(fmt::format("{}; retrying with {{n_gpu_layers}} {}", e.what(), next));
            so.n_gpu_layers = next;
        }
    }
}

}  // namespace tandem::serving
