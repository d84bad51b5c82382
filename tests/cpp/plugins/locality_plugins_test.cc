// The locality and capacity plugins (capacity-filter / -scorer, region-spillover-filter,
// region-rtt-scorer, zone-preference-scorer) through real schedulers on a manual clock, and the
// endpoints-file keys and engine mapping a region-level EPP reads pools with. Values by hand
// from the formulas in docs/scheduling.md.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "epp/config.h"
#include "epp/runtime/endpoints.h"
#include "epp/runtime/kube.h"
#include "epp/metrics.h"
#include "epp/registry.h"
#include "epp/request.h"
#include "epp/scheduler.h"
#include "testing/epp_testing.h"

namespace epp {
namespace {

using testing::EndpointBuilder;
using testing::kNowUs;

struct Built {
  std::unique_ptr<ManualClock> clock = std::make_unique<ManualClock>(kNowUs);
  std::unique_ptr<SeededRng> rng = std::make_unique<SeededRng>(3);
  std::unique_ptr<Scheduler> scheduler;
};

absl::StatusOr<Built> Build(const std::string& plugins, const std::string& profile_plugins, const std::string& region = "",
                            const std::string& zone = "") {
  Built b;
  const std::string yaml = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n" +
                           plugins + "schedulingProfiles:\n- name: default\n  plugins:\n" + profile_plugins;
  EPP_ASSIGN_OR_RETURN(EppConfig cfg, ParseConfig(yaml, "t.yaml"));
  PluginContext ctx{b.clock.get(), b.rng.get()};
  ctx.region = region;
  ctx.zone = zone;
  EPP_ASSIGN_OR_RETURN(b.scheduler, BuildScheduler(cfg, BuiltinRegistry(), ctx));
  return b;
}

Built MustBuild(const std::string& plugins, const std::string& profile_plugins, const std::string& region = "",
                const std::string& zone = "") {
  auto b = Build(plugins, profile_plugins, region, zone);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::move(*b) : Built{};
}

InferenceRequest Req(const std::string& prompt = "hello there",
                     std::vector<std::pair<std::string, std::string>> headers = {}) {
  auto r = ParseOpenAIRequest("/v1/completions", R"({"model":"m","prompt":")" + prompt + R"("})");
  EXPECT_TRUE(r.ok()) << r.status();
  r->headers = std::move(headers);
  return *r;
}

// A pool behind its gateway: pool averages, a region, an optional capacity.
Endpoint Pool(std::string address, std::string region, double queue = 0, double kv = 0.1,
              std::optional<double> rps = std::nullopt) {
  Endpoint e = EndpointBuilder(std::move(address)).Queue(queue).Running(0).Kv(kv).Label("region", std::move(region)).Engine("epp");
  e.metrics.custom.emplace_back(std::string(kReadyPodsAttribute), 2);
  e.capacity.requests_per_second = rps;
  return e;
}

std::string Removed(const PickResult& r, const std::string& endpoint) {
  for (const ProfileTrace& p : r.profiles)
    for (const FilterTrace& f : p.filters)
      for (const auto& x : f.removed)
        if (x.endpoint == endpoint) return x.reason;
  return "";
}

std::string Detail(const PickResult& r, const std::string& endpoint, const std::string& type) {
  for (const ProfileTrace& p : r.profiles)
    for (const EndpointScoreTrace& s : p.scores)
      if (s.endpoint == endpoint)
        for (const ScorerTrace& t : s.scorers)
          if (t.type == type) return t.detail;
  return "";
}

double Raw(const PickResult& r, const std::string& endpoint, const std::string& type) {
  for (const ProfileTrace& p : r.profiles)
    for (const EndpointScoreTrace& s : p.scores)
      if (s.endpoint == endpoint)
        for (const ScorerTrace& t : s.scorers)
          if (t.type == type) return t.raw;
  return -1;
}

// ---- capacity-filter

TEST(CapacityFilterTest, KeepsPicksWithinTheLimitOverTheWindowThenSheds) {
  Built b = MustBuild("- type: capacity-filter\n- type: queue-scorer\n", "  - pluginRef: capacity-filter\n  - pluginRef: queue-scorer\n");
  ASSERT_NE(b.scheduler, nullptr);
  // a is preferred (shorter queue) and takes 3 a second; b takes 2 more; then 429.
  std::vector<Endpoint> pool = {Pool("a:1", "r", 0, 0.1, 3), Pool("b:1", "r", 5, 0.1, 2)};
  std::map<std::string, int> got;
  for (int i = 0; i < 5; ++i) {
    PickResult r = b.scheduler->Pick(Req(), pool);
    ASSERT_EQ(r.status, 200) << r.reason;
    got[r.endpoints[0]]++;
    b.clock->Advance(1000);
  }
  EXPECT_EQ(got["a:1"], 3);
  EXPECT_EQ(got["b:1"], 2);
  PickResult shed = b.scheduler->Pick(Req(), pool, {.trace = true});
  EXPECT_EQ(shed.status, 429);
  EXPECT_EQ(shed.dropped_reason, kDroppedSaturated);
  EXPECT_NE(shed.reason.find("every endpoint is at its capacity limit"), std::string::npos) << shed.reason;
  EXPECT_NE(shed.reason.find("a:1 (3 of 3 requests in the last 1 s)"), std::string::npos) << shed.reason;
  // One second after the first pick, its slot frees (the window slides, it does not reset).
  b.clock->Set(kNowUs + 1'000'000);
  PickResult r = b.scheduler->Pick(Req(), pool);
  ASSERT_EQ(r.status, 200) << r.reason;
  EXPECT_EQ(r.endpoints[0], "a:1");
  // a is full again (its picks at +1 and +2 ms are still in the window) and so is b (+3, +4 ms).
  EXPECT_EQ(b.scheduler->Pick(Req(), pool).status, 429);
  b.clock->Set(kNowUs + 1'000'000 + 2000);  // a's picks at +1 and +2 ms leave the window
  r = b.scheduler->Pick(Req(), pool);
  ASSERT_EQ(r.status, 200) << r.reason;
  EXPECT_EQ(r.endpoints[0], "a:1");
}

TEST(CapacityFilterTest, TokenLimitsCountPromptTokensAndUnlimitedEndpointsAlwaysFit) {
  Built b = MustBuild("- type: capacity-filter\n  parameters: {windowMs: 2000}\n- type: queue-scorer\n",
                      "  - pluginRef: capacity-filter\n  - pluginRef: queue-scorer\n");
  ASSERT_NE(b.scheduler, nullptr);
  Endpoint a = Pool("a:1", "r", 0);
  a.capacity.tokens_per_second = 10;  // 20 tokens in the 2 s window
  std::vector<Endpoint> pool = {a, Pool("free:1", "r", 9)};
  const InferenceRequest req = Req("one two three four five six seven eight nine ten eleven twelve");
  ASSERT_GT(req.prompt_tokens, 10);
  ASSERT_LE(req.prompt_tokens, 20);
  PickResult r1 = b.scheduler->Pick(req, pool, {.trace = true});
  EXPECT_EQ(r1.endpoints[0], "a:1");
  PickResult r2 = b.scheduler->Pick(req, pool, {.trace = true});
  ASSERT_EQ(r2.status, 200);
  EXPECT_EQ(r2.endpoints[0], "free:1");  // a's window has no room for a second prompt
  EXPECT_NE(Removed(r2, "a:1").find("at its capacity limit: " + std::to_string(req.prompt_tokens) + " of 20 tokens in the last 2 s"),
            std::string::npos)
      << Removed(r2, "a:1");
}

TEST(CapacityFilterTest, ParametersAreChecked) {
  for (const char* bad : {"{windowMs: 0}", "{windowMs: -5}", "{window: 100}"}) {
    auto b = Build(std::string("- type: capacity-filter\n  parameters: ") + bad + "\n", "  - pluginRef: capacity-filter\n");
    EXPECT_FALSE(b.ok()) << bad;
  }
}

// ---- capacity-scorer

TEST(CapacityScorerTest, ScoresHeadroomOfTheLargerUsedFraction) {
  Built b = MustBuild("- type: capacity-scorer\n", "  - pluginRef: capacity-scorer\n");
  ASSERT_NE(b.scheduler, nullptr);
  std::vector<Endpoint> pool = {Pool("a:1", "r", 0, 0.1, 4), Pool("b:1", "r", 0, 0.1, 10), Pool("u:1", "r")};
  // Fill a with 1 pick (u and b tie on 1.0 with a first; picks go by score, so pin with a subset).
  PickResult first = b.scheduler->Pick(Req(), pool, {.subset = std::vector<std::string>{"a:1"}});
  ASSERT_EQ(first.endpoints[0], "a:1");
  PickResult r = b.scheduler->Pick(Req(), pool, {.trace = true, .record = false});
  EXPECT_DOUBLE_EQ(Raw(r, "a:1", "capacity-scorer"), 0.75);
  EXPECT_DOUBLE_EQ(Raw(r, "b:1", "capacity-scorer"), 1.0);
  EXPECT_DOUBLE_EQ(Raw(r, "u:1", "capacity-scorer"), 1.0);
  EXPECT_EQ(Detail(r, "a:1", "capacity-scorer"), "1 of 4 requests in the last 1 s");
  EXPECT_EQ(Detail(r, "u:1", "capacity-scorer"), "no capacity limit");
}

// ---- region-spillover-filter

const char* kSpill =
    "- type: region-spillover-filter\n"
    "  parameters: {spilloverOrder: [eu, ap], queueThreshold: 4, kvCacheThreshold: 0.9}\n"
    "- type: queue-scorer\n";
const char* kSpillProfile = "  - pluginRef: region-spillover-filter\n  - pluginRef: queue-scorer\n";

TEST(RegionSpilloverFilterTest, HomeUntilSaturatedThenTheSpilloverOrder) {
  Built b = MustBuild(kSpill, kSpillProfile, "us");
  ASSERT_NE(b.scheduler, nullptr);
  // Home pools are busier than the others, yet keep the requests while below the threshold.
  std::vector<Endpoint> pool = {Pool("us1:1", "us", 3), Pool("us2:1", "us", 3.5), Pool("eu1:1", "eu", 0), Pool("ap1:1", "ap", 0)};
  PickResult r = b.scheduler->Pick(Req(), pool, {.trace = true});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.endpoints[0], "us1:1");
  EXPECT_NE(Removed(r, "eu1:1").find("region 'eu' comes later in the spill-over order (us > eu > ap)"), std::string::npos)
      << Removed(r, "eu1:1");
  // One home pool saturates: the other home pool still wins.
  pool[0].metrics.waiting_queue_size = 4;
  r = b.scheduler->Pick(Req(), pool, {.trace = true});
  EXPECT_EQ(r.endpoints[0], "us2:1");
  EXPECT_EQ(Removed(r, "us1:1"), "saturated: queue 4 >= 4");
  // Both saturated (queue, KV): eu next, even though ap is as idle.
  pool[1].metrics.kv_cache_usage = 0.95;
  r = b.scheduler->Pick(Req(), pool, {.trace = true});
  EXPECT_EQ(r.endpoints[0], "eu1:1");
  EXPECT_EQ(Removed(r, "us2:1"), "saturated: KV cache 0.95 >= 0.9");
  // eu saturated too: ap.
  pool[2].metrics.waiting_queue_size = 10;
  r = b.scheduler->Pick(Req(), pool);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.endpoints[0], "ap1:1");
  // Everything saturated: every available pool competes (the queue scorer picks the shortest).
  pool[3].metrics.waiting_queue_size = 20;
  r = b.scheduler->Pick(Req(), pool, {.trace = true});
  EXPECT_EQ(r.endpoints[0], "us2:1");
  for (const char* a : {"us1:1", "us2:1", "eu1:1", "ap1:1"}) EXPECT_EQ(Removed(r, a), "") << a;
}

TEST(RegionSpilloverFilterTest, UnreachableStaleAndEmptyPoolsAreSkipped) {
  Built b = MustBuild(kSpill, kSpillProfile, "us");
  ASSERT_NE(b.scheduler, nullptr);
  std::vector<Endpoint> pool = {Pool("us1:1", "us"), Pool("us2:1", "us"), Pool("us3:1", "us"), Pool("eu1:1", "eu", 2)};
  pool[0].unreachable = true;
  pool[1].metrics_time_us = kNowUs - 5'000'000;  // older than the 2 s default
  pool[2].metrics.custom = {{std::string(kReadyPodsAttribute), 0}};
  PickResult r = b.scheduler->Pick(Req(), pool, {.trace = true});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.endpoints[0], "eu1:1");
  EXPECT_EQ(Removed(r, "us1:1"), "") << "the scheduler passes unreachable endpoints over before any filter";
  EXPECT_EQ(Removed(r, "us2:1"), "metrics stale (older than 2000 ms)");
  EXPECT_EQ(Removed(r, "us3:1"), "0 ready pods");
  // With nothing available, the reachable pools are kept (trying beats a certain 503).
  pool[3].metrics.custom = {{std::string(kReadyPodsAttribute), 0}};
  r = b.scheduler->Pick(Req(), pool);
  EXPECT_EQ(r.status, 200);
}

TEST(RegionSpilloverFilterTest, CapacityUseCountsAsSaturation) {
  Built b = MustBuild("- type: region-spillover-filter\n  parameters: {capacityThreshold: 0.5}\n",
                      "  - pluginRef: region-spillover-filter\n", "us");
  ASSERT_NE(b.scheduler, nullptr);
  std::vector<Endpoint> pool = {Pool("us1:1", "us", 0, 0.1, 4), Pool("eu1:1", "eu", 0)};
  EXPECT_EQ(b.scheduler->Pick(Req(), pool).endpoints[0], "us1:1");
  EXPECT_EQ(b.scheduler->Pick(Req(), pool).endpoints[0], "us1:1");
  PickResult r = b.scheduler->Pick(Req(), pool, {.trace = true});  // 2 of 4 used: 0.5 >= 0.5
  EXPECT_EQ(r.endpoints[0], "eu1:1");
  EXPECT_EQ(Removed(r, "us1:1"), "saturated: capacity 2 of 4 requests in the last 1 s >= 0.5 of the limit");
}

TEST(RegionSpilloverFilterTest, HomeRegionParameterWinsOverTheContextAndKubeLabelsWork) {
  Built b = MustBuild("- type: region-spillover-filter\n  parameters: {homeRegion: eu}\n- type: queue-scorer\n", kSpillProfile, "us");
  ASSERT_NE(b.scheduler, nullptr);
  Endpoint eu = EndpointBuilder("eu1:1").Queue(3).Running(0).Kv(0.1).Label("topology.kubernetes.io/region", "eu");
  std::vector<Endpoint> pool = {Pool("us1:1", "us", 0), eu};
  EXPECT_EQ(b.scheduler->Pick(Req(), pool).endpoints[0], "eu1:1");
  auto bad = Build("- type: region-spillover-filter\n  parameters: {spilloverOrder: [a, a]}\n", "  - pluginRef: region-spillover-filter\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("region 'a' listed twice"), std::string::npos) << bad.status();
  bad = Build("- type: region-spillover-filter\n  parameters: {kvCacheThreshold: 80}\n", "  - pluginRef: region-spillover-filter\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("kvCacheThreshold: must be in [0, 1], got 80"), std::string::npos) << bad.status();
}

// ---- region-rtt-scorer

TEST(RegionRttScorerTest, ScoresOneMinusRttOverTheMaximumFromTheMatrix) {
  Built b = MustBuild("- type: region-rtt-scorer\n  parameters:\n    rttMs: {us: {eu: 80}, ap: {us: 160}}\n",
                      "  - pluginRef: region-rtt-scorer\n", "us");
  ASSERT_NE(b.scheduler, nullptr);
  std::vector<Endpoint> pool = {Pool("us1:1", "us"), Pool("eu1:1", "eu"), Pool("ap1:1", "ap"), Pool("x:1", "mars")};
  PickResult r = b.scheduler->Pick(Req(), pool, {.trace = true, .record = false});
  EXPECT_EQ(r.endpoints[0], "us1:1");
  EXPECT_DOUBLE_EQ(Raw(r, "us1:1", "region-rtt-scorer"), 1.0);
  EXPECT_DOUBLE_EQ(Raw(r, "eu1:1", "region-rtt-scorer"), 0.5);  // maxRttMs defaults to the largest entry, 160
  EXPECT_DOUBLE_EQ(Raw(r, "ap1:1", "region-rtt-scorer"), 0.0);  // given as ap -> us: the matrix is symmetric
  EXPECT_DOUBLE_EQ(Raw(r, "x:1", "region-rtt-scorer"), 0.0);
  EXPECT_EQ(Detail(r, "eu1:1", "region-rtt-scorer"), "RTT us -> eu 80 ms (max 160)");
  EXPECT_EQ(Detail(r, "x:1", "region-rtt-scorer"), "no RTT known from 'us' to 'mars'");
  auto bad = Build("- type: region-rtt-scorer\n  parameters:\n    rttMs: {us: {eu: -1}}\n", "  - pluginRef: region-rtt-scorer\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("rttMs.us.eu: must be a finite number >= 0"), std::string::npos) << bad.status();
}

// ---- zone-preference-scorer

TEST(ZonePreferenceScorerTest, TheRequestHeaderBeatsTheConfiguredZone) {
  Built b = MustBuild("- type: zone-preference-scorer\n  parameters: {otherZoneScore: 0.25}\n- type: queue-scorer\n",
                      "  - pluginRef: zone-preference-scorer\n    weight: 10\n  - pluginRef: queue-scorer\n", "", "z1");
  ASSERT_NE(b.scheduler, nullptr);
  std::vector<Endpoint> pool = {EndpointBuilder("a:1").Queue(5).Running(0).Kv(0.1).Label("zone", "z1"),
                                EndpointBuilder("b:1").Queue(0).Running(0).Kv(0.1).Label("topology.kubernetes.io/zone", "z2"),
                                EndpointBuilder("c:1").Queue(0).Running(0).Kv(0.1)};
  PickResult r = b.scheduler->Pick(Req(), pool, {.trace = true, .record = false});
  EXPECT_EQ(r.endpoints[0], "a:1");
  EXPECT_DOUBLE_EQ(Raw(r, "b:1", "zone-preference-scorer"), 0.25);
  EXPECT_DOUBLE_EQ(Raw(r, "c:1", "zone-preference-scorer"), 0.0);
  EXPECT_EQ(Detail(r, "b:1", "zone-preference-scorer"), "zone z2, gateway in z1");
  EXPECT_EQ(Detail(r, "c:1", "zone-preference-scorer"), "no zone label");
  r = b.scheduler->Pick(Req("hello there", {{"x-gateway-zone", "z2"}}), pool, {.trace = true, .record = false});
  EXPECT_EQ(r.endpoints[0], "b:1");
  EXPECT_EQ(Detail(r, "b:1", "zone-preference-scorer"), "same zone z2");
  // No zone anywhere: every candidate 0, the other scorers decide.
  Built none = MustBuild("- type: zone-preference-scorer\n- type: queue-scorer\n",
                         "  - pluginRef: zone-preference-scorer\n  - pluginRef: queue-scorer\n");
  r = none.scheduler->Pick(Req(), pool, {.trace = true, .record = false});
  EXPECT_DOUBLE_EQ(Raw(r, "a:1", "zone-preference-scorer"), 0.0);
  EXPECT_NE(Detail(r, "a:1", "zone-preference-scorer").find("gateway zone unknown"), std::string::npos);
}

// ---- endpoints file and engine mapping

TEST(PoolEndpointsTest, CapacityAndTlsKeysParseAndBadValuesNameTheirPlace) {
  auto specs = ParseEndpointsYaml(
      "endpoints:\n"
      "- address: gw-east.example:443\n"
      "  metrics: https://epp-east.example:9090/metrics\n"
      "  engine: epp\n"
      "  labels: {region: us-east, zone: us-east-1a}\n"
      "  capacity: {requestsPerSecond: 50, tokensPerSecond: 2.5e5}\n"
      "  tls: {caFile: certs/ca.pem, insecureSkipVerify: false}\n",
      "eps.yaml", "/etc/epp");
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 1u);
  const EndpointSpec& s = (*specs)[0];
  EXPECT_EQ(s.capacity.requests_per_second, 50);
  EXPECT_EQ(s.capacity.tokens_per_second, 250000);
  EXPECT_EQ(s.tls_ca_file, "/etc/epp/certs/ca.pem");
  EXPECT_FALSE(s.tls_insecure_skip_verify);
  struct Case {
    const char* entry;
    const char* want;
  } cases[] = {
      {"  capacity: {requestsPerSecond: 0}\n", "eps.yaml:3: endpoints[0].capacity.requestsPerSecond: expected a number > 0, got '0'"},
      {"  capacity: {requestsPerSecond: lots}\n", "expected a number > 0, got 'lots'"},
      {"  capacity: {rps: 5}\n", "endpoints[0].capacity.rps: unknown key (expected requestsPerSecond or tokensPerSecond)"},
      {"  capacity: {}\n", "endpoints[0].capacity: expected a map with requestsPerSecond and/or tokensPerSecond"},
      {"  tls: {insecureSkipVerify: maybe}\n", "endpoints[0].tls.insecureSkipVerify: expected true or false"},
      {"  tls: {cert: x}\n", "endpoints[0].tls.cert: unknown key (expected caFile or insecureSkipVerify)"},
  };
  for (const Case& c : cases) {
    auto bad = ParseEndpointsYaml(std::string("endpoints:\n- address: gw:443\n") + c.entry, "eps.yaml", "");
    ASSERT_FALSE(bad.ok()) << c.entry;
    EXPECT_NE(bad.status().message().find(c.want), std::string::npos) << bad.status();
  }
}

TEST(PoolEndpointsTest, EndpointModeRemotePodsCarryTheirStalenessAllowance) {
  // Endpoint Mode: the cluster directory lists the exporting clusters' pods themselves (flat
  // network); the import picks them by cluster, and a remote pod's metrics may be older.
  auto dir = ParseEndpointsYaml(
      "endpoints:\n"
      "- {address: 10.1.0.5:8000, labels: {cluster: east, region: us-east}}\n"
      "- {address: 10.2.0.7:8000, labels: {cluster: west, region: us-west}, metricsStalenessAllowance: 1s}\n"
      "- {address: 10.3.0.9:8000, labels: {cluster: eu, region: eu}, metricsStalenessAllowance: 250ms}\n",
      "clusters.yaml", "");
  ASSERT_TRUE(dir.ok()) << dir.status();
  auto imp = ParseInferencePoolImport(
      R"({"metadata":{"name":"llama","namespace":"ns"},"status":{"controllers":[{"name":"c","exportingClusters":[{"name":"east"},{"name":"west"}]}]}})",
      "GET x");
  ASSERT_TRUE(imp.ok()) << imp.status();
  const std::vector<EndpointSpec> specs = ImportEndpoints(*imp, *dir, "cluster");
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].metrics_staleness_allowance_us, 0);
  EXPECT_EQ(specs[1].metrics_staleness_allowance_us, 1000000);
  // ResolveEndpoints carries the allowance onto the endpoint.
  const std::string prom = ::testing::TempDir() + "/endpoint-mode.prom";
  { std::ofstream(prom) << "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n"
                           "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"
                           "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.2\n"; }
  std::vector<EndpointSpec> with_metrics = specs;
  for (EndpointSpec& s : with_metrics) s.metrics = prom;
  auto eps = ResolveEndpoints(with_metrics, ResolveOptions{});
  ASSERT_TRUE(eps.ok()) << eps.status();
  EXPECT_EQ((*eps)[1].metrics_staleness_allowance_us, 1000000);
  // Both read 800 ms ago; 500 ms is stale for the home pod, not for the remote one.
  for (Endpoint& e : *eps) e.metrics_time_us = kNowUs - 800000;
  EXPECT_TRUE(MetricsStale((*eps)[0], kNowUs, 500000));
  EXPECT_FALSE(MetricsStale((*eps)[1], kNowUs, 500000));
  EXPECT_TRUE(MetricsStale((*eps)[1], kNowUs + 800000, 500000));
  Built b = MustBuild("- type: region-spillover-filter\n  parameters: {metricsStalenessMs: 500}\n- type: queue-scorer\n",
                      "  - pluginRef: region-spillover-filter\n  - pluginRef: queue-scorer\n", "us-east");
  const PickResult r = b.scheduler->Pick(Req(), *eps, {.trace = true});
  ASSERT_EQ(r.status, 200) << r.reason;
  EXPECT_EQ(r.endpoints.front(), "10.2.0.7:8000");
  EXPECT_EQ(Removed(r, "10.1.0.5:8000"), "metrics stale (older than 500 ms)");

  auto bad = ParseEndpointsYaml("endpoints:\n- address: a:1\n  metricsStalenessAllowance: soon\n", "eps.yaml", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "eps.yaml:3: endpoints[0].metricsStalenessAllowance: expected a duration from 0s to 1h such as 300ms, got 'soon'");
}

TEST(PoolEndpointsTest, TheEppEngineReadsPoolAggregatesInEitherDialect) {
  auto mappings = MetricMappings::Create(ScrapeOptions{});
  ASSERT_TRUE(mappings.ok()) << mappings.status();
  const std::string gie =
      "# TYPE inference_pool_average_queue_size gauge\ninference_pool_average_queue_size{name=\"p\"} 2.5\n"
      "# TYPE inference_pool_average_running_requests gauge\ninference_pool_average_running_requests{name=\"p\"} 7\n"
      "# TYPE inference_pool_average_kv_cache_utilization gauge\ninference_pool_average_kv_cache_utilization{name=\"p\"} 0.4\n"
      "# TYPE inference_pool_ready_pods gauge\ninference_pool_ready_pods{name=\"p\"} 3\n";
  MetricsRead r = ReadEndpointMetrics(gie, *mappings, "auto");
  ASSERT_TRUE(r.error.ok()) << r.error;
  EXPECT_EQ(r.engine, "epp");  // detected from the pool aggregates
  EXPECT_EQ(r.extraction.metrics.waiting_queue_size, 2.5);
  EXPECT_EQ(r.extraction.metrics.running_requests, 7);
  EXPECT_EQ(r.extraction.metrics.kv_cache_usage, 0.4);
  EXPECT_EQ(r.extraction.metrics.Custom(kReadyPodsAttribute), 3);
  const std::string llmd =
      "# TYPE llm_d_epp_average_queue_size gauge\nllm_d_epp_average_queue_size{name=\"p\"} 1\n"
      "# TYPE llm_d_epp_average_kv_cache_utilization gauge\nllm_d_epp_average_kv_cache_utilization{name=\"p\"} 0.2\n";
  r = ReadEndpointMetrics(llmd, *mappings, "epp");
  EXPECT_EQ(r.extraction.metrics.waiting_queue_size, 1);
  EXPECT_EQ(r.extraction.metrics.kv_cache_usage, 0.2);
}

}  // namespace
}  // namespace epp
