#include "tools/bench_svg.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "runtime/common/atomic_file.h"
#include "runtime/common/error.h"

namespace tandem::tools {
namespace {

// Canvas and panel geometry, in SVG user units (pixels).
constexpr double kWidth = 880, kHeight = 720;
constexpr double kLeft = 90, kRight = 220;  // the right margin holds the legends
constexpr double kPanelHeight = 250;
constexpr double kTopPanelY = 70, kBottomPanelY = 400;
constexpr const char* kDecodeColour = "#1f77b4";
constexpr const char* kPrefillColour = "#d62728";
constexpr const char* kLimitColour = "#555555";

std::string xml_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            default: out += c;
        }
    }
    return out;
}

// 1, 2 or 5 times a power of ten, at least `raw`: ticks people can read.
double nice_step(double raw) {
    if (!(raw > 0)) return 1.0;
    const double p = std::pow(10.0, std::floor(std::log10(raw)));
    for (double m : {1.0, 2.0, 5.0, 10.0}) {
        if (m * p >= raw) return m * p;
    }
    return 10.0 * p;
}

// The largest 1, 2 or 5 times a power of ten at most `v` (v > 0).
double nice_floor(double v) {
    const double p = std::pow(10.0, std::floor(std::log10(v)));
    for (double m : {5.0, 2.0, 1.0}) {
        if (m * p <= v * (1 + 1e-9)) return m * p;
    }
    return p;
}

std::string tick_label(double v) {
    if (v >= 1e6) return fmt::format("{:g}M", v / 1e6);
    if (v >= 1e3) return fmt::format("{:g}k", v / 1e3);
    return fmt::format("{:g}", v);
}

struct Axis {
    double lo = 0, hi = 1;
    double to_px(double v, double px_lo, double px_hi) const { return px_lo + (v - lo) / (hi - lo) * (px_hi - px_lo); }
};

// A logarithmic tok/s axis from lo to hi (both 1, 2 or 5 times a power of ten).
struct LogAxis {
    double lo = 1, hi = 10;
    double to_px(double v, double px_lo, double px_hi) const {
        const double f = std::log10(std::max(v, lo) / lo) / std::log10(hi / lo);
        return px_lo + std::min(f, 1.0) * (px_hi - px_lo);
    }
};

// How a series marks its points: none (a prediction), dots (Tandem's
// measurements) or hollow squares (llama.cpp's, beside Tandem's).
enum class Marker { None, Dot, Square };

struct Series {
    std::string css_class;  // names the line in the document, e.g. "measured-tg"
    std::string label;
    std::string colour;
    bool dashed = false;
    Marker marker = Marker::Dot;
    struct Point {
        double x;              // ngl or depth
        double v;
        double sd = 0;         // error bar half-height
        bool streamed = false; // hollow diamond instead of the series' marker
    };
    std::vector<Point> points;
};

// Room of a quarter of a tick above and below the values, at 1-2-5 steps.
LogAxis log_axis_for(const std::vector<Series>& series) {
    double lo = 0, hi = 0;
    for (const Series& s : series) {
        for (const Series::Point& p : s.points) {
            const double low = p.v - p.sd > 0 ? p.v - p.sd : p.v;
            if (!(p.v > 0)) continue;
            lo = lo > 0 ? std::min(lo, low) : low;
            hi = std::max(hi, p.v + p.sd);
        }
    }
    if (!(lo > 0)) return {};
    LogAxis a{nice_floor(lo / 1.2), 0};
    a.hi = nice_step(hi * 1.2);
    if (a.hi < a.lo * 10) a.hi = nice_step(a.lo * 10 * (1 - 1e-9));  // at least one decade
    return a;
}

// Ticks: every decade labelled; 2x and 5x labelled too while the axis spans
// at most three decades, else grid lines only.
void draw_log_ticks(std::string& svg, const LogAxis& y, double top, double bottom, double left, double right) {
    const bool label_minor = y.hi / y.lo <= 1000 * (1 + 1e-9);
    for (double decade = std::pow(10.0, std::floor(std::log10(y.lo))); decade <= y.hi * (1 + 1e-9); decade *= 10) {
        for (double m : {1.0, 2.0, 5.0}) {
            const double v = decade * m;
            if (v < y.lo * (1 - 1e-9) || v > y.hi * (1 + 1e-9)) continue;
            const double py = y.to_px(v, bottom, top);
            const bool major = m == 1.0;
            svg += fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="{}"/>)" "\n", left, py, right,
                               py, major ? "#c8c8c8" : "#ececec");
            if (major || label_minor) {
                svg += fmt::format(R"(<text x="{}" y="{:.1f}" font-size="{}" text-anchor="end"{}>{}</text>)" "\n",
                                   left - 6, py + 4, major ? 12 : 10, major ? R"( font-weight="bold")" : "",
                                   tick_label(v));
            }
        }
    }
}

// One marker centred on (px, py): the series' own, or a hollow diamond
// where the prompt streamed weights.
std::string marker_svg(const std::string& css_class, Marker marker, bool streamed, double px, double py,
                       const std::string& colour) {
    if (streamed) {
        return fmt::format(
            R"(<path class="{0} streamed" d="M{1:.1f},{2:.1f}l5,5l-5,5l-5,-5z" fill="#fff" stroke="{3}" stroke-width="1.8"/>)"
            "\n",
            css_class, px, py - 5, colour);
    }
    if (marker == Marker::Square) {
        return fmt::format(
            R"(<rect class="{}" x="{:.1f}" y="{:.1f}" width="7" height="7" fill="#fff" stroke="{}" stroke-width="1.8"/>)"
            "\n",
            css_class, px - 3.5, py - 3.5, colour);
    }
    return fmt::format(R"(<circle class="{}" cx="{:.1f}" cy="{:.1f}" r="3.5" fill="{}"/>)" "\n", css_class, px, py,
                       colour);
}

// The measured points: the series' marker with a +-sd bar (capped) behind it.
void draw_markers(std::string& svg, const Series& s, const Axis& x, const LogAxis& y, double top, double bottom) {
    for (const Series::Point& p : s.points) {
        const double px = x.to_px(p.x, kLeft, kWidth - kRight);
        const double py = y.to_px(p.v, bottom, top);
        if (p.sd > 0) {
            const double y0 = y.to_px(p.v - p.sd > 0 ? p.v - p.sd : y.lo, bottom, top);
            const double y1 = y.to_px(p.v + p.sd, bottom, top);
            svg += fmt::format(
                R"(<path class="sd-bar" d="M{0:.1f},{1:.1f}V{2:.1f}M{3:.1f},{1:.1f}H{4:.1f}M{3:.1f},{2:.1f}H{4:.1f}" stroke="{5}" stroke-width="1.2" fill="none"/>)"
                "\n",
                px, y0, y1, px - 4, px + 4, s.colour);
        }
        svg += marker_svg(s.css_class, s.marker, p.streamed, px, py, s.colour);
    }
}

// The largest ngl that fits, and whether the sweep went past it.
struct FitLimit {
    std::optional<int64_t> ngl;
    bool swept_past = false;
};

// The capacity limit inside a panel: the splits past it shaded, a dashed
// line at it, and in the top panel its label, on the side with room.
void draw_fit_limit(std::string& svg, const Axis& x, const FitLimit& limit, double top, bool label) {
    if (!limit.ngl) return;
    const double left = kLeft, right = kWidth - kRight, bottom = top + kPanelHeight;
    const double lx = x.to_px(std::clamp(static_cast<double>(*limit.ngl), x.lo, x.hi), left, right);
    if (limit.swept_past) {
        svg += fmt::format(R"(<rect class="no-fit" x="{:.1f}" y="{}" width="{:.1f}" height="{}" fill="#000" fill-opacity="0.06"/>)"
                           "\n",
                           lx, top, right - lx, kPanelHeight);
    }
    svg += fmt::format(
        R"(<line class="fit-limit" x1="{0:.1f}" y1="{1}" x2="{0:.1f}" y2="{2}" stroke="{3}" stroke-width="1.5" stroke-dasharray="4,4"/>)"
        "\n",
        lx, top, bottom, kLimitColour);
    if (!label) return;
    const bool on_left = lx - left > right - lx;
    svg += fmt::format(
        R"(<text class="fit-limit-label" x="{:.1f}" y="{}" font-size="11" fill="{}" text-anchor="{}" stroke="#fff" stroke-width="3" paint-order="stroke">largest ngl that fits: {}</text>)"
        "\n",
        on_left ? lx - 5 : lx + 5, top + 14, kLimitColour, on_left ? "end" : "start", *limit.ngl);
}

// The largest gap between the predicted and the measured series (the
// first two of a panel) at a split both have, as "predicted within +-X% of
// measured (worst: +Y% at ngl N)"; "" when no split has both.
std::string worst_error_text(const std::vector<Series>& series) {
    if (series.size() < 2) return "";
    std::optional<std::pair<double, double>> worst;
    for (const Series::Point& m : series[0].points) {
        for (const Series::Point& p : series[1].points) {
            if (p.x != m.x || !(m.v > 0)) continue;
            const double err = p.v / m.v - 1.0;
            if (!worst || std::abs(err) > std::abs(worst->first)) worst = std::make_pair(err, m.x);
        }
    }
    if (!worst) return "";
    return fmt::format("predicted vs measured: worst {:+.0f}% (ngl {})", 100.0 * worst->first, worst->second);
}

// A panel's words and lines; `note` is written at the heading line's right
// end with class `note_class` ("" for none).
struct Panel {
    double top = 0;
    std::string heading, note, note_class, y_label;
    std::vector<Series> series;
};

// The x axis: its range and at most about `max_ticks` labelled ticks at
// whole 1-2-5 steps (ngl and depths are whole numbers).
struct XAxis {
    Axis range;
    int max_ticks = 16;
    std::string label;
};

void draw_x_ticks(std::string& svg, const XAxis& xa, double bottom) {
    const Axis& x = xa.range;
    const double left = kLeft, right = kWidth - kRight;
    const int64_t x_first = static_cast<int64_t>(std::ceil(x.lo)), x_last = static_cast<int64_t>(std::floor(x.hi));
    const int64_t x_step =
        std::max<int64_t>(1, static_cast<int64_t>(nice_step(static_cast<double>(x_last - x_first) / xa.max_ticks)));
    for (int64_t v = (x_first + x_step - 1) / x_step * x_step; v <= x_last; v += x_step) {
        const double px = x.to_px(static_cast<double>(v), left, right);
        svg += fmt::format(R"(<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="#000"/>)" "\n", px, bottom, px,
                           bottom + 5);
        svg += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="11" text-anchor="middle">{}</text>)" "\n", px,
                           bottom + 18, tick_label(static_cast<double>(v)));
    }
}

// One panel: frame, log y ticks and grid, x ticks, the series and a legend.
void draw_panel(std::string& svg, const Panel& panel, const XAxis& xa, const FitLimit& limit, bool limit_label) {
    const double top = panel.top, bottom = top + kPanelHeight, left = kLeft, right = kWidth - kRight;
    const Axis& x = xa.range;
    const std::vector<Series>& series = panel.series;
    const LogAxis y = log_axis_for(series);

    svg += fmt::format(R"(<text x="{}" y="{}" font-size="14" font-weight="bold">{}</text>)" "\n", left, top - 10,
                       xml_escape(panel.heading));
    if (!panel.note.empty()) {
        svg += fmt::format(R"(<text class="{}" x="{}" y="{}" font-size="12" text-anchor="end">{}</text>)" "\n",
                           panel.note_class, right, top - 10, xml_escape(panel.note));
    }
    draw_log_ticks(svg, y, top, bottom, left, right);
    draw_x_ticks(svg, xa, bottom);
    draw_fit_limit(svg, x, limit, top, limit_label);
    svg += fmt::format(R"(<rect class="panel" x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#000"/>)" "\n",
                       left, top, right - left, kPanelHeight);
    svg += fmt::format(
        R"svg(<text x="{}" y="{}" font-size="12" text-anchor="middle" transform="rotate(-90 {} {})">{}</text>)svg" "\n",
        left - 58, top + kPanelHeight / 2, left - 58, top + kPanelHeight / 2, xml_escape(panel.y_label + ", log scale"));

    double legend_y = top + 14;
    const auto legend = [&](const std::string& swatch, const std::string& text) {
        svg += swatch;
        svg += fmt::format(R"(<text x="{}" y="{}" font-size="12">{}</text>)" "\n", right + 46, legend_y,
                           xml_escape(text));
        legend_y += 18;
    };
    bool any_sd = false, any_streamed = false;
    for (const Series& s : series) {
        const std::string dash = s.dashed ? R"( stroke-dasharray="6,4")" : "";
        if (!s.points.empty()) {
            std::string pts;
            for (const Series::Point& p : s.points) {
                pts += fmt::format("{:.1f},{:.1f} ", x.to_px(p.x, left, right), y.to_px(p.v, bottom, top));
                any_sd = any_sd || p.sd > 0;
                any_streamed = any_streamed || p.streamed;
            }
            pts.pop_back();
            svg += fmt::format(R"(<polyline class="{}" points="{}" fill="none" stroke="{}" stroke-width="2"{}/>)" "\n",
                               s.css_class, pts, s.colour, dash);
            if (s.marker != Marker::None) draw_markers(svg, s, x, y, top, bottom);
        }
        std::string swatch = fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="2"{}/>)" "\n",
                                         right + 12, legend_y - 4, right + 40, legend_y - 4, s.colour, dash);
        // A second kind of marker in the panel (llama.cpp's squares) is
        // shown on its swatch, so the legend tells the points apart too.
        if (s.marker == Marker::Square) swatch += marker_svg("legend", s.marker, false, right + 26, legend_y - 4, s.colour);
        legend(swatch, s.points.empty() ? s.label + " (none)" : s.label);
    }
    const std::string& colour = series.empty() ? std::string(kLimitColour) : series.front().colour;
    if (any_sd) {
        legend(fmt::format(R"(<path d="M{0},{1}V{2}M{3},{1}H{4}M{3},{2}H{4}" stroke="{5}" fill="none"/>)" "\n",
                           right + 26, legend_y - 10, legend_y + 2, right + 22, right + 30, colour),
               "+-1 sd over the repetitions");
    }
    if (any_streamed) {
        legend(fmt::format(R"(<path d="M{},{}l5,5l-5,5l-5,-5z" fill="#fff" stroke="{}" stroke-width="1.8"/>)" "\n",
                           right + 26, legend_y - 9, colour),
               "prompt streamed weights");
    }
    if (limit.swept_past) {
        legend(fmt::format(R"(<rect x="{}" y="{}" width="28" height="12" fill="#000" fill-opacity="0.06" stroke="{}" stroke-dasharray="4,4"/>)"
                           "\n",
                           right + 12, legend_y - 10, kLimitColour),
               "does not fit: predicted only");
    }
}

// The whole document: the title, the two panels (decode on top, prefill
// below) and the x axis's label under them.
std::string render_chart(const std::string& title, const Panel& decode, const Panel& prefill, const XAxis& x,
                         const FitLimit& limit) {
    std::string svg = fmt::format(
        R"(<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" viewBox="0 0 {0} {1}" font-family="sans-serif">)"
        "\n",
        kWidth, kHeight);
    svg += fmt::format(R"(<rect width="{}" height="{}" fill="#fff"/>)" "\n", kWidth, kHeight);
    svg += fmt::format(R"(<text x="{}" y="30" font-size="16" text-anchor="middle">{}</text>)" "\n", kWidth / 2,
                       xml_escape(title));
    draw_panel(svg, decode, x, limit, true);
    draw_panel(svg, prefill, x, limit, false);
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="13" text-anchor="middle">{}</text>)" "\n",
                       kLeft + (kWidth - kRight - kLeft) / 2, kBottomPanelY + kPanelHeight + 42, xml_escape(x.label));
    svg += "</svg>\n";
    return svg;
}

// From `first` to `last` with room on each side (at least half a unit, 3%
// of the span), so the end points sit inside the frame rather than on it.
Axis padded_axis(double first, double last) {
    const double pad = std::max(0.5, (last - first) * 0.03);
    return {first - pad, last + pad};
}

void write_chart(const std::string& path, const std::string& svg) {
    try {
        write_file_atomic(path, svg);
    } catch (const Error& e) {
        throw Error(fmt::format("--plot: {}", e.what()));
    }
}

// Colours of the depth chart's tests, one per test of a panel, in turn.
constexpr std::array<const char*, 5> kTestColours{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"};

// "Tandem / llama.cpp (tg128): 0.91x at d0, 0.85x at d16384": the ratio at
// the first and the last depth both measured, of the first test with
// llama.cpp's points; "" when none.
std::string depth_ratio_text(const std::vector<const DepthCurve*>& curves) {
    for (const DepthCurve* c : curves) {
        std::vector<std::pair<int64_t, double>> ratios;
        for (const DepthPoint& t : c->tandem) {
            for (const DepthPoint& l : c->llama) {
                if (l.depth == t.depth && l.tps > 0) ratios.emplace_back(t.depth, t.tps / l.tps);
            }
        }
        if (ratios.empty()) continue;
        std::string text = fmt::format("Tandem / llama.cpp ({}): {:.2f}x at d{}", c->test, ratios.front().second,
                                       ratios.front().first);
        if (ratios.size() > 1) text += fmt::format(", {:.2f}x at d{}", ratios.back().second, ratios.back().first);
        return text;
    }
    return "";
}

std::vector<Series::Point> depth_points(const std::vector<DepthPoint>& points) {
    std::vector<Series::Point> out;
    for (const DepthPoint& p : points) {
        if (p.tps > 0) out.push_back({static_cast<double>(p.depth), p.tps, p.sd, false});
    }
    return out;
}

// A depth chart panel: each test of its kind as Tandem's solid line with
// dots and llama.cpp's dashed line with squares, in the test's colour.
Panel depth_panel(const DepthChart& c, bool decode) {
    Panel panel;
    panel.top = decode ? kTopPanelY : kBottomPanelY;
    panel.heading = decode ? "Decode" : "Prefill";
    panel.y_label = decode ? "tok/s (tgN)" : "tok/s (ppN)";
    std::vector<const DepthCurve*> curves;
    for (const DepthCurve& curve : c.curves) {
        if (curve.decode == decode) curves.push_back(&curve);
    }
    for (size_t i = 0; i < curves.size(); ++i) {
        const DepthCurve& curve = *curves[i];
        // Prefill starts at red, as in the sweep chart.
        const char* colour = kTestColours[(i + (decode ? 0 : 1)) % kTestColours.size()];
        panel.series.push_back(
            {"tandem-" + curve.test, "Tandem " + curve.test, colour, false, Marker::Dot, depth_points(curve.tandem)});
        if (!curve.llama.empty()) {
            panel.series.push_back({"llama-" + curve.test, "llama.cpp " + curve.test, colour, true, Marker::Square,
                                    depth_points(curve.llama)});
        }
    }
    panel.note = depth_ratio_text(curves);
    panel.note_class = "ratio";
    return panel;
}

}  // namespace

SweepChart sweep_chart_from_rows(const std::vector<BenchRow>& rows, std::string title,
                                 std::optional<int64_t> fit_limit) {
    SweepChart chart;
    chart.title = std::move(title);
    chart.fit_limit = fit_limit;
    if (rows.empty()) return chart;
    const BenchRow& first = rows.front();
    const auto same_setup = [&](const BenchRow& r) {
        return r.model == first.model && r.threads == first.threads && r.n_ubatch == first.n_ubatch &&
               r.cache_type == first.cache_type;
    };
    for (const BenchRow& r : rows) {
        if (!same_setup(r)) continue;
        if (chart.tg_test.empty() && r.n_prompt == 0) chart.tg_test = r.test;
        if (chart.pp_test.empty() && r.n_gen == 0) chart.pp_test = r.test;
    }
    std::map<int64_t, SweepPoint> by_ngl;
    for (const BenchRow& r : rows) {
        if (!same_setup(r)) continue;
        const bool is_tg = r.test == chart.tg_test, is_pp = r.test == chart.pp_test;
        if (!is_tg && !is_pp) continue;
        SweepPoint& p = by_ngl[r.ngl];
        p.ngl = r.ngl;
        (is_tg ? p.measured_tg : p.measured_pp) = r.fits ? r.tps_mean : std::nullopt;
        (is_tg ? p.predicted_tg : p.predicted_pp) = r.predicted_tps;
        (is_tg ? p.sd_tg : p.sd_pp) = r.fits ? r.tps_sd : std::nullopt;
        (is_tg ? p.streamed_tg : p.streamed_pp) = r.backend.find("+stream") != std::string::npos;
    }
    for (auto& [ngl, p] : by_ngl) chart.points.push_back(p);
    return chart;
}

std::string render_sweep_svg(const SweepChart& c) {
    // Half a layer of room on each side, so the first and last points (and
    // a limit at the last ngl) sit inside the frame rather than on it.
    XAxis x{{-0.5, 1.5}, 16, "layers on the accelerator (ngl)"};
    if (!c.points.empty()) {
        x.range = padded_axis(static_cast<double>(c.points.front().ngl), static_cast<double>(c.points.back().ngl));
    }
    using Measure = std::optional<double> SweepPoint::*;
    const auto series = [&](std::string css, std::string label, const char* colour, bool dashed, Measure value,
                            Measure sd, bool SweepPoint::*streamed) {
        Series s{std::move(css), std::move(label), colour, dashed, dashed ? Marker::None : Marker::Dot, {}};
        for (const SweepPoint& p : c.points) {
            if (const auto& v = p.*value; v && *v > 0) {
                s.points.push_back({static_cast<double>(p.ngl), *v, sd != nullptr ? (p.*sd).value_or(0.0) : 0.0,
                                    streamed != nullptr && p.*streamed});
            }
        }
        return s;
    };
    const std::string tg = c.tg_test.empty() ? "decode" : c.tg_test;
    const std::string pp = c.pp_test.empty() ? "prefill" : c.pp_test;
    Panel decode{kTopPanelY, "Decode", "", "worst-error", "tok/s (" + tg + ")",
                 {series("measured-tg", "measured " + tg, kDecodeColour, false, &SweepPoint::measured_tg,
                         &SweepPoint::sd_tg, &SweepPoint::streamed_tg),
                  series("predicted-tg", "predicted " + tg, kDecodeColour, true, &SweepPoint::predicted_tg, nullptr,
                         nullptr)}};
    Panel prefill{kBottomPanelY, "Prefill", "", "worst-error", "tok/s (" + pp + ")",
                  {series("measured-pp", "measured " + pp, kPrefillColour, false, &SweepPoint::measured_pp,
                          &SweepPoint::sd_pp, &SweepPoint::streamed_pp),
                   series("predicted-pp", "predicted " + pp, kPrefillColour, true, &SweepPoint::predicted_pp, nullptr,
                          nullptr)}};
    decode.note = worst_error_text(decode.series);
    prefill.note = worst_error_text(prefill.series);
    const FitLimit limit{c.fit_limit, c.fit_limit && !c.points.empty() && c.points.back().ngl > *c.fit_limit};
    return render_chart(c.title, decode, prefill, x, limit);
}

void write_sweep_svg(const std::string& path, const SweepChart& chart) { write_chart(path, render_sweep_svg(chart)); }

DepthChart depth_chart_from_rows(const std::vector<BenchRow>& rows, std::string title) {
    DepthChart chart;
    chart.title = std::move(title);
    if (rows.empty()) return chart;
    const BenchRow& first = rows.front();
    const auto same_setup = [&](const BenchRow& r) {
        return r.model == first.model && r.threads == first.threads && r.n_ubatch == first.n_ubatch &&
               r.cache_type == first.cache_type && r.ngl == first.ngl;
    };
    for (const BenchRow& r : rows) {
        // pgP,N mixes both kinds, and --parallel has no depth: neither is drawn.
        const bool decode = r.n_prompt == 0, prefill = r.n_gen == 0;
        if (!same_setup(r) || r.n_parallel > 0 || decode == prefill) continue;
        const std::string test = BenchTest{r.n_prompt, r.n_gen, 0, 0}.name();
        auto curve = std::find_if(chart.curves.begin(), chart.curves.end(),
                                  [&](const DepthCurve& c) { return c.test == test; });
        if (curve == chart.curves.end()) curve = chart.curves.insert(chart.curves.end(), DepthCurve{test, decode, {}, {}});
        if (r.fits && r.tps_mean) curve->tandem.push_back({r.n_depth, *r.tps_mean, r.tps_sd.value_or(0.0)});
        if (r.llama_tps_mean) curve->llama.push_back({r.n_depth, *r.llama_tps_mean, r.llama_tps_sd.value_or(0.0)});
    }
    const auto by_depth = [](const DepthPoint& a, const DepthPoint& b) { return a.depth < b.depth; };
    for (DepthCurve& c : chart.curves) {
        std::stable_sort(c.tandem.begin(), c.tandem.end(), by_depth);
        std::stable_sort(c.llama.begin(), c.llama.end(), by_depth);
    }
    return chart;
}

std::string render_depth_svg(const DepthChart& c) {
    std::optional<double> lo, hi;
    for (const DepthCurve& curve : c.curves) {
        for (const auto* points : {&curve.tandem, &curve.llama}) {
            for (const DepthPoint& p : *points) {
                const auto d = static_cast<double>(p.depth);
                lo = std::min(lo.value_or(d), d);
                hi = std::max(hi.value_or(d), d);
            }
        }
    }
    XAxis x{lo ? padded_axis(*lo, *hi) : Axis{-0.5, 1.5}, 8, "tokens already in the KV cache (depth, -d)"};
    return render_chart(c.title, depth_panel(c, true), depth_panel(c, false), x, FitLimit{});
}

void write_depth_svg(const std::string& path, const DepthChart& chart) { write_chart(path, render_depth_svg(chart)); }

}  // namespace tandem::tools
