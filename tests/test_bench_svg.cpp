// The --plot chart: a well-formed SVG with the four lines, the capacity
// limit and labels, built from a sweep's rows.
#include "tools/bench_svg.h"

#include <fmt/format.h>

#include <gtest/gtest.h>

#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace tandem::tools {
namespace {

using testing::contains;

BenchRow sweep_row(int64_t ngl, const std::string& test, std::optional<double> measured, double predicted) {
    BenchRow r;
    r.model = "m.gguf";
    r.threads = 2;
    r.n_ubatch = 512;
    r.cache_type = "f16";
    r.ngl = ngl;
    r.test = test;
    r.n_prompt = test.rfind("pp", 0) == 0 ? 16 : 0;
    r.n_gen = r.n_prompt == 0 ? 8 : 0;
    r.fits = measured.has_value();
    r.tps_mean = measured;
    r.predicted_tps = predicted;
    return r;
}

std::vector<BenchRow> sweep_rows() {
    std::vector<BenchRow> rows;
    for (int64_t ngl = 0; ngl <= 5; ++ngl) {
        const bool fits = ngl <= 3;
        rows.push_back(sweep_row(ngl, "pp16", fits ? std::optional<double>(1000.0 + ngl) : std::nullopt, 2000.0 * (ngl + 1)));
        rows.push_back(sweep_row(ngl, "tg8", fits ? std::optional<double>(100.0 - ngl) : std::nullopt, 120.0 + ngl));
    }
    return rows;
}

size_t count_of(const std::string& s, const std::string& needle) {
    size_t n = 0;
    for (size_t pos = s.find(needle); pos != std::string::npos; pos = s.find(needle, pos + 1)) ++n;
    return n;
}

TEST(BenchSvg, ChartFromRowsSeparatesMeasuredAndPredicted) {
    const SweepChart c = sweep_chart_from_rows(sweep_rows(), "m.gguf on cpu2", 3);
    EXPECT_EQ(c.tg_test, "tg8");
    EXPECT_EQ(c.pp_test, "pp16");
    ASSERT_EQ(c.points.size(), 6u);
    EXPECT_EQ(c.points[0].measured_tg, 100.0);
    EXPECT_EQ(c.points[3].measured_pp, 1003.0);
    EXPECT_FALSE(c.points[4].measured_tg.has_value());  // did not fit: predicted only
    EXPECT_EQ(c.points[4].predicted_tg, 124.0);
    EXPECT_EQ(c.points[5].predicted_pp, 12000.0);
}

TEST(BenchSvg, RendersWellFormedSvgWithLinesLimitAndLabels) {
    const std::string svg = render_sweep_svg(sweep_chart_from_rows(sweep_rows(), "m.gguf on cpu2 <2 MiB>", 3));
    EXPECT_EQ(svg.rfind("<svg", 0), 0u);
    EXPECT_TRUE(contains(svg, "</svg>"));
    for (const char* line : {"measured-tg", "predicted-tg", "measured-pp", "predicted-pp"}) {
        EXPECT_TRUE(contains(svg, fmt::format("<polyline class=\"{}\"", line))) << line;
    }
    EXPECT_TRUE(contains(svg, "class=\"fit-limit\""));
    EXPECT_TRUE(contains(svg, "stroke-dasharray"));
    EXPECT_TRUE(contains(svg, "layers on the accelerator (ngl)"));
    EXPECT_TRUE(contains(svg, "tok/s"));
    EXPECT_TRUE(contains(svg, "&lt;2 MiB&gt;"));  // the title is escaped
    // Every element that opens also closes: the tags balance.
    EXPECT_EQ(count_of(svg, "<text"), count_of(svg, "</text>"));
    EXPECT_EQ(count_of(svg, "<svg"), count_of(svg, "</svg>"));
    EXPECT_EQ(svg.find("nan"), std::string::npos);
    // Measured lines stop where the split stops fitting: 4 points, not 6.
    const size_t start = svg.find("<polyline class=\"measured-tg\" points=\"");
    const size_t end = svg.find('"', svg.find("points=\"", start) + 8);
    const std::string pts = svg.substr(svg.find("points=\"", start) + 8, end - svg.find("points=\"", start) - 8);
    EXPECT_EQ(count_of(pts, ","), 4u) << pts;
}

TEST(BenchSvg, NoLimitLineWithoutACapacityAndEmptySweepsStillRender) {
    const std::string svg = render_sweep_svg(sweep_chart_from_rows(sweep_rows(), "t", std::nullopt));
    EXPECT_FALSE(contains(svg, "fit-limit"));
    const std::string empty = render_sweep_svg(SweepChart{});
    EXPECT_EQ(empty.rfind("<svg", 0), 0u);
    EXPECT_TRUE(contains(empty, "</svg>"));
}

TEST(BenchSvg, WriteFailsWithAOneLineError) {
    const std::string e = testing::error_of([] { write_sweep_svg("/nonexistent-dir/x.svg", SweepChart{}); });
    EXPECT_TRUE(contains(e, "--plot")) << e;
    const auto dir = testing::scratch_dir();
    const auto path = (dir / "chart.svg").string();
    write_sweep_svg(path, sweep_chart_from_rows(sweep_rows(), "t", 3));
    EXPECT_EQ(testing::slurp(path).rfind("<svg", 0), 0u);
}

}  // namespace
}  // namespace tandem::tools
