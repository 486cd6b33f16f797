#include "tools/split.h"

#include <algorithm>
#include <exception>
#include <string_view>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/common/memory_ledger.h"
#include "runtime/engine/device_registry.h"
#include "tools/llama_flags.h"

namespace tandem::tools {
namespace {

void check_cache_types(std::string_view flag, const std::string& text) {
    for (std::string_view item : split_items(text)) {
        if (item == "f16" || item == "q8_0") continue;
        throw Error(fmt::format("{} {}: not supported; Tandem's KV cache is f16 or q8_0, one type for K and V "
                                "(--cache-type, or -ctk and -ctv alike)",
                                flag, item));
    }
}

}  // namespace

void add_cache_type_flags(CLI::App& cmd, CacheTypeFlags& f, bool list) {
    const std::string kind = list ? ", a list (default f16)" : "";
    CLI::Option* opts[] = {
        cmd.add_option("--cache-type", f.both, "KV cache type for K and V: f16 or q8_0" + kind),
        cmd.add_option("--cache-type-k", f.k, "K cache type (-ctk), as llama.cpp; must be the same as V's" + kind),
        cmd.add_option("--cache-type-v", f.v, "V cache type (-ctv), as llama.cpp; must be the same as K's" + kind),
    };
    if (!list) {
        opts[0]->capture_default_str();
        return;
    }
    // A list may come in pieces, as llama-bench takes it: -ctk f16 -ctk q8_0.
    for (CLI::Option* o : opts) o->type_name("LIST")->delimiter(',')->multi_option_policy(CLI::MultiOptionPolicy::Join);
}

std::string cache_type_text(const CacheTypeFlags& f) {
    check_cache_types("--cache-type", f.both);
    if (!f.k.empty()) check_cache_types("-ctk", f.k);
    if (!f.v.empty()) check_cache_types("-ctv", f.v);
    const std::string& k = f.k.empty() ? f.both : f.k;
    const std::string& v = f.v.empty() ? f.both : f.v;
    if (k != v) {
        throw Error(fmt::format("-ctk {} with -ctv {}: Tandem's KV cache has one type for K and V; give both the "
                                "same (f16 or q8_0), or --cache-type",
                                k, v));
    }
    return k;
}

uint64_t parse_size_flag(std::string_view flag, std::string_view text) {
    constexpr std::string_view kForms = "8G, 8GiB, 8GB, 512M, 512MiB or 1.5G (G and GiB are 2^30 bytes, GB is 10^9)";
    constexpr std::string_view kBlank = " \t";
    const size_t b = text.find_first_not_of(kBlank);
    const std::string_view s = b == std::string_view::npos ? std::string_view() : text.substr(b);
    const std::string_view number = s.substr(0, s.find_first_not_of("0123456789."));
    const bool unitless = s.substr(number.size()).find_first_not_of(kBlank) == std::string_view::npos;
    if (unitless && number.find_first_of("0123456789") != std::string_view::npos) {
        if (number.find_first_not_of("0.") == std::string_view::npos) return 0;  // zero needs no unit
        throw Error(fmt::format("{} {}: a size needs a unit (a plain number would be bytes); expected e.g. {}", flag,
                                text, kForms));
    }
    try {
        return parse_size(s);
    } catch (const Error&) {
        throw Error(fmt::format("{}: expected a size such as {}, found '{}'", flag, kForms, text));
    }
}

std::optional<int64_t> parse_ngl(const std::string& text, std::string_view flag) {
    if (text == "auto") return std::nullopt;
    try {
        size_t used = 0;
        const long long v = std::stoll(text, &used);
        if (used == text.size() && v >= 0) return v;
    } catch (const std::exception&) {
    }
    throw Error(fmt::format("{}: expected auto or a layer count >= 0, found '{}'", flag, text));
}

SplitRequest split_request(const SplitFlags& f, int64_t n_ctx, int64_t n_ubatch) {
    SplitRequest r;
    r.device = f.device;
    (void)parse_accelerator(r.device);  // throws, naming the flag and what it found
    if (!f.vram.empty()) r.vram = parse_size_flag("--vram", f.vram);
    r.ngl = parse_ngl(f.n_gpu_layers);
    r.n_ctx = n_ctx;
    r.n_ubatch = n_ubatch;
    r.cache_type = planner::parse_cache_type(cache_type_text(f.cache));
    r.stream = stream_options(f.stream);
    r.placement = placement_options(f.placement);
    return r;
}

}  // namespace tandem::tools
