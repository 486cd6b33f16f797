#include "tools/bench_svg.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "runtime/common/error.h"

namespace tandem::tools {
namespace {

// Canvas and panel geometry, in SVG user units (pixels).
constexpr double kWidth = 860, kHeight = 700;
constexpr double kLeft = 90, kRight = 200;  // the right margin holds the legends
constexpr double kPanelHeight = 240;
constexpr double kTopPanelY = 70, kBottomPanelY = 390;
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

std::string tick_label(double v) {
    if (v >= 1e6) return fmt::format("{:g}M", v / 1e6);
    if (v >= 1e4) return fmt::format("{:g}k", v / 1e3);
    return fmt::format("{:g}", v);
}

struct Axis {
    double lo = 0, hi = 1;
    double to_px(double v, double px_lo, double px_hi) const { return px_lo + (v - lo) / (hi - lo) * (px_hi - px_lo); }
};

struct Series {
    std::string css_class;  // names the line in the document, e.g. "measured-tg"
    std::string label;
    std::string colour;
    bool dashed = false;
    std::vector<std::pair<int64_t, double>> points;
};

// One panel: frame, y ticks and grid, x ticks, the series and a legend.
void draw_panel(std::string& svg, double top, const std::string& heading, const std::string& y_label,
                const std::vector<Series>& series, const Axis& x) {
    const double bottom = top + kPanelHeight, left = kLeft, right = kWidth - kRight;
    double y_max = 0;
    for (const Series& s : series) {
        for (const auto& p : s.points) y_max = std::max(y_max, p.second);
    }
    const double step = nice_step(std::max(y_max, 1e-9) * 1.1 / 5);
    const Axis y{0, step * std::max(1.0, std::ceil(y_max * 1.1 / step))};

    svg += fmt::format(R"(<text x="{}" y="{}" font-size="14" font-weight="bold">{}</text>)" "\n", left, top - 10,
                       xml_escape(heading));
    for (double v = 0; v <= y.hi + step / 2; v += step) {
        const double py = y.to_px(v, bottom, top);
        svg += fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#e0e0e0"/>)" "\n", left, py, right, py);
        svg += fmt::format(R"(<text x="{}" y="{:.1f}" font-size="11" text-anchor="end">{}</text>)" "\n", left - 6,
                           py + 4, tick_label(v));
    }
    const int64_t x_span = static_cast<int64_t>(x.hi - x.lo);
    const int64_t x_step = std::max<int64_t>(1, static_cast<int64_t>(nice_step(static_cast<double>(x_span) / 16)));
    for (int64_t v = static_cast<int64_t>(x.lo); v <= static_cast<int64_t>(x.hi); v += x_step) {
        const double px = x.to_px(static_cast<double>(v), left, right);
        svg += fmt::format(R"(<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="#000"/>)" "\n", px, bottom, px,
                           bottom + 5);
        svg += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="11" text-anchor="middle">{}</text>)" "\n", px,
                           bottom + 18, v);
    }
    svg += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#000"/>)" "\n", left, top,
                       right - left, kPanelHeight);
    svg += fmt::format(
        R"svg(<text x="{}" y="{}" font-size="12" text-anchor="middle" transform="rotate(-90 {} {})">{}</text>)svg" "\n",
        left - 58, top + kPanelHeight / 2, left - 58, top + kPanelHeight / 2, xml_escape(y_label));

    double legend_y = top + 14;
    for (const Series& s : series) {
        const std::string dash = s.dashed ? R"( stroke-dasharray="6,4")" : "";
        if (!s.points.empty()) {
            std::string pts;
            for (const auto& [ngl, v] : s.points) {
                pts += fmt::format("{:.1f},{:.1f} ", x.to_px(static_cast<double>(ngl), left, right),
                                   y.to_px(v, bottom, top));
            }
            pts.pop_back();
            svg += fmt::format(R"(<polyline class="{}" points="{}" fill="none" stroke="{}" stroke-width="2"{}/>)" "\n",
                               s.css_class, pts, s.colour, dash);
            if (!s.dashed) {
                for (const auto& [ngl, v] : s.points) {
                    svg += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="{}"/>)" "\n",
                                       x.to_px(static_cast<double>(ngl), left, right), y.to_px(v, bottom, top),
                                       s.colour);
                }
            }
        }
        svg += fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="2"{}/>)" "\n", right + 12,
                           legend_y - 4, right + 40, legend_y - 4, s.colour, dash);
        svg += fmt::format(R"(<text x="{}" y="{}" font-size="12">{}</text>)" "\n", right + 46, legend_y,
                           xml_escape(s.points.empty() ? s.label + " (none)" : s.label));
        legend_y += 18;
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
    }
    for (auto& [ngl, p] : by_ngl) chart.points.push_back(p);
    return chart;
}

std::string render_sweep_svg(const SweepChart& c) {
    Axis x{0, 1};
    if (!c.points.empty()) {
        x.lo = static_cast<double>(c.points.front().ngl);
        x.hi = std::max(x.lo + 1, static_cast<double>(c.points.back().ngl));
    }
    const auto series = [&](std::string css, std::string label, const char* colour, bool dashed, auto member) {
        Series s{std::move(css), std::move(label), colour, dashed, {}};
        for (const SweepPoint& p : c.points) {
            if (const auto& v = p.*member) s.points.emplace_back(p.ngl, *v);
        }
        return s;
    };
    const std::string tg = c.tg_test.empty() ? "decode" : c.tg_test;
    const std::string pp = c.pp_test.empty() ? "prefill" : c.pp_test;
    const std::vector<Series> decode{
        series("measured-tg", "measured " + tg, kDecodeColour, false, &SweepPoint::measured_tg),
        series("predicted-tg", "predicted " + tg, kDecodeColour, true, &SweepPoint::predicted_tg)};
    const std::vector<Series> prefill{
        series("measured-pp", "measured " + pp, kPrefillColour, false, &SweepPoint::measured_pp),
        series("predicted-pp", "predicted " + pp, kPrefillColour, true, &SweepPoint::predicted_pp)};

    std::string svg = fmt::format(
        R"(<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" viewBox="0 0 {0} {1}" font-family="sans-serif">)"
        "\n",
        kWidth, kHeight);
    svg += fmt::format(R"(<rect width="{}" height="{}" fill="#fff"/>)" "\n", kWidth, kHeight);
    svg += fmt::format(R"(<text x="{}" y="30" font-size="16" text-anchor="middle">{}</text>)" "\n", kWidth / 2,
                       xml_escape(c.title));
    draw_panel(svg, kTopPanelY, "Decode", "tok/s (" + tg + ")", decode, x);
    draw_panel(svg, kBottomPanelY, "Prefill", "tok/s (" + pp + ")", prefill, x);
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="13" text-anchor="middle">layers on the accelerator (ngl)</text>)"
                       "\n",
                       kLeft + (kWidth - kRight - kLeft) / 2, kBottomPanelY + kPanelHeight + 42);
    if (c.fit_limit) {
        const double lx = x.to_px(static_cast<double>(std::clamp<double>(static_cast<double>(*c.fit_limit), x.lo, x.hi)),
                                  kLeft, kWidth - kRight);
        svg += fmt::format(
            R"(<line class="fit-limit" x1="{0:.1f}" y1="{1}" x2="{0:.1f}" y2="{2}" stroke="{3}" stroke-width="1.5" stroke-dasharray="4,4"/>)"
            "\n",
            lx, kTopPanelY, kBottomPanelY + kPanelHeight, kLimitColour);
        svg += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="11" fill="{}">largest ngl that fits: {}</text>)" "\n",
                           lx + 4, kTopPanelY + kPanelHeight + 36, kLimitColour, *c.fit_limit);
    }
    svg += "</svg>\n";
    return svg;
}

void write_sweep_svg(const std::string& path, const SweepChart& chart) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(fmt::format("--plot: cannot write {}", path));
    out << render_sweep_svg(chart);
    if (!out) throw Error(fmt::format("--plot: writing {} failed", path));
}

}  // namespace tandem::tools
