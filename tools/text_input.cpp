#include "tools/text_input.h"

#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "runtime/common/error.h"

namespace tandem::tools {

std::string read_llama_text_file(const std::string& path) {
    std::string text = read_text_input(path, "text file");
    if (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
}

uint64_t max_text_bytes() {
    constexpr uint64_t kDefaultMiB = 64;
    const char* env = std::getenv("TANDEM_MAX_TEXT_MB");
    if (env == nullptr || *env == '\0') return kDefaultMiB << 20;
    uint64_t mb = 0;
    const char* end = env + std::strlen(env);
    const auto [p, ec] = std::from_chars(env, end, mb);
    if (ec != std::errc() || p != end || mb == 0 || mb > (uint64_t{1} << 20)) {
        throw Error(fmt::format("TANDEM_MAX_TEXT_MB: expected a size in megabytes from 1 to 1048576, found '{}'", env));
    }
    return mb << 20;
}

std::string read_text_input(const std::string& path, const char* what) {
    if (path.empty()) throw Error(fmt::format("{}: expected a path (or - for standard input), found an empty one", what));
    const bool stdin_text = path == "-";
    struct stat st {};
    if (!stdin_text && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        throw Error(fmt::format("{} {}: is a directory, expected a text file", what, path));
    }
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> owned(stdin_text ? nullptr : std::fopen(path.c_str(), "rb"),
                                                          &std::fclose);
    std::FILE* in = stdin_text ? stdin : owned.get();
    if (in == nullptr) throw Error(fmt::format("{} {}: cannot open: {}", what, path, std::strerror(errno)));
    const uint64_t cap = max_text_bytes();
    std::string text;
    char buf[1 << 16];
    for (;;) {
        const size_t n = std::fread(buf, 1, sizeof buf, in);
        text.append(buf, n);
        if (text.size() > cap) {
            throw Error(fmt::format("{} {}: longer than {} MiB; set TANDEM_MAX_TEXT_MB to allow more", what,
                                    stdin_text ? "(standard input)" : path, cap >> 20));
        }
        if (n < sizeof buf) break;
    }
    if (std::ferror(in)) {
        throw Error(fmt::format("{} {}: read error: {}", what, stdin_text ? "(standard input)" : path,
                                std::strerror(errno)));
    }
    return text;
}

}  // namespace tandem::tools
