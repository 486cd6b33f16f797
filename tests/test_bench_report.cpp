// `tandem bench` output: markdown, csv, json and jsonl of the same rows
// must carry the same values, and the statistics must be the textbook ones.
#include "tools/bench_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/test_paths.h"

namespace tandem::tools {
namespace {

using testing::contains;

std::vector<BenchRow> sample_rows() {
    BenchRow measured;
    measured.model = "tiny, \"quoted\".gguf";  // csv must quote this one
    measured.model_type = "Q4_K_M";
    measured.model_size = 8620000;
    measured.model_params = 11340000;
    measured.device = "cpu2";
    measured.backend = "split";
    measured.ngl = 2;
    measured.threads = 2;
    measured.n_ubatch = 512;
    measured.cache_type = "f16";
    measured.test = "tg8";
    measured.n_gen = 8;
    measured.samples = {100.5, 110.25, 99.0};
    measured.tps_mean = mean_of(measured.samples);
    measured.tps_sd = sample_sd_of(measured.samples);
    measured.gbps = 0.123456789;
    measured.pct_bandwidth = 45.5;
    measured.predicted_tps = 150.0;

    BenchRow not_fitting = measured;
    not_fitting.model = "tiny.gguf";
    not_fitting.backend = "-";
    not_fitting.ngl = 5;
    not_fitting.test = "pp16";
    not_fitting.n_prompt = 16;
    not_fitting.n_gen = 0;
    not_fitting.fits = false;
    not_fitting.samples.clear();
    not_fitting.tps_mean.reset();
    not_fitting.tps_sd.reset();
    not_fitting.gbps.reset();
    not_fitting.pct_bandwidth.reset();
    return {measured, not_fitting};
}

// RFC 4180 fields of one line: enough for the csv format_csv writes.
std::vector<std::string> csv_split(const std::string& line) {
    std::vector<std::string> out(1);
    bool quoted = false;
    for (size_t i = 0; i < line.size(); ++i) {
        const char c = line[i];
        if (quoted) {
            if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
                out.back() += '"';
                ++i;
            } else if (c == '"') {
                quoted = false;
            } else {
                out.back() += c;
            }
        } else if (c == '"') {
            quoted = true;
        } else if (c == ',') {
            out.emplace_back();
        } else {
            out.back() += c;
        }
    }
    return out;
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}

// The csv text of a json value as format_csv writes it.
std::string as_csv_text(const nlohmann::json& v) {
    if (v.is_null()) return "";
    if (v.is_string()) return v.get<std::string>();
    if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
    if (v.is_array()) {
        std::string s;
        for (size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{}", i ? ";" : "", v[i].get<double>());
        return s;
    }
    return v.dump();
}

TEST(BenchReport, MeanAndSampleStandardDeviation) {
    EXPECT_DOUBLE_EQ(mean_of({2, 4, 6}), 4.0);
    EXPECT_DOUBLE_EQ(sample_sd_of({2, 4, 6}), 2.0);  // n - 1 in the denominator
    EXPECT_DOUBLE_EQ(sample_sd_of({5}), 0.0);
    EXPECT_DOUBLE_EQ(mean_of({}), 0.0);
    EXPECT_DOUBLE_EQ(median_of({3, 1, 2}), 2.0);
    EXPECT_DOUBLE_EQ(median_of({4, 1, 3, 2}), 2.5);
    EXPECT_DOUBLE_EQ(median_of({}), 0.0);
}

TEST(BenchReport, JsonCsvAndJsonlAgreeFieldByField) {
    const auto rows = sample_rows();
    const auto json = nlohmann::json::parse(format_json(rows));
    ASSERT_TRUE(json.is_array());
    ASSERT_EQ(json.size(), rows.size());

    const auto csv = lines_of(format_csv(rows));
    ASSERT_EQ(csv.size(), rows.size() + 1);
    const auto header = csv_split(csv[0]);
    EXPECT_EQ(header, bench_field_names());
    for (const char* required : {"model", "model_type", "model_size", "ngl", "threads", "n_ubatch", "cache_type",
                                 "test", "n_prompt", "n_gen", "tps_mean", "tps_sd", "gbps", "pct_bandwidth",
                                 "backend", "samples"}) {
        EXPECT_TRUE(json[0].contains(required)) << required;
    }
    for (size_t r = 0; r < rows.size(); ++r) {
        const auto fields = csv_split(csv[r + 1]);
        ASSERT_EQ(fields.size(), header.size()) << csv[r + 1];
        for (size_t f = 0; f < header.size(); ++f) {
            const nlohmann::json& v = json[r].at(header[f]);
            if (v.is_number_float()) {
                ASSERT_FALSE(fields[f].empty()) << header[f];
                EXPECT_DOUBLE_EQ(std::stod(fields[f]), v.get<double>()) << header[f];
            } else {
                EXPECT_EQ(fields[f], as_csv_text(v)) << header[f];
            }
        }
    }

    const auto jsonl = lines_of(format_jsonl(rows));
    ASSERT_EQ(jsonl.size(), rows.size());
    for (size_t r = 0; r < rows.size(); ++r) EXPECT_EQ(nlohmann::json::parse(jsonl[r]), json[r]);

    EXPECT_EQ(json[0]["samples"].size(), 3u);
    EXPECT_TRUE(json[1]["tps_mean"].is_null());
    EXPECT_FALSE(json[1]["fits"].get<bool>());
    EXPECT_DOUBLE_EQ(json[1]["predicted_tps"].get<double>(), 150.0);
}

TEST(BenchReport, MarkdownIsATableWithTheSameRows) {
    const auto rows = sample_rows();
    const auto md = lines_of(format_markdown(rows, true));
    ASSERT_EQ(md.size(), rows.size() + 2);
    for (const auto& line : md) {
        EXPECT_EQ(line.front(), '|') << line;
        EXPECT_EQ(line.back(), '|') << line;
    }
    EXPECT_TRUE(contains(md[0], "t/s"));
    EXPECT_TRUE(contains(md[0], "pred t/s"));
    EXPECT_TRUE(contains(md[0], "% bw"));
    EXPECT_TRUE(contains(md[1], "---:"));  // numbers right-aligned, as llama-bench
    EXPECT_TRUE(contains(md[2], fmt::format("{:.2f} ± {:.2f}", *rows[0].tps_mean, *rows[0].tps_sd)));
    EXPECT_TRUE(contains(md[2], "8.22 MiB"));
    EXPECT_TRUE(contains(md[2], "11.34 M"));
    EXPECT_TRUE(contains(md[3], "does not fit"));
    // Every line has the same number of columns.
    const auto bars = [](const std::string& s) { return std::count(s.begin(), s.end(), '|'); };
    for (const auto& line : md) EXPECT_EQ(bars(line), bars(md[0])) << line;
    // Without a sweep, no prediction column; defaults (f16, 512) stay hidden.
    const std::string plain = format_markdown(rows, false);
    EXPECT_FALSE(contains(plain, "pred t/s"));
    EXPECT_FALSE(contains(plain, "n_ubatch"));
    EXPECT_FALSE(contains(plain, "cache"));
}

// Beside the prediction: the fastest repetition (a busy host only slows
// runs) and the prediction's error against it.
TEST(BenchReport, PredictionIsHeldAgainstTheFastestRun) {
    const auto rows = sample_rows();
    ASSERT_DOUBLE_EQ(*best_tps(rows[0]), 110.25);  // not the mean (103.25), not the first sample
    EXPECT_NEAR(*prediction_error_pct(rows[0]), (150.0 / 110.25 - 1.0) * 100.0, 1e-9);
    EXPECT_FALSE(best_tps(rows[1]).has_value());  // did not run: no error either
    EXPECT_FALSE(prediction_error_pct(rows[1]).has_value());
    BenchRow slower = rows[0];
    slower.predicted_tps = 99.225;  // 10% under the best run
    EXPECT_NEAR(*prediction_error_pct(slower), -10.0, 1e-9);

    const auto md = lines_of(format_markdown(rows, true));
    EXPECT_TRUE(contains(md[0], "best t/s"));
    EXPECT_TRUE(contains(md[0], "pred err"));
    EXPECT_TRUE(contains(md[2], "110.25"));
    EXPECT_TRUE(contains(md[2], "+36.1%"));
    const auto json = nlohmann::json::parse(format_json(rows));
    EXPECT_DOUBLE_EQ(json[0]["best_tps"].get<double>(), 110.25);
    EXPECT_TRUE(json[1]["prediction_error_pct"].is_null());
    EXPECT_FALSE(contains(format_markdown(rows, false), "best t/s"));
}

// --parallel rows: the per-stream and speed-up columns appear with them,
// and only then; csv and json carry the fields on every row.
TEST(BenchReport, ParallelRowsShowPerStreamSpeedAndSpeedUp) {
    std::vector<BenchRow> rows = sample_rows();
    BenchRow four = rows[0];
    four.test = "tg8 x4 @ p32";
    four.n_prompt = 32;
    four.n_parallel = 4;
    four.tps_mean = 400.0;
    four.stream_tps = 100.0;
    four.speedup = 3.25;
    rows.push_back(four);
    const std::string md = format_markdown(rows, false);
    EXPECT_TRUE(contains(md, "t/s/stream")) << md;
    EXPECT_TRUE(contains(md, "speed-up")) << md;
    EXPECT_TRUE(contains(md, "3.25x")) << md;
    EXPECT_TRUE(contains(md, "tg8 x4 @ p32")) << md;
    EXPECT_FALSE(contains(format_markdown(sample_rows(), false), "t/s/stream"));
    const auto j = nlohmann::json::parse(format_json(rows));
    EXPECT_EQ(j[2]["n_parallel"], 4);
    EXPECT_DOUBLE_EQ(j[2]["stream_tps"].get<double>(), 100.0);
    EXPECT_DOUBLE_EQ(j[2]["speedup"].get<double>(), 3.25);
    EXPECT_EQ(j[0]["n_parallel"], 0);
    EXPECT_TRUE(j[0]["speedup"].is_null());
    const auto csv = lines_of(format_csv(rows));
    ASSERT_EQ(csv.size(), 4u);
    const auto header = csv_split(csv[0]);
    const auto fields = csv_split(csv[3]);
    ASSERT_EQ(fields.size(), header.size());
    const auto at = [&](const std::string& name) {
        return fields[static_cast<size_t>(std::find(header.begin(), header.end(), name) - header.begin())];
    };
    EXPECT_EQ(at("n_parallel"), "4");
    EXPECT_EQ(at("stream_tps"), "100");
    EXPECT_EQ(at("speedup"), "3.25");
}

// --ref-bench: llama.cpp's t/s and Tandem's ratio to it appear in markdown
// with them, and only then; csv and json carry the fields on every row.
TEST(BenchReport, LlamaBenchRowsBesideTandems) {
    std::vector<BenchRow> rows = sample_rows();
    rows[0].llama_samples = {80.0, 82.0};
    rows[0].llama_tps_mean = 81.0;
    rows[0].llama_tps_sd = 1.41;
    const double ratio = *rows[0].tps_mean / 81.0;
    const auto md = lines_of(format_markdown(rows, false));
    ASSERT_EQ(md.size(), 4u);
    EXPECT_TRUE(contains(md[0], "llama.cpp t/s")) << md[0];
    EXPECT_TRUE(contains(md[0], "tandem/llama")) << md[0];
    EXPECT_TRUE(contains(md[2], "81.00 ± 1.41")) << md[2];
    EXPECT_TRUE(contains(md[2], fmt::format("{:.2f}x", ratio))) << md[2];
    const auto bars = [](const std::string& line) { return std::count(line.begin(), line.end(), '|'); };
    EXPECT_EQ(bars(md[3]), bars(md[0]));  // the row without llama.cpp's has "-" cells
    EXPECT_FALSE(contains(format_markdown(sample_rows(), false), "llama.cpp"));

    const auto j = nlohmann::json::parse(format_json(rows));
    EXPECT_DOUBLE_EQ(j[0]["llama_tps_mean"].get<double>(), 81.0);
    EXPECT_DOUBLE_EQ(j[0]["llama_tps_sd"].get<double>(), 1.41);
    EXPECT_DOUBLE_EQ(j[0]["tps_vs_llama"].get<double>(), ratio);
    EXPECT_EQ(j[0]["llama_samples"].size(), 2u);
    EXPECT_TRUE(j[1]["llama_tps_mean"].is_null());
    EXPECT_TRUE(j[1]["tps_vs_llama"].is_null());
    const auto csv = lines_of(format_csv(rows));
    const auto header = csv_split(csv[0]);
    const auto fields = csv_split(csv[1]);
    ASSERT_EQ(fields.size(), header.size());
    const auto at = [&](const std::string& name) {
        const auto it = std::find(header.begin(), header.end(), name);
        return it == header.end() ? std::string("<no column>") : fields[static_cast<size_t>(it - header.begin())];
    };
    EXPECT_EQ(at("llama_tps_mean"), "81");
    EXPECT_EQ(at("llama_samples"), "80;82");
    EXPECT_DOUBLE_EQ(std::stod(at("tps_vs_llama")), ratio);
}

TEST(BenchReport, HumanSizes) {
    EXPECT_EQ(human_size(512), "512 B");
    EXPECT_EQ(human_size(3ull << 30), "3.00 GiB");
    EXPECT_EQ(human_count(7'240'000'000ull), "7.24 B");
    EXPECT_EQ(human_count(999), "999");
}

}  // namespace
}  // namespace tandem::tools
