// llm-d's data-layer plugins and what reads them: core-metrics-extractor's parameters (engine
// configs with customMetrics, engineLabelKey, defaultEngine), endpoint-attribute-filter / -scorer
// over the custom attributes, topology-extractor with topology-affinity-filter / -scorer in a
// disaggregated cycle (the decode pick is the prefill profile's peer). Values by hand from
// llm-d's formulas.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "epp/config.h"
#include "epp/runtime/endpoints.h"
#include "epp/metrics.h"
#include "epp/registry.h"
#include "epp/request.h"
#include "epp/scheduler.h"
#include "testing/epp_testing.h"

namespace epp {
namespace {

using testing::EndpointBuilder;

std::string Config(const std::string& plugins, const std::string& profiles) {
  return "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n" + plugins +
         "schedulingProfiles:\n" + profiles;
}

absl::StatusOr<std::unique_ptr<Scheduler>> Build(const std::string& yaml) {
  static SeededRng rng(7);
  EPP_ASSIGN_OR_RETURN(EppConfig cfg, ParseConfig(yaml, "t.yaml"));
  return BuildScheduler(cfg, BuiltinRegistry(), PluginContext{&SteadyClock::Get(), &rng});
}

std::unique_ptr<Scheduler> MustBuild(const std::string& yaml) {
  auto s = Build(yaml);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

Endpoint WithAttr(std::string address, std::optional<double> v, double queue = 0) {
  Endpoint e = EndpointBuilder(std::move(address)).Queue(queue).Running(0).Kv(0.1);
  if (v) e.metrics.custom.emplace_back("gpu.util", *v);
  return e;
}

InferenceRequest Req(const std::string& prompt = "hello there") {
  auto r = ParseOpenAIRequest("/v1/completions", R"({"model":"m","prompt":")" + prompt + R"("})");
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

bool HasWarning(const Scheduler& s, const std::string& part) {
  for (const std::string& w : s.warnings())
    if (w.find(part) != std::string::npos) return true;
  return false;
}

const std::string kExtractor =
    "- type: core-metrics-extractor\n"
    "  parameters:\n"
    "    engineConfigs:\n"
    "    - name: vllm\n"
    "      queuedRequestsSpec: vllm:num_requests_waiting\n"
    "      runningRequestsSpec: vllm:num_requests_running\n"
    "      kvUsageSpec: vllm:kv_cache_usage_perc\n"
    "      customMetrics:\n"
    "      - {attributeKey: gpu.util, metricSpec: 'gpu_util{tier=gold}'}\n";

TEST(CoreMetricsExtractorTest, EngineConfigsWithCustomMetricsReachTheScrape) {
  auto s = MustBuild(Config(kExtractor + "    engineLabelKey: my/engine\n    defaultEngine: vllm\n",
                            "- name: default\n  plugins: []\n"));
  ASSERT_NE(s, nullptr);
  ScrapeOptions o;
  s->ConfigureScrape(o);
  ASSERT_EQ(o.custom_mappings.size(), 1u);
  EXPECT_EQ(o.custom_mappings[0].engine, "vllm");
  ASSERT_EQ(o.custom_mappings[0].custom.size(), 1u);
  EXPECT_EQ(o.custom_mappings[0].custom[0].first, "gpu.util");
  EXPECT_EQ(o.engine_labels, std::vector<std::string>{"my/engine"});
  EXPECT_EQ(o.engine, "vllm");

  // The mapping reads the attribute: the series matching the selector with the latest timestamp.
  auto mappings = MetricMappings::Create(o);
  ASSERT_TRUE(mappings.ok()) << mappings.status();
  const std::string text =
      "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 1\n"
      "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 2\n"
      "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.5\n"
      "# TYPE gpu_util gauge\ngpu_util{tier=\"gold\"} 0.25 100\ngpu_util{tier=\"gold\",x=\"y\"} 0.75 200\n"
      "gpu_util{tier=\"silver\"} 0.99 300\n";
  MetricsRead r = ReadEndpointMetrics(text, *mappings, "vllm");
  ASSERT_TRUE(r.error.ok()) << r.error;
  EXPECT_EQ(r.extraction.metrics.Custom("gpu.util"), 0.75);
  // Absent: a warning, not a failure of the scrape.
  MetricsRead absent = ReadEndpointMetrics(text.substr(0, text.find("# TYPE gpu_util")), *mappings, "vllm");
  EXPECT_FALSE(absent.extraction.metrics.Custom("gpu.util").has_value());
  bool warned = false;
  for (const CheckResult& c : absent.extraction.checks)
    if (c.id == "metrics.custom.gpu.util") warned = c.status == CheckStatus::kWarn;
  EXPECT_TRUE(warned);
}

TEST(CoreMetricsExtractorTest, WithoutParametersNothingChanges) {
  auto s = MustBuild(Config("- type: core-metrics-extractor\n", "- name: default\n  plugins: []\n"));
  ASSERT_NE(s, nullptr);
  ScrapeOptions o;
  const std::vector<std::string> labels = o.engine_labels;
  s->ConfigureScrape(o);
  EXPECT_TRUE(o.custom_mappings.empty());
  EXPECT_EQ(o.engine, "auto");
  EXPECT_EQ(o.engine_labels, labels);
}

TEST(CoreMetricsExtractorTest, BadParametersNameTheirPlace) {
  const std::string profiles = "- name: default\n  plugins: []\n";
  struct Case {
    std::string params, want;
  } cases[] = {
      {"    defaultEngine: nope\n", "defaultEngine: 'nope' is neither a built-in engine"},
      {"    engineConfigs:\n    - {name: a, kvUsageSpec: 'x{'}\n", "engineConfigs[0].kvUsageSpec"},
      {"    engineConfigs:\n    - {name: a, bogus: x}\n", "engineConfigs[0].bogus: unknown key"},
      {"    engineConfigs:\n    - {queuedRequestsSpec: q}\n", "needs a name"},
      {"    engineConfigs:\n    - {name: a}\n    - {name: a}\n", "duplicate engine 'a'"},
      {"    engineConfigs:\n    - name: a\n      customMetrics:\n      - {attributeKey: k, metricSpec: m}\n"
       "      - {attributeKey: k, metricSpec: n}\n",
       "duplicate attributeKey 'k'"},
      {"    engineConfigs:\n    - name: a\n      customMetrics:\n      - {attributeKey: '', metricSpec: m}\n",
       "attributeKey cannot be empty"},
      {"    engineLabel: x\n", "unknown parameter 'engineLabel'"},
  };
  for (const Case& c : cases) {
    auto s = Build(Config("- type: core-metrics-extractor\n  parameters:\n" + c.params, profiles));
    ASSERT_FALSE(s.ok()) << c.params;
    EXPECT_NE(s.status().message().find(c.want), std::string::npos) << s.status();
    EXPECT_NE(s.status().message().find("plugins[0].parameters"), std::string::npos) << s.status();
  }
}

TEST(CoreMetricsExtractorTest, MetricMappingsYamlReadsCustomMetrics) {
  auto m = LoadMetricMappingsYaml(
      "engineConfigs:\n- name: e\n  kvUsageSpec: kv\n  customMetrics:\n  - {attributeKey: a, metricSpec: 'm{x=y}'}\n", "m.yaml");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ((*m)[0].custom.size(), 1u);
  EXPECT_EQ((*m)[0].custom[0].second.ToString(), "m{x=\"y\"}");
  auto bad = LoadMetricMappingsYaml("- name: e\n  customMetrics:\n  - {attributeKey: a, metric: m}\n", "m.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("m.yaml:3"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("customMetrics[0].metric: unknown key"), std::string::npos) << bad.status();
}

TEST(CoreMetricsExtractorTest, TheEngineLabelChoosesACustomMapping) {
  // A custom engine whose metric names auto-detection cannot know; the endpoint's label names it.
  auto s = MustBuild(Config("- type: core-metrics-extractor\n  parameters:\n    engineLabelKey: example.com/engine\n"
                            "    engineConfigs:\n    - {name: mine, queuedRequestsSpec: q, runningRequestsSpec: r, kvUsageSpec: kv}\n",
                            "- name: default\n  plugins: []\n"));
  ASSERT_NE(s, nullptr);
  const auto path = std::filesystem::temp_directory_path() / ("epp-engine-label-" + std::to_string(::getpid()) + ".prom");
  {
    std::ofstream f(path);
    f << "# TYPE q gauge\nq 3\n# TYPE r gauge\nr 1\n# TYPE kv gauge\nkv 0.5\n";
  }
  EndpointSpec labelled;
  labelled.address = "10.0.0.1:8000";
  labelled.metrics = path.string();
  labelled.labels["example.com/engine"] = "mine";
  EndpointSpec unlabelled = labelled;
  unlabelled.address = "10.0.0.2:8000";
  unlabelled.labels.clear();
  ResolveOptions ro;
  s->ConfigureScrape(ro.scrape);
  const std::vector<EndpointSpec> specs = {labelled, unlabelled};
  auto eps = ResolveEndpoints(specs, ro);
  std::filesystem::remove(path);
  ASSERT_TRUE(eps.ok()) << eps.status();
  EXPECT_EQ((*eps)[0].engine, "mine");
  EXPECT_EQ((*eps)[0].metrics.waiting_queue_size, 3);
  EXPECT_EQ((*eps)[0].metrics.kv_cache_usage, 0.5);
  // Unlabelled, auto-detection also considers the custom engine (its names are all present).
  EXPECT_EQ((*eps)[1].engine, "mine");
}

std::string AttrFilter(const std::string& extra) {
  return "- type: endpoint-attribute-filter\n  parameters:\n    attribute: gpu.util\n" + extra;
}

std::vector<std::string> Kept(const std::string& filter_yaml, std::vector<Endpoint> eps) {
  auto s = MustBuild(Config(kExtractor + filter_yaml + "- type: queue-scorer\n",
                            "- name: default\n  plugins: [{pluginRef: endpoint-attribute-filter}, {pluginRef: queue-scorer}]\n"));
  if (!s) return {"<build failed>"};
  PickOptions po;
  po.trace = true;
  PickResult r = s->Pick(Req(), eps, po);
  if (r.status != 200) return {};
  std::vector<std::string> out;
  for (const ProfileTrace& p : r.profiles)
    for (const FilterTrace& f : p.filters)
      for (const std::string& k : f.kept) out.push_back(k);
  return out;
}

TEST(EndpointAttributeFilterTest, ThresholdOperatorsOnMissingAndFallback) {
  const std::vector<Endpoint> eps = {WithAttr("a:1", 0.2), WithAttr("b:1", 0.9), WithAttr("c:1", std::nullopt)};
  const std::string le = "    algorithm: {type: threshold, threshold: {operator: LessThanOrEqual, value: 0.9}}\n";
  EXPECT_EQ(Kept(AttrFilter(le), eps), (std::vector<std::string>{"a:1", "b:1", "c:1"})) << "onMissing defaults to Pass";
  EXPECT_EQ(Kept(AttrFilter(le + "    onMissing: Fail\n"), eps), (std::vector<std::string>{"a:1", "b:1"}));
  const std::string lt = "    algorithm: {type: threshold, threshold: {operator: LessThan, value: 0.9}}\n    onMissing: Fail\n";
  EXPECT_EQ(Kept(AttrFilter(lt), eps), (std::vector<std::string>{"a:1"}));
  const std::string ne = "    algorithm: {type: threshold, threshold: {operator: NotEqual, value: 0.2}}\n    onMissing: Fail\n";
  EXPECT_EQ(Kept(AttrFilter(ne), eps), (std::vector<std::string>{"b:1"}));
  const std::string none = "    algorithm: {type: threshold, threshold: {operator: GreaterThan, value: 5}}\n    onMissing: Fail\n";
  EXPECT_TRUE(Kept(AttrFilter(none), eps).empty()) << "nothing passes: 503 without fallbackOnEmpty";
  EXPECT_EQ(Kept(AttrFilter(none + "    fallbackOnEmpty: true\n"), eps), (std::vector<std::string>{"a:1", "b:1", "c:1"}));
}

TEST(EndpointAttributeFilterTest, ParametersAreCheckedAsLlmdChecksThem) {
  const std::string profiles = "- name: default\n  plugins: [{pluginRef: endpoint-attribute-filter}]\n";
  const std::string alg = "    algorithm: {type: threshold, threshold: {operator: LessThan, value: 1}}\n";
  struct Case {
    std::string params, want;
  } cases[] = {
      {"    attribute: ''\n" + alg, "requires a non-empty attribute"},
      {"    attribute: llm-d.ai/x\n" + alg, "contains '/' but no producer is set"},
      {"    attribute: a\n    onMissing: pass\n" + alg, "onMissing: must be \"Pass\" or \"Fail\""},
      {"    attribute: a\n    algorithm: {type: percentile}\n", "type: must be \"threshold\""},
      {"    attribute: a\n    algorithm: {type: threshold, threshold: {operator: Less, value: 1}}\n", "'Less' is not one of"},
      {"    attribute: a\n", "algorithm: required"},
  };
  for (const Case& c : cases) {
    auto s = Build(Config("- type: endpoint-attribute-filter\n  parameters:\n" + c.params, profiles));
    ASSERT_FALSE(s.ok()) << c.params;
    EXPECT_NE(s.status().message().find(c.want), std::string::npos) << s.status();
  }
  // A producer epp does not have, or an attribute no extractor declares: loads, with a warning.
  auto other = MustBuild(Config("- type: endpoint-attribute-filter\n  parameters:\n    attribute: GPUUtilization\n"
                                "    producer: dcgm-extractor\n" + alg, profiles));
  ASSERT_NE(other, nullptr);
  EXPECT_TRUE(HasWarning(*other, "epp has no such producer"));
  auto undeclared = MustBuild(Config(kExtractor + "- type: endpoint-attribute-filter\n  parameters:\n    attribute: typo\n" + alg, profiles));
  ASSERT_NE(undeclared, nullptr);
  EXPECT_TRUE(HasWarning(*undeclared, "'typo' is in no core-metrics-extractor's customMetrics"));
}

std::vector<double> AttrScores(const std::string& algorithm, std::vector<Endpoint> eps) {
  auto s = MustBuild(Config(kExtractor + "- type: endpoint-attribute-scorer\n  parameters:\n    attributeKey: gpu.util\n" + algorithm,
                            "- name: default\n  plugins: [{pluginRef: endpoint-attribute-scorer}]\n"));
  if (!s) return {};
  PickOptions po;
  po.trace = true;
  PickResult r = s->Pick(Req(), eps, po);
  std::vector<double> out;
  for (const std::string& address : {std::string("a:1"), std::string("b:1"), std::string("c:1")})
    for (const ProfileTrace& p : r.profiles)
      for (const EndpointScoreTrace& c : p.scores)
        if (c.endpoint == address) out.push_back(c.total);
  return out;
}

TEST(EndpointAttributeScorerTest, FixedAndAdaptiveRanges) {
  const std::vector<Endpoint> eps = {WithAttr("a:1", 0.2), WithAttr("b:1", 0.6), WithAttr("c:1", std::nullopt)};
  EXPECT_EQ(AttrScores("    algorithm: {type: linear_lower_is_better, normalization: {fixedRange: {min: 0, max: 1}}}\n", eps),
            (std::vector<double>{0.8, 0.4, 0.0}));
  const std::vector<double> higher =
      AttrScores("    algorithm: {type: linear_higher_is_better, normalization: {fixedRange: {min: 0.4, max: 1}}}\n", eps);
  ASSERT_EQ(higher.size(), 3u);
  EXPECT_EQ(higher[0], 0.0);
  EXPECT_NEAR(higher[1], (0.6 - 0.4) / 0.6, 1e-12);
  EXPECT_EQ(higher[2], 0.0);
  // Adaptive (the default): min and max over the candidates that have it.
  EXPECT_EQ(AttrScores("    algorithm: {type: linear_lower_is_better}\n", eps), (std::vector<double>{1.0, 0.0, 0.0}));
  // One value among the candidates: neutral 1.
  EXPECT_EQ(AttrScores("    algorithm: {type: linear_higher_is_better, normalization: {adaptiveRange: {}}}\n",
                       {WithAttr("a:1", 0.5), WithAttr("b:1", 0.5), WithAttr("c:1", std::nullopt)}),
            (std::vector<double>{1.0, 1.0, 0.0}));
  auto both = Build(Config("- type: endpoint-attribute-scorer\n  parameters:\n    attributeKey: a\n    algorithm: {type: "
                           "linear_lower_is_better, normalization: {fixedRange: {min: 0, max: 1}, adaptiveRange: {}}}\n",
                           "- name: default\n  plugins: [{pluginRef: endpoint-attribute-scorer}]\n"));
  EXPECT_FALSE(both.ok());
  auto inverted = Build(Config("- type: endpoint-attribute-scorer\n  parameters:\n    attributeKey: a\n    algorithm: {type: "
                               "linear_lower_is_better, normalization: {fixedRange: {min: 1, max: 1}}}\n",
                               "- name: default\n  plugins: [{pluginRef: endpoint-attribute-scorer}]\n"));
  ASSERT_FALSE(inverted.ok());
  EXPECT_NE(inverted.status().message().find("min (1) must be less than max (1)"), std::string::npos) << inverted.status();
}

// A P/D pool: decode d on host n1; prefill p-same on n1, p-rack on another host of rack r1,
// p-zone elsewhere in zone z. The prefill profile keeps/prefers what is close to the decode pick.
std::vector<Endpoint> PdPool(double same_queue) {
  auto ep = [](std::string address, std::string role, std::string host, std::string rack, double queue) {
    Endpoint e = EndpointBuilder(std::move(address)).Queue(queue).Running(0).Kv(0.1).Label("llm-d.ai/role", role);
    if (!host.empty()) e.labels["kubernetes.io/hostname"] = host;
    if (!rack.empty()) e.labels["topology.kubernetes.io/rack"] = rack;
    e.labels["topology.kubernetes.io/zone"] = "z";
    return e;
  };
  return {ep("d:1", "decode", "n1", "r1", 0), ep("p-same:1", "prefill", "n1", "r1", same_queue),
          ep("p-rack:1", "prefill", "n2", "r1", 0), ep("p-zone:1", "prefill", "n3", "r2", 0)};
}

std::string PdConfig(const std::string& topology_plugins, const std::string& prefill_refs) {
  return Config("- type: prefill-filter\n- type: decode-filter\n- type: queue-scorer\n- type: always-disagg-pd-decider\n"
                "- type: disagg-profile-handler\n  parameters: {deciders: {prefill: always-disagg-pd-decider}}\n" +
                    topology_plugins,
                "- name: decode\n  plugins: [{pluginRef: decode-filter}]\n"
                "- name: prefill\n  plugins: [{pluginRef: prefill-filter}, {pluginRef: queue-scorer}" + prefill_refs + "]\n");
}

std::string Header(const PickResult& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return {};
}

TEST(TopologyAffinityTest, PrefillStaysCloseToTheDecodePick) {
  const std::string plugins = "- type: topology-extractor\n- type: topology-affinity-filter\n";
  // minAffinity host: only the prefill server on the decode pod's host, even when it is busier.
  auto host = MustBuild(PdConfig(plugins, ", {pluginRef: topology-affinity-filter}"));
  ASSERT_NE(host, nullptr);
  PickResult r = host->Pick(Req(), PdPool(50));
  ASSERT_EQ(r.status, 200) << r.reason;
  EXPECT_EQ(r.endpoints.front(), "d:1");
  EXPECT_EQ(Header(r, "x-prefiller-host-port"), "p-same:1");
  // minAffinity rack: host or rack; the idle one on the rack wins on queue.
  auto rack = MustBuild(PdConfig("- type: topology-extractor\n- type: topology-affinity-filter\n  parameters: {minAffinity: rack}\n",
                                 ", {pluginRef: topology-affinity-filter}"));
  ASSERT_NE(rack, nullptr);
  EXPECT_EQ(Header(rack->Pick(Req(), PdPool(50)), "x-prefiller-host-port"), "p-rack:1");
  // Nothing close enough: fail open (every prefill candidate stays).
  std::vector<Endpoint> far = PdPool(0);
  far[1].labels.clear();
  far[1].labels["llm-d.ai/role"] = "prefill";
  far[2].labels["topology.kubernetes.io/rack"] = "r9";
  auto zone_only = MustBuild(PdConfig(plugins, ", {pluginRef: topology-affinity-filter}"));
  PickOptions po;
  po.trace = true;
  PickResult open = zone_only->Pick(Req(), far, po);
  ASSERT_EQ(open.status, 200);
  ASSERT_EQ(open.profiles.size(), 2u);
  EXPECT_EQ(open.profiles[1].filters.back().kept.size(), 3u);
}

TEST(TopologyAffinityTest, ScorerUsesLlmdsLevelScores) {
  auto s = MustBuild(PdConfig("- type: topology-extractor\n- type: topology-affinity-scorer\n",
                              ", {pluginRef: topology-affinity-scorer, weight: 1}"));
  ASSERT_NE(s, nullptr);
  PickOptions po;
  po.trace = true;
  // p-same has queue 1, others 0: queue-scorer 0 for p-same, 1 for the idle ones (min-max).
  PickResult r = s->Pick(Req(), PdPool(1), po);
  ASSERT_EQ(r.status, 200);
  ASSERT_EQ(r.profiles.size(), 2u);
  std::map<std::string, double> totals;
  for (const EndpointScoreTrace& c : r.profiles[1].scores) totals[c.endpoint] = c.total;
  EXPECT_DOUBLE_EQ(totals["p-same:1"], 0.0 + 1.0);   // host
  EXPECT_DOUBLE_EQ(totals["p-rack:1"], 1.0 + 0.20);  // rack
  EXPECT_DOUBLE_EQ(totals["p-zone:1"], 1.0 + 0.05);  // zone
  EXPECT_EQ(Header(r, "x-prefiller-host-port"), "p-rack:1");
  // explain names the level and the peer.
  EXPECT_NE(PickResultToText(nullptr, r).find("rack shared with peer d:1"), std::string::npos) << PickResultToText(nullptr, r);
}

TEST(TopologyAffinityTest, WithoutAnExtractorItLoadsWithAWarningAndKeepsEveryone) {
  auto s = MustBuild(PdConfig("- type: topology-affinity-filter\n", ", {pluginRef: topology-affinity-filter}"));
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(HasWarning(*s, "no topology-extractor named 'topology-extractor'"));
  PickResult r = s->Pick(Req(), PdPool(50));
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(Header(r, "x-prefiller-host-port"), "p-same:1") << "no topology: the busy same-host server loses on queue";
  auto bad = Build(PdConfig("- type: topology-affinity-filter\n  parameters: {minAffinity: node}\n", ""));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("invalid topology level 'node', must be one of host, rack, zone, region"),
            std::string::npos);
}

TEST(TopologyAffinityTest, ExtractorLabelsAreConfigurable) {
  std::vector<Endpoint> pool = PdPool(50);
  for (Endpoint& e : pool) {
    e.labels["node"] = e.labels["kubernetes.io/hostname"];
    e.labels.erase("kubernetes.io/hostname");
  }
  auto s = MustBuild(PdConfig("- type: topology-extractor\n  parameters: {hostname: node}\n- type: topology-affinity-filter\n",
                              ", {pluginRef: topology-affinity-filter}"));
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(Header(s->Pick(Req(), pool), "x-prefiller-host-port"), "p-same:1");
}

}  // namespace
}  // namespace epp
