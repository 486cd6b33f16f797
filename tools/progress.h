// A progress bar on stderr for long work (quantize, synth, uploads). It
// redraws at most ~10 times a second, only when stderr is a terminal;
// otherwise it prints a line at 0%, every 25%, and at the end, so logs stay
// short but still show that work is moving.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace tandem::tools {

class ProgressBar {
public:
    // `unit_bytes`: show a GB/s rate (total counts bytes).
    ProgressBar(std::string label, uint64_t total, bool unit_bytes = false);
    ~ProgressBar();  // finishes the line if finish() was not called
    ProgressBar(const ProgressBar&) = delete;
    ProgressBar& operator=(const ProgressBar&) = delete;

    void advance(uint64_t n, std::string_view detail = {});
    void finish();

private:
    void draw(bool force);

    std::string label_;
    uint64_t total_;
    uint64_t done_ = 0;
    bool unit_bytes_;
    bool tty_;
    bool finished_ = false;
    int last_quarter_ = -1;
    std::string detail_;
    std::chrono::steady_clock::time_point start_;
    std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace tandem::tools
