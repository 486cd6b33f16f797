// Where tests find their inputs. Core tests use tests/data/ (committed, so
// they pass anywhere); tests on the full model set use ../shared and skip
// cleanly where it is absent.
#pragma once

#include <cstdint>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>
#include <string_view>

#include <gtest/gtest.h>

#include "runtime/common/error.h"

namespace tandem::testing {

inline constexpr uint64_t kGiB = uint64_t{1} << 30;

inline std::filesystem::path test_data(const std::string& rel) {
    return std::filesystem::path(TANDEM_TEST_DATA_DIR) / rel;
}

inline std::filesystem::path shared_dir() { return std::filesystem::path(TANDEM_SHARED_DIR); }

inline std::filesystem::path shared(const std::string& rel) { return shared_dir() / rel; }

inline std::filesystem::path tandem_binary() { return std::filesystem::path(TANDEM_BINARY); }

// A scratch directory unique to the running test, removed by the caller or
// left under the build tree's temp for inspection.
inline std::filesystem::path scratch_dir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    auto dir = std::filesystem::temp_directory_path() / "tandem-tests" /
               (std::string(info->test_suite_name()) + "." + info->name());
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

// The message of the tandem::Error that fn throws, or "<no error>".
template <class Fn>
std::string error_of(Fn&& fn) {
    try {
        fn();
    } catch (const tandem::Error& e) {
        return e.what();
    }
    return "<no error>";
}

inline bool contains(const std::string& haystack, std::string_view needle) {
    return haystack.find(needle) != std::string::npos;
}

// The temp files an AtomicFile writing `target` would leave beside it
// (".NAME.tandem-XXXXXX"): none once a writer has finished or failed.
inline std::vector<std::filesystem::path> temp_files_of(const std::filesystem::path& target) {
    std::vector<std::filesystem::path> out;
    const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
    const std::string prefix = "." + target.filename().string() + ".tandem-";
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path());
    }
    return out;
}

// Whether a model file was refused for what Tandem does not take yet (a
// tensor type, an architecture: ../shared holds files of open issues), in
// the clear words such a refusal uses, rather than for any other fault.
inline bool refused_as_unsupported(const std::exception& e) {
    const std::string m = e.what();
    return m.find("expected a supported tensor type") != std::string::npos ||
           m.find("is not supported; supported:") != std::string::npos;
}

}  // namespace tandem::testing

// Skips the current test when a ../shared asset is missing.
#define TANDEM_REQUIRE_SHARED(path)                                                     \
    do {                                                                                \
        if (!std::filesystem::exists(path)) GTEST_SKIP() << "shared asset absent: " << (path); \
    } while (0)
