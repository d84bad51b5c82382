// ReplayReportToJson and ReplayReportToText: a ReplayReport as eppctl replay writes it (--json, and
// the table on stdout). ReplayReportToHtml is in html_report.cc; the run itself in replay.cc.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "epp/tools/replay.h"
#include "replay/render.h"

namespace epp {
namespace {

using internal::Num;

// A left-aligned table with columns two spaces apart, each line prefixed with `indent`.
void AppendTable(std::string& out, const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                 const std::string& indent) {
  std::vector<size_t> w(header.size());
  for (size_t c = 0; c < header.size(); ++c) w[c] = header[c].size();
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) w[c] = std::max(w[c], row[c].size());
  auto line = [&](const std::vector<std::string>& row) {
    out += indent;
    for (size_t c = 0; c < row.size(); ++c) absl::StrAppend(&out, row[c], std::string(w[c] - row[c].size() + 2, ' '));
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += "\n";
  };
  line(header);
  for (const auto& row : rows) line(row);
}

}  // namespace

std::string ReplayReportToJson(const ReplayReport& report, int indent) {
  using json = nlohmann::ordered_json;
  auto pct = [](const Percentiles& p) { return json{{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"mean", p.mean}}; };
  auto groups = [&](const std::vector<ReplayGroupReport>& gs) {
    json a = json::array();
    for (const ReplayGroupReport& g : gs)
      a.push_back({{"name", g.name}, {"requests", g.requests}, {"completed", g.completed}, {"dropped", g.dropped},
                   {"ttft_s", pct(g.ttft_s)}, {"wait_s", pct(g.wait_s)}, {"served_rps", g.served_rps}, {"demand_rps", g.demand_rps}});
    return a;
  };
  json j;
  j["trace"] = {{"requests", report.trace.requests},
                {"blocks", report.trace.blocks},
                {"prompt_tokens", report.trace.prompt_tokens},
                {"duration_s", report.trace.duration_s},
                {"upper_bound_block_hit_rate", report.trace.upper_bound_block_hit_rate},
                {"pooled_cache_bound_block_hit_rate", report.trace.pooled_cache_bound_block_hit_rate},
                {"ttft_bound_s", pct(report.trace.ttft_bound_s)}};
  json ps = json::array();
  for (const ReplayPolicyReport& p : report.policies) {
    ps.push_back({{"name", p.name},
                  {"completed", p.completed},
                  {"failed", p.failed},
                  {"shed", p.shed},
                  {"block_hit_rate", p.block_hit_rate},
                  {"token_hit_rate", p.token_hit_rate},
                  {"ttft_s", pct(p.ttft_s)},
                  {"ttft_over_bound", pct(p.ttft_over_bound)},
                  {"e2e_s", pct(p.e2e_s)},
                  {"queue_s", pct(p.queue_s)},
                  {"itl_s", pct(p.itl_s)},
                  {"disaggregated_pool", p.disaggregated_pool},
                  {"disaggregated", p.disaggregated},
                  {"kv_transfer_s_mean", p.kv_transfer_s_mean},
                  {"server_roles", p.server_roles},
                  {"throughput_rps", p.throughput_rps},
                  {"load_max_over_mean", p.load_max_over_mean},
                  {"prediction_error_rate", p.prediction_error_rate},
                  {"precise", p.precise},
                  {"requests_per_server", p.requests_per_server},
                  {"kv_usage_mean_per_server", p.kv_usage_mean_per_server},
                  {"hit_rate_timeline", p.hit_rate_timeline},
                  {"ttft_samples_s", p.ttft_samples_s},
                  {"flow_control", p.flow_control},
                  {"flow_wait_s", pct(p.flow_wait_s)},
                  {"drops", p.drops},
                  {"bands", groups(p.bands)},
                  {"tenants", groups(p.tenants)},
                  {"jain_fairness", p.jain_fairness},
                  {"slo", p.slo_requests == 0 ? json(nullptr)
                                              : json{{"requests", p.slo_requests},
                                                     {"ttft_attainment", p.slo_ttft_attainment},
                                                     {"tpot_attainment", p.slo_tpot_attainment},
                                                     {"attainment", p.slo_attainment},
                                                     {"goodput_rps", p.goodput_rps}}},
                  {"flags", [&] {
                     json f = json::array();
                     for (const ReplayFlag& x : p.flags) f.push_back({{"code", x.code}, {"message", x.message}});
                     return f;
                   }()},
                  {"wall_s", p.wall_s}});
  }
  j["policies"] = ps;
  return j.dump(indent);
}

namespace replay_internal {

std::string RatioToBound(const Percentiles& over_bound) {
  if (!(over_bound.p90 > 0)) return "-";
  return absl::StrCat(Num(over_bound.p50), "/", Num(over_bound.p90), "/", Num(over_bound.p99), "x");
}

}  // namespace replay_internal

std::string ReplayReportToText(const ReplayReport& r) {
  std::string out = absl::StrCat("trace: ", r.trace.requests, " requests over ", Num(r.trace.duration_s), " s, ", r.trace.blocks,
                                 " prompt blocks; block hit-rate bounds: upper ", Num(r.trace.upper_bound_block_hit_rate),
                                 ", pooled cache ", Num(r.trace.pooled_cache_bound_block_hit_rate), "\n");
  if (r.trace.ttft_bound_s.p50 > 0)
    absl::StrAppend(&out, "TTFT bound (no queueing, infinite cache): p50 ", Num(r.trace.ttft_bound_s.p50), " p90 ",
                    Num(r.trace.ttft_bound_s.p90), " p99 ", Num(r.trace.ttft_bound_s.p99), " s\n");
  out += "\n";
  const std::vector<std::string> header = {"policy", "blocks hit", "tokens hit", "TTFT p50", "p90", "p99", "p50/p90/p99 over bound", "E2E p50", "p99",
                                           "req/s", "load max/mean", "mispredicted", "failed", "shed"};
  std::vector<std::vector<std::string>> rows;
  for (const ReplayPolicyReport& p : r.policies) {
    rows.push_back({p.name, Num(p.block_hit_rate), Num(p.token_hit_rate), Num(p.ttft_s.p50), Num(p.ttft_s.p90), Num(p.ttft_s.p99),
                    replay_internal::RatioToBound(p.ttft_over_bound), Num(p.e2e_s.p50), Num(p.e2e_s.p99), Num(p.throughput_rps), Num(p.load_max_over_mean),
                    std::isnan(p.prediction_error_rate) ? "n/a" : Num(p.prediction_error_rate), std::to_string(p.failed), std::to_string(p.shed)});
  }
  AppendTable(out, header, rows, "");
  bool any_flag = false;
  for (const ReplayPolicyReport& p : r.policies)
    for (const ReplayFlag& f : p.flags) {
      if (!any_flag) out += "\nflags:\n";
      any_flag = true;
      absl::StrAppend(&out, "  ", p.name, ": ", f.code, ": ", f.message, "\n");
    }
  for (const ReplayPolicyReport& p : r.policies) {
    if (!p.disaggregated_pool) continue;
    int prefill = 0, decode = 0;
    int64_t prefill_requests = 0, decode_requests = 0;
    for (size_t i = 0; i < p.server_roles.size(); ++i) {
      const bool is_prefill = p.server_roles[i] == "prefill";
      (is_prefill ? prefill : decode)++;
      (is_prefill ? prefill_requests : decode_requests) += i < p.requests_per_server.size() ? p.requests_per_server[i] : 0;
    }
    absl::StrAppend(&out, "\n", p.name, ": P/D pool (", prefill, " prefill + ", decode, " decode servers): ", p.disaggregated, " of ",
                    p.completed, " requests prefilled remotely, KV transfer mean ", Num(p.kv_transfer_s_mean), " s; stage requests ",
                    prefill_requests, " on prefill, ", decode_requests, " on decode servers; ITL p50 ", Num(p.itl_s.p50), " p99 ",
                    Num(p.itl_s.p99), "\n");
  }
  if (std::any_of(r.policies.begin(), r.policies.end(), [](const ReplayPolicyReport& p) { return p.slo_requests > 0; })) {
    out += "\nSLO attainment (share of the requests carrying each SLO that met it; dropped requests miss):\n";
    auto share = [](double x) { return std::isnan(x) ? std::string("-") : Num(x); };
    std::vector<std::vector<std::string>> rows;
    for (const ReplayPolicyReport& p : r.policies)
      rows.push_back({p.name, std::to_string(p.slo_requests), share(p.slo_ttft_attainment), share(p.slo_tpot_attainment),
                      share(p.slo_attainment), Num(p.goodput_rps)});
    AppendTable(out, {"policy", "with SLO", "TTFT met", "TPOT met", "all met", "goodput req/s"}, rows, "  ");
  }
  for (const ReplayPolicyReport& p : r.policies) {
    if (p.bands.empty() && p.tenants.empty()) continue;
    absl::StrAppend(&out, "\n", p.name, ":");
    if (p.flow_control)
      absl::StrAppend(&out, " flow control, time queued in the EPP p50 ", Num(p.flow_wait_s.p50), " p99 ", Num(p.flow_wait_s.p99), " s;");
    if (p.drops.empty()) {
      out += " no request dropped";
    } else {
      out += " dropped:";
      for (const auto& [reason, n] : p.drops) absl::StrAppend(&out, " ", reason, " ", n);
    }
    if (!std::isnan(p.jain_fairness) && !p.tenants.empty()) absl::StrAppend(&out, "; Jain's fairness index ", Num(p.jain_fairness));
    out += "\n";
    const std::vector<std::string> gh = {"requests", "completed", "dropped", "TTFT p50", "p99", "queued p50", "p99", "served/s", "demand/s"};
    auto group_rows = [&](const std::vector<ReplayGroupReport>& gs, const std::string& what) {
      if (gs.empty()) return;
      std::vector<std::string> h = {what};
      h.insert(h.end(), gh.begin(), gh.end());
      std::vector<std::vector<std::string>> gr;
      for (const ReplayGroupReport& g : gs)
        gr.push_back({g.name.empty() ? "(none)" : g.name, std::to_string(g.requests), std::to_string(g.completed), std::to_string(g.dropped),
                      Num(g.ttft_s.p50), Num(g.ttft_s.p99), Num(g.wait_s.p50), Num(g.wait_s.p99), Num(g.served_rps), Num(g.demand_rps)});
      AppendTable(out, h, gr, "  ");
    };
    group_rows(p.bands, "band");
    group_rows(p.tenants, "tenant");
  }
  out +=
      "\n(times in seconds of simulated time; figures come from the simulator's cost model, not GPUs; "
      "mispredicted: share of requests whose predicted prefix match was off by a block or more, n/a without a prefix "
      "producer)\n";
  return out;
}

}  // namespace epp
