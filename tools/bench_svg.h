// The chart `tandem bench --sweep-ngl --plot FILE.svg` writes: tok/s against
// the number of layers on the accelerator, measured beside predicted, decode
// in the top panel and prefill in the bottom one (their scales differ by
// orders of magnitude, so one axis would flatten decode). Each panel's y axis
// is logarithmic with labelled decades, so a measured line far below its
// prediction (200 against 20,000 tok/s) still has its own height. Measured
// points carry +-1 standard deviation bars over the -r repetitions; points
// whose prompt streamed weights to the accelerator are hollow diamonds; the
// largest ngl that fits the capacity is a dashed line inside the plot area,
// with the splits past it shaded. Each panel's heading line ends with the
// worst gap between predicted and measured over the splits that ran
// (class "worst-error"). Plain SVG text: no plotting library, and any
// browser shows it.
//
// Without --sweep-ngl, `--plot` with two or more depths (-d 0,4096,16384)
// draws tok/s against depth instead, in the same two panels and axes:
// each tgN (top) and ppN (bottom) test as a line with +-1 sd bars, and with
// --ref-bench llama.cpp's line for the same test beside it (dashed, hollow
// squares, the same colour); each panel's heading line ends with Tandem's
// ratio to llama.cpp at the first and the last depth (class "ratio").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tools/bench_report.h"

namespace tandem::tools {

struct SweepPoint {
    int64_t ngl = 0;
    std::optional<double> measured_tg, predicted_tg;
    std::optional<double> measured_pp, predicted_pp;
    std::optional<double> sd_tg, sd_pp;             // of the measured tok/s over the repetitions
    bool streamed_tg = false, streamed_pp = false;  // the row's backend says "+stream"
};

struct SweepChart {
    std::string title;    // e.g. "tiny-llama-Q4_K_M.gguf on cpu2, --vram 2.00 MiB"
    std::string tg_test;  // "tg128": the decode test plotted; "" if none ran
    std::string pp_test;  // "pp512": the prefill test plotted; "" if none ran
    std::vector<SweepPoint> points;  // ascending ngl
    // The largest ngl that fits the capacity: a dashed vertical line. nullopt
    // when the capacity is unlimited.
    std::optional<int64_t> fit_limit;
};

// Picks from a sweep's rows the first decode-only and first prefill-only
// test, at the first threads / micro-batch / cache type seen, and lays
// measured and predicted tok/s out by ngl.
SweepChart sweep_chart_from_rows(const std::vector<BenchRow>& rows, std::string title,
                                 std::optional<int64_t> fit_limit);

// The whole document, starting with "<svg".
std::string render_sweep_svg(const SweepChart& chart);

// Writes render_sweep_svg(chart) to `path`; throws tandem::Error when the
// file cannot be written.
void write_sweep_svg(const std::string& path, const SweepChart& chart);

struct DepthPoint {
    int64_t depth = 0;
    double tps = 0;  // the mean over the repetitions
    double sd = 0;   // their standard deviation
};

// One test (tg128, pp512) across the depths: Tandem's points and, with
// --ref-bench, llama.cpp's.
struct DepthCurve {
    std::string test;     // the test without its depth: "tg128"
    bool decode = false;  // a tgN test (top panel); else a ppN test (bottom)
    std::vector<DepthPoint> tandem, llama;  // ascending depth
};

struct DepthChart {
    std::string title;
    std::vector<DepthCurve> curves;  // in the order the tests ran
};

// Every ppN and tgN test's rows at the first row's model, threads,
// micro-batch, cache type and ngl, by depth; pgP,N tests and rows without a
// measurement are left out.
DepthChart depth_chart_from_rows(const std::vector<BenchRow>& rows, std::string title);

std::string render_depth_svg(const DepthChart& chart);

// Writes render_depth_svg(chart) to `path`; throws tandem::Error as
// write_sweep_svg does.
void write_depth_svg(const std::string& path, const DepthChart& chart);

}  // namespace tandem::tools
