#include "tools/sampling_flags.h"

#include <charconv>
#include <chrono>

#include <fmt/format.h>

#include "runtime/common/error.h"

namespace tandem::tools {

std::optional<uint64_t> parse_seed(const std::string& text) {
    if (text == "-1") return std::nullopt;
    uint64_t v = 0;
    const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || ec != std::errc() || p != text.data() + text.size()) {
        throw Error(fmt::format("--seed: expected a number (or -1: from the clock), found '{}'", text));
    }
    return v;
}

void add_sampling_flags(CLI::App& cmd, SamplingFlags& f) {
    cmd.add_option("--temp", f.params.temperature, "temperature (0: greedy)")->capture_default_str();
    cmd.add_option("--top-k", f.params.top_k, "top-k (0: off)")->capture_default_str();
    cmd.add_option("--top-p", f.params.top_p, "top-p (1: off)")->capture_default_str();
    cmd.add_option("--min-p", f.params.min_p, "min-p (0: off)")->capture_default_str();
    cmd.add_option("--repeat-penalty", f.params.repeat_penalty, "repetition penalty (1: off)")->capture_default_str();
    cmd.add_option("--repeat-last-n", f.params.repeat_last_n, "tokens the penalty looks back over")
        ->capture_default_str();
    cmd.add_option_function<std::string>(
           "-s,--seed", [&f](const std::string& v) { f.seed = parse_seed(v); },
           "random seed (default, or -1: from the clock, printed as seed: N on stderr)")
        ->type_name("N");
}

SamplerParams resolved_sampling(const SamplingFlags& f) {
    SamplerParams p = f.params;
    p.seed = f.seed ? *f.seed : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    validate(p);
    return p;
}

}  // namespace tandem::tools
