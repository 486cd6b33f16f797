#include "tools/bench_report.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include <fmt/format.h>

#include "tools/perplexity.h"

namespace tandem::tools {
namespace {

// One column of the markdown table: its header, whether it is numeric
// (right-aligned, as llama-bench does) and how a row fills it.
struct Column {
    std::string header;
    bool numeric = false;
    std::function<std::string(const BenchRow&)> cell;
};

std::string optional_number(const std::optional<double>& v, const char* format_spec) {
    return v ? fmt::format(fmt::runtime(format_spec), *v) : std::string("-");
}

std::string tps_cell(const BenchRow& r) {
    if (!r.fits) return "does not fit";
    if (!r.tps_mean) return "-";
    return fmt::format("{:.2f} ± {:.2f}", *r.tps_mean, r.tps_sd.value_or(0.0));
}

bool any_row(const std::vector<BenchRow>& rows, const std::function<bool(const BenchRow&)>& pred) {
    return std::any_of(rows.begin(), rows.end(), pred);
}

std::vector<Column> markdown_columns(const std::vector<BenchRow>& rows, bool show_prediction) {
    std::vector<Column> cols;
    cols.push_back({"model", false, [](const BenchRow& r) { return r.model; }});
    cols.push_back({"type", false, [](const BenchRow& r) { return r.model_type; }});
    cols.push_back({"size", true, [](const BenchRow& r) { return human_size(r.model_size); }});
    cols.push_back({"params", true, [](const BenchRow& r) { return human_count(r.model_params); }});
    if (any_row(rows, [](const BenchRow& r) { return !r.device.empty(); })) {
        cols.push_back({"device", false, [](const BenchRow& r) { return r.device.empty() ? "-" : r.device; }});
    }
    cols.push_back({"backend", false, [](const BenchRow& r) { return r.backend; }});
    cols.push_back({"ngl", true, [](const BenchRow& r) { return std::to_string(r.ngl); }});
    cols.push_back({"threads", true, [](const BenchRow& r) { return std::to_string(r.threads); }});
    // As llama-bench: parameters at their defaults stay out of the way.
    if (any_row(rows, [](const BenchRow& r) { return r.n_ubatch != 512; })) {
        cols.push_back({"n_ubatch", true, [](const BenchRow& r) { return std::to_string(r.n_ubatch); }});
    }
    if (any_row(rows, [](const BenchRow& r) { return r.cache_type != "f16"; })) {
        cols.push_back({"cache", false, [](const BenchRow& r) { return r.cache_type; }});
    }
    cols.push_back({"test", true, [](const BenchRow& r) { return r.test; }});
    cols.push_back({"t/s", true, tps_cell});
    // --parallel: t/s is all streams together; these split it per stream
    // and compare it with one stream.
    if (any_row(rows, [](const BenchRow& r) { return r.n_parallel > 0; })) {
        cols.push_back({"t/s/stream", true, [](const BenchRow& r) { return optional_number(r.stream_tps, "{:.2f}"); }});
        cols.push_back({"speed-up", true, [](const BenchRow& r) { return optional_number(r.speedup, "{:.2f}x"); }});
    }
    // --ref-bench: llama.cpp's speed for the same test beside Tandem's.
    if (any_row(rows, [](const BenchRow& r) { return r.llama_tps_mean.has_value(); })) {
        cols.push_back({"llama.cpp t/s", true, [](const BenchRow& r) {
                            if (!r.llama_tps_mean) return std::string("-");
                            return fmt::format("{:.2f} ± {:.2f}", *r.llama_tps_mean, r.llama_tps_sd.value_or(0.0));
                        }});
        cols.push_back({"tandem/llama", true, [](const BenchRow& r) { return optional_number(tps_vs_llama(r), "{:.2f}x"); }});
    }
    if (show_prediction) {
        // The planner predicts an undisturbed run. A busy host only ever
        // slows runs down (steal, a neighbour on the core), so the fastest
        // of the repetitions is the one to hold the prediction against.
        cols.push_back({"best t/s", true, [](const BenchRow& r) { return optional_number(best_tps(r), "{:.2f}"); }});
        cols.push_back({"pred t/s", true, [](const BenchRow& r) { return optional_number(r.predicted_tps, "{:.2f}"); }});
        cols.push_back({"pred err", true, [](const BenchRow& r) {
                            const auto e = prediction_error_pct(r);
                            return e ? fmt::format("{:+.1f}%", *e) : std::string("-");
                        }});
    }
    cols.push_back({"GB/s", true, [](const BenchRow& r) { return optional_number(r.gbps, "{:.2f}"); }});
    if (any_row(rows, [](const BenchRow& r) { return r.cpu_gbps_before.has_value(); })) {
        cols.push_back({"bw now", true, [](const BenchRow& r) {
                            if (!r.cpu_gbps_before || !r.cpu_gbps_after) return std::string("-");
                            return fmt::format("{:.1f}/{:.1f}", *r.cpu_gbps_before, *r.cpu_gbps_after);
                        }});
    }
    cols.push_back({"% bw", true, [](const BenchRow& r) { return optional_number(r.pct_bandwidth, "{:.1f}"); }});
    // Shown when the hypervisor took a noticeable share during some test:
    // those rows are slow and noisy for a reason outside Tandem.
    if (any_row(rows, [](const BenchRow& r) { return r.steal_pct.value_or(0.0) >= kShowStealPct; })) {
        cols.push_back({"steal %", true, [](const BenchRow& r) { return optional_number(r.steal_pct, "{:.1f}"); }});
    }
    return cols;
}

// Display width in characters: "±" is two bytes but one column.
size_t display_width(const std::string& s) {
    size_t w = 0;
    for (unsigned char c : s) w += (c & 0xC0) != 0x80;
    return w;
}

std::string pad(const std::string& s, size_t width, bool right) {
    const size_t w = display_width(s);
    const std::string fill(width > w ? width - w : 0, ' ');
    return right ? fmt::format("{}{}", fill, s) : fmt::format("{}{}", s, fill);
}

// csv: quote a field only when it needs it (RFC 4180).
std::string csv_field(const std::string& s) {
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string q(1, '"');
    for (char c : s) {
        if (c == '"') q += '"';
        q += c;
    }
    q += '"';
    return q;
}

// Shortest text that reads back to the same double, so csv and json agree.
std::string csv_number(const std::optional<double>& v) { return v ? fmt::format("{}", *v) : std::string(); }

std::string join_samples(const std::vector<double>& v, const char* sep) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) out += fmt::format("{}{}", i ? sep : "", v[i]);
    return out;
}

nlohmann::json optional_json(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

}  // namespace

double mean_of(const std::vector<double>& v) {
    if (v.empty()) return 0.0;
    return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return ppl::percentile(v, 0.5);
}

double sample_sd_of(const std::vector<double>& v) {
    if (v.size() < 2) return 0.0;
    const double m = mean_of(v);
    double ss = 0.0;
    for (double x : v) ss += (x - m) * (x - m);
    return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

std::string human_size(uint64_t bytes) {
    const double b = static_cast<double>(bytes);
    if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
    if (b >= 1024.0 * 1024) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
    if (b >= 1024.0) return fmt::format("{:.2f} KiB", b / 1024.0);
    return fmt::format("{} B", bytes);
}

std::optional<double> best_tps(const BenchRow& r) {
    if (r.samples.empty()) return std::nullopt;
    return *std::max_element(r.samples.begin(), r.samples.end());
}

std::optional<double> prediction_error_pct(const BenchRow& r) {
    const auto best = best_tps(r);
    if (!best || *best <= 0.0 || !r.predicted_tps) return std::nullopt;
    return (*r.predicted_tps / *best - 1.0) * 100.0;
}

std::optional<double> tps_vs_llama(const BenchRow& r) {
    if (!r.tps_mean || !r.llama_tps_mean || !(*r.llama_tps_mean > 0.0)) return std::nullopt;
    return *r.tps_mean / *r.llama_tps_mean;
}

std::string human_count(uint64_t n) {
    const double v = static_cast<double>(n);
    if (v >= 1e9) return fmt::format("{:.2f} B", v / 1e9);
    if (v >= 1e6) return fmt::format("{:.2f} M", v / 1e6);
    if (v >= 1e3) return fmt::format("{:.2f} K", v / 1e3);
    return std::to_string(n);
}

const std::vector<std::string>& bench_field_names() {
    static const std::vector<std::string> names{
        "model",    "model_type", "model_size", "model_params", "device",   "backend",  "ngl",
        "threads",  "n_ubatch",   "cache_type", "test",         "n_prompt", "n_gen",    "n_depth",  "n_parallel",
        "fits",     "tps_mean",   "tps_sd",     "stream_tps",   "speedup",  "gbps",     "pct_bandwidth",
        "predicted_tps", "best_tps", "prediction_error_pct", "cpu_gbps_before", "cpu_gbps_after", "steal_pct",
        "llama_tps_mean", "llama_tps_sd", "tps_vs_llama", "samples", "llama_samples"};
    return names;
}

nlohmann::json to_json(const BenchRow& r) {
    nlohmann::json j;
    j["model"] = r.model;
    j["model_type"] = r.model_type;
    j["model_size"] = r.model_size;
    j["model_params"] = r.model_params;
    j["device"] = r.device;
    j["backend"] = r.backend;
    j["ngl"] = r.ngl;
    j["threads"] = r.threads;
    j["n_ubatch"] = r.n_ubatch;
    j["cache_type"] = r.cache_type;
    j["test"] = r.test;
    j["n_prompt"] = r.n_prompt;
    j["n_gen"] = r.n_gen;
    j["n_depth"] = r.n_depth;
    j["n_parallel"] = r.n_parallel;
    j["fits"] = r.fits;
    j["tps_mean"] = optional_json(r.tps_mean);
    j["tps_sd"] = optional_json(r.tps_sd);
    j["stream_tps"] = optional_json(r.stream_tps);
    j["speedup"] = optional_json(r.speedup);
    j["gbps"] = optional_json(r.gbps);
    j["pct_bandwidth"] = optional_json(r.pct_bandwidth);
    j["predicted_tps"] = optional_json(r.predicted_tps);
    j["best_tps"] = optional_json(best_tps(r));
    j["prediction_error_pct"] = optional_json(prediction_error_pct(r));
    j["cpu_gbps_before"] = optional_json(r.cpu_gbps_before);
    j["cpu_gbps_after"] = optional_json(r.cpu_gbps_after);
    j["steal_pct"] = optional_json(r.steal_pct);
    j["llama_tps_mean"] = optional_json(r.llama_tps_mean);
    j["llama_tps_sd"] = optional_json(r.llama_tps_sd);
    j["tps_vs_llama"] = optional_json(tps_vs_llama(r));
    j["samples"] = r.samples;
    j["llama_samples"] = r.llama_samples;
    return j;
}

std::string format_markdown(const std::vector<BenchRow>& rows, bool show_prediction) {
    const std::vector<Column> cols = markdown_columns(rows, show_prediction);
    std::vector<std::vector<std::string>> cells;
    for (const BenchRow& r : rows) {
        std::vector<std::string> line;
        for (const Column& c : cols) line.push_back(c.cell(r));
        cells.push_back(std::move(line));
    }
    std::vector<size_t> width(cols.size());
    for (size_t i = 0; i < cols.size(); ++i) {
        width[i] = std::max<size_t>(display_width(cols[i].header), 3);
        for (const auto& line : cells) width[i] = std::max(width[i], display_width(line[i]));
    }
    const auto table_line = [&](const std::vector<std::string>& line) {
        std::string out = "|";
        for (size_t i = 0; i < cols.size(); ++i) out += fmt::format(" {} |", pad(line[i], width[i], cols[i].numeric));
        return out + "\n";
    };
    std::vector<std::string> headers, rules;
    for (size_t i = 0; i < cols.size(); ++i) {
        headers.push_back(cols[i].header);
        // ---: right-aligns a column in rendered markdown.
        rules.push_back(cols[i].numeric ? fmt::format("{}:", std::string(width[i] - 1, '-')) : std::string(width[i], '-'));
    }
    std::string out = table_line(headers) + table_line(rules);
    for (const auto& line : cells) out += table_line(line);
    return out;
}

std::string format_csv(const std::vector<BenchRow>& rows) {
    const auto& names = bench_field_names();
    std::string out;
    for (size_t i = 0; i < names.size(); ++i) out += fmt::format("{}{}", i ? "," : "", names[i]);
    out += "\n";
    for (const BenchRow& r : rows) {
        const std::vector<std::string> fields{r.model,
                                              r.model_type,
                                              std::to_string(r.model_size),
                                              std::to_string(r.model_params),
                                              r.device,
                                              r.backend,
                                              std::to_string(r.ngl),
                                              std::to_string(r.threads),
                                              std::to_string(r.n_ubatch),
                                              r.cache_type,
                                              r.test,
                                              std::to_string(r.n_prompt),
                                              std::to_string(r.n_gen),
                                              std::to_string(r.n_depth),
                                              std::to_string(r.n_parallel),
                                              r.fits ? "true" : "false",
                                              csv_number(r.tps_mean),
                                              csv_number(r.tps_sd),
                                              csv_number(r.stream_tps),
                                              csv_number(r.speedup),
                                              csv_number(r.gbps),
                                              csv_number(r.pct_bandwidth),
                                              csv_number(r.predicted_tps),
                                              csv_number(best_tps(r)),
                                              csv_number(prediction_error_pct(r)),
                                              csv_number(r.cpu_gbps_before),
                                              csv_number(r.cpu_gbps_after),
                                              csv_number(r.steal_pct),
                                              csv_number(r.llama_tps_mean),
                                              csv_number(r.llama_tps_sd),
                                              csv_number(tps_vs_llama(r)),
                                              // One field each: the raw list, ';'-separated.
                                              join_samples(r.samples, ";"),
                                              join_samples(r.llama_samples, ";")};
        for (size_t i = 0; i < fields.size(); ++i) out += fmt::format("{}{}", i ? "," : "", csv_field(fields[i]));
        out += "\n";
    }
    return out;
}

std::string format_json(const std::vector<BenchRow>& rows) {
    nlohmann::json arr = nlohmann::json::array();
    for (const BenchRow& r : rows) arr.push_back(to_json(r));
    return arr.dump(2) + "\n";
}

std::string format_jsonl(const std::vector<BenchRow>& rows) {
    std::string out;
    for (const BenchRow& r : rows) out += to_json(r).dump() + "\n";
    return out;
}

std::string format_rows(const std::vector<BenchRow>& rows, OutputFormat format, bool show_prediction) {
    switch (format) {
        case OutputFormat::Markdown: return format_markdown(rows, show_prediction);
        case OutputFormat::Csv: return format_csv(rows);
        case OutputFormat::Json: return format_json(rows);
        case OutputFormat::JsonLines: return format_jsonl(rows);
    }
    return format_markdown(rows, show_prediction);
}

}  // namespace tandem::tools
