#include "tools/split.h"

#include <algorithm>
#include <charconv>
#include <exception>
#include <string_view>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/common/memory_ledger.h"
#include "runtime/engine/device_registry.h"
#include "tools/llama_flags.h"
#include "tools/pipeline.h"

namespace tandem::tools {
namespace {

// Each item of a flag's list as a cache element type.
std::vector<quant::Type> cache_elements(std::string_view flag, const std::string& text) {
    std::vector<quant::Type> types;
    for (std::string_view item : split_items(text)) types.push_back(model::parse_cache_element(flag, item));
    if (types.empty()) throw Error(fmt::format("{}: expected a KV cache type, found nothing", flag));
    return types;
}

// K's and V's lists: -ctk and -ctv where given, else --cache-type's.
std::pair<std::vector<quant::Type>, std::vector<quant::Type>> cache_lists(const CacheTypeFlags& f) {
    const std::vector<quant::Type> both = cache_elements("--cache-type", f.both);
    return {f.k.empty() ? both : cache_elements("-ctk", f.k), f.v.empty() ? both : cache_elements("-ctv", f.v)};
}

}  // namespace

void add_cache_type_flags(CLI::App& cmd, CacheTypeFlags& f, bool list) {
    const std::string kind = list ? ", a list (default f16)" : "";
    CLI::Option* opts[] = {
        cmd.add_option("--cache-type", f.both,
                       "KV cache type for K and V: f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0 or q5_1 (the "
                       "quantized ones stored rotated, as llama.cpp)" + kind),
        cmd.add_option("--cache-type-k", f.k, "K cache type (-ctk), as llama.cpp; default --cache-type's" + kind),
        cmd.add_option("--cache-type-v", f.v, "V cache type (-ctv), as llama.cpp; default --cache-type's" + kind),
    };
    if (!list) {
        opts[0]->capture_default_str();
        return;
    }
    // A list may come in pieces, as llama-bench takes it: -ctk f16 -ctk q8_0.
    for (CLI::Option* o : opts) o->type_name("LIST")->delimiter(',')->multi_option_policy(CLI::MultiOptionPolicy::Join);
}

model::CacheType cache_type_of(const CacheTypeFlags& f) {
    const auto [k, v] = cache_lists(f);
    if (k.size() != 1 || v.size() != 1) throw Error("--cache-type, -ctk, -ctv: expected one type each, found a list");
    return {k[0], v[0]};
}

std::vector<model::CacheType> cache_types_of(const CacheTypeFlags& f) {
    const auto [ks, vs] = cache_lists(f);
    std::vector<model::CacheType> pairs;
    for (const quant::Type k : ks) {
        for (const quant::Type v : vs) pairs.push_back({k, v});
    }
    return pairs;
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

void add_device_flags(CLI::App& cmd, SplitFlags& f) {
    cmd.add_option("--device", f.device,
                   "accelerators: cuda0 (a GPU), cuda0,cuda1 (several, splitting the layers), or cpu2, cpu2,cpu3 "
                   "(stand-in CPU devices, each with a --vram capacity)");
    cmd.add_option("--vram", f.vram,
                   "accelerator memory Tandem may use, e.g. 24GiB; with several devices one size for each, or a list "
                   "such as 24GiB,12GiB");
    cmd.add_option("--n-gpu-layers", f.n_gpu_layers,
                   "leading layers on the accelerators (-ngl), or auto: the most that fit --vram; more than the layer "
                   "count also moves the head")
        ->capture_default_str();
    cmd.add_option("--tensor-split", f.tensor_split,
                   "-ts A,B,...: how several devices share the -ngl layers, in proportions (default: by --vram, else "
                   "equal)");
    cmd.add_option("--split-mode", f.split_mode, "-sm none|layer: split the layers between the devices (row is refused)")
        ->capture_default_str();
    cmd.add_flag("--pipeline", f.pipeline,
                 "run as pipeline stages, one per MPI rank, each with a range of layers: mpirun -np N tandem ... "
                 "--pipeline (rank 0 reads the input and writes every output)");
}

std::vector<uint64_t> parse_vram_list(std::string_view flag, const std::string& text) {
    std::vector<uint64_t> out;
    for (std::string_view item : split_items(text, ",")) out.push_back(parse_size_flag(flag, item));
    return out;
}

std::vector<double> parse_tensor_split(const std::string& text) {
    std::vector<double> out;
    for (std::string_view item : split_items(text, ",/;")) {
        double x = 0;
        const auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), x);
        if (item.empty() || ec != std::errc() || p != item.data() + item.size() || !(x >= 0)) {
            throw Error(fmt::format("-ts: expected proportions such as 1 or 3,1, found '{}'", text));
        }
        out.push_back(x);
    }
    return out;
}

SplitRequest split_request(const SplitFlags& f, int64_t n_ctx, int64_t n_ubatch) {
    SplitRequest r;
    r.device = f.device;
    const std::vector<std::string> names = parse_accelerators(r.device);  // throws, naming the flag
    if (!f.vram.empty()) r.vram = parse_vram_list("--vram", f.vram);
    if (r.vram.size() > 1 && r.vram.size() != names.size()) {
        throw Error(fmt::format("--vram: expected one size, or one per device of --device ({}), found {}",
                                names.size(), r.vram.size()));
    }
    if (f.split_mode == "row") {
        throw Error("-sm row is not supported; Tandem splits by layers (-sm layer, with -ts for the shares)");
    }
    if (f.split_mode != "layer" && f.split_mode != "none") {
        throw Error(fmt::format("-sm: expected none or layer, found '{}'", f.split_mode));
    }
    if (!f.tensor_split.empty()) r.tensor_split = parse_tensor_split(f.tensor_split);
    // One device or none: a split that gives everything to the first is
    // llama.cpp's way of saying so (-ts 1, -ts 1,0).
    const bool all_on_first = !r.tensor_split.empty() && r.tensor_split[0] > 0 &&
                              std::all_of(r.tensor_split.begin() + 1, r.tensor_split.end(), [](double x) { return x == 0; });
    if (names.size() <= 1 && all_on_first) r.tensor_split.clear();
    if (!r.tensor_split.empty() && r.tensor_split.size() != names.size()) {
        throw Error(fmt::format("-ts {} shares the layers between {} devices, but --device names {}; give one "
                                "proportion per device (e.g. --device cuda0,cuda1 -ts 3,1)",
                                f.tensor_split, r.tensor_split.size(), names.size()));
    }
    if (f.split_mode == "none" && names.size() > 1) {
        throw Error(fmt::format("-sm none uses one device; --device names {}", names.size()));
    }
    r.ngl = parse_ngl(f.n_gpu_layers);
    if (f.pipeline) {
        r.pipeline = pipeline_link();
        if (!r.pipeline) throw Error("--pipeline: start tandem under mpirun, e.g. mpirun -np 2 tandem run ... --pipeline");
    }
    r.n_ctx = n_ctx;
    r.n_ubatch = n_ubatch;
    r.cache_type = cache_type_of(f.cache);
    r.stream = stream_options(f.stream);
    r.placement = placement_options(f.placement);
    return r;
}

}  // namespace tandem::tools
