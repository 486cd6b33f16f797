#include "tools/bench_args.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>

#include <fmt/format.h>

#include "planner/planner.h"
#include "runtime/common/memory_ledger.h"
#include "runtime/common/error.h"
#include "runtime/engine/device_registry.h"
#include "runtime/engine/session.h"
#include "tools/llama_flags.h"

namespace tandem::tools {
namespace {

// A bound on range expansion: "0-100000000" is a typo, not a benchmark, and
// must not allocate gigabytes before the error.
constexpr size_t kMaxListItems = 4096;
// More threads than any machine has cores is a typo too (and must fit an int).
constexpr int64_t kMaxThreads = 4096;
// --parallel's prompt per stream when -p is not given: enough context for
// attention to matter a little, not so much that prefill dominates a run.
constexpr int64_t kParallelPrompt = 32;

std::string_view trim(std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
}

std::vector<std::string_view> split(std::string_view text, char sep) {
    std::vector<std::string_view> out;
    size_t start = 0;
    while (true) {
        const size_t end = text.find(sep, start);
        out.push_back(trim(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start)));
        if (end == std::string_view::npos) break;
        start = end + 1;
    }
    return out;
}

// A whole non-negative decimal number, or nullopt.
std::optional<int64_t> to_count(std::string_view s) {
    if (s.empty() || s.front() == '+' || s.front() == '-') return std::nullopt;
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
    return v;
}

[[noreturn]] void bad_item(std::string_view flag, std::string_view text, std::string_view item) {
    throw Error(fmt::format("{}: expected N, A-B or A-B+STEP (STEP >= 1) items separated by commas, found '{}' in '{}'", flag, item,
                            text));
}

// Appends one item ("8", "0-8", "0-32+4") to out.
void expand_item(std::string_view item, std::string_view flag, std::string_view text, std::vector<int64_t>& out) {
    if (item.empty()) bad_item(flag, text, item);
    std::string_view range = item;
    int64_t step = 1;
    if (const size_t plus = item.find('+'); plus != std::string_view::npos) {
        const auto s = to_count(item.substr(plus + 1));
        if (!s || *s < 1) bad_item(flag, text, item);
        step = *s;
        range = item.substr(0, plus);
    }
    const size_t dash = range.find('-');
    const auto first = to_count(range.substr(0, dash));
    if (!first) bad_item(flag, text, item);
    int64_t last = *first;
    if (dash != std::string_view::npos) {
        const auto l = to_count(range.substr(dash + 1));
        if (!l) bad_item(flag, text, item);
        last = *l;
    } else if (step != 1) {
        bad_item(flag, text, item);  // "8+2" has no range to step through
    }
    if (last < *first) {
        throw Error(fmt::format("{}: range '{}' ends below its start", flag, item));
    }
    for (int64_t v = *first; v <= last; v += step) {
        if (out.size() >= kMaxListItems) {
            throw Error(fmt::format("{}: '{}' expands to more than {} values", flag, text, kMaxListItems));
        }
        out.push_back(v);
        if (v > std::numeric_limits<int64_t>::max() - step) break;
    }
}

// Joins the occurrences of a repeatable flag, or gives the default.
std::vector<int64_t> int_lists(const std::vector<std::string>& texts, std::string_view flag,
                               std::vector<int64_t> fallback) {
    if (texts.empty()) return fallback;
    std::vector<int64_t> out;
    for (const auto& t : texts) {
        const auto v = parse_int_list(t, flag);
        out.insert(out.end(), v.begin(), v.end());
    }
    return out;
}

void require_at_least(const std::vector<int64_t>& values, int64_t min, std::string_view flag) {
    for (int64_t v : values) {
        if (v < min) throw Error(fmt::format("{}: expected values >= {}, found {}", flag, min, v));
    }
}

bool ends_with_svg(const std::string& path) {
    if (path.size() < 4) return false;
    std::string ext = path.substr(path.size() - 4);
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
    return ext == ".svg";
}

// --parallel: for every prompt length (-p, per stream, default 32), decode
// length (-n, default 128) and depth (-d, default 0), every stream count
// in the order given.
std::vector<BenchTest> parallel_tests(const BenchArgs& a) {
    if (!a.prompt_gen.empty()) {
        throw Error("--parallel: -pg does not combine with it; give the prompt of each stream with -p (not timed) "
                    "and the decode steps with -n");
    }
    const std::vector<int64_t> depths = int_lists(a.n_depth, "-d", {0});
    std::vector<int64_t> counts;
    for (const auto& text : a.parallel) {
        const auto v = parse_parallel_list(text);
        counts.insert(counts.end(), v.begin(), v.end());
    }
    std::vector<BenchTest> tests;
    for (int64_t p : int_lists(a.n_prompt, "-p", {kParallelPrompt})) {
        for (int64_t n : int_lists(a.n_gen, "-n", {128})) {
            if (n == 0) continue;  // as llama-bench: -n 0 drops the decode tests, here all of them
            for (int64_t d : depths) {
                for (int64_t streams : counts) tests.push_back({p, n, d, streams});
            }
        }
    }
    if (tests.empty()) throw Error("--parallel: no decode step left to time; -n 0 drops every test");
    return tests;
}

// --plot without --sweep-ngl draws tok/s against depth: it needs two
// depths to draw a line through, and a pp or tg test to draw.
void check_depth_plot(const std::vector<BenchTest>& tests) {
    std::vector<int64_t> depths;
    bool drawable = false;
    for (const BenchTest& t : tests) {
        if (std::find(depths.begin(), depths.end(), t.n_depth) == depths.end()) depths.push_back(t.n_depth);
        drawable = drawable || t.n_prompt == 0 || t.n_gen == 0;
    }
    if (depths.size() < 2) {
        throw Error(fmt::format("--plot draws an ngl sweep (--sweep-ngl) or tok/s against depth; expected -d with "
                                "two or more depths (e.g. -d 0,4096,16384), found {} depth{}",
                                depths.size(), depths.size() == 1 ? fmt::format(" ({})", depths.front()) : "s"));
    }
    if (!drawable) throw Error("--plot draws the pp and tg tests against depth; found only -pg tests");
}

// --ref-bench: what llama-bench can be asked for alike. Its -ctk and -ctv
// take one type per run here (one llama-bench run per row), so a list is
// refused rather than compared against the wrong type.
RefBenchConfig ref_bench_config(const BenchArgs& a) {
    if (!a.parallel.empty()) {
        throw Error("--ref-bench: llama-bench has no batched-decode test to compare --parallel with; drop one of them");
    }
    if (a.pipeline) throw Error("--ref-bench: llama-bench does not run pipeline stages; drop --pipeline");
    if (parse_accelerators(a.device).size() > 1) {
        throw Error(fmt::format("--ref-bench: compares one device; --device {} names several", a.device));
    }
    const PlacementFlags& p = a.placement;
    if (!p.overrides.empty() || p.cpu_moe || p.n_cpu_moe > 0 || p.no_kv_offload) {
        throw Error("--ref-bench: -ot, --cpu-moe, --n-cpu-moe and -nkvo are not passed to llama-bench (the names of "
                    "devices differ); drop them to compare");
    }
    RefBenchConfig r;
    r.binary = a.ref_bench;
    const CacheTypeFlags& f = a.cache_types;
    const bool given = f.both != CacheTypeFlags{}.both || !f.k.empty() || !f.v.empty();
    if (given) {
        r.cache_k = f.k.empty() ? f.both : f.k;
        r.cache_v = f.v.empty() ? f.both : f.v;
        if (r.cache_k.find(',') != std::string::npos || r.cache_v.find(',') != std::string::npos) {
            throw Error(fmt::format("--ref-bench: expected one cache type for llama-bench, found -ctk {} -ctv {}",
                                    r.cache_k, r.cache_v));
        }
    }
    r.pass_ubatch = !a.n_ubatch.empty();
    return r;
}

}  // namespace

std::string BenchTest::name() const {
    if (n_parallel > 0) {
        const std::string base = fmt::format("tg{} x{}", n_gen, n_parallel);
        const std::string depth = n_depth > 0 ? fmt::format(" d{}", n_depth) : "";
        return n_prompt > 0 || n_depth > 0 ? fmt::format("{} @ p{}{}", base, n_prompt, depth) : base;
    }
    const std::string base = n_gen == 0      ? fmt::format("pp{}", n_prompt)
                             : n_prompt == 0 ? fmt::format("tg{}", n_gen)
                                             : fmt::format("pp{}+tg{}", n_prompt, n_gen);
    return n_depth > 0 ? fmt::format("{} @ d{}", base, n_depth) : base;
}

int64_t BenchTest::n_cells() const {
    return std::max<int64_t>(n_parallel, 1) * (n_depth + n_prompt + n_gen);
}

int64_t BenchConfig::n_ctx() const {
    int64_t n = 1;
    for (const BenchTest& t : tests) n = std::max(n, t.n_cells());
    return n;
}

int64_t BenchConfig::n_seq_max() const {
    int64_t n = 1;
    for (const BenchTest& t : tests) n = std::max(n, t.n_parallel);
    return n;
}

std::vector<int64_t> parse_int_list(std::string_view text, std::string_view flag) {
    std::vector<int64_t> out;
    for (std::string_view item : split(text, ',')) expand_item(item, flag, text, out);
    return out;
}

std::vector<std::optional<int64_t>> parse_ngl_list(std::string_view text) {
    std::vector<std::optional<int64_t>> out;
    for (std::string_view item : split(text, ',')) {
        if (item == "auto") {
            out.push_back(std::nullopt);
            continue;
        }
        std::vector<int64_t> values;
        expand_item(item, "-ngl", text, values);
        out.insert(out.end(), values.begin(), values.end());
    }
    return out;
}

std::vector<int64_t> parse_parallel_list(std::string_view text) {
    const std::vector<int64_t> counts = parse_int_list(text, "--parallel");
    for (int64_t n : counts) {
        if (n < 1 || n > kMaxSequences) {
            throw Error(fmt::format("--parallel: expected stream counts from 1 to {} (the sequences a session can "
                                    "tell apart), found {} in '{}'",
                                    kMaxSequences, n, text));
        }
    }
    return counts;
}

std::pair<int64_t, int64_t> parse_prompt_gen(std::string_view text) {
    const auto parts = split(text, ',');
    const auto p = parts.size() == 2 ? to_count(parts[0]) : std::nullopt;
    const auto n = parts.size() == 2 ? to_count(parts[1]) : std::nullopt;
    if (!p || !n || *p < 1 || *n < 1) {
        throw Error(fmt::format("-pg: expected two positive numbers P,N (prompt and generated tokens), found '{}'",
                                text));
    }
    return {*p, *n};
}

OutputFormat parse_output_format(std::string_view text) {
    if (text == "md") return OutputFormat::Markdown;
    if (text == "csv") return OutputFormat::Csv;
    if (text == "json") return OutputFormat::Json;
    if (text == "jsonl") return OutputFormat::JsonLines;
    throw Error(fmt::format("-o: expected md, csv, json or jsonl, found '{}'", text));
}

std::string_view output_format_name(OutputFormat f) {
    switch (f) {
        case OutputFormat::Markdown: return "md";
        case OutputFormat::Csv: return "csv";
        case OutputFormat::Json: return "json";
        case OutputFormat::JsonLines: return "jsonl";
    }
    return "md";
}

BenchConfig make_bench_config(const BenchArgs& a) {
    BenchConfig c;
    if (a.models.empty()) throw Error("bench: no model; give -m MODEL.gguf (or --calibrate)");
    c.models = a.models;
    if (a.repetitions < 1) throw Error(fmt::format("-r: expected at least 1 repetition, found {}", a.repetitions));
    c.repetitions = a.repetitions;
    c.format = parse_output_format(a.output);
    if (a.n_batch < 0) throw Error(fmt::format("-b: expected a value >= 0, found {}", a.n_batch));

    if (!a.parallel.empty()) {
        c.tests = parallel_tests(a);
    } else {
        // As llama-bench: a 0 in -p or -n drops that kind of test.
        for (int64_t p : int_lists(a.n_prompt, "-p", {512})) {
            if (p > 0) c.tests.push_back({p, 0});
        }
        for (int64_t n : int_lists(a.n_gen, "-n", {128})) {
            if (n > 0) c.tests.push_back({0, n});
        }
        for (const auto& pg : a.prompt_gen) {
            const auto [p, n] = parse_prompt_gen(pg);
            c.tests.push_back({p, n});
        }
        if (c.tests.empty()) {
            throw Error("bench: no test left to run; -p 0 and -n 0 drop every test and no -pg was given");
        }
        // -d: every test at every depth, as llama-bench.
        const std::vector<int64_t> depths = int_lists(a.n_depth, "-d", {0});
        std::vector<BenchTest> at_depths;
        for (const BenchTest& t : c.tests) {
            for (int64_t d : depths) at_depths.push_back({t.n_prompt, t.n_gen, d});
        }
        c.tests = std::move(at_depths);
    }

    const auto threads = int_lists(a.threads, "-t", {0});
    if (!a.threads.empty()) require_at_least(threads, 1, "-t");
    for (int64_t t : threads) {
        if (t > kMaxThreads) throw Error(fmt::format("-t: expected at most {} threads, found {}", kMaxThreads, t));
        c.threads.push_back(static_cast<int>(t));
    }
    c.n_ubatch = int_lists(a.n_ubatch, "-ub", {512});
    require_at_least(c.n_ubatch, 1, "-ub");
    c.cache_types = cache_types_of(a.cache_types);
    const auto mmaps = split(a.mmap, ',');
    if (mmaps.size() != 1) {
        throw Error(fmt::format("-mmp: one value, 0 or 1 (Tandem does not sweep it), found '{}'", a.mmap));
    }
    c.mmap = parse_switch("-mmp", std::string(mmaps.front()));

    // --device, --vram, -ts and -sm as run takes them (each checked there,
    // naming the flag): several devices share the layers.
    SplitFlags where;
    where.device = a.device;
    where.vram = a.vram;
    where.tensor_split = a.tensor_split;
    where.split_mode = a.split_mode;
    const SplitRequest placed = split_request(where, 0, 512);
    c.device = a.device;
    c.vram = placed.vram;
    c.tensor_split = placed.tensor_split;
    c.weight_stream = !a.no_stream;
    c.copy_host_weights = !a.no_host_copy;
    c.pipeline = a.pipeline;
    c.placement = a.placement;
    SessionOptions check;
    serving::apply_placement(placement_options(c.placement), check);  // a bad -ot fails before any model loads
    if (a.stream_min_batch <= 0) {
        throw Error(fmt::format("--stream-min-batch: expected a positive value, found {}", a.stream_min_batch));
    }
    c.stream_min_batch = a.stream_min_batch;
    if (!c.vram.empty() && c.device.empty()) throw Error("--vram needs --device (cuda or cpu2)");

    if (a.sweep) {
        if (c.device.empty()) throw Error("--sweep-ngl needs an accelerator: give --device cpu2 or cuda (and --vram)");
        if (!a.n_gpu_layers.empty()) throw Error("--sweep-ngl chooses the layer counts itself; drop -ngl");
        int64_t step = 1;
        if (!a.sweep_step.empty()) {
            const auto s = to_count(trim(a.sweep_step));
            if (!s || *s < 1) throw Error(fmt::format("--sweep-ngl: expected a step >= 1, found '{}'", a.sweep_step));
            step = *s;
        }
        c.sweep_step = step;
    } else {
        for (const auto& text : a.n_gpu_layers.empty() ? std::vector<std::string>{"auto"} : a.n_gpu_layers) {
            const auto v = parse_ngl_list(text);
            c.n_gpu_layers.insert(c.n_gpu_layers.end(), v.begin(), v.end());
        }
        for (const auto& ngl : c.n_gpu_layers) {
            if (ngl && *ngl > 0 && c.device.empty()) {
                throw Error(fmt::format("-ngl {} asks for layers on an accelerator; give --device cpu2 or cuda", *ngl));
            }
            // As `run -ngl auto`: the planner needs a capacity to fill. A
            // GPU's is what it has free (cmd_bench fills --vram with it, or
            // under --pipeline each rank reads its own); a stand-in has none.
            const auto names = parse_accelerators(c.device);
            const bool stand_in = std::any_of(names.begin(), names.end(), [](const std::string& n) {
                return parse_accelerator(n).kind != AcceleratorKind::Cuda;
            });
            if (!ngl && stand_in && c.vram.empty()) {
                throw Error(fmt::format("-ngl auto on {} needs --vram SIZE; or give -ngl N", c.device));
            }
        }
    }

    if (!a.plot.empty()) {
        if (!ends_with_svg(a.plot)) {
            throw Error(fmt::format("--plot: only SVG is written; expected a file name ending in .svg, found '{}'",
                                    a.plot));
        }
        if (c.models.size() != 1) throw Error("--plot draws one model; give a single -m");
        if (!a.parallel.empty()) throw Error("--plot draws the pp and tg tests; drop --parallel");
        if (!c.sweep_step) check_depth_plot(c.tests);
        c.plot_path = a.plot;
    }
    if (!a.ref_bench.empty()) c.ref_bench = ref_bench_config(a);
    return c;
}

}  // namespace tandem::tools
