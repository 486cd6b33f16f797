#include "tools/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

namespace tandem::tools {

ProgressBar::ProgressBar(std::string label, uint64_t total, bool unit_bytes)
    : label_(std::move(label)),
      total_(std::max<uint64_t>(total, 1)),
      unit_bytes_(unit_bytes),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {
    draw(true);
}

ProgressBar::~ProgressBar() {
    if (!finished_) finish();
}

void ProgressBar::advance(uint64_t n, std::string_view detail) {
    done_ = std::min(total_, done_ + n);
    detail_.assign(detail);
    draw(false);
}

void ProgressBar::finish() {
    if (finished_) return;
    done_ = total_;
    detail_.clear();
    draw(true);
    if (tty_) std::fputc('\n', stderr);
    finished_ = true;
}

void ProgressBar::draw(bool force) {
    const auto now = std::chrono::steady_clock::now();
    const double frac = static_cast<double>(done_) / static_cast<double>(total_);
    const int quarter = static_cast<int>(frac * 4.0);
    if (tty_) {
        if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
    } else if (quarter == last_quarter_) {
        return;  // logs get one line per quarter, the final one included once
    }
    last_draw_ = now;
    last_quarter_ = quarter;
    const double secs = std::chrono::duration<double>(now - start_).count();
    std::string rate;
    if (unit_bytes_ && secs > 0.0) {
        const double bps = static_cast<double>(done_) / secs;
        rate = bps >= 1e8 ? fmt::format(" {:.2f} GB/s", bps / 1e9) : fmt::format(" {:.1f} MB/s", bps / 1e6);
    }
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(frac * kWidth);
    const std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '.');
    const std::string line = fmt::format("{} [{}] {:5.1f}% {:.1f}s{}{}{}", label_, bar, frac * 100.0, secs, rate,
                                         detail_.empty() ? "" : " ", detail_);
    if (tty_) {
        fmt::print(stderr, "\r{}\x1b[K", line);
    } else {
        fmt::print(stderr, "{}\n", line);
    }
    std::fflush(stderr);
}

}  // namespace tandem::tools
