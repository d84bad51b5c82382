// llm-d's SLO-aware latency plugins (predicted-latency-producer, latency-scorer,
// slo-headroom-tier-filter, latency-slo-admitter): configs naming them load with one warning
// each, their parameters are read and checked as llm-d reads them (defaults from llm-d's
// DefaultConfig structs), and until the predictor exists they leave every pick as it was.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "epp/config.h"
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
  std::unique_ptr<SeededRng> rng = std::make_unique<SeededRng>(11);
  std::unique_ptr<Scheduler> scheduler;
};

absl::StatusOr<Built> Build(const std::string& yaml) {
  Built b;
  EPP_ASSIGN_OR_RETURN(EppConfig cfg, ParseConfig(yaml, "latency.yaml"));
  PluginContext ctx{b.clock.get(), b.rng.get()};
  EPP_ASSIGN_OR_RETURN(b.scheduler, BuildScheduler(cfg, BuiltinRegistry(), ctx));
  return b;
}

// Our own config in the shape of llm-d's latency READMEs and its "predicted-latency-slo" config:
// every latency plugin with parameters, the filter and the scorer in the profile.
const char kLatencyConfig[] = R"(apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: predicted-latency-producer
  name: predictor
  parameters:
    streamingMode: true
    sloBufferFactor: 1.1
    contextTTL: 90s
    endpointRoleLabel: llm-d.ai/role
- type: slo-headroom-tier-filter
  name: tiers
  parameters:
    epsilonExploreNeg: 0.05
- type: latency-scorer
  name: headroom
  parameters:
    ttftWeight: 0.6
    tpotWeight: 0.4
    headroomSelectionStrategy: most
    compositePrefixWeight: 2
- type: latency-slo-admitter
  name: slo-gate
- type: queue-scorer
- type: weighted-random-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: tiers
  - pluginRef: headroom
  - pluginRef: queue-scorer
  - pluginRef: weighted-random-picker
)";

// The same config without the latency plugins.
const char kBaselineConfig[] = R"(apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: weighted-random-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: weighted-random-picker
)";

std::vector<Endpoint> Pool() {
  return {EndpointBuilder("a:8000").Queue(0).Running(1).Kv(0.2), EndpointBuilder("b:8000").Queue(3).Running(2).Kv(0.5),
          EndpointBuilder("c:8000").Queue(9).Running(4).Kv(0.9)};
}

InferenceRequest Req() {
  auto r = ParseOpenAIRequest("/v1/completions", R"({"model":"m","prompt":"how far is the moon"})");
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

TEST(LatencyPluginsTest, ConfigNamingAllFourLoadsWithOneWarningEach) {
  absl::StatusOr<Built> b = Build(kLatencyConfig);
  ASSERT_TRUE(b.ok()) << b.status();
  const std::vector<std::string>& warnings = b->scheduler->warnings();
  const std::pair<std::string, std::string> expected[] = {{"predictor", "predicted-latency-producer"},
                                                          {"tiers", "slo-headroom-tier-filter"},
                                                          {"headroom", "latency-scorer"},
                                                          {"slo-gate", "latency-slo-admitter"}};
  for (const auto& [name, type] : expected) {
    const std::string head = "plugin '" + name + "' (" + type + "): parameters checked; SLO-aware latency prediction is "
                             "not implemented yet in epp: this plugin does not affect routing";
    int found = 0;
    for (const std::string& w : warnings) found += w.find(head) != std::string::npos;
    EXPECT_EQ(found, 1) << type << " in:\n" << ::testing::PrintToString(warnings);
  }
}

TEST(LatencyPluginsTest, PicksAreTheSameAsWithoutThem) {
  absl::StatusOr<Built> with = Build(kLatencyConfig);
  absl::StatusOr<Built> without = Build(kBaselineConfig);
  ASSERT_TRUE(with.ok()) << with.status();
  ASSERT_TRUE(without.ok()) << without.status();
  const std::vector<Endpoint> pool = Pool();
  std::vector<std::string> a, b;
  for (int i = 0; i < 40; ++i) {
    PickResult x = with->scheduler->Pick(Req(), pool);
    PickResult y = without->scheduler->Pick(Req(), pool);
    ASSERT_EQ(x.status, 200) << x.reason;
    ASSERT_EQ(y.status, 200) << y.reason;
    a.push_back(x.endpoints[0]);
    b.push_back(y.endpoints[0]);
  }
  EXPECT_EQ(a, b);
  // Weighted random over the queue scores: not always the same endpoint, so the check means
  // something.
  EXPECT_NE(std::count(a.begin(), a.end(), a[0]), static_cast<long>(a.size()));

  // The trace shows the filter keeping everything and the scorer's 0 with its reason.
  PickResult t = with->scheduler->Pick(Req(), pool, {.trace = true});
  ASSERT_EQ(t.status, 200) << t.reason;
  ASSERT_EQ(t.profiles.size(), 1u);
  ASSERT_FALSE(t.profiles[0].filters.empty());
  EXPECT_EQ(t.profiles[0].filters[0].type, "slo-headroom-tier-filter");
  EXPECT_EQ(t.profiles[0].filters[0].kept.size(), 3u);
  EXPECT_TRUE(t.profiles[0].filters[0].removed.empty());
  int latency_scores = 0;
  for (const EndpointScoreTrace& s : t.profiles[0].scores)
    for (const ScorerTrace& sc : s.scorers)
      if (sc.type == "latency-scorer") {
        ++latency_scores;
        EXPECT_EQ(sc.raw, 0) << s.endpoint;
        EXPECT_NE(sc.detail.find("not implemented"), std::string::npos) << sc.detail;
      }
  EXPECT_EQ(latency_scores, 3);
}

// ---- parameters, straight through the registry

struct Made {
  absl::StatusOr<std::unique_ptr<Plugin>> plugin;
  std::vector<std::string> warnings;
};

Made Make(const std::string& type, const std::string& yaml_params) {
  static SeededRng rng(5);
  Made m;
  Params params;
  if (!yaml_params.empty()) {
    const std::string yaml = std::string(R"(apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: )") + type + "\n  parameters: " + yaml_params + "\n";
    absl::StatusOr<EppConfig> cfg = ParseConfig(yaml, "p.yaml");
    EXPECT_TRUE(cfg.ok()) << cfg.status();
    if (cfg.ok()) params = cfg->plugins.at(0).parameters;
  }
  params.SetPath("plugins[0].parameters");
  PluginContext ctx{&SteadyClock::Get(), &rng};
  ctx.warnings = &m.warnings;
  m.plugin = BuiltinRegistry().Create(type, "p", params, ctx);
  return m;
}

std::string Effective(const std::string& type, const std::string& yaml_params = "") {
  Made m = Make(type, yaml_params);
  EXPECT_TRUE(m.plugin.ok()) << type << ": " << m.plugin.status();
  return m.plugin.ok() ? (*m.plugin)->EffectiveParams().ToJson() : "";
}

std::string Error(const std::string& type, const std::string& yaml_params) {
  Made m = Make(type, yaml_params);
  EXPECT_FALSE(m.plugin.ok()) << type << " accepted " << yaml_params;
  return m.plugin.ok() ? "" : std::string(m.plugin.status().message());
}

TEST(LatencyPluginsTest, DefaultsAreLlmdDefaults) {
  EXPECT_EQ(Effective("predicted-latency-producer"),
            R"({"samplingMean":1000,"maxDecodeTokenSamplesForPrediction":0,"sloBufferFactor":1,)"
            R"("contextTTL":"300000ms","streamingMode":false,"predictInProduce":true,"useEncoderCacheFeatures":false})");
  EXPECT_EQ(Effective("latency-scorer"),
            R"({"ttftWeight":0.8,"tpotWeight":0.2,"headroomSelectionStrategy":"least","compositeKVWeight":1,)"
            R"("compositeQueueWeight":1,"compositePrefixWeight":1})");
  EXPECT_EQ(Effective("slo-headroom-tier-filter"), R"({"epsilonExploreNeg":0.01})");
  EXPECT_EQ(Effective("latency-slo-admitter"), "{}");
  // The defaults create the same plugin again.
  for (const char* type : {"predicted-latency-producer", "latency-scorer", "slo-headroom-tier-filter", "latency-slo-admitter"})
    EXPECT_EQ(Effective(type, Effective(type)), Effective(type)) << type;
}

TEST(LatencyPluginsTest, GivenParametersAreKept) {
  EXPECT_EQ(Effective("predicted-latency-producer",
                      "{streamingMode: true, predictInProduce: false, endpointRoleLabel: llm-d.ai/role, "
                      "prefixMatchInfoProducerName: approx, inFlightLoadProducerName: inflight, "
                      "useEncoderCacheFeatures: true, encoderCacheMatchInfoProducerName: mm}"),
            R"({"samplingMean":1000,"maxDecodeTokenSamplesForPrediction":0,"sloBufferFactor":1,)"
            R"("contextTTL":"300000ms","streamingMode":true,"endpointRoleLabel":"llm-d.ai/role",)"
            R"("predictInProduce":false,"prefixMatchInfoProducerName":"approx","inFlightLoadProducerName":"inflight",)"
            R"("useEncoderCacheFeatures":true,"encoderCacheMatchInfoProducerName":"mm"})");
  EXPECT_EQ(Effective("latency-scorer", "{latencyPredictionInfoProducerName: pl, prefixMatchInfoProducerName: px, "
                                        "tpotWeight: 0}"),
            R"({"ttftWeight":0.8,"tpotWeight":0,"headroomSelectionStrategy":"least","compositeKVWeight":1,)"
            R"("compositeQueueWeight":1,"compositePrefixWeight":1,"latencyPredictionInfoProducerName":"pl",)"
            R"("prefixMatchInfoProducerName":"px"})");
  EXPECT_EQ(Effective("slo-headroom-tier-filter", "{epsilonExploreNeg: 0, latencyPredictionInfoProducerName: pl}"),
            R"({"epsilonExploreNeg":0,"latencyPredictionInfoProducerName":"pl"})");
  EXPECT_EQ(Effective("slo-headroom-tier-filter", "{epsilonExploreNeg: 1}"), R"({"epsilonExploreNeg":1})");
  EXPECT_EQ(Effective("latency-slo-admitter", "{latencyPredictionInfoProducerName: pl}"),
            R"({"latencyPredictionInfoProducerName":"pl"})");
}

// contextTTL is a Go time.Duration: llm-d decodes a JSON number as nanoseconds; epp also takes
// the Go duration spelling llm-d's README uses.
TEST(LatencyPluginsTest, ContextTtlTakesDurationsAndNanoseconds) {
  auto ttl = [](const std::string& v) {
    Made m = Make("predicted-latency-producer", "{contextTTL: " + v + "}");
    EXPECT_TRUE(m.plugin.ok()) << v << ": " << m.plugin.status();
    return m.plugin.ok() ? (*m.plugin)->EffectiveParams().Find("contextTTL")->text() : "";
  };
  EXPECT_EQ(ttl("5m"), "300000ms");
  EXPECT_EQ(ttl("1.5s"), "1500ms");
  EXPECT_EQ(ttl("300000000000"), "300000ms");  // 5 minutes in nanoseconds
  EXPECT_EQ(ttl("2500000"), "2500us");
  EXPECT_EQ(ttl("0"), "0ms");
  EXPECT_NE(Error("predicted-latency-producer", "{contextTTL: 1.5}").find("plugins[0].parameters.contextTTL: "),
            std::string::npos);
  EXPECT_NE(Error("predicted-latency-producer", "{contextTTL: -5}").find("plugins[0].parameters.contextTTL: must be >= 0"),
            std::string::npos);
  EXPECT_NE(Error("predicted-latency-producer", "{contextTTL: -1s}").find("plugins[0].parameters.contextTTL"),
            std::string::npos);
  EXPECT_NE(Error("predicted-latency-producer", "{contextTTL: soon}").find("plugins[0].parameters.contextTTL"),
            std::string::npos);
}

TEST(LatencyPluginsTest, BadValuesAreRejectedNamingTheParameter) {
  struct Case {
    std::string type, params, expect;
  };
  const Case cases[] = {
      // llm-d's own checks.
      {"predicted-latency-producer", "{sloBufferFactor: 0}", "plugins[0].parameters.sloBufferFactor: must be > 0, got 0"},
      {"predicted-latency-producer", "{sloBufferFactor: -2}", "plugins[0].parameters.sloBufferFactor: must be > 0"},
      {"slo-headroom-tier-filter", "{epsilonExploreNeg: 1.5}",
       "plugins[0].parameters.epsilonExploreNeg: must be in [0, 1], got 1.5"},
      {"slo-headroom-tier-filter", "{epsilonExploreNeg: -0.1}", "plugins[0].parameters.epsilonExploreNeg: must be in [0, 1]"},
      // Types, as llm-d's strict JSON decoding rejects them.
      {"predicted-latency-producer", "{maxDecodeTokenSamplesForPrediction: 20.5}",
       "plugins[0].parameters.maxDecodeTokenSamplesForPrediction: expected an integer"},
      {"predicted-latency-producer", "{samplingMean: many}", "plugins[0].parameters.samplingMean: expected a number"},
      {"predicted-latency-producer", "{streamingMode: sometimes}", "plugins[0].parameters.streamingMode: expected a boolean"},
      {"latency-scorer", "{ttftWeight: [1]}", "plugins[0].parameters.ttftWeight: expected a number"},
      // The ranges and choices llm-d's README documents for the scorer.
      {"latency-scorer", "{ttftWeight: -1}", "plugins[0].parameters.ttftWeight: must be >= 0, got -1"},
      {"latency-scorer", "{compositeQueueWeight: -0.5}", "plugins[0].parameters.compositeQueueWeight: must be >= 0"},
      {"latency-scorer", "{headroomSelectionStrategy: fastest}", "plugins[0].parameters.headroomSelectionStrategy"},
      // Unknown keys, as DisallowUnknownFields.
      {"latency-slo-admitter", "{epsilonExploreNeg: 0.1}", "plugins[0].parameters: unknown parameter 'epsilonExploreNeg'"},
      {"slo-headroom-tier-filter", "{epsilon: 0.1}", "plugins[0].parameters: unknown parameter 'epsilon'"},
  };
  for (const Case& c : cases) {
    const std::string err = Error(c.type, c.params);
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.type << " " << c.params << ": " << err;
  }
  EXPECT_NE(Error("latency-scorer", "{headroomSelectionStrategy: Most}").find("least"), std::string::npos);
}

// llm-d accepts and ignores the two sampling parameters (any value) and says so; so does epp.
TEST(LatencyPluginsTest, DeprecatedSamplingParametersAreAcceptedWithANote) {
  Made quiet = Make("predicted-latency-producer", "{sloBufferFactor: 1.2}");
  ASSERT_TRUE(quiet.plugin.ok()) << quiet.plugin.status();
  ASSERT_EQ(quiet.warnings.size(), 1u);
  EXPECT_EQ(quiet.warnings[0].find("samplingMean"), std::string::npos) << quiet.warnings[0];

  Made noted = Make("predicted-latency-producer", "{samplingMean: -1, maxDecodeTokenSamplesForPrediction: -1}");
  ASSERT_TRUE(noted.plugin.ok()) << noted.plugin.status();
  ASSERT_EQ(noted.warnings.size(), 1u);
  EXPECT_NE(noted.warnings[0].find("samplingMean and maxDecodeTokenSamplesForPrediction are ignored"), std::string::npos)
      << noted.warnings[0];
  EXPECT_NE((*noted.plugin)->EffectiveParams().ToJson().find(R"("samplingMean":-1)"), std::string::npos);
}

// Effective parameters create the same plugin again (what config reloads compare), with every
// parameter set away from its default.
TEST(LatencyPluginsTest, EffectiveParametersRoundTrip) {
  const std::pair<std::string, std::string> configs[] = {
      {"predicted-latency-producer",
       "{samplingMean: 150, maxDecodeTokenSamplesForPrediction: 30, sloBufferFactor: 1.2, contextTTL: 45s, "
       "streamingMode: true, endpointRoleLabel: role, predictInProduce: false, prefixMatchInfoProducerName: a, "
       "inFlightLoadProducerName: b, useEncoderCacheFeatures: true, encoderCacheMatchInfoProducerName: c}"},
      {"latency-scorer",
       "{ttftWeight: 2, tpotWeight: 0, headroomSelectionStrategy: most, compositeKVWeight: 0.5, "
       "compositeQueueWeight: 3, compositePrefixWeight: 0, latencyPredictionInfoProducerName: a, "
       "prefixMatchInfoProducerName: b}"},
      {"slo-headroom-tier-filter", "{epsilonExploreNeg: 0.25, latencyPredictionInfoProducerName: a}"},
      {"latency-slo-admitter", "{latencyPredictionInfoProducerName: a}"},
  };
  for (const auto& [type, params] : configs) {
    SCOPED_TRACE(type);
    const std::string first = Effective(type, params);
    ASSERT_FALSE(first.empty());
    EXPECT_NE(first, Effective(type));  // the given values are kept, not the defaults
    const std::string again = Effective(type, first);
    EXPECT_EQ(again, first);
  }
}

TEST(LatencyPluginsTest, ConfigPluginsListsTheirParameters) {
  const std::string md = PluginParametersMarkdown(BuiltinRegistry());
  EXPECT_NE(md.find("### `predicted-latency-producer`"), std::string::npos);
  EXPECT_NE(md.find("| `sloBufferFactor` | number | `1` | > 0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| `epsilonExploreNeg` | number | `0.01` | [0, 1] |"), std::string::npos);
  EXPECT_NE(md.find("| `headroomSelectionStrategy` | string | `least` | `least`, `most` |"), std::string::npos);
  EXPECT_NE(md.find("### `latency-slo-admitter`"), std::string::npos);
}

}  // namespace
}  // namespace epp
