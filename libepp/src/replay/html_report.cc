// ReplayReportToHtml: one self-contained HTML page with inline SVG charts drawn here (no script,
// no external resource), so a report opens offline and can be mailed as one file.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "epp/tools/replay.h"
#include "replay/render.h"

namespace epp {
namespace {

using internal::Num;

// Colour-blind-safe palette (Okabe-Ito), cycled.
constexpr const char* kPalette[] = {"#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"};
const char* Color(size_t i) { return kPalette[i % (sizeof kPalette / sizeof kPalette[0])]; }

std::string Escape(std::string_view s) { return internal::EscapeMarkup(s); }

std::string F(double v) {  // SVG coordinates
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// About five round tick values covering [lo, hi].
std::vector<double> NiceTicks(double lo, double hi) {
  std::vector<double> t;
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / 5;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return t;
}

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;
  std::string color;
  bool dashed = false;
  bool step = false;  // draw as a staircase (a CDF)
};

struct Axes {
  std::string title, x_label, y_label;
  double x_min = 0, x_max = 1, y_min = 0, y_max = 1;
  bool log_x = false;
  bool percent_y = false;
  bool x_ticks = true;  // numeric x ticks and grid (bar charts label their groups instead)
};

constexpr double kW = 760, kH = 330, kLeft = 64, kRight = 180, kTop = 34, kBottom = 48;

class Plot {
 public:
  explicit Plot(const Axes& a) : a_(a) {
    if (a_.log_x) {
      a_.x_min = std::log10(std::max(a_.x_min, 1e-9));
      a_.x_max = std::log10(std::max(a_.x_max, 1e-9));
    }
    if (!(a_.x_max > a_.x_min)) a_.x_max = a_.x_min + 1;
    if (!(a_.y_max > a_.y_min)) a_.y_max = a_.y_min + 1;
  }
  double X(double v) const {
    if (a_.log_x) v = std::log10(std::max(v, 1e-9));
    return kLeft + (v - a_.x_min) / (a_.x_max - a_.x_min) * (kW - kLeft - kRight);
  }
  double Y(double v) const { return kH - kBottom - (v - a_.y_min) / (a_.y_max - a_.y_min) * (kH - kTop - kBottom); }

  // Frame, grid, ticks, labels.
  std::string Begin() const {
    std::string s = absl::StrCat("<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 ", kW, " ", kH, "\" width=\"", kW,
                                 "\" height=\"", kH, "\" font-family=\"sans-serif\" font-size=\"11\" fill=\"#333\" role=\"img\" aria-label=\"", Escape(a_.title), "\">\n");
    absl::StrAppend(&s, "<text x=\"", kLeft, "\" y=\"20\" font-size=\"13\" font-weight=\"600\">", Escape(a_.title), "</text>\n");
    const double x0 = kLeft, x1 = kW - kRight, y0 = kTop, y1 = kH - kBottom;
    // Y ticks.
    for (double v : NiceTicks(a_.y_min, a_.y_max)) {
      const double y = Y(v);
      absl::StrAppend(&s, "<line x1=\"", F(x0), "\" y1=\"", F(y), "\" x2=\"", F(x1), "\" y2=\"", F(y), "\" stroke=\"#e4e4e4\"/>",
                      "<text x=\"", F(x0 - 6), "\" y=\"", F(y + 4), "\" text-anchor=\"end\">",
                      a_.percent_y ? absl::StrCat(Num(v * 100), "%") : Num(v), "</text>\n");
    }
    // X ticks.
    std::vector<double> xt;
    if (!a_.x_ticks) {
    } else if (a_.log_x) {
      for (double e = std::floor(a_.x_min); e <= std::ceil(a_.x_max); e += 1)
        if (e >= a_.x_min - 1e-9 && e <= a_.x_max + 1e-9) xt.push_back(std::pow(10, e));
    } else {
      xt = NiceTicks(a_.x_min, a_.x_max);
    }
    for (double v : xt) {
      const double x = X(v);
      absl::StrAppend(&s, "<line x1=\"", F(x), "\" y1=\"", F(y0), "\" x2=\"", F(x), "\" y2=\"", F(y1), "\" stroke=\"#e4e4e4\"/>",
                      "<text x=\"", F(x), "\" y=\"", F(y1 + 16), "\" text-anchor=\"middle\">", Num(v), "</text>\n");
    }
    absl::StrAppend(&s, "<rect x=\"", F(x0), "\" y=\"", F(y0), "\" width=\"", F(x1 - x0), "\" height=\"", F(y1 - y0),
                    "\" fill=\"none\" stroke=\"#999\"/>\n");
    absl::StrAppend(&s, "<text x=\"", F((x0 + x1) / 2), "\" y=\"", F(kH - 8), "\" text-anchor=\"middle\">", Escape(a_.x_label),
                    "</text>\n");
    absl::StrAppend(&s, "<text x=\"14\" y=\"", F((y0 + y1) / 2), "\" text-anchor=\"middle\" transform=\"rotate(-90 14 ",
                    F((y0 + y1) / 2), ")\">", Escape(a_.y_label), "</text>\n");
    return s;
  }

  std::string Lines(const std::vector<Series>& series) const {
    std::string s;
    for (const Series& ser : series) {
      if (ser.points.empty()) continue;
      std::string d;
      for (size_t i = 0; i < ser.points.size(); ++i) {
        const double x = X(ser.points[i].first), y = Y(ser.points[i].second);
        if (i == 0) {
          absl::StrAppend(&d, "M", F(x), " ", F(y));
        } else if (ser.step) {
          absl::StrAppend(&d, " H", F(x), " V", F(y));
        } else {
          absl::StrAppend(&d, " L", F(x), " ", F(y));
        }
      }
      absl::StrAppend(&s, "<path d=\"", d, "\" fill=\"none\" stroke=\"", ser.color, "\" stroke-width=\"2\"",
                      ser.dashed ? " stroke-dasharray=\"6 4\"" : "", "><title>", Escape(ser.name), "</title></path>\n");
    }
    return s;
  }

  static std::string Legend(const std::vector<Series>& series) {
    std::string s;
    double y = kTop + 6;
    // The legend column holds about kLegendChars characters at this font; a longer name is
    // squeezed to the column (textLength) rather than cut at the image's edge, and its full
    // text is the entry's tooltip.
    constexpr size_t kLegendChars = 22;
    for (const Series& ser : series) {
      const double x = kW - kRight + 14;
      const double room = kRight - 14 - 28 - 4;
      absl::StrAppend(&s, "<line x1=\"", F(x), "\" y1=\"", F(y), "\" x2=\"", F(x + 22), "\" y2=\"", F(y), "\" stroke=\"", ser.color,
                      "\" stroke-width=\"3\"", ser.dashed ? " stroke-dasharray=\"6 4\"" : "", "/>", "<text x=\"", F(x + 28),
                      "\" y=\"", F(y + 4), "\"",
                      ser.name.size() > kLegendChars
                          ? absl::StrCat(" textLength=\"", F(room), "\" lengthAdjust=\"spacingAndGlyphs\"")
                          : std::string(),
                      "><title>", Escape(ser.name), "</title>", Escape(ser.name), "</text>\n");
      y += 18;
    }
    return s;
  }

 private:
  Axes a_;
};

std::string TtftChart(const ReplayReport& r) {
  double lo = INFINITY, hi = 0;
  for (const ReplayPolicyReport& p : r.policies)
    for (double v : p.ttft_samples_s) {
      if (v > 0) lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  if (!(hi > 0)) return "<p>No completed requests: no TTFT distribution.</p>\n";
  for (double v : r.trace.ttft_bound_samples_s)
    if (v > 0) lo = std::min(lo, v);
  Axes a;
  a.title = "Time to first token: cumulative distribution";
  a.y_label = "fraction of requests";
  a.percent_y = true;
  // A long tail would squash a linear axis; go logarithmic past two decades.
  a.log_x = std::isfinite(lo) && hi / lo > 100;
  a.x_label = a.log_x ? "TTFT, seconds (log scale)" : "TTFT, seconds";
  a.x_min = a.log_x ? std::pow(10, std::floor(std::log10(lo))) : 0;
  a.x_max = a.log_x ? std::pow(10, std::ceil(std::log10(hi))) : hi * 1.05;
  Plot plot(a);
  std::vector<Series> series;
  for (size_t i = 0; i < r.policies.size(); ++i) {
    const ReplayPolicyReport& p = r.policies[i];
    Series s{p.name, {}, Color(i)};
    s.step = true;
    std::vector<double> v = p.ttft_samples_s;
    std::sort(v.begin(), v.end());
    if (!v.empty()) s.points.push_back({a.log_x ? std::max(v.front(), a.x_min) : 0.0, 0.0});
    for (size_t k = 0; k < v.size(); ++k) s.points.push_back({std::max(v[k], a.log_x ? a.x_min : 0.0), static_cast<double>(k + 1) / v.size()});
    series.push_back(std::move(s));
  }
  if (!r.trace.ttft_bound_samples_s.empty()) {
    // The zero-queue bound's distribution: no policy's curve can lie to the left of it.
    Series b{"TTFT bound (no queueing, infinite cache)", {}, "#222"};
    b.step = true;
    b.dashed = true;
    const std::vector<double>& v = r.trace.ttft_bound_samples_s;
    b.points.push_back({a.log_x ? std::max(v.front(), a.x_min) : 0.0, 0.0});
    for (size_t k = 0; k < v.size(); ++k) b.points.push_back({std::max(v[k], a.log_x ? a.x_min : 0.0), static_cast<double>(k + 1) / v.size()});
    series.push_back(std::move(b));
  }
  return absl::StrCat(plot.Begin(), plot.Lines(series), Plot::Legend(series), "</svg>\n");
}

std::string HitRateChart(const ReplayReport& r) {
  Axes a;
  a.title = "Prefix-cache block hit rate over time (by arrival)";
  a.x_label = "arrival time, seconds since the first request";
  a.y_label = "block hit rate";
  a.percent_y = true;
  a.x_max = std::max(r.trace.duration_s, 1e-6);
  Plot plot(a);
  std::vector<Series> series;
  for (size_t i = 0; i < r.policies.size(); ++i) {
    const ReplayPolicyReport& p = r.policies[i];
    Series s{p.name, {}, Color(i)};
    const size_t n = p.hit_rate_timeline.size();
    for (size_t b = 0; b < n; ++b) s.points.push_back({(static_cast<double>(b) + 0.5) / n * a.x_max, p.hit_rate_timeline[b]});
    series.push_back(std::move(s));
  }
  Series upper{absl::StrCat("upper bound ", Num(r.trace.upper_bound_block_hit_rate * 100), "%"),
               {{0, r.trace.upper_bound_block_hit_rate}, {a.x_max, r.trace.upper_bound_block_hit_rate}},
               "#888888"};
  upper.dashed = true;
  Series pooled{absl::StrCat("pooled cache ", Num(r.trace.pooled_cache_bound_block_hit_rate * 100), "%"),
                {{0, r.trace.pooled_cache_bound_block_hit_rate}, {a.x_max, r.trace.pooled_cache_bound_block_hit_rate}},
                "#444444"};
  pooled.dashed = true;
  series.push_back(std::move(upper));
  series.push_back(std::move(pooled));
  return absl::StrCat(plot.Begin(), plot.Lines(series), Plot::Legend(series), "</svg>\n");
}

// Grouped bars: one group per server, one bar per policy.
template <typename T>
std::string BarChart(const ReplayReport& r, const std::string& title, const std::string& y_label, bool percent,
                     std::vector<T> ReplayPolicyReport::*field) {
  size_t servers = 0;
  double hi = 0;
  for (const ReplayPolicyReport& p : r.policies) {
    servers = std::max(servers, (p.*field).size());
    for (T v : p.*field) hi = std::max(hi, static_cast<double>(v));
  }
  if (servers == 0) return "";
  Axes a;
  a.title = title;
  a.x_label = "server";
  a.y_label = y_label;
  a.percent_y = percent;
  a.y_max = hi > 0 ? hi * 1.08 : 1;
  a.x_min = 0;
  a.x_max = static_cast<double>(servers);
  a.x_ticks = false;
  Plot plot(a);
  std::string s = plot.Begin();
  const double group_w = (kW - kLeft - kRight) / static_cast<double>(servers);
  const size_t label_every = (servers + 15) / 16;  // at most 16 labels
  for (size_t k = 0; k < servers; k += label_every)
    absl::StrAppend(&s, "<text x=\"", F(plot.X(static_cast<double>(k)) + group_w / 2), "\" y=\"", F(kH - kBottom + 16),
                    "\" text-anchor=\"middle\">", k, "</text>\n");
  const double bar_w = std::max(0.5, group_w * 0.8 / static_cast<double>(std::max<size_t>(1, r.policies.size())));
  for (size_t i = 0; i < r.policies.size(); ++i) {
    const auto& values = r.policies[i].*field;
    for (size_t k = 0; k < values.size(); ++k) {
      const double v = static_cast<double>(values[k]);
      const double x = plot.X(static_cast<double>(k)) + group_w * 0.1 + bar_w * static_cast<double>(i);
      const double y = plot.Y(v);
      absl::StrAppend(&s, "<rect x=\"", F(x), "\" y=\"", F(y), "\" width=\"", F(bar_w), "\" height=\"", F(plot.Y(0) - y),
                      "\" fill=\"", Color(i), "\"><title>", Escape(r.policies[i].name), ", server ", k, ": ",
                      percent ? absl::StrCat(Num(v * 100), "%") : Num(v), "</title></rect>\n");
    }
  }
  std::vector<Series> legend;
  for (size_t i = 0; i < r.policies.size(); ++i) legend.push_back({r.policies[i].name, {}, Color(i)});
  absl::StrAppend(&s, Plot::Legend(legend), "</svg>\n");
  return s;
}

std::string Table(const ReplayReport& r) {
  std::string s =
      "<table>\n<thead><tr><th>policy</th><th>blocks hit</th><th>tokens hit</th><th>TTFT p50</th><th>TTFT p90</th>"
      "<th>TTFT p99</th><th>TTFT p50 / p90 / p99 over bound</th><th>E2E p50</th><th>E2E p99</th><th>queue p99</th><th>req/s</th><th>load max/mean</th>"
      "<th>mispredicted</th><th>completed</th><th>failed</th><th>shed</th><th>wall s</th></tr></thead>\n<tbody>\n";
  for (const ReplayPolicyReport& p : r.policies) {
    absl::StrAppend(&s, "<tr><td>", Escape(p.name), "</td>");
    for (double v : {p.block_hit_rate, p.token_hit_rate}) absl::StrAppend(&s, "<td>", Num(v * 100), "%</td>");
    for (double v : {p.ttft_s.p50, p.ttft_s.p90, p.ttft_s.p99}) absl::StrAppend(&s, "<td>", Num(v), "</td>");
    absl::StrAppend(&s, "<td>", replay_internal::RatioToBound(p.ttft_over_bound), "</td>");
    for (double v : {p.e2e_s.p50, p.e2e_s.p99, p.queue_s.p99, p.throughput_rps, p.load_max_over_mean})
      absl::StrAppend(&s, "<td>", Num(v), "</td>");
    absl::StrAppend(&s, "<td>", std::isnan(p.prediction_error_rate) ? "n/a" : absl::StrCat(Num(p.prediction_error_rate * 100), "%"),
                    "</td><td>", p.completed, "</td><td>", p.failed, "</td><td>",
                    p.shed, "</td><td>", Num(p.wall_s), "</td></tr>\n");
  }
  s += "</tbody>\n</table>\n";
  std::string flags;
  for (const ReplayPolicyReport& p : r.policies)
    for (const ReplayFlag& f : p.flags)
      absl::StrAppend(&flags, "<li><b>", Escape(p.name), "</b>: <code>", Escape(f.code), "</code> ", Escape(f.message), "</li>\n");
  if (!flags.empty()) absl::StrAppend(&s, "<h3>Flags</h3>\n<ul class=\"flags\">\n", flags, "</ul>\n");
  return s;
}

// SLO attainment and goodput, when requests carry SLOs; per-band and per-tenant groups, when
// the run has them (flow control, tenants, several priorities).
std::string SloAndGroupTables(const ReplayReport& r) {
  std::string s;
  auto pct = [](double x) { return std::isnan(x) ? std::string("-") : absl::StrCat(Num(x * 100), "%"); };
  if (std::any_of(r.policies.begin(), r.policies.end(), [](const ReplayPolicyReport& p) { return p.slo_requests > 0; })) {
    s += "<h2>SLO attainment</h2>\n<table>\n<thead><tr><th>policy</th><th>with SLO</th><th>TTFT met</th><th>TPOT met</th>"
         "<th>all met</th><th>goodput req/s</th></tr></thead>\n<tbody>\n";
    for (const ReplayPolicyReport& p : r.policies)
      absl::StrAppend(&s, "<tr><td>", Escape(p.name), "</td><td>", p.slo_requests, "</td><td>", pct(p.slo_ttft_attainment),
                      "</td><td>", pct(p.slo_tpot_attainment), "</td><td>", pct(p.slo_attainment), "</td><td>",
                      Num(p.goodput_rps), "</td></tr>\n");
    s += "</tbody>\n</table>\n<p class=\"note\">Share of the requests carrying each SLO that met it; a dropped or failed "
         "request meets none. Goodput: requests meeting all their SLOs per second.</p>\n";
  }
  for (const ReplayPolicyReport& p : r.policies) {
    if (p.bands.empty() && p.tenants.empty()) continue;
    absl::StrAppend(&s, "<h3>", Escape(p.name), p.flow_control ? " (flow control)" : "", "</h3>\n");
    if (!std::isnan(p.jain_fairness) && !p.tenants.empty())
      absl::StrAppend(&s, "<p>Jain's fairness index over tenants: <b>", Num(p.jain_fairness), "</b></p>\n");
    for (const auto* groups : {&p.bands, &p.tenants}) {
      if (groups->empty()) continue;
      absl::StrAppend(&s, "<table>\n<thead><tr><th>", groups == &p.bands ? "band" : "tenant",
                      "</th><th>requests</th><th>completed</th><th>dropped</th><th>TTFT p50</th><th>TTFT p99</th>"
                      "<th>queued p50</th><th>queued p99</th><th>served req/s</th><th>demand req/s</th></tr></thead>\n<tbody>\n");
      for (const ReplayGroupReport& g : *groups)
        absl::StrAppend(&s, "<tr><td>", Escape(g.name.empty() ? "(none)" : g.name), "</td><td>", g.requests, "</td><td>",
                        g.completed, "</td><td>", g.dropped, "</td><td>", Num(g.ttft_s.p50), "</td><td>", Num(g.ttft_s.p99),
                        "</td><td>", Num(g.wait_s.p50), "</td><td>", Num(g.wait_s.p99), "</td><td>", Num(g.served_rps),
                        "</td><td>", Num(g.demand_rps), "</td></tr>\n");
      s += "</tbody>\n</table>\n";
    }
  }
  return s;
}

}  // namespace

std::string ReplayReportToHtml(const ReplayReport& r, const std::string& title) {
  std::string s = absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>", Escape(title), "</title>\n",
      "<style>\n"
      "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1000px;color:#222}\n"
      "h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}\n"
      "table{border-collapse:collapse;font-size:.85em;display:block;max-width:100%;overflow-x:auto}\n"
      "th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}\n"
      "th:first-child,td:first-child{text-align:left}thead{background:#f2f2f2}\n"
      "svg{display:block;margin:8px 0;max-width:100%;height:auto}\n"
      ".note{color:#555;font-size:.9em}\n"
      "</style>\n</head>\n<body>\n<h1>",
      Escape(title), "</h1>\n");
  absl::StrAppend(&s, "<p>", r.trace.requests, " requests over ", Num(r.trace.duration_s), " s of simulated time; ", r.trace.blocks,
                  " prompt blocks of 16 tokens (", r.trace.prompt_tokens, " prompt tokens). Block hit-rate bounds: <b>upper ",
                  Num(r.trace.upper_bound_block_hit_rate * 100), "%</b> (one infinite cache), <b>pooled cache ",
                  Num(r.trace.pooled_cache_bound_block_hit_rate * 100), "%</b> (one LRU as large as all servers together).");
  if (r.trace.ttft_bound_s.p50 > 0)
    absl::StrAppend(&s, " TTFT bound (each request alone on the fastest server, every earlier prefix cached): <b>p50 ",
                    Num(r.trace.ttft_bound_s.p50), " s, p90 ", Num(r.trace.ttft_bound_s.p90), " s, p99 ",
                    Num(r.trace.ttft_bound_s.p99), " s</b>.");
  s += "</p>\n";
  absl::StrAppend(&s, "<h2>Results</h2>\n", Table(r),
                  "<p class=\"note\">Times in seconds of simulated time. &quot;mispredicted&quot;: requests whose prefix match the "
                  "EPP predicted differed from what the server had cached by at least one block. &quot;wall s&quot;: real time "
                  "the replay of that policy took.</p>\n");
  s += SloAndGroupTables(r);
  absl::StrAppend(&s, "<h2>Time to first token</h2>\n", TtftChart(r));
  absl::StrAppend(&s, "<h2>Cache hits over time</h2>\n", HitRateChart(r),
                  "<p class=\"note\">Requests are grouped by arrival time. The two bounds hold for the whole trace; "
                  "a single interval may exceed them.</p>\n");
  absl::StrAppend(&s, "<h2>Load</h2>\n",
                  BarChart<int64_t>(r, "Requests per server", "requests", false, &ReplayPolicyReport::requests_per_server));
  absl::StrAppend(&s, BarChart<double>(r, "Mean KV-cache usage per server (over scrapes)", "KV usage", true,
                                       &ReplayPolicyReport::kv_usage_mean_per_server));
  absl::StrAppend(&s,
                  "<p class=\"note\">These are simulated figures from epp's model-server cost model (docs/sim.md), not "
                  "measurements on GPUs: use them to compare routing policies, not to predict a deployment's latency.</p>\n"
                  "</body>\n</html>\n");
  return s;
}

}  // namespace epp
