// TANDEM_CACHE_DIR pointed at a scratch directory for the scope, so that
// no stored calibration or tune entry (a developer's own `bench
// --calibrate`) changes what a test's commands choose or report; the
// variable is put back afterwards, since later tests in the process may
// rely on it.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

namespace tandem::testing {

class ScratchCache {
public:
    explicit ScratchCache(const std::filesystem::path& dir) {
        if (const char* v = std::getenv("TANDEM_CACHE_DIR")) saved_ = v;
        ::setenv("TANDEM_CACHE_DIR", (dir / "cache").c_str(), 1);
    }
    ~ScratchCache() {
        if (saved_) {
            ::setenv("TANDEM_CACHE_DIR", saved_->c_str(), 1);
        } else {
            ::unsetenv("TANDEM_CACHE_DIR");
        }
    }
    ScratchCache(const ScratchCache&) = delete;
    ScratchCache& operator=(const ScratchCache&) = delete;

private:
    std::optional<std::string> saved_;
};

}  // namespace tandem::testing
