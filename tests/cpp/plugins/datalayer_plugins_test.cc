// llm-d's data-layer types wired by dataLayer.sources: dcgm-data-source + dcgm-extractor,
// models-data-source + models-data-extractor, multicluster-metrics-data-source +
// multicluster-metrics-extractor. The data paths run against loopback simulators (their DCGM
// exporter, their /v1/models): ResolveEndpoints reads what the scrape loop reads, the scheduler
// filters and scores on it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "epp/config.h"
#include "epp/metrics.h"
#include "epp/registry.h"
#include "epp/request.h"
#include "epp/runtime/endpoints.h"
#include "testing/epp_testing.h"
#include "epp/runtime/http.h"
#include "epp/scheduler.h"
#include "epp/tools/sim.h"
#include "plugins/datalayer/datalayer.h"

namespace epp {
namespace {

std::string Config(const std::string& plugins, const std::string& rest) {
  return "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n" + plugins + rest;
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

bool HasWarning(const Scheduler& s, const std::string& part) {
  for (const std::string& w : s.warnings())
    if (w.find(part) != std::string::npos) return true;
  return false;
}

// llm-d-router's deploy/config/sim-epp-gpu-config.yaml, with the exporter's port as a parameter.
std::string GpuConfig(int port) {
  return Config("- type: dcgm-data-source\n  name: dcgm-source\n  parameters:\n    port: " + std::to_string(port) +
                    "\n    interval: \"1s\"\n"
                    "- type: dcgm-extractor\n  name: dcgm-extractor\n"
                    "- type: endpoint-attribute-filter\n  name: gpu-utilization-filter\n  parameters:\n"
                    "    attribute: \"GPUUtilization\"\n    producer: \"dcgm-extractor\"\n    onMissing: \"Pass\"\n"
                    "    fallbackOnEmpty: true\n    algorithm:\n      type: \"threshold\"\n      threshold:\n"
                    "        operator: \"LessThanOrEqual\"\n        value: 0.90\n"
                    "- type: endpoint-attribute-scorer\n  name: gpu-utilization-scorer\n  parameters:\n"
                    "    attributeKey: \"GPUUtilization\"\n    producer: \"dcgm-extractor\"\n    algorithm:\n"
                    "      type: \"linear_lower_is_better\"\n      normalization:\n        fixedRange:\n"
                    "          min: 0.0\n          max: 1.0\n"
                    "- type: kv-cache-utilization-scorer\n- type: max-score-picker\n- type: single-profile-handler\n"
                    "- type: decode-filter\n",
                "dataLayer:\n  sources:\n  - pluginRef: dcgm-source\n    extractors:\n    - pluginRef: dcgm-extractor\n"
                "schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: decode-filter\n"
                "  - pluginRef: gpu-utilization-filter\n  - pluginRef: gpu-utilization-scorer\n    weight: 2.0\n"
                "  - pluginRef: kv-cache-utilization-scorer\n    weight: 1.0\n  - pluginRef: max-score-picker\n");
}

ScrapeOptions ScrapeFor(const Scheduler& s) {
  ScrapeOptions o;
  o.timeout = std::chrono::milliseconds(2000 * epp::testing::TimeScale());
  s.ConfigureScrape(o);
  return o;
}

const char* kDcgmText =
    "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
    "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
    "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",pod=\"vllm-a\",namespace=\"ns\"} 35\n"
    "DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",pod=\"vllm-a\",namespace=\"ns\"} 80\n"
    "DCGM_FI_DEV_GPU_UTIL{gpu=\"2\",pod=\"vllm-b\",namespace=\"ns\"} 95\n";

EndpointSpec PodSpec(const std::string& address, const std::string& instance) {
  EndpointSpec s;
  s.address = address;
  s.instance = instance;
  return s;
}

TEST(DataLayerPluginsTest, DcgmExtractorTakesThePodsBusiestGpuAsAFraction) {
  auto s = MustBuild(GpuConfig(9400));
  ASSERT_NE(s, nullptr);
  ScrapeOptions o = ScrapeFor(*s);
  ASSERT_EQ(o.attribute_sources.size(), 1u);
  const AttributeSource& src = *o.attribute_sources[0];
  EXPECT_EQ(src.name(), "dcgm-source");
  EXPECT_EQ(src.interval(), std::chrono::seconds(1));

  // A DaemonSet payload: only the Pod's own GPUs count, the busiest wins, percent -> [0, 1].
  EndpointAttributes a;
  ASSERT_TRUE(src.Apply(kDcgmText, PodSpec("10.0.0.1:8000", "ns/vllm-a"), a).ok());
  EXPECT_DOUBLE_EQ(*a.Find("GPUUtilization", "dcgm-extractor"), 0.80);
  EXPECT_EQ(a.values[0].source, "dcgm-source");
  ASSERT_TRUE(src.Apply(kDcgmText, PodSpec("10.0.0.2:8000", "ns/vllm-b"), a).ok());
  EXPECT_DOUBLE_EQ(*a.Find("GPUUtilization"), 0.95);
  EXPECT_EQ(a.values.size(), 1u);  // replaced, not appended
  // No Pod name (a file's endpoint) or no pod label (a sidecar): every sample is its own.
  EndpointAttributes b;
  ASSERT_TRUE(src.Apply(kDcgmText, PodSpec("10.0.0.3:8000", ""), b).ok());
  EXPECT_DOUBLE_EQ(*b.Find("GPUUtilization"), 0.95);
  // A Pod the payload does not mention, a missing metric, an untyped one: errors; the value stays.
  absl::Status st = src.Apply(kDcgmText, PodSpec("10.0.0.4:8000", "ns/other"), b);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("no sample for pod 'other'"), std::string_view::npos) << st;
  EXPECT_DOUBLE_EQ(*b.Find("GPUUtilization"), 0.95);
  st = src.Apply("DCGM_FI_DEV_FB_USED 3\n", PodSpec("10.0.0.3:8000", ""), b);
  EXPECT_NE(st.message().find("DCGM_FI_DEV_GPU_UTIL not found"), std::string_view::npos) << st;
  st = src.Apply("# TYPE DCGM_FI_DEV_GPU_UTIL untyped\nDCGM_FI_DEV_GPU_UTIL 3\n", PodSpec("10.0.0.3:8000", ""), b);
  EXPECT_NE(st.message().find("expected a gauge"), std::string_view::npos) << st;
}

TEST(DataLayerPluginsTest, DcgmSourceRequestsTheExporterBesideThePod) {
  auto s = MustBuild(GpuConfig(9400));
  ASSERT_NE(s, nullptr);
  ScrapeOptions o = ScrapeFor(*s);
  ASSERT_EQ(o.attribute_sources.size(), 1u);
  auto r = o.attribute_sources[0]->Request(PodSpec("10.0.0.1:8000", "ns/a"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->url, "http://10.0.0.1:9400/metrics");
  EXPECT_TRUE(r->insecure);  // llm-d's default insecureSkipVerify: true
  r = o.attribute_sources[0]->Request(PodSpec("[fd00::1]:8000", "ns/a"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->url, "http://[fd00::1]:9400/metrics");

  // DaemonSet: the node's exporter; unknown without a node address.
  auto d = MustBuild(Config("- type: dcgm-data-source\n  name: d\n  parameters: {useNodeAddress: true, scheme: https, "
                            "path: /dcgm}\n- type: dcgm-extractor\n",
                            "dataLayer:\n  sources:\n  - pluginRef: d\n    extractors: [{pluginRef: dcgm-extractor}]\n"));
  ASSERT_NE(d, nullptr);
  ScrapeOptions od = ScrapeFor(*d);
  EndpointSpec pod = PodSpec("10.0.0.1:8000", "ns/a");
  EXPECT_EQ(od.attribute_sources[0]->Request(pod).status().code(), absl::StatusCode::kFailedPrecondition);
  pod.node_address = "192.168.1.7";
  EXPECT_EQ(od.attribute_sources[0]->Request(pod)->url, "https://192.168.1.7:9400/dcgm");
}

TEST(DataLayerPluginsTest, SourceParametersAreLlmdsWithItsDefaults) {
  auto s = MustBuild(Config("- type: dcgm-data-source\n- type: models-data-source\n- type: multicluster-metrics-data-source\n"
                            "- type: multicluster-metrics-extractor\n",
                            ""));
  ASSERT_NE(s, nullptr);
  const std::string eff = s->EffectiveConfigYaml();
  EXPECT_NE(eff.find("port: 9400"), std::string::npos) << eff;
  EXPECT_NE(eff.find("path: /v1/models"), std::string::npos) << eff;
  EXPECT_NE(eff.find("scheme: https"), std::string::npos) << eff;  // multicluster: across a trust boundary
  EXPECT_NE(eff.find("llm_d_epp_average_kv_cache_utilization"), std::string::npos) << eff;
  // Not wired in dataLayer.sources: they read nothing, and say so.
  EXPECT_TRUE(HasWarning(*s, "'dcgm-data-source' (dcgm-data-source) is in no dataLayer.sources entry"));
  EXPECT_TRUE(ScrapeFor(*s).attribute_sources.empty());

  for (const auto& [params, want] : std::vector<std::pair<std::string, std::string>>{
           {"{scheme: ftp}", "scheme"},
           {"{port: 0}", "port"},
           {"{path: metrics}", "path: must start with '/'"},
           {"{interval: soon}", "interval"},
           {"{portt: 1}", "unknown parameter 'portt'"}}) {
    auto b = Build(Config("- type: dcgm-data-source\n  parameters: " + params + "\n", ""));
    ASSERT_FALSE(b.ok()) << params;
    EXPECT_NE(b.status().message().find(want), std::string_view::npos) << b.status();
  }
  auto m = Build(Config("- type: models-data-source\n  parameters: {clientCertPath: /c.pem}\n", ""));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("clientCertPath: mTLS client certificates are not supported"), std::string_view::npos);
}

TEST(DataLayerPluginsTest, DataLayerSectionIsCheckedAndWired) {
  const std::string plugins =
      "- type: dcgm-data-source\n  name: gpu\n- type: dcgm-extractor\n- type: models-data-extractor\n"
      "- type: queue-scorer\n";
  // An extractor that reads another payload than the source provides.
  auto bad = Build(Config(plugins, "dataLayer:\n  sources:\n  - pluginRef: gpu\n    extractors:\n"
                                   "    - pluginRef: models-data-extractor\n"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("dataLayer.sources[0].extractors[0].pluginRef: 'models-data-extractor' "
                                        "(models-data-extractor) reads /v1/models but 'gpu' (dcgm-data-source) "
                                        "provides Prometheus metrics"),
            std::string_view::npos)
      << bad.status();
  // A source that is no data source; an undefined reference; unknown keys.
  auto notsrc = Build(Config(plugins, "dataLayer:\n  sources:\n  - pluginRef: queue-scorer\n"));
  ASSERT_FALSE(notsrc.ok());
  EXPECT_NE(notsrc.status().message().find("'queue-scorer' (queue-scorer) is not a data source"), std::string_view::npos)
      << notsrc.status();
  auto undef = Build(Config(plugins, "dataLayer:\n  sources:\n  - pluginRef: gpu\n    extractors: [{pluginRef: nope}]\n"));
  ASSERT_FALSE(undef.ok());
  EXPECT_NE(undef.status().message().find("nope"), std::string_view::npos) << undef.status();
  auto typo = Build(Config(plugins, "dataLayer:\n  source: []\n"));
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("unknown key 'source'"), std::string_view::npos) << typo.status();
  // The keys epp loads without acting on them warn; the wired source reaches the scrape.
  auto ok = MustBuild(Config(plugins, "dataLayer:\n  injectDefaults: true\n  crossReplicaSyncInterval: 5s\n  sources:\n"
                                      "  - pluginRef: gpu\n    extractors: [{pluginRef: dcgm-extractor}]\n"));
  ASSERT_NE(ok, nullptr);
  EXPECT_TRUE(HasWarning(*ok, "dataLayer.crossReplicaSyncInterval: loaded but not implemented"));
  EXPECT_FALSE(HasWarning(*ok, "in no dataLayer.sources entry"));
  EXPECT_EQ(ScrapeFor(*ok).attribute_sources.size(), 1u);
}

TEST(DataLayerPluginsTest, AttributePluginsReadTheExtractorsAttribute) {
  auto s = MustBuild(GpuConfig(9400));
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(HasWarning(*s, "every endpoint misses it")) << s->warnings().front();
  std::vector<Endpoint> eps(3);
  const double util[] = {0.95, 0.2, 0.5};
  for (int i = 0; i < 3; ++i) {
    eps[i].address = "10.0.0." + std::to_string(i + 1) + ":8000";
    eps[i].metrics.waiting_queue_size = 0;
    eps[i].metrics.running_requests = 0;
    eps[i].metrics.kv_cache_usage = 0.1;
    eps[i].metrics_time_us = SteadyClock::Get().NowMicros();
    eps[i].attributes.values.push_back({"GPUUtilization", "dcgm-extractor", "dcgm-source", util[i]});
  }
  auto req = ParseOpenAIRequest("/v1/completions", R"({"model":"m","prompt":"hi"})");
  ASSERT_TRUE(req.ok());
  PickResult r = s->Pick(*req, eps);
  ASSERT_EQ(r.status, 200) << r.reason;
  EXPECT_EQ(r.endpoints.front(), "10.0.0.2:8000");  // least utilized; 10.0.0.1 is filtered out (> 0.9)
  // A producer that does not make the attribute is caught at load.
  auto w = MustBuild(Config("- type: dcgm-extractor\n- type: endpoint-attribute-scorer\n  parameters: {attributeKey: "
                            "FBUsed, producer: dcgm-extractor, algorithm: {type: linear_lower_is_better}}\n",
                            ""));
  ASSERT_NE(w, nullptr);
  EXPECT_TRUE(HasWarning(*w, "'dcgm-extractor' (dcgm-extractor) does not produce it"));
}

// Starts two simulated servers on their own loopback addresses, each with a DCGM exporter on one
// shared port (as each Pod's sidecar listens on 9400 at the Pod's IP).
struct SimPair {
  std::vector<std::unique_ptr<SimHttpServer>> servers;
  int dcgm_port = -1;
  bool Start(int max_running) {
    for (const char* host : {"127.0.0.2", "127.0.0.3"}) {
      SimHttpOptions o;
      o.host = host;
      o.params.max_running = max_running;
      o.params.loras = {"sql-lora"};
      o.dcgm_port = dcgm_port < 0 ? 0 : dcgm_port;
      auto s = SimHttpServer::Start(o);
      if (!s.ok()) {
        ADD_FAILURE() << s.status();
        return false;
      }
      dcgm_port = (*s)->dcgm_port();
      servers.push_back(*std::move(s));
    }
    return true;
  }
  std::vector<EndpointSpec> Specs() const {
    std::vector<EndpointSpec> out;
    for (const auto& s : servers) out.push_back(PodSpec(s->url().substr(7), ""));
    return out;
  }
  ~SimPair() {
    for (auto& s : servers) s->Stop();
  }
};

TEST(DataLayerPluginsTest, GpuUtilizationFromTheSimulatorsExporterSteersPicks) {
  SimPair sims;
  ASSERT_TRUE(sims.Start(/*max_running=*/2));
  auto s = MustBuild(GpuConfig(sims.dcgm_port));
  ASSERT_NE(s, nullptr);
  ResolveOptions ro;
  ro.scrape = ScrapeFor(*s);
  const std::vector<EndpointSpec> specs = sims.Specs();

  // Idle: both read, both 0.
  auto idle = ResolveEndpoints(specs, ro);
  ASSERT_TRUE(idle.ok()) << idle.status();
  for (const Endpoint& e : *idle) {
    EXPECT_TRUE(e.attributes.errors.empty()) << e.attributes.errors.front().second;
    ASSERT_TRUE(e.attributes.Find("GPUUtilization", "dcgm-extractor").has_value()) << e.address;
    EXPECT_DOUBLE_EQ(*e.attributes.Find("GPUUtilization"), 0.0);
  }

  // Two long requests fill the first server's batch of 2: its exporter reports 100%.
  HttpClient load;
  for (int i = 0; i < 2; ++i) {
    HttpRequest r;
    r.method = "POST";
    r.url = sims.servers[0]->url() + "/v1/completions";
    r.headers = {"Content-Type: application/json"};
    r.body = R"({"model":"meta-llama/Llama-3.1-8B-Instruct","prompt":"hello","max_tokens":5000})";
    r.timeout = std::chrono::milliseconds(60000);
    load.Start(r);
  }
  std::vector<Endpoint> busy;
  for (int tries = 0; tries < 100; ++tries) {
    (void)load.Wait(std::chrono::steady_clock::now() + std::chrono::milliseconds(20));  // drives the uploads
    auto got = ResolveEndpoints(specs, ro);
    ASSERT_TRUE(got.ok());
    busy = *got;
    if (busy[0].attributes.Find("GPUUtilization").value_or(0) >= 1.0) break;
  }
  EXPECT_DOUBLE_EQ(*busy[0].attributes.Find("GPUUtilization"), 1.0);
  EXPECT_DOUBLE_EQ(*busy[1].attributes.Find("GPUUtilization"), 0.0);
  auto req = ParseOpenAIRequest("/v1/completions", R"({"model":"m","prompt":"hi"})");
  ASSERT_TRUE(req.ok());
  for (int i = 0; i < 5; ++i) {
    PickResult r = s->Pick(*req, busy);
    ASSERT_EQ(r.status, 200) << r.reason;
    EXPECT_EQ(r.endpoints.front(), busy[1].address);
  }

  // The exporter goes away: the error is recorded, the last value kept (as llm-d keeps it).
  sims.servers[0]->Stop();
  ASSERT_TRUE(RefreshEndpointMetrics(specs, busy, ro).ok());
  ASSERT_FALSE(busy[0].attributes.errors.empty());
  EXPECT_EQ(busy[0].attributes.errors[0].first, "dcgm-source");
  EXPECT_DOUBLE_EQ(*busy[0].attributes.Find("GPUUtilization"), 1.0);
  EXPECT_TRUE(busy[1].attributes.errors.empty());
}

TEST(DataLayerPluginsTest, ModelsFromTheSimulatorsModelList) {
  SimPair sims;
  ASSERT_TRUE(sims.Start(8));
  auto s = MustBuild(Config("- type: models-data-source\n  name: models\n- type: models-data-extractor\n",
                            "dataLayer:\n  sources:\n  - pluginRef: models\n    extractors: [{pluginRef: models-data-extractor}]\n"));
  ASSERT_NE(s, nullptr);
  ResolveOptions ro;
  ro.scrape = ScrapeFor(*s);
  auto eps = ResolveEndpoints(sims.Specs(), ro);
  ASSERT_TRUE(eps.ok()) << eps.status();
  const EndpointAttributes& a = (*eps)[0].attributes;
  ASSERT_TRUE(a.models.has_value()) << (a.errors.empty() ? "" : a.errors[0].second);
  ASSERT_EQ(a.models->size(), 2u);
  EXPECT_EQ((*a.models)[0], (ServedModel{"meta-llama/Llama-3.1-8B-Instruct", ""}));
  EXPECT_EQ((*a.models)[1], (ServedModel{"sql-lora", "meta-llama/Llama-3.1-8B-Instruct"}));
  EXPECT_EQ(a.models_source, "models");
  EXPECT_EQ(a.Serves("sql-lora"), std::optional<bool>(true));
  EXPECT_EQ(a.Serves("other"), std::optional<bool>(false));

  // What the source makes of answers that are not a model list.
  ScrapeOptions o = ScrapeFor(*s);
  EndpointAttributes x;
  EXPECT_NE(o.attribute_sources[0]->Apply("nope", PodSpec("10.0.0.1:8000", ""), x).message().find("not JSON"),
            std::string_view::npos);
  EXPECT_NE(o.attribute_sources[0]->Apply(R"({"data":[{"object":"model"}]})", PodSpec("10.0.0.1:8000", ""), x)
                .message()
                .find("data[0].id"),
            std::string_view::npos);
  EXPECT_FALSE(x.models.has_value());
}

TEST(DataLayerPluginsTest, MulticlusterExtractorReadsThePeersPoolAggregates) {
  auto s = MustBuild(Config("- type: multicluster-metrics-data-source\n  name: peers\n  parameters: {scheme: http}\n"
                            "- type: multicluster-metrics-extractor\n  parameters: {queueSizeMetric: 'my_queue{pool=a}'}\n",
                            "dataLayer:\n  sources:\n  - pluginRef: peers\n    extractors: "
                            "[{pluginRef: multicluster-metrics-extractor}]\n"));
  ASSERT_NE(s, nullptr);
  ScrapeOptions o = ScrapeFor(*s);
  ASSERT_EQ(o.attribute_sources.size(), 1u);
  const AttributeSource& src = *o.attribute_sources[0];
  // A peer's metrics URL names its EPP; the request goes there, capped.
  EndpointSpec peer = PodSpec("gw-east.example:443", "");
  peer.metrics = "http://epp-east.example:9090/metrics";
  auto r = src.Request(peer);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->url, "http://epp-east.example:9090/metrics");
  EXPECT_EQ(r->max_body_bytes, size_t{8} << 20);
  EndpointAttributes a;
  ASSERT_TRUE(src.Apply("llm_d_epp_average_kv_cache_utilization 0.4\nmy_queue{pool=\"b\"} 9\nmy_queue{pool=\"a\"} 3\n",
                        peer, a)
                  .ok());
  EXPECT_DOUBLE_EQ(*a.Find("llm-d.ai/multicluster-kv-cache-utilization"), 0.4);
  EXPECT_DOUBLE_EQ(*a.Find("llm-d.ai/multicluster-queue-size"), 3);
  // One aggregate missing: the other is still written, the missing one keeps its value.
  absl::Status st = src.Apply("llm_d_epp_average_kv_cache_utilization 0.7\n", peer, a);
  EXPECT_NE(st.message().find("my_queue{pool=\"a\"} not found"), std::string_view::npos) << st;
  EXPECT_DOUBLE_EQ(*a.Find("llm-d.ai/multicluster-kv-cache-utilization"), 0.7);
  EXPECT_DOUBLE_EQ(*a.Find("llm-d.ai/multicluster-queue-size"), 3);
}

TEST(DataLayerPluginsTest, SimulatorDcgmExporterFollowsTheLoad) {
  SimParams p;
  p.max_running = 4;
  SimSnapshot snap;
  SimDcgmOptions o;
  o.pod = "vllm-0";
  snap.running = 3;
  auto fam = ParsePrometheusText(RenderDcgmMetrics(p, snap, o));
  ASSERT_TRUE(fam.ok()) << fam.status();
  auto util = fam->SamplesNamed("DCGM_FI_DEV_GPU_UTIL");
  ASSERT_EQ(util.size(), 1u);
  EXPECT_EQ(util[0].first->type, MetricType::kGauge);
  EXPECT_DOUBLE_EQ(util[0].second->value, 75);
  EXPECT_EQ(util[0].second->label("pod"), std::optional<std::string_view>("vllm-0"));
  EXPECT_EQ(util[0].second->label("modelName"), std::optional<std::string_view>("NVIDIA H100 80GB HBM3"));
  snap.waiting = 5;  // a queue: the batch is full
  fam = ParsePrometheusText(RenderDcgmMetrics(p, snap, SimDcgmOptions{}));
  ASSERT_TRUE(fam.ok());
  EXPECT_DOUBLE_EQ(fam->SamplesNamed("DCGM_FI_DEV_GPU_UTIL")[0].second->value, 100);
  EXPECT_DOUBLE_EQ(fam->SamplesNamed("DCGM_FI_DEV_POWER_USAGE")[0].second->value, 700);
  EXPECT_FALSE(fam->SamplesNamed("DCGM_FI_DEV_GPU_UTIL")[0].second->label("pod").has_value());
  EXPECT_EQ(fam->SamplesNamed("DCGM_FI_DEV_FB_USED").size(), 1u);
  EXPECT_EQ(fam->SamplesNamed("DCGM_FI_DEV_FB_FREE").size(), 1u);
}

}  // namespace
}  // namespace epp

namespace epp {
namespace {

// The scheduler's selected discovery plugin, listing once.
absl::StatusOr<std::vector<EndpointSpec>> ListOnce(const Scheduler& s) {
  std::shared_ptr<EndpointLister> l = plugins::ConfiguredDiscovery(s, nullptr);
  if (!l) return absl::NotFoundError("no discovery");
  std::atomic<bool> cancel{false};
  return l->List(cancel);
}

TEST(DataLayerPluginsTest, FileDiscoveryReadsLlmdsEndpointsFile) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/dl-endpoints.yaml";
  {
    std::ofstream f(path);
    f << "endpoints:\n"
         "- {name: vllm-0, address: \"10.0.0.1\", port: \"8000\", labels: {role: decode}}\n"
         "- {name: vllm-1, namespace: team, address: \"10.0.0.2\", port: 8001}\n"
         "- {name: bad-ip, address: gw.example, port: \"8000\"}\n"
         "- {name: bad-port, address: \"10.0.0.3\", port: \"70000\"}\n"
         "- {name: twice, address: \"10.0.0.1\", port: \"8000\"}\n";
  }
  const std::string config = Config("- type: file-discovery\n  parameters: {path: " + path + ", watchFile: true}\n",
                                    "dataLayer:\n  discovery: {pluginRef: file-discovery}\n");
  auto s = MustBuild(config);
  ASSERT_NE(s, nullptr);
  auto specs = ListOnce(*s);
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 2u);  // the invalid entries are skipped, as llm-d skips them
  EXPECT_EQ((*specs)[0].address, "10.0.0.1:8000");
  EXPECT_EQ((*specs)[0].instance, "default/vllm-0");  // the Pod name dcgm-extractor matches
  EXPECT_EQ((*specs)[0].labels.at("role"), "decode");
  EXPECT_EQ((*specs)[1].address, "10.0.0.2:8001");
  EXPECT_EQ((*specs)[1].instance, "team/vllm-1");

  // multicluster-file-discovery: gateway hosts, metrics where the labels say.
  {
    std::ofstream f(path);
    f << "endpoints:\n"
         "- {name: east, address: gw-east.example, port: \"443\", labels: {metricsAddress: epp-east.example, "
         "metricsPort: \"9090\"}}\n"
         "- {name: west, address: \"10.9.0.1\", port: \"443\"}\n"
         "- {name: Bad_Host, address: Bad_Host, port: \"443\"}\n";
  }
  auto m = MustBuild(Config("- type: multicluster-file-discovery\n  name: peers\n  parameters: {path: " + path + "}\n",
                            "dataLayer:\n  discovery: {pluginRef: peers}\n"));
  ASSERT_NE(m, nullptr);
  auto peers = ListOnce(*m);
  ASSERT_TRUE(peers.ok()) << peers.status();
  ASSERT_EQ(peers->size(), 2u);
  EXPECT_EQ((*peers)[0].address, "gw-east.example:443");
  EXPECT_EQ((*peers)[0].metrics, "http://epp-east.example:9090/metrics");
  EXPECT_EQ((*peers)[1].metrics, "");

  // A file that is not the format fails the load; a discovery plugin not selected lists nothing.
  { std::ofstream(path) << "endpoints: {a: 1}\n"; }
  EXPECT_FALSE(ListOnce(*MustBuild(config)).ok());
  auto unused = MustBuild(Config("- type: file-discovery\n  parameters: {path: " + path + "}\n", ""));
  ASSERT_NE(unused, nullptr);
  EXPECT_EQ(plugins::ConfiguredDiscovery(*unused, nullptr), nullptr);
  EXPECT_TRUE(HasWarning(*unused, "is not dataLayer.discovery; it lists nothing"));
  auto nopath = Build(Config("- type: file-discovery\n", ""));
  ASSERT_FALSE(nopath.ok());
  EXPECT_NE(nopath.status().message().find("path: required"), std::string_view::npos);
  auto notdisc = Build(Config("- type: queue-scorer\n", "dataLayer:\n  discovery: {pluginRef: queue-scorer}\n"));
  ASSERT_FALSE(notdisc.ok());
  EXPECT_NE(notdisc.status().message().find("is not an endpoint discovery plugin"), std::string_view::npos);
}

}  // namespace
}  // namespace epp

namespace epp {
namespace {

TEST(DataLayerPluginsTest, K8sNotificationSourceChecksItsKindAndTakesNoExtractor) {
  auto s = MustBuild(Config("- type: k8s-notification-source\n  name: pods\n  parameters: {group: \"\", version: v1, kind: Pod}\n",
                            "dataLayer:\n  sources:\n  - pluginRef: pods\n"));
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(HasWarning(*s, "plugin 'pods' (k8s-notification-source, v1 Pod): epp has no notification extractors"));
  EXPECT_NE(s->EffectiveConfigYaml().find("kind: Pod"), std::string::npos);
  auto missing = Build(Config("- type: k8s-notification-source\n  parameters: {version: v1}\n", ""));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("version and kind are required"), std::string_view::npos) << missing.status();
  auto wired = Build(Config("- type: k8s-notification-source\n  name: pods\n  parameters: {version: v1, kind: Pod}\n"
                            "- type: dcgm-extractor\n",
                            "dataLayer:\n  sources:\n  - pluginRef: pods\n    extractors: [{pluginRef: dcgm-extractor}]\n"));
  ASSERT_FALSE(wired.ok());
  EXPECT_NE(wired.status().message().find("reads Prometheus metrics but 'pods' (k8s-notification-source) provides "
                                          "Kubernetes objects"),
            std::string_view::npos)
      << wired.status();
}

}  // namespace
}  // namespace epp
