#include "tools/bench_svg.h"

#include <algorithm>
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

struct Series {
    std::string css_class;  // names the line in the document, e.g. "measured-tg"
    std::string label;
    std::string colour;
    bool dashed = false;    // predicted: a dashed line without markers
    struct Point {
        int64_t ngl;
        double v;
        double sd = 0;         // error bar half-height
        bool streamed = false; // hollow diamond instead of a dot
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

// The measured points: a dot, or a hollow diamond where the prompt streamed
// weights, with a +-sd bar (capped) behind it.
void draw_markers(std::string& svg, const Series& s, const Axis& x, const LogAxis& y, double top, double bottom) {
    for (const Series::Point& p : s.points) {
        const double px = x.to_px(static_cast<double>(p.ngl), kLeft, kWidth - kRight);
        const double py = y.to_px(p.v, bottom, top);
        if (p.sd > 0) {
            const double y0 = y.to_px(p.v - p.sd > 0 ? p.v - p.sd : y.lo, bottom, top);
            const double y1 = y.to_px(p.v + p.sd, bottom, top);
            svg += fmt::format(
                R"(<path class="sd-bar" d="M{0:.1f},{1:.1f}V{2:.1f}M{3:.1f},{1:.1f}H{4:.1f}M{3:.1f},{2:.1f}H{4:.1f}" stroke="{5}" stroke-width="1.2" fill="none"/>)"
                "\n",
                px, y0, y1, px - 4, px + 4, s.colour);
        }
        if (p.streamed) {
            svg += fmt::format(
                R"(<path class="{0} streamed" d="M{1:.1f},{2:.1f}l5,5l-5,5l-5,-5z" fill="#fff" stroke="{3}" stroke-width="1.8"/>)"
                "\n",
                s.css_class, px, py - 5, s.colour);
        } else {
            svg += fmt::format(R"(<circle class="{}" cx="{:.1f}" cy="{:.1f}" r="3.5" fill="{}"/>)" "\n", s.css_class, px,
                               py, s.colour);
        }
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
    std::optional<std::pair<double, int64_t>> worst;
    for (const Series::Point& m : series[0].points) {
        for (const Series::Point& p : series[1].points) {
            if (p.ngl != m.ngl || !(m.v > 0)) continue;
            const double err = p.v / m.v - 1.0;
            if (!worst || std::abs(err) > std::abs(worst->first)) worst = std::make_pair(err, m.ngl);
        }
    }
    if (!worst) return "";
    return fmt::format("predicted vs measured: worst {:+.0f}% (ngl {})", 100.0 * worst->first, worst->second);
}

// One panel: frame, log y ticks and grid, x ticks, the series and a legend.
void draw_panel(std::string& svg, double top, const std::string& heading, const std::string& y_label,
                const std::vector<Series>& series, const Axis& x, const FitLimit& limit, bool limit_label) {
    const double bottom = top + kPanelHeight, left = kLeft, right = kWidth - kRight;
    const LogAxis y = log_axis_for(series);

    svg += fmt::format(R"(<text x="{}" y="{}" font-size="14" font-weight="bold">{}</text>)" "\n", left, top - 10,
                       xml_escape(heading));
    if (const std::string worst = worst_error_text(series); !worst.empty()) {
        svg += fmt::format(R"(<text class="worst-error" x="{}" y="{}" font-size="12" text-anchor="end">{}</text>)" "\n",
                           right, top - 10, xml_escape(worst));
    }
    draw_log_ticks(svg, y, top, bottom, left, right);
    const int64_t x_first = static_cast<int64_t>(std::ceil(x.lo)), x_last = static_cast<int64_t>(std::floor(x.hi));
    const int64_t x_step = std::max<int64_t>(1, static_cast<int64_t>(nice_step(static_cast<double>(x_last - x_first) / 16)));
    for (int64_t v = (x_first + x_step - 1) / x_step * x_step; v <= x_last; v += x_step) {
        const double px = x.to_px(static_cast<double>(v), left, right);
        svg += fmt::format(R"(<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="#000"/>)" "\n", px, bottom, px,
                           bottom + 5);
        svg += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="11" text-anchor="middle">{}</text>)" "\n", px,
                           bottom + 18, v);
    }
    draw_fit_limit(svg, x, limit, top, limit_label);
    svg += fmt::format(R"(<rect class="panel" x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#000"/>)" "\n",
                       left, top, right - left, kPanelHeight);
    svg += fmt::format(
        R"svg(<text x="{}" y="{}" font-size="12" text-anchor="middle" transform="rotate(-90 {} {})">{}</text>)svg" "\n",
        left - 58, top + kPanelHeight / 2, left - 58, top + kPanelHeight / 2, xml_escape(y_label + ", log scale"));

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
                pts += fmt::format("{:.1f},{:.1f} ", x.to_px(static_cast<double>(p.ngl), left, right),
                                   y.to_px(p.v, bottom, top));
                any_sd = any_sd || p.sd > 0;
                any_streamed = any_streamed || p.streamed;
            }
            pts.pop_back();
            svg += fmt::format(R"(<polyline class="{}" points="{}" fill="none" stroke="{}" stroke-width="2"{}/>)" "\n",
                               s.css_class, pts, s.colour, dash);
            if (!s.dashed) draw_markers(svg, s, x, y, top, bottom);
        }
        legend(fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="2"{}/>)" "\n", right + 12,
                           legend_y - 4, right + 40, legend_y - 4, s.colour, dash),
               s.points.empty() ? s.label + " (none)" : s.label);
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
    Axis x{-0.5, 1.5};
    if (!c.points.empty()) {
        const double first = static_cast<double>(c.points.front().ngl), last = static_cast<double>(c.points.back().ngl);
        const double pad = std::max(0.5, (last - first) * 0.03);
        x = {first - pad, last + pad};
    }
    using Measure = std::optional<double> SweepPoint::*;
    const auto series = [&](std::string css, std::string label, const char* colour, bool dashed, Measure value,
                            Measure sd, bool SweepPoint::*streamed) {
        Series s{std::move(css), std::move(label), colour, dashed, {}};
        for (const SweepPoint& p : c.points) {
            if (const auto& v = p.*value; v && *v > 0) {
                s.points.push_back({p.ngl, *v, sd != nullptr ? (p.*sd).value_or(0.0) : 0.0,
                                    streamed != nullptr && p.*streamed});
            }
        }
        return s;
    };
    const std::string tg = c.tg_test.empty() ? "decode" : c.tg_test;
    const std::string pp = c.pp_test.empty() ? "prefill" : c.pp_test;
    const std::vector<Series> decode{
        series("measured-tg", "measured " + tg, kDecodeColour, false, &SweepPoint::measured_tg, &SweepPoint::sd_tg,
               &SweepPoint::streamed_tg),
        series("predicted-tg", "predicted " + tg, kDecodeColour, true, &SweepPoint::predicted_tg, nullptr, nullptr)};
    const std::vector<Series> prefill{
        series("measured-pp", "measured " + pp, kPrefillColour, false, &SweepPoint::measured_pp, &SweepPoint::sd_pp,
               &SweepPoint::streamed_pp),
        series("predicted-pp", "predicted " + pp, kPrefillColour, true, &SweepPoint::predicted_pp, nullptr, nullptr)};

    std::string svg = fmt::format(
        R"(<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" viewBox="0 0 {0} {1}" font-family="sans-serif">)"
        "\n",
        kWidth, kHeight);
    svg += fmt::format(R"(<rect width="{}" height="{}" fill="#fff"/>)" "\n", kWidth, kHeight);
    svg += fmt::format(R"(<text x="{}" y="30" font-size="16" text-anchor="middle">{}</text>)" "\n", kWidth / 2,
                       xml_escape(c.title));
    const FitLimit limit{c.fit_limit, c.fit_limit && !c.points.empty() && c.points.back().ngl > *c.fit_limit};
    draw_panel(svg, kTopPanelY, "Decode", "tok/s (" + tg + ")", decode, x, limit, true);
    draw_panel(svg, kBottomPanelY, "Prefill", "tok/s (" + pp + ")", prefill, x, limit, false);
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="13" text-anchor="middle">layers on the accelerator (ngl)</text>)"
                       "\n",
                       kLeft + (kWidth - kRight - kLeft) / 2, kBottomPanelY + kPanelHeight + 42);
    svg += "</svg>\n";
    return svg;
}

void write_sweep_svg(const std::string& path, const SweepChart& chart) {
    try {
        write_file_atomic(path, render_sweep_svg(chart));
    } catch (const Error& e) {
        throw Error(fmt::format("--plot: {}", e.what()));
    }
}

}  // namespace tandem::tools
