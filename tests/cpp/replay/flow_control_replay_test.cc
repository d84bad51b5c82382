// Replay with llm-d's flow-control layer in virtual time: exact dispatch order and times on one
// server (the cost model of docs/sim.md: a lone 1000-token, 10-output request takes 56,050 us to
// its first token and 110,500 us to its end), TTL drops, fairness between tenants measured by
// Jain's index, per-band and per-tenant reports, and the tenant/priority mix of a trace.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

#include "epp/config.h"
#include "epp/tools/replay.h"
#include "flowcontrol/controller.h"

namespace epp {
namespace {

// A request with a prompt of its own (no prefix shared with any other): 1000 tokens, 10 out.
ReplayRequest Req(int64_t arrival_us, uint64_t id, int priority = 0, std::string tenant = "") {
  ReplayRequest r;
  r.arrival_us = arrival_us;
  r.segments = {{1000 + id, 1000}};
  r.prompt_tokens = 1000;
  r.output_tokens = 10;
  r.priority = priority;
  r.tenant = std::move(tenant);
  return r;
}

// One request in flight per endpoint; bands 10 and 0 with `fairness` (and llm-d's defaults).
std::string FlowConfig(const std::string& fairness = "global-strict-fairness-policy", const std::string& ttl = "") {
  return "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
         "featureGates: [flowControl]\n"
         "plugins:\n"
         "- type: concurrency-detector\n  parameters: {maxConcurrency: 1}\n"
         "- type: " + fairness + "\n"
         "- type: queue-scorer\n- type: max-score-picker\n"
         "schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n  - pluginRef: max-score-picker\n"
         "flowControl:\n" + (ttl.empty() ? "" : "  defaultRequestTTL: " + ttl + "\n") +
         "  saturationDetector: {pluginRef: concurrency-detector}\n"
         "  priorityBands:\n"
         "  - {priority: 10, fairnessPolicyRef: " + fairness + "}\n"
         "  - {priority: 0, fairnessPolicyRef: " + fairness + "}\n";
}

ReplayPolicy Policy(const std::string& name, const std::string& yaml) {
  absl::StatusOr<EppConfig> c = ParseConfig(yaml, name + ".yaml");
  EXPECT_TRUE(c.ok()) << c.status();
  return ReplayPolicy{name, c.ok() ? *std::move(c) : EppConfig{}};
}

ReplayPolicyReport ReplayOne(const std::vector<ReplayRequest>& trace, const ReplayPolicy& policy, int servers = 1) {
  ReplayOptions o;
  o.servers = servers;
  absl::StatusOr<ReplayReport> r = RunReplay(trace, {policy}, o);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok() || r->policies.empty()) return {};
  return r->policies.front();
}

const ReplayGroupReport* Group(const std::vector<ReplayGroupReport>& groups, const std::string& name) {
  for (const ReplayGroupReport& g : groups)
    if (g.name == name) return &g;
  return nullptr;
}

TEST(FlowControlReplayTest, HoldsRequestsOverCapacityThenHighPriorityFirstThenFcfs) {
  // r0 runs 0..110,500. r1, r2 (priority 0) and r3 (priority 10) wait in the EPP; as each request
  // ends, the next is dispatched at that microsecond: r3 at 110,500, r1 at 221,000, r2 at 331,500.
  const std::vector<ReplayRequest> trace = {Req(0, 0), Req(1000, 1), Req(2000, 2), Req(3000, 3, 10)};
  const ReplayPolicyReport p = ReplayOne(trace, Policy("fc", FlowConfig()));
  EXPECT_TRUE(p.flow_control);
  EXPECT_EQ(p.completed, 4);
  EXPECT_EQ(p.shed, 0);
  EXPECT_TRUE(p.drops.empty());
  ASSERT_EQ(p.bands.size(), 2u);
  EXPECT_EQ(p.bands[0].name, "10");  // highest priority first
  EXPECT_EQ(p.bands[1].name, "0");
  EXPECT_EQ(p.bands[0].requests, 1);
  EXPECT_EQ(p.bands[1].requests, 3);
  EXPECT_DOUBLE_EQ(p.bands[0].ttft_s.p50, (110500 + 56050 - 3000) / 1e6);
  EXPECT_DOUBLE_EQ(p.bands[0].wait_s.p50, (110500 - 3000) / 1e6);
  // Band 0: r0 at once, r1 after r3, r2 last: FCFS within the band.
  EXPECT_DOUBLE_EQ(p.bands[1].ttft_s.p50, (221000 + 56050 - 1000) / 1e6);
  EXPECT_NEAR(p.bands[1].ttft_s.mean, (56050 + (221000 + 56050 - 1000) + (331500 + 56050 - 2000)) / 3e6, 1e-9);
  EXPECT_NEAR(p.bands[1].wait_s.mean, (0 + 220000 + 329500) / 3e6, 1e-9);
  // The server ran one request at a time: no queueing on it.
  EXPECT_DOUBLE_EQ(p.queue_s.p99, 0);
  EXPECT_DOUBLE_EQ(p.flow_wait_s.p50, (110500 - 3000 + 220000) / 2e6);  // median of 0, 107,500, 220,000, 329,500
}

TEST(FlowControlReplayTest, WithoutTheLayerEveryRequestGoesToTheServerAtOnce) {
  const std::vector<ReplayRequest> trace = {Req(0, 0), Req(1000, 1), Req(2000, 2), Req(3000, 3, 10)};
  std::string yaml = FlowConfig();
  yaml.replace(yaml.find("featureGates: [flowControl]\n"), 28, "");
  const ReplayPolicyReport p = ReplayOne(trace, Policy("no-fc", yaml));
  EXPECT_FALSE(p.flow_control);
  EXPECT_EQ(p.completed, 4);
  EXPECT_GT(p.queue_s.p99, 0);  // all four on the server together: batched, not held
  ASSERT_EQ(p.bands.size(), 2u);  // two priorities: bands are reported anyway
  EXPECT_DOUBLE_EQ(p.bands[0].wait_s.p50, 0);
}

TEST(FlowControlReplayTest, RequestsWaitingPastTheirTtlAreDroppedWithTheReferencesReason) {
  // TTL 100 ms: r1 (arrived at 1,000) and r2 (2,000) cannot start before 110,500: both expire.
  const std::vector<ReplayRequest> trace = {Req(0, 0), Req(1000, 1), Req(2000, 2)};
  const ReplayPolicyReport p = ReplayOne(trace, Policy("ttl", FlowConfig("global-strict-fairness-policy", "100ms")));
  EXPECT_EQ(p.completed, 1);
  EXPECT_EQ(p.shed, 2);
  const std::string reason(flowcontrol::AnswerFor(flowcontrol::Outcome::kEvictedTTL).reason);
  ASSERT_EQ(p.drops.count(reason), 1u) << reason;
  EXPECT_EQ(p.drops.at(reason), 2);
  ASSERT_EQ(p.bands.size(), 1u);
  EXPECT_EQ(p.bands[0].dropped, 2);
}

// Tenant a asks five times as often as b, together far above what one server does (about 9
// requests per second): round robin between flows serves both alike, a global FCFS order serves
// them in proportion to what they ask.
std::vector<ReplayRequest> Unequal() {
  std::vector<ReplayRequest> trace;
  uint64_t id = 0;
  for (int64_t t = 0; t < 5'000'000; t += 20'000) {
    trace.push_back(Req(t, id++, 0, "a"));
    if (t % 100'000 == 0) trace.push_back(Req(t + 1, id++, 0, "b"));
  }
  return trace;
}

TEST(FlowControlReplayTest, RoundRobinFairnessServesUnequalTenantsAlikeAndJainSaysSo) {
  const std::vector<ReplayRequest> trace = Unequal();
  const ReplayPolicyReport rr = ReplayOne(trace, Policy("rr", FlowConfig("round-robin-fairness-policy")));
  const ReplayPolicyReport fcfs = ReplayOne(trace, Policy("strict", FlowConfig("global-strict-fairness-policy")));
  for (const ReplayPolicyReport* p : {&rr, &fcfs}) {
    ASSERT_EQ(p->tenants.size(), 2u);
    EXPECT_EQ(p->completed, static_cast<int64_t>(trace.size()));  // the default 60 s TTL: all served in the end
  }
  const ReplayGroupReport* rr_a = Group(rr.tenants, "a");
  const ReplayGroupReport* rr_b = Group(rr.tenants, "b");
  const ReplayGroupReport* st_b = Group(fcfs.tenants, "b");
  ASSERT_TRUE(rr_a && rr_b && st_b);
  EXPECT_NEAR(rr_a->demand_rps, 5 * rr_b->demand_rps, 0.05 * rr_a->demand_rps);
  // Round robin: b gets as much service as a while both are backlogged.
  EXPECT_NEAR(rr_b->served_rps, rr_a->served_rps, 0.15 * rr_a->served_rps);
  EXPECT_GT(rr.jain_fairness, 0.95);
  // FCFS across flows: b gets about a sixth, and waits behind a's backlog.
  EXPECT_LT(st_b->served_rps, 0.5 * rr_b->served_rps);
  EXPECT_LT(fcfs.jain_fairness, 0.85);
  EXPECT_LT(rr_b->ttft_s.p50, 0.5 * st_b->ttft_s.p50);
}

TEST(FlowControlReplayTest, JainIsUndefinedForOneTenantAndTenantsAreReportedWithoutTheLayer) {
  const std::vector<ReplayRequest> one = {Req(0, 0, 0, "solo"), Req(1000, 1, 0, "solo")};
  ReplayPolicyReport p = ReplayOne(one, Policy("fc", FlowConfig()));
  ASSERT_EQ(p.tenants.size(), 1u);
  EXPECT_TRUE(std::isnan(p.jain_fairness));
  // Without the layer: two tenants, both served at once, each its demand: index 1.
  std::string yaml = FlowConfig();
  yaml.replace(yaml.find("featureGates: [flowControl]\n"), 28, "");
  p = ReplayOne({Req(0, 0, 0, "x"), Req(1000, 1, 0, "y"), Req(2000, 2, 0, "x"), Req(3000, 3, 0, "y")}, Policy("plain", yaml), 4);
  ASSERT_EQ(p.tenants.size(), 2u);
  EXPECT_NEAR(p.jain_fairness, 1.0, 1e-9);
  // And the JSON report carries the groups.
  ReplayReport report;
  report.policies.push_back(p);
  const nlohmann::json j = nlohmann::json::parse(ReplayReportToJson(report));
  EXPECT_EQ(j["policies"][0]["tenants"].size(), 2u);
  EXPECT_EQ(j["policies"][0]["tenants"][0]["name"], "x");
  EXPECT_FALSE(j["policies"][0]["flow_control"].get<bool>());
  EXPECT_NE(ReplayReportToText(report).find("Jain's fairness index 1"), std::string::npos) << ReplayReportToText(report);
}

TEST(TenantMixTest, ParsesCountsWeightsAndSharesAndNamesBadItems) {
  absl::StatusOr<TenantMix> m = ParseTenantMix("3", "");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->tenants.size(), 3u);
  EXPECT_EQ(m->tenants[2].first, "t3");
  m = ParseTenantMix("big=5,small", "1=0.1,0=0.9");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->tenants[0], (std::pair<std::string, double>{"big", 5}));
  EXPECT_EQ(m->tenants[1], (std::pair<std::string, double>{"small", 1}));
  EXPECT_EQ(m->priorities[0], (std::pair<int, double>{1, 0.1}));
  for (auto [t, p, what] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"0", "", "--tenants: '0'"},
           {"a=0", "", "--tenants: 'a=0'"},
           {"a,a", "", "tenant 'a' given twice"},
           {"", "1", "--priority-mix: '1'"},
           {"", "x=0.5", "--priority-mix: 'x=0.5'"},
           {"", "1.5=1", "--priority-mix: '1.5=1'"},
           {"", "1=0.5,1=0.5", "priority 1 given twice"}}) {
    absl::StatusOr<TenantMix> bad = ParseTenantMix(t, p);
    ASSERT_FALSE(bad.ok()) << t << " " << p;
    EXPECT_NE(bad.status().message().find(what), std::string::npos) << bad.status();
  }
}

TEST(TenantMixTest, AssignsByWeightAndShareDeterministically) {
  std::vector<ReplayRequest> trace(10000);
  absl::StatusOr<TenantMix> m = ParseTenantMix("a=3,b=1", "1=0.1,0=0.9", 7);
  ASSERT_TRUE(m.ok());
  MixTenants(trace, *m);
  std::map<std::string, int> tenants;
  std::map<int, int> priorities;
  for (const ReplayRequest& r : trace) {
    tenants[r.tenant]++;
    priorities[r.priority]++;
  }
  EXPECT_NEAR(tenants["a"], 7500, 300);
  EXPECT_NEAR(tenants["b"], 2500, 300);
  EXPECT_NEAR(priorities[1], 1000, 150);
  EXPECT_EQ(tenants.size(), 2u);
  std::vector<ReplayRequest> again(10000);
  MixTenants(again, *m);
  for (size_t i = 0; i < trace.size(); ++i) ASSERT_EQ(again[i].tenant, trace[i].tenant);
  // Only what is set is assigned.
  absl::StatusOr<TenantMix> only = ParseTenantMix("", "5=1");
  ASSERT_TRUE(only.ok());
  MixTenants(trace, *only);
  EXPECT_EQ(trace[0].priority, 5);
  EXPECT_FALSE(trace[0].tenant.empty());
}

}  // namespace
}  // namespace epp

namespace epp {
namespace {

// SLO attainment and goodput: two lone requests on one server, 1 s apart, each with TTFT 56,050 us
// and TPOT (110,500 - 56,050) / 9 = 6,050 us.
TEST(SloReplayTest, AttainmentAndGoodputCountWhoMetTheirSlos) {
  std::vector<ReplayRequest> trace = {Req(0, 0), Req(1'000'000, 1), Req(2'000'000, 2)};
  trace[0].slo_ttft_ms = 60;  // met
  trace[0].slo_tpot_ms = 7;   // met
  trace[1].slo_ttft_ms = 50;  // missed
  trace[1].slo_tpot_ms = 6;   // missed
  // trace[2] carries none: not counted.
  absl::StatusOr<EppConfig> c = ParseConfig(
      "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: round-robin-picker\n",
      "rr.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const ReplayPolicyReport p = ReplayOne(trace, ReplayPolicy{"rr", *c});
  EXPECT_EQ(p.slo_requests, 2);
  EXPECT_DOUBLE_EQ(p.slo_ttft_attainment, 0.5);
  EXPECT_DOUBLE_EQ(p.slo_tpot_attainment, 0.5);
  EXPECT_DOUBLE_EQ(p.slo_attainment, 0.5);
  EXPECT_DOUBLE_EQ(p.goodput_rps, 1 / 2.1105);  // one request met all, over first arrival .. last finish
  // TTFT only: the TPOT share is undefined.
  trace[0].slo_tpot_ms = trace[1].slo_tpot_ms = -1;
  trace[1].slo_ttft_ms = 57;  // 56.05 ms: met
  const ReplayPolicyReport q = ReplayOne(trace, ReplayPolicy{"rr", *c});
  EXPECT_DOUBLE_EQ(q.slo_ttft_attainment, 1.0);
  EXPECT_TRUE(std::isnan(q.slo_tpot_attainment));
  EXPECT_DOUBLE_EQ(q.slo_attainment, 1.0);
  ReplayReport report;
  report.policies.push_back(q);
  const nlohmann::json j = nlohmann::json::parse(ReplayReportToJson(report));
  EXPECT_EQ(j["policies"][0]["slo"]["requests"], 2);
  EXPECT_TRUE(j["policies"][0]["slo"]["tpot_attainment"].is_null());
  EXPECT_NE(ReplayReportToText(report).find("SLO attainment"), std::string::npos);
  EXPECT_NE(ReplayReportToHtml(report, "t").find("<h2>SLO attainment</h2>"), std::string::npos);
  // Without SLOs: no section, JSON null.
  report.policies[0] = ReplayOne({Req(0, 0)}, ReplayPolicy{"rr", *c});
  EXPECT_TRUE(nlohmann::json::parse(ReplayReportToJson(report))["policies"][0]["slo"].is_null());
  EXPECT_EQ(ReplayReportToText(report).find("SLO attainment"), std::string::npos);
}

TEST(SloReplayTest, DroppedRequestsMissAndAttachKeepsARequestsOwnSlo) {
  // TTL 100 ms under flow control: two of three requests expire, and miss their SLO.
  std::vector<ReplayRequest> trace = {Req(0, 0), Req(1000, 1), Req(2000, 2)};
  AttachSlos(trace, 1000, -1);
  trace[2].slo_ttft_ms = 5;
  AttachSlos(trace, 2000, 50);
  EXPECT_EQ(trace[0].slo_ttft_ms, 1000);
  EXPECT_EQ(trace[2].slo_ttft_ms, 5);
  EXPECT_EQ(trace[0].slo_tpot_ms, 50);
  const ReplayPolicyReport p = ReplayOne(trace, Policy("ttl", FlowConfig("global-strict-fairness-policy", "100ms")));
  EXPECT_EQ(p.completed, 1);
  EXPECT_EQ(p.slo_requests, 3);
  EXPECT_NEAR(p.slo_attainment, 1.0 / 3, 1e-12);
}

}  // namespace
}  // namespace epp
