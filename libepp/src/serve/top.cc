// `eppctl top`'s model and frame (epp/tools/top.h).
#include "epp/tools/top.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iterator>
#include <limits>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "epp/metrics.h"

namespace epp {
namespace {

constexpr size_t kDecisionsKept = 200;

std::string Sv(std::string_view s) { return std::string(s); }

// The quantile q of a cumulative histogram given as (upper bound, count) pairs, by linear
// interpolation inside the bucket (Prometheus' histogram_quantile).
double Quantile(std::vector<std::pair<double, double>> buckets, double q) {
  std::sort(buckets.begin(), buckets.end());
  if (buckets.empty() || buckets.back().second <= 0) return 0;
  const double rank = q * buckets.back().second;
  double lo = 0, below = 0;
  for (const auto& [le, count] : buckets) {
    if (count >= rank) {
      if (std::isinf(le)) return lo;
      return count > below ? lo + (le - lo) * (rank - below) / (count - below) : le;
    }
    lo = le;
    below = count;
  }
  return lo;
}

std::string Fit(std::string s, size_t width) {
  if (s.size() > width) s.resize(width);
  return s;
}

std::string Pad(std::string_view s, size_t width, bool right = false) {
  std::string out(s.substr(0, width));
  if (out.size() < width) out = right ? std::string(width - out.size(), ' ') + out : out + std::string(width - out.size(), ' ');
  return out;
}

// `s` safe to write to a terminal, byte for byte the same length: control characters (C0, DEL,
// C1), and so every escape sequence's introducer, and bytes that are not well-formed UTF-8 become
// '?'; a tab becomes a space.
std::string Sanitize(std::string_view s) {
  std::string out(s);
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = b[i];
    if (c < 0x80) {
      if (c == '\t') out[i] = ' ';
      else if (c < 0x20 || c == 0x7f) out[i] = '?';
      ++i;
      continue;
    }
    // A multi-byte sequence: its length from the lead byte, every continuation 10xxxxxx, no
    // overlong or surrogate forms (RFC 3629's table), and not a C1 control (U+0080..U+009F).
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c >= 0xe0 && c <= 0xef) {
      n = 3;
      if (c == 0xe0) lo = 0xa0;
      if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 4;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;
    }
    bool ok = n > 0 && i + n <= s.size() && b[i + 1] >= lo && b[i + 1] <= hi;
    for (size_t k = 2; ok && k < n; ++k) ok = b[i + k] >= 0x80 && b[i + k] <= 0xbf;
    if (ok && c == 0xc2 && b[i + 1] <= 0x9f) ok = false;  // C1 controls (0x9b is CSI)
    if (!ok) {
      out[i++] = '?';
      continue;
    }
    i += n;
  }
  return out;
}

// 312 B, 4.1 KiB, 12.0 MiB.
std::string Bytes(double v) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(kUnits)) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, kUnits[u]);
  return buf;
}

// Seconds as milliseconds: "0.4 ms", "12 ms".
std::string Ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 0.01 ? "%.1f ms" : "%.0f ms", s * 1e3);
  return buf;
}

std::string Opt(const std::optional<double>& v, const char* fmt) {
  if (!v) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, *v);
  return buf;
}

// The flow-control layer's series (serve's WriteFlowControl), or nullopt when there are none.
// `outcomes` gets requests_total by outcome; `last` is the previous poll's, `dt` the seconds since.
std::optional<TopFlowControl> ParseFlowControl(const MetricFamilies& m, double dt,
                                               const std::map<std::string, int64_t>& last,
                                               std::map<std::string, int64_t>& outcomes) {
  constexpr std::string_view kPrefix = "llm_d_epp_flow_control_";
  bool any = false;
  for (const MetricFamily& f : m.families())
    if (f.name.substr(0, kPrefix.size()) == kPrefix && !f.samples.empty()) any = true;
  if (!any) return std::nullopt;
  const auto named = [&](std::string_view suffix) { return m.SamplesNamed(std::string(kPrefix) + std::string(suffix)); };
  const auto priority = [](const Sample& s) -> std::optional<int> {
    const std::optional<std::string_view> p = s.label("priority");
    int v = 0;
    if (!p || !absl::SimpleAtoi(absl::string_view(p->data(), p->size()), &v)) return std::nullopt;
    return v;
  };
  TopFlowControl fc;
  std::map<int, TopFlowBand, std::greater<int>> bands;
  auto band = [&](int p) -> TopFlowBand& {
    TopFlowBand& b = bands[p];
    b.priority = p;
    return b;
  };
  std::map<std::pair<std::string, int>, TopFlow> flows;  // by (raw fairness id, priority)
  auto flow = [&](const Sample& s) -> TopFlow* {
    const std::optional<int> p = priority(s);
    if (!p) return nullptr;
    const std::string id = Sv(s.label("fairness_id").value_or(""));
    TopFlow& f = flows[{id, *p}];
    f.id = Sanitize(id);
    f.priority = *p;
    return &f;
  };
  for (const auto& [family, s] : named("queue_size")) {
    (void)family;
    if (TopFlow* f = flow(*s)) f->queued = static_cast<int64_t>(s->value);
  }
  for (const auto& [family, s] : named("queue_bytes")) {
    (void)family;
    if (TopFlow* f = flow(*s)) f->bytes = static_cast<int64_t>(s->value);
  }
  for (const auto& [key, f] : flows) {
    TopFlowBand& b = band(f.priority);
    b.queued += f.queued;
    b.bytes += f.bytes;
    fc.queued += f.queued;
    fc.bytes += f.bytes;
    fc.flows.push_back(f);
  }
  std::stable_sort(fc.flows.begin(), fc.flows.end(), [](const TopFlow& a, const TopFlow& b) {
    if (a.queued != b.queued) return a.queued > b.queued;
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    return a.priority > b.priority;  // then by id: the map's order
  });
  for (const auto& [family, s] : named("capacity_utilization_requests")) {
    (void)family;
    if (const std::optional<int> p = priority(*s)) band(*p).requests_used = s->value;
  }
  for (const auto& [family, s] : named("capacity_utilization_bytes")) {
    (void)family;
    if (const std::optional<int> p = priority(*s)) band(*p).bytes_used = s->value;
  }
  for (auto& [p, b] : bands) fc.bands.push_back(b);
  for (const auto& [family, s] : named("global_capacity_utilization_requests")) {
    (void)family;
    fc.requests_used = s->value;
  }
  for (const auto& [family, s] : named("global_capacity_utilization_bytes")) {
    (void)family;
    fc.bytes_used = s->value;
  }
  for (const auto& [family, s] : named("pool_saturation")) {
    (void)family;
    const std::string_view stage = s->label("stage").value_or("effective");
    if (stage == "effective") fc.saturation = s->value;
    else if (stage == "prefill") fc.prefill_saturation = s->value;
    else if (stage == "decode") fc.decode_saturation = s->value;
  }
  for (const auto& [family, s] : named("requests_total")) {
    (void)family;
    outcomes[Sv(s->label("outcome").value_or("?"))] += static_cast<int64_t>(s->value);
  }
  for (const auto& [name, total] : outcomes) {
    TopFlowOutcome o{Sanitize(name), total, 0};
    auto prev = last.find(name);
    if (dt > 0) o.per_s = std::max<int64_t>(0, total - (prev == last.end() ? 0 : prev->second)) / dt;
    fc.outcomes.push_back(std::move(o));
  }
  std::vector<std::pair<double, double>> waits;
  for (const auto& [family, s] : named("request_queue_duration_seconds_bucket")) {
    (void)family;
    if (s->label("outcome").value_or("") != "Dispatched") continue;
    const std::string le = Sv(s->label("le").value_or("+Inf"));
    waits.emplace_back(le == "+Inf" ? std::numeric_limits<double>::infinity() : std::strtod(le.c_str(), nullptr),
                       s->value);
  }
  // The largest bound is +Inf, whose count is every dispatched request.
  if (!waits.empty() && std::max_element(waits.begin(), waits.end())->second > 0) {
    fc.wait_p50_s = Quantile(waits, 0.5);
    fc.wait_p99_s = Quantile(waits, 0.99);
  }
  return fc;
}

}  // namespace

std::string_view TopSortName(TopSort s) {
  switch (s) {
    case TopSort::kAddress: return "endpoint";
    case TopSort::kQueue: return "queue";
    case TopSort::kKvCache: return "kv";
    case TopSort::kInflight: return "in-flight";
    case TopSort::kPicks: return "picks/s";
  }
  return "endpoint";
}

absl::Status TopModel::Update(std::string_view metrics_text, std::string_view decisions_json,
                              std::string_view decisions_error, double now_s) {
  absl::StatusOr<MetricFamilies> parsed = ParsePrometheusText(metrics_text, ParseOptions{.lenient = true});
  if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat("/metrics: ", parsed.status().message()));
  if (parsed->SamplesNamed("epp_requests_total").empty())
    return absl::InvalidArgumentError("/metrics: no epp_requests_total: not an eppctl serve metrics port?");
  TopState next;
  next.polls = state_.polls + 1;
  std::map<std::string, TopEndpoint> rows;
  auto per_endpoint = [&](std::string_view name, auto apply) {
    for (const auto& [family, sample] : parsed->SamplesNamed(name)) {
      (void)family;
      std::optional<std::string_view> ep = sample->label("endpoint");
      if (!ep) continue;
      TopEndpoint& row = rows[Sv(*ep)];
      row.address = Sv(*ep);
      apply(row, sample->value);
    }
  };
  per_endpoint("epp_endpoint_waiting_queue_size", [](TopEndpoint& r, double v) { r.waiting = v; });
  per_endpoint("epp_endpoint_running_requests", [](TopEndpoint& r, double v) { r.running = v; });
  per_endpoint("epp_endpoint_kv_cache_usage", [](TopEndpoint& r, double v) { r.kv_cache = v; });
  per_endpoint("epp_endpoint_metrics_age_seconds", [](TopEndpoint& r, double v) { r.metrics_age_s = v; });
  per_endpoint("epp_endpoint_metrics_fresh", [](TopEndpoint& r, double v) { r.fresh = v > 0; });
  per_endpoint("epp_endpoint_unreachable", [](TopEndpoint& r, double v) { r.unreachable = v > 0; });
  per_endpoint("epp_endpoint_scrape_errors_total", [](TopEndpoint& r, double v) { r.scrape_errors = static_cast<int64_t>(v); });
  per_endpoint("epp_endpoint_inflight_requests", [](TopEndpoint& r, double v) { r.inflight = v; });
  std::map<std::string, Counts> counts;
  per_endpoint("epp_endpoint_picks_total", [&](TopEndpoint& r, double v) {
    r.picks_total = static_cast<int64_t>(v);
    counts[r.address].picks = r.picks_total;
  });
  per_endpoint("epp_endpoint_prefix_blocks_total", [&](TopEndpoint& r, double v) { counts[r.address].blocks = static_cast<int64_t>(v); });
  per_endpoint("epp_endpoint_prefix_match_blocks_total",
               [&](TopEndpoint& r, double v) { counts[r.address].matched = static_cast<int64_t>(v); });

  const double dt = state_.polls > 0 ? now_s - last_s_ : 0;
  for (auto& [address, row] : rows) {
    const Counts c = counts[address];
    auto prev = last_.find(address);
    const Counts p = prev != last_.end() && dt > 0 ? prev->second : Counts{};
    if (dt > 0 && prev != last_.end()) row.picks_per_s = std::max<int64_t>(0, c.picks - p.picks) / dt;
    // The hit rate of the interval's picks; with none, the endpoint's rate since the server started.
    const int64_t blocks = c.blocks - p.blocks, matched = c.matched - p.matched;
    if (blocks > 0) row.prefix_hit = static_cast<double>(matched) / static_cast<double>(blocks);
    else if (c.blocks > 0) row.prefix_hit = static_cast<double>(c.matched) / static_cast<double>(c.blocks);
    next.endpoints.push_back(row);
  }
  int64_t requests = 0;
  for (const auto& [family, sample] : parsed->SamplesNamed("epp_requests_total")) {
    (void)family;
    const std::string outcome = Sv(sample->label("outcome").value_or("?"));
    next.outcomes[outcome] = static_cast<int64_t>(sample->value);
    requests += static_cast<int64_t>(sample->value);
  }
  if (dt > 0) next.requests_per_s = std::max<int64_t>(0, requests - last_requests_) / dt;
  for (const auto& [family, sample] : parsed->SamplesNamed("epp_streams_active")) {
    (void)family;
    next.streams_active = static_cast<int64_t>(sample->value);
  }
  for (const auto& [family, sample] : parsed->SamplesNamed("epp_info")) {
    (void)family;
    next.version = Sv(sample->label("version").value_or(""));
  }
  std::vector<std::pair<double, double>> buckets;
  for (const auto& [family, sample] : parsed->SamplesNamed("epp_pick_duration_seconds_bucket")) {
    (void)family;
    const std::string le = Sv(sample->label("le").value_or("+Inf"));
    const double bound = le == "+Inf" ? std::numeric_limits<double>::infinity() : std::strtod(le.c_str(), nullptr);
    buckets.emplace_back(bound, sample->value);
  }
  next.pick_p50_us = Quantile(buckets, 0.5) * 1e6;
  next.pick_p99_us = Quantile(buckets, 0.99) * 1e6;
  std::map<std::string, int64_t> flow_outcomes;
  next.flow_control = ParseFlowControl(*parsed, dt, last_flow_outcomes_, flow_outcomes);

  // Decisions: merged by id, so a poll that returns only newer ones keeps the older rows.
  if (!decisions_error.empty()) {
    next.decisions_note = std::string(decisions_error);
  } else if (!decisions_json.empty()) {
    nlohmann::json j = nlohmann::json::parse(decisions_json, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("decisions") || !j["decisions"].is_array()) {
      next.decisions_note = "/debug/decisions: not a decision list";
    } else {
      next.decisions_seen = j.value("seen", uint64_t{0});
      next.decisions_kept = j.value("kept", uint64_t{0});
      for (const auto& d : j["decisions"]) {
        if (!d.is_object() || !d.contains("id") || !d["id"].is_number_unsigned()) continue;
        TopDecision t;
        t.id = d["id"].get<uint64_t>();
        t.unix_ms = d.value("unix_ms", int64_t{0});
        t.model = d.value("model", "");
        t.request_id = d.value("request_id", "");
        t.status = d.value("status", 0);
        if (d.contains("endpoint") && d["endpoint"].is_string()) t.endpoint = d["endpoint"].get<std::string>();
        t.reason = d.value("reason", "");
        t.pick_us = d.value("pick_us", int64_t{0});
        t.prefix_blocks = d.value("prefix_blocks", 0);
        t.prefix_match_blocks = d.value("prefix_match_blocks", 0);
        if (d.contains("summary") && d["summary"].is_object()) {
          const auto& s = d["summary"];
          t.kind = s.value("kind", "");
          t.runner_up = s.value("runner_up", "");
          t.deciding_scorer = s.value("deciding_scorer", "");
          t.winner_score = s.value("winner_score", 0.0);
          t.runner_up_score = s.value("runner_up_score", 0.0);
        }
        decisions_[t.id] = std::move(t);
      }
      while (decisions_.size() > kDecisionsKept) decisions_.erase(decisions_.begin());
    }
  }
  for (const auto& [id, d] : decisions_) next.decisions.push_back(d);
  last_ = std::move(counts);
  last_flow_outcomes_ = std::move(flow_outcomes);
  last_s_ = now_s;
  last_requests_ = requests;
  state_ = std::move(next);
  return absl::OkStatus();
}

std::string RenderTop(const TopState& s, const TopView& v, int width, int height) {
  width = std::max(width, 20);
  height = std::max(height, 3);
  std::vector<std::string> lines;
  auto add = [&](std::string line) { lines.push_back(Sanitize(Fit(std::move(line), static_cast<size_t>(width)))); };
  const auto outcome = [&](const char* k) {
    auto it = s.outcomes.find(k);
    return it == s.outcomes.end() ? int64_t{0} : it->second;
  };
  char buf[256];
  std::snprintf(buf, sizeof buf, "epp top  %s  %s  %.1f req/s  streams %lld  picked %lld  429 %lld  503 %lld  400 %lld  pick p50 %.0f us p99 %.0f us",
                v.target.c_str(), s.version.c_str(), s.requests_per_s, static_cast<long long>(s.streams_active),
                static_cast<long long>(outcome("200")), static_cast<long long>(outcome("429")),
                static_cast<long long>(outcome("503")), static_cast<long long>(outcome("400")), s.pick_p50_us, s.pick_p99_us);
  add(buf);
  if (!v.detail.empty()) {
    add("decision explanation   (Esc or Enter: back, q: quit)");
    for (absl::string_view l : absl::StrSplit(v.detail, '\n')) {
      if (static_cast<int>(lines.size()) >= height - 1) break;
      add(std::string(l));
    }
  } else {
    add("");
    std::vector<TopEndpoint> rows = s.endpoints;
    auto key = [&](const TopEndpoint& e) -> double {
      switch (v.sort) {
        case TopSort::kQueue: return e.waiting.value_or(-1);
        case TopSort::kKvCache: return e.kv_cache.value_or(-1);
        case TopSort::kInflight: return e.inflight;
        case TopSort::kPicks: return e.picks_per_s;
        case TopSort::kAddress: return 0;
      }
      return 0;
    };
    std::stable_sort(rows.begin(), rows.end(), [&](const TopEndpoint& a, const TopEndpoint& b) {
      if (v.sort == TopSort::kAddress) return v.descending ? a.address > b.address : a.address < b.address;
      return v.descending ? key(a) > key(b) : key(a) < key(b);
    });
    add(absl::StrCat(Pad("ENDPOINT", 24), Pad("QUEUE", 7, true), Pad("RUN", 6, true), Pad("KV", 7, true),
                     Pad("INFL", 6, true), Pad("PICK/S", 8, true), Pad("PREFIX", 8, true), Pad("AGE", 8, true),
                     Pad("ERR", 6, true), "  STATE"));
    // The flow-control section: a title, a table of the bands and totals beside the longest flows,
    // the outcomes and a blank line; its table takes at most a sixth of the frame (at least two rows).
    int fc_rows = 0, fc_lines = 0;
    if (s.flow_control) {
      const TopFlowControl& fc = *s.flow_control;
      const size_t wanted = std::max(fc.bands.size() + 1, std::min<size_t>(fc.flows.size(), 3));
      fc_rows = static_cast<int>(std::min<size_t>(wanted, static_cast<size_t>(std::max(2, height / 6))));
      fc_lines = fc_rows + 4;
    }
    const int decision_rows = std::max(3, (height - 6 - fc_lines) / 2);
    const int endpoint_rows = std::max(1, height - 6 - fc_lines - decision_rows);
    int shown = 0;
    for (const TopEndpoint& e : rows) {
      if (shown++ >= endpoint_rows) {
        add(absl::StrCat("  ... ", rows.size() - static_cast<size_t>(endpoint_rows), " more"));
        break;
      }
      const std::string state = e.unreachable ? "unreachable" : e.fresh ? "ok" : "stale";
      add(absl::StrCat(Pad(e.address, 24), Pad(Opt(e.waiting, "%.0f"), 7, true), Pad(Opt(e.running, "%.0f"), 6, true),
                       Pad(e.kv_cache ? Opt(*e.kv_cache * 100, "%.0f%%") : "-", 7, true),
                       Pad(Opt(e.inflight, "%.0f"), 6, true), Pad(Opt(e.picks_per_s, "%.1f"), 8, true),
                       Pad(e.prefix_hit ? Opt(*e.prefix_hit * 100, "%.0f%%") : "-", 8, true),
                       Pad(e.metrics_age_s ? Opt(*e.metrics_age_s * 1000, "%.0fms") : "never", 8, true),
                       Pad(std::to_string(e.scrape_errors), 6, true), "  ", state));
    }
    add("");
    if (s.flow_control) {
      const TopFlowControl& fc = *s.flow_control;
      const auto pct = [](const std::optional<double>& v) { return v ? Opt(*v * 100, "%.0f%%") : std::string("-"); };
      std::string title = absl::StrCat("FLOW CONTROL   saturation ", Opt(fc.saturation, "%.2f"));
      if (fc.prefill_saturation || fc.decode_saturation)
        absl::StrAppend(&title, " (prefill ", Opt(fc.prefill_saturation, "%.2f"), ", decode ",
                        Opt(fc.decode_saturation, "%.2f"), ")");
      if (fc.wait_p50_s)
        absl::StrAppend(&title, "   wait p50 ", Ms(*fc.wait_p50_s), " p99 ", Ms(fc.wait_p99_s.value_or(0)), " (dispatched)");
      add(title);
      add(absl::StrCat("  ", Pad("BAND", 8), Pad("QUEUED", 8, true), Pad("BYTES", 11, true), Pad("REQ%", 7, true),
                       Pad("BYTES%", 8, true), "    ", Pad("FLOW", 24), Pad("BAND", 6, true), Pad("QUEUED", 8, true),
                       Pad("BYTES", 11, true)));
      // Left: the bands, then the layer's totals against its global limits. Right: the longest flows.
      const size_t rows = static_cast<size_t>(fc_rows);
      const auto band_row = [&](const std::string& name, int64_t queued, int64_t bytes, const std::optional<double>& req,
                                const std::optional<double>& byt) {
        return absl::StrCat(Pad(name, 8), Pad(std::to_string(queued), 8, true), Pad(Bytes(static_cast<double>(bytes)), 11, true),
                            Pad(pct(req), 7, true), Pad(pct(byt), 8, true));
      };
      std::vector<std::string> left;
      const size_t bands_shown = fc.bands.size() + 1 > rows ? rows - 2 : fc.bands.size();
      for (size_t k = 0; k < bands_shown; ++k) {
        const TopFlowBand& b = fc.bands[k];
        left.push_back(band_row(std::to_string(b.priority), b.queued, b.bytes, b.requests_used, b.bytes_used));
      }
      if (bands_shown < fc.bands.size()) left.push_back(Pad(absl::StrCat("... ", fc.bands.size() - bands_shown, " more bands"), 42));
      left.push_back(band_row("all", fc.queued, fc.bytes, fc.requests_used, fc.bytes_used));
      std::vector<std::string> right;
      const size_t flows_shown = fc.flows.size() > rows ? rows - 1 : fc.flows.size();
      for (size_t k = 0; k < flows_shown; ++k) {
        const TopFlow& f = fc.flows[k];
        right.push_back(absl::StrCat(Pad(f.id, 24), Pad(std::to_string(f.priority), 6, true),
                                     Pad(std::to_string(f.queued), 8, true), Pad(Bytes(static_cast<double>(f.bytes)), 11, true)));
      }
      if (flows_shown < fc.flows.size()) right.push_back(absl::StrCat("... ", fc.flows.size() - flows_shown, " more flows"));
      if (fc.flows.empty()) right.push_back("(no requests queued)");
      for (size_t k = 0; k < rows; ++k) {
        std::string row = absl::StrCat("  ", k < left.size() ? left[k] : std::string(42, ' '), "    ",
                                       k < right.size() ? right[k] : "");
        while (!row.empty() && row.back() == ' ') row.pop_back();
        add(std::move(row));
      }
      // Drops first (every outcome but Dispatched), then what went out.
      std::string outcomes = "  dropped/s (total):";
      const TopFlowOutcome* dispatched = nullptr;
      bool dropped = false;
      for (const TopFlowOutcome& o : fc.outcomes) {
        if (o.outcome == "Dispatched") {
          dispatched = &o;
          continue;
        }
        dropped = true;
        absl::StrAppend(&outcomes, "  ", o.outcome, " ", Opt(o.per_s, "%.1f"), " (", o.total, ")");
      }
      if (!dropped) absl::StrAppend(&outcomes, " none");
      absl::StrAppend(&outcomes, "    dispatched/s ", Opt(dispatched ? dispatched->per_s : 0, "%.1f"), " (",
                      dispatched ? dispatched->total : 0, ")");
      add(outcomes);
      add("");
    }
    add(absl::StrCat("DECISIONS (newest first; ", s.decisions_kept, " kept of ", s.decisions_seen,
                     " seen)   sort: ", std::string(TopSortName(v.sort)), v.descending ? " desc" : "",
                     "   keys: s sort, r reverse, up/down select, Enter explain, q quit"));
    if (!s.decisions_note.empty()) add("  " + s.decisions_note);
    add(absl::StrCat("  ", Pad("ID", 7), Pad("STATUS", 7), Pad("WINNER", 24), Pad("RUNNER-UP", 24), Pad("DECIDED BY", 26),
                     Pad("PICK", 8, true), "  MODEL"));
    int n = 0;
    for (auto it = s.decisions.rbegin(); it != s.decisions.rend() && n < decision_rows; ++it, ++n) {
      const TopDecision& d = *it;
      std::string decided = d.kind == "margin" ? d.deciding_scorer : d.kind.empty() ? std::string("-") : d.kind;
      if (d.status != 200) decided = Fit(d.reason, 26);
      add(absl::StrCat(n == v.selected ? "> " : "  ", Pad(std::to_string(d.id), 7), Pad(std::to_string(d.status), 7),
                       Pad(d.endpoint.empty() ? "-" : d.endpoint, 24), Pad(d.runner_up.empty() ? "-" : d.runner_up, 24),
                       Pad(decided, 26), Pad(absl::StrCat(d.pick_us, "us"), 8, true), "  ", d.model));
    }
  }
  while (static_cast<int>(lines.size()) < height - 1) lines.emplace_back();
  if (static_cast<int>(lines.size()) > height - 1) lines.resize(static_cast<size_t>(height - 1));
  add(v.error.empty() ? absl::StrCat("polls ", s.polls) : "error: " + v.error);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += '\n';
    out += lines[i];
  }
  return out;
}

}  // namespace epp
