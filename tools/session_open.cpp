#include "tools/session_open.h"

#include <algorithm>
#include <thread>

#include "kernels_cpu/cpu_info.h"
#include "runtime/model/tensor_check.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "runtime/common/memory_ledger.h"
#include "tools/progress.h"

namespace tandem::tools {
namespace {

// A progress bar fed by cumulative byte counts (SessionOptions::upload_progress
// and host_copy_progress).
struct UploadBar {
    std::string label;
    std::unique_ptr<ProgressBar> bar;
    uint64_t shown = 0;
    void update(uint64_t done, uint64_t total) {
        if (!bar) bar = std::make_unique<ProgressBar>(label, total, true);
        bar->advance(done - std::min(done, shown));
        shown = done;
        if (done >= total) bar->finish();
    }
};

// A fresh bar labelled `label`, shown once the total reaches min_total.
std::function<void(uint64_t, uint64_t)> bar_feed(std::string label, uint64_t min_total = 0) {
    auto state = std::make_shared<UploadBar>();
    state->label = std::move(label);
    return [state, min_total](uint64_t done, uint64_t total) {
        if (total >= min_total) state->update(done, total);
    };
}

}  // namespace

std::unique_ptr<Session> open_session_stepping_down(const gguf::File& file, const model::ModelSpec& spec,
                                                    SessionOptions& so, bool check_every_row) {
    // (Past 4x the logical CPUs the thread pool refuses the count instead.)
    const int cores = cpu::physical_core_count();
    const auto logical = static_cast<int>(std::thread::hardware_concurrency());
    if (so.n_threads > cores && so.n_threads <= 4 * std::max(1, logical)) {
        fmt::print(stderr,
                   "tandem: warning: -t {} is more than the {} physical cores: threads then share cores, which "
                   "usually slows decoding\n",
                   so.n_threads, cores);
    }
    if (!file.header_only()) {
        for (const std::string& w : model::find_non_finite_tensors(file, spec, check_every_row)) {
            fmt::print(stderr, "tandem: warning: {}\n", w);
        }
    }
    const bool own_bar = !so.device.empty() && !so.upload_progress;
    const bool own_copy_bar = so.copy_host_weights && !so.host_copy_progress;
    while (true) {
        // Fresh bars per attempt: a step-down moves bytes between the two.
        // Copying the CPU's weights takes a moment per GiB: a bar from there.
        if (own_copy_bar) so.host_copy_progress = bar_feed("copy CPU weights", uint64_t{1} << 30);
        if (own_bar) so.upload_progress = bar_feed("upload to " + so.device);
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
