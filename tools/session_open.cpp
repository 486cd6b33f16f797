#include "tools/session_open.h"

#include <algorithm>
#include <memory>
#include <string>

#include "tools/field_flags.h"
#include "tools/progress.h"

namespace tandem::tools {
namespace {

// A progress bar fed by cumulative byte counts.
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

}  // namespace

serving::ProgressFactory progress_bars() {
    return [](const std::string& label) -> serving::ByteProgress {
        const uint64_t min_total = label == serving::kCopyStep ? uint64_t{1} << 30 : 0;
        auto state = std::make_shared<UploadBar>();
        state->label = label;
        return [state, min_total](uint64_t done, uint64_t total) {
            if (total >= min_total) state->update(done, total);
        };
    };
}

std::unique_ptr<Session> open_session_stepping_down(const gguf::File& file, const model::ModelSpec& spec,
                                                    SessionOptions& so, bool check_every_row) {
    return serving::open_session(file, spec, so, warn_on_stderr, progress_bars(), check_every_row);
}

}  // namespace tandem::tools
