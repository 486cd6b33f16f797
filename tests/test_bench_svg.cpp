// The --plot chart: a well-formed SVG with the four lines, the capacity
// limit and labels, built from a sweep's rows; log axes that keep measured
// lines off the floor when predictions are 100x higher; error bars and
// streamed markers; a PNG rendering through rsvg-convert.
#include "tools/bench_svg.h"

#include <fmt/format.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

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

// The y coordinates of a polyline's points, or of the markers with a class.
std::vector<double> ys_of(const std::string& svg, const std::string& opening) {
    std::vector<double> ys;
    const size_t start = svg.find(opening);
    if (start == std::string::npos) return ys;
    const size_t from = svg.find("points=\"", start) + 8;
    std::istringstream pts(svg.substr(from, svg.find('"', from) - from));
    std::string xy;
    while (pts >> xy) ys.push_back(std::stod(xy.substr(xy.find(',') + 1)));
    return ys;
}

// The x of the fit-limit line.
double limit_x(const std::string& svg) {
    const std::string open = "<line class=\"fit-limit\" x1=\"";
    const size_t at = svg.find(open);
    return at == std::string::npos ? -1.0 : std::stod(svg.substr(at + open.size()));
}

// The first "<rect class=\"panel\"": the decode panel's top and bottom.
std::pair<double, double> decode_panel(const std::string& svg) {
    const size_t at = svg.find("<rect class=\"panel\"");
    const auto attr = [&](const char* name) {
        const size_t p = svg.find(std::string(name) + "=\"", at) + std::string(name).size() + 2;
        return std::stod(svg.substr(p, svg.find('"', p) - p));
    };
    return {attr("y"), attr("y") + attr("height")};
}

// A sweep like a 1B model on a small card: decode ~200 tok/s measured
// against ~3,300 predicted, prefill ~1,400 against ~20,000; -r repetitions
// (a standard deviation), and the larger splits' prompts streamed weights.
std::vector<BenchRow> realistic_rows() {
    std::vector<BenchRow> rows;
    for (int64_t ngl = 0; ngl <= 16; ngl += 2) {
        const bool fits = ngl <= 12;
        const double d = static_cast<double>(ngl);
        BenchRow pp = sweep_row(ngl, "pp512", fits ? std::optional<double>(1300.0 + 25 * d) : std::nullopt,
                                19000.0 + 150 * d);
        BenchRow tg = sweep_row(ngl, "tg128", fits ? std::optional<double>(180.0 + 3 * d) : std::nullopt, 3200.0 + 20 * d);
        if (fits) {
            pp.tps_sd = 40.0;
            tg.tps_sd = 6.0;
        }
        pp.backend = ngl >= 8 ? "split+stream" : "split";
        tg.backend = "split";
        rows.push_back(pp);
        rows.push_back(tg);
    }
    return rows;
}

TEST(BenchSvg, LogAxisKeepsMeasuredLinesOffTheFloor) {
    const SweepChart c = sweep_chart_from_rows(realistic_rows(), "llama-1b.gguf on cpu2", 12);
    EXPECT_EQ(c.points[0].sd_tg, 6.0);
    EXPECT_TRUE(c.points[4].streamed_pp);   // ngl 8
    EXPECT_FALSE(c.points[4].streamed_tg);
    const std::string svg = render_sweep_svg(c);
    const auto [top, bottom] = decode_panel(svg);
    const auto measured = ys_of(svg, "<polyline class=\"measured-tg\"");
    const auto predicted = ys_of(svg, "<polyline class=\"predicted-tg\"");
    ASSERT_EQ(measured.size(), 7u);
    ASSERT_EQ(predicted.size(), 9u);
    // On a linear axis 200 against 3,300 would sit 6% up; here the
    // measured line is well above the floor and well below the prediction.
    for (double y : measured) {
        EXPECT_LT(y, bottom - 0.15 * (bottom - top)) << "measured point within a few pixels of the floor";
        EXPECT_GT(y, top);
    }
    EXPECT_GT(*std::min_element(measured.begin(), measured.end()),
              *std::max_element(predicted.begin(), predicted.end()) + 40);
    // Labelled decades: 100 and 1k in decode, 1k and 10k in prefill.
    for (const char* label : {">100</text>", ">1k</text>", ">10k</text>", "log scale"}) {
        EXPECT_TRUE(contains(svg, label)) << label;
    }
    // Error bars on the measured points, hollow diamonds where the prompt
    // streamed (ngl 8, 10, 12 of prefill), both in the legend.
    EXPECT_EQ(count_of(svg, "class=\"sd-bar\""), 14u);
    EXPECT_EQ(count_of(svg, "class=\"measured-pp streamed\""), 3u);
    EXPECT_TRUE(contains(svg, "prompt streamed weights"));
    EXPECT_TRUE(contains(svg, "+-1 sd over the repetitions"));
    // The limit and its label lie inside the plot area, not on its border.
    const double lx = limit_x(svg);
    EXPECT_GT(lx, 90 + 5);
    EXPECT_LT(lx, 880 - 220 - 5);
    EXPECT_TRUE(contains(svg, "class=\"fit-limit-label\""));
    EXPECT_TRUE(contains(svg, "class=\"no-fit\""));
}

TEST(BenchSvg, LimitAtTheLastNglStaysInsideTheFrame) {
    const std::string svg = render_sweep_svg(sweep_chart_from_rows(sweep_rows(), "t", 5));
    EXPECT_GT(limit_x(svg), 90 + 5);
    EXPECT_LT(limit_x(svg), 880 - 220 - 5);
    EXPECT_FALSE(contains(svg, "class=\"no-fit\""));  // nothing past it
}

// The chart as a person sees it: rsvg-convert (Debian: librsvg2-bin) renders
// it to a PNG of the SVG's size. Left in the test's scratch directory
// (/tmp/tandem-tests/BenchSvg.RendersToPngWithRsvgConvert) for a look.
TEST(BenchSvg, RendersToPngWithRsvgConvert) {
    if (std::system("command -v rsvg-convert >/dev/null 2>&1") != 0) {
        GTEST_SKIP() << "rsvg-convert not found (Debian package librsvg2-bin, in scripts/install-deps.sh)";
    }
    const auto dir = testing::scratch_dir();
    const auto svg = dir / "sweep.svg", png = dir / "sweep.png";
    write_sweep_svg(svg.string(), sweep_chart_from_rows(realistic_rows(), "llama-1b-F16.gguf on cpu2, --vram 1.00 GiB", 12));
    const std::string cmd = "rsvg-convert -o " + testing::shell_quote(png.string()) + " " +
                            testing::shell_quote(svg.string()) + " 2>" + testing::shell_quote((dir / "err.txt").string());
    ASSERT_EQ(std::system(cmd.c_str()), 0) << testing::slurp(dir / "err.txt");
    ASSERT_TRUE(std::filesystem::exists(png));
    const std::string bytes = testing::slurp(png);
    // A chart of lines, text and shading: tens of KiB, not a blank page.
    EXPECT_GT(bytes.size(), 20'000u);
    EXPECT_LT(bytes.size(), 2'000'000u);
    ASSERT_GE(bytes.size(), 24u);
    EXPECT_EQ(bytes.substr(1, 3), "PNG");
    const auto be32 = [&](size_t at) {
        uint32_t v = 0;
        for (size_t i = 0; i < 4; ++i) v = v << 8 | static_cast<uint8_t>(bytes[at + i]);
        return v;
    };
    EXPECT_EQ(be32(16), 880u);  // IHDR width and height: the SVG's
    EXPECT_EQ(be32(20), 720u);
}

TEST(BenchSvg, WriteFailsWithAOneLineError) {
    const std::string e = testing::error_of([] { write_sweep_svg("/nonexistent-dir/x.svg", SweepChart{}); });
    EXPECT_TRUE(contains(e, "--plot")) << e;
    const auto dir = testing::scratch_dir();
    const auto path = (dir / "chart.svg").string();
    write_sweep_svg(path, sweep_chart_from_rows(sweep_rows(), "t", 3));
    EXPECT_EQ(testing::slurp(path).rfind("<svg", 0), 0u);
}

// Rows of -p 16 -n 4 -d 0,4096,16384 with llama-bench's beside them
// (--ref-bench), and a pg row and a row of another thread count that the
// depth chart leaves out.
std::vector<BenchRow> depth_rows() {
    std::vector<BenchRow> rows;
    for (int64_t depth : {0, 4096, 16384}) {
        const double d = static_cast<double>(depth) / 4096.0;
        for (const bool pp : {true, false}) {
            BenchRow r = sweep_row(0, pp ? "pp16" : "tg4", (pp ? 2000.0 : 50.0) / (1 + d), 0.0);
            r.n_prompt = pp ? 16 : 0;
            r.n_gen = pp ? 0 : 4;
            r.n_depth = depth;
            r.test = BenchTest{r.n_prompt, r.n_gen, depth, 0}.name();
            r.tps_sd = pp ? 30.0 : 2.0;
            r.llama_tps_mean = (pp ? 2500.0 : 40.0) / (1 + d / 2);
            r.llama_tps_sd = 1.0;
            rows.push_back(r);
        }
    }
    BenchRow pg = rows.front();
    pg.n_gen = 4;
    pg.test = "pp16+tg4";
    rows.push_back(pg);
    BenchRow other = rows.front();
    other.threads = 8;
    other.tps_mean = 1.0;
    rows.push_back(other);
    return rows;
}

TEST(BenchSvg, DepthChartFromRowsHasTandemAndLlamaByDepth) {
    const DepthChart c = depth_chart_from_rows(depth_rows(), "m.gguf");
    ASSERT_EQ(c.curves.size(), 2u);  // pp16 and tg4; not the pg test
    EXPECT_EQ(c.curves[0].test, "pp16");
    EXPECT_FALSE(c.curves[0].decode);
    EXPECT_EQ(c.curves[1].test, "tg4");
    EXPECT_TRUE(c.curves[1].decode);
    for (const DepthCurve& curve : c.curves) {
        ASSERT_EQ(curve.tandem.size(), 3u) << curve.test;  // not the 8-thread row
        ASSERT_EQ(curve.llama.size(), 3u) << curve.test;
        EXPECT_EQ(curve.tandem[2].depth, 16384);
        EXPECT_EQ(curve.llama[1].depth, 4096);
    }
    EXPECT_DOUBLE_EQ(c.curves[0].tandem[0].tps, 2000.0);
    EXPECT_DOUBLE_EQ(c.curves[0].tandem[0].sd, 30.0);
    EXPECT_DOUBLE_EQ(c.curves[1].llama[2].tps, 40.0 / 3.0);
}

TEST(BenchSvg, DepthChartDrawsBothSeriesInBothPanels) {
    const std::string svg = render_depth_svg(depth_chart_from_rows(depth_rows(), "m.gguf on the CPU <1>"));
    EXPECT_EQ(svg.rfind("<svg", 0), 0u);
    EXPECT_EQ(count_of(svg, "<text"), count_of(svg, "</text>"));
    EXPECT_EQ(svg.find("nan"), std::string::npos);
    EXPECT_TRUE(contains(svg, "&lt;1&gt;"));
    for (const char* series : {"tandem-tg4", "llama-tg4", "tandem-pp16", "llama-pp16"}) {
        EXPECT_EQ(ys_of(svg, fmt::format("<polyline class=\"{}\"", series)).size(), 3u) << series;
    }
    for (const char* label : {"Tandem tg4", "llama.cpp tg4", "Tandem pp16", "llama.cpp pp16",
                              "tokens already in the KV cache (depth, -d)", "+-1 sd over the repetitions"}) {
        EXPECT_TRUE(contains(svg, label)) << label;
    }
    // Tandem's dots and llama.cpp's hollow squares (3 each, one more on the
    // legend's swatch), with sd bars on all of them.
    EXPECT_EQ(count_of(svg, "<circle class=\"tandem-tg4\""), 3u);
    EXPECT_EQ(count_of(svg, "<rect class=\"llama-tg4\""), 3u);
    EXPECT_EQ(count_of(svg, "class=\"sd-bar\""), 12u);
    // Decode on top: Tandem 50 t/s at d0 over llama.cpp's 40; the ratio at
    // the first and last depth heads each panel.
    EXPECT_TRUE(contains(svg, "Tandem / llama.cpp (tg4): 1.25x at d0, 0.75x at d16384")) << svg;
    EXPECT_TRUE(contains(svg, "Tandem / llama.cpp (pp16): 0.80x at d0"));
    const auto [top, bottom] = decode_panel(svg);
    for (double y : ys_of(svg, "<polyline class=\"llama-tg4\"")) {
        EXPECT_GT(y, top);
        EXPECT_LT(y, bottom);
    }
    // Tandem's tg4 falls with depth: each point lower (a larger y) than the last.
    const auto tg = ys_of(svg, "<polyline class=\"tandem-tg4\"");
    EXPECT_LT(tg[0], tg[1]);
    EXPECT_LT(tg[1], tg[2]);
    // Without llama.cpp's rows: Tandem's lines only, no ratio.
    std::vector<BenchRow> alone = depth_rows();
    for (BenchRow& r : alone) r.llama_tps_mean.reset();
    const std::string plain = render_depth_svg(depth_chart_from_rows(alone, "t"));
    EXPECT_TRUE(contains(plain, "tandem-tg4"));
    EXPECT_FALSE(contains(plain, "llama-"));
    EXPECT_FALSE(contains(plain, "Tandem / llama.cpp"));
    EXPECT_EQ(render_depth_svg(DepthChart{}).rfind("<svg", 0), 0u);
}

}  // namespace
}  // namespace tandem::tools
