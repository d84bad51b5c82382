// llm-d's SLO-aware latency plugins (predicted-latency-producer, latency-scorer,
// slo-headroom-tier-filter, latency-slo-admitter): their parameters are read and checked as llm-d
// reads them (defaults from llm-d's DefaultConfig structs); the consumers follow llm-d's rules on
// hand-made predictions (exact scores); the producer learns from the response path and the
// scheduler routes around a slow server and sheds what no server can serve in time.
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

InferenceRequest Req() {
  auto r = ParseOpenAIRequest("/v1/completions", R"({"model":"m","prompt":"how far is the moon"})");
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

TEST(LatencyPluginsTest, ConfigNamingAllFourLoadsWithoutNotices) {
  absl::StatusOr<Built> b = Build(kLatencyConfig);
  ASSERT_TRUE(b.ok()) << b.status();
  for (const std::string& w : b->scheduler->warnings()) EXPECT_EQ(w.find("not implemented"), std::string::npos) << w;
  EXPECT_TRUE(b->scheduler->Needs().first_token);
  EXPECT_TRUE(b->scheduler->Needs().completion);
}

// A scorer, filter or admitter of the config with a producer: a profile reading predictions gets
// llm-d's default producer, and the prefix producer the predictions read.
TEST(LatencyPluginsTest, ReadingPredictionsAddsTheDefaultProducer) {
  absl::StatusOr<Built> b = Build(R"(apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: latency-scorer
- type: max-score-picker
)");
  ASSERT_TRUE(b.ok()) << b.status();
  const std::string eff = b->scheduler->EffectiveConfigYaml();
  EXPECT_NE(eff.find("type: predicted-latency-producer"), std::string::npos) << eff;
  EXPECT_NE(eff.find("type: approx-prefix-cache-producer"), std::string::npos) << eff;
}

// ---- the consumers on hand-made predictions (llm-d's semantics, exact)

struct Cycle {
  std::vector<Endpoint> pool;
  InferenceRequest req;
  SeededRng rng{3};
  SchedulingContext ctx;
  std::vector<const Endpoint*> cands;
  Cycle(std::vector<Endpoint> p, double ttft_slo, double tpot_slo) : pool(std::move(p)), req(Req()) {
    ctx.request = &req;
    ctx.endpoints = pool;
    ctx.rng = &rng;
    ctx.now_us = kNowUs;
    ctx.latency.computed = true;
    ctx.latency.producer = "predicted-latency-producer";
    ctx.latency.ttft_slo_ms = ttft_slo;
    ctx.latency.tpot_slo_ms = tpot_slo;
    ctx.latency.info.assign(pool.size(), LatencyInfo{});
    for (const Endpoint& e : pool) cands.push_back(&e);
  }
  // Endpoint i predicted at ttft/tpot ms, headroom against the SLOs as the producer computes it.
  void Predict(size_t i, double ttft, double tpot, int64_t dispatched = 1) {
    LatencyInfo& li = ctx.latency.info[i];
    li.has = true;
    li.ttft_ms = ttft;
    li.tpot_ms = tpot;
    li.ttft_headroom_ms = ctx.latency.ttft_slo_ms - ttft;
    li.ttft_valid = ttft < ctx.latency.ttft_slo_ms;
    li.tpot_headroom_ms = ctx.latency.tpot_slo_ms - tpot;
    li.tpot_valid = tpot < ctx.latency.tpot_slo_ms;
    li.dispatched = dispatched;
  }
};

std::unique_ptr<Plugin> Plug(const std::string& type, const std::string& yaml_params = "");

std::vector<double> Scores(const Plugin& scorer, const Cycle& c) {
  std::vector<double> out(c.cands.size());
  scorer.AsScorer()->Score(c.ctx, c.cands, out);
  return out;
}

std::vector<std::string> Kept(const Plugin& filter, const Cycle& c) {
  std::vector<std::string> out;
  for (const Endpoint* e : filter.AsFilter()->Apply(c.ctx, c.cands)) out.push_back(e->address);
  return out;
}

std::vector<Endpoint> Four() {
  return {EndpointBuilder("a:1").Queue(0).Running(2).Kv(0.3), EndpointBuilder("b:1").Queue(1).Running(2).Kv(0.3),
          EndpointBuilder("c:1").Queue(2).Running(2).Kv(0.3), EndpointBuilder("d:1").Queue(3).Running(2).Kv(0.3)};
}

TEST(LatencyPluginsTest, ScorerLeastPrefersTheTightestFitAmongThoseMeetingTheSlo) {
  // TTFT SLO 1000 ms, no TPOT SLO (tpot headroom 0 by the neutral convention below).
  Cycle c(Four(), 1000, 0);
  c.Predict(0, 200, 0);
  c.Predict(1, 600, 0);
  c.Predict(2, 900, 0);
  c.Predict(3, 1500, 0);  // misses: scored 0
  for (size_t i = 0; i < 4; ++i) c.ctx.latency.info[i].tpot_headroom_ms = 0;
  std::unique_ptr<Plugin> least = Plug("latency-scorer");
  // Headroom 800, 400, 100: normalised 1, 3/7, 0; only TTFT varies, so it carries all the
  // weight; least: floor((1 - n) * 100) + 1, over 100.
  EXPECT_EQ(Scores(*least, c), (std::vector<double>{0.01, 0.58, 1.01, 0}));
  std::unique_ptr<Plugin> most = Plug("latency-scorer", "{headroomSelectionStrategy: most}");
  EXPECT_EQ(Scores(*most, c), (std::vector<double>{1.01, 0.43, 0.01, 0}));
}

TEST(LatencyPluginsTest, ScorerWithoutAPositiveTierPrefersIdleThenTheSmallestDeficit) {
  // No SLO at all: every TTFT headroom is -predicted, so the scorer picks the fastest.
  Cycle none(Four(), 0, 0);
  for (size_t i = 0; i < 4; ++i) none.Predict(i, 100.0 * static_cast<double>(i + 1), 0);
  for (size_t i = 0; i < 4; ++i) none.ctx.latency.info[i].tpot_headroom_ms = 0;
  std::unique_ptr<Plugin> most = Plug("latency-scorer", "{headroomSelectionStrategy: most}");
  // Negative buckets always score "least": the smallest deficit best.
  EXPECT_EQ(Scores(*most, none), (std::vector<double>{1.01, 0.67, 0.34, 0.01}));
  // An idle endpoint (nothing dispatched) wins over any deficit, whatever its prediction.
  none.ctx.latency.info[3].dispatched = 0;
  EXPECT_EQ(Scores(*most, none), (std::vector<double>{0, 0, 0, 0.51}));

  // Deficit buckets: TPOT-only misses before TTFT-only before both.
  Cycle c(Four(), 1000, 50);
  c.Predict(0, 2000, 80);  // both miss
  c.Predict(1, 1200, 40);  // TTFT only
  c.Predict(2, 800, 70);   // TPOT only
  c.Predict(3, 3000, 90);  // both
  EXPECT_EQ(Scores(*most, c), (std::vector<double>{0, 0, 0.51, 0}));
}

TEST(LatencyPluginsTest, ScorerFallsBackToTheCompositeWithoutPredictions) {
  Cycle c({EndpointBuilder("a:1").Queue(0).Kv(0.2), EndpointBuilder("b:1").Queue(3).Kv(0.5),
           EndpointBuilder("c:1").Queue(9).Kv(0.9)},
          1000, 0);
  // (free KV + queue relative to the longest + prefix share 0) / 3, in llm-d's 1/100 steps.
  std::unique_ptr<Plugin> s = Plug("latency-scorer");
  EXPECT_EQ(Scores(*s, c), (std::vector<double>{0.6, 0.39, 0.03}));
  std::unique_ptr<Plugin> kv_only = Plug("latency-scorer", "{compositeQueueWeight: 0, compositePrefixWeight: 0}");
  EXPECT_EQ(Scores(*kv_only, c), (std::vector<double>{0.8, 0.5, 0.1}));
}

TEST(LatencyPluginsTest, TierFilterKeepsTheTierMeetingTheSlosAndExploresTheOther) {
  Cycle c(Four(), 1000, 0);
  c.Predict(0, 200, 0);
  c.Predict(1, 1600, 0);
  c.Predict(2, 900, 0);
  // d has no prediction: it joins the tier missing the SLOs.
  for (size_t i = 0; i < 4; ++i) c.ctx.latency.info[i].tpot_headroom_ms = 0;
  std::unique_ptr<Plugin> f = Plug("slo-headroom-tier-filter", "{epsilonExploreNeg: 0}");
  EXPECT_EQ(Kept(*f, c), (std::vector<std::string>{"a:1", "c:1"}));
  std::string why = f->AsFilter()->WhyRemoved(c.ctx, c.pool[1]);
  EXPECT_NE(why.find("misses the SLOs"), std::string::npos) << why;
  EXPECT_NE(why.find("predicted TTFT 1600 ms (SLO 1000, headroom -600)"), std::string::npos) << why;
  std::unique_ptr<Plugin> always = Plug("slo-headroom-tier-filter", "{epsilonExploreNeg: 1}");
  EXPECT_EQ(Kept(*always, c), (std::vector<std::string>{"b:1", "d:1"}));
  // One tier only: that tier; no prediction at all: everything.
  Cycle slow(Four(), 100, 0);
  for (size_t i = 0; i < 4; ++i) slow.Predict(i, 500, 0);
  for (size_t i = 0; i < 4; ++i) slow.ctx.latency.info[i].tpot_headroom_ms = 0;
  EXPECT_EQ(Kept(*f, slow).size(), 4u);
  Cycle empty(Four(), 100, 0);
  EXPECT_EQ(Kept(*f, empty).size(), 4u);
  // A consumer naming another producer reads nothing.
  std::unique_ptr<Plugin> other = Plug("slo-headroom-tier-filter", "{epsilonExploreNeg: 0, latencyPredictionInfoProducerName: x}");
  EXPECT_EQ(Kept(*other, c).size(), 4u);
}

TEST(LatencyPluginsTest, AdmitterShedsOnlySheddableRequestsNoEndpointCanServe) {
  std::unique_ptr<Plugin> a = Plug("latency-slo-admitter");
  auto admit = [&](Cycle& c, int priority) {
    c.req.priority = priority;
    std::string why;
    const bool ok = a->AsAdmitter()->Admit(c.ctx, c.cands, why);
    return ok ? std::string("admit") : why;
  };
  Cycle c(Four(), 500, 0);
  for (size_t i = 0; i < 4; ++i) c.Predict(i, 800 + 100.0 * static_cast<double>(i), 0);
  for (size_t i = 0; i < 4; ++i) c.ctx.latency.info[i].tpot_valid = true;
  EXPECT_EQ(admit(c, 0), "admit");  // not sheddable
  const std::string why = admit(c, -1);
  EXPECT_EQ(why.rfind("request cannot be admitted: no valid endpoint available to serve the request", 0), 0u) << why;
  EXPECT_NE(why.find("TTFT SLO 500 ms"), std::string::npos) << why;
  // One endpoint within the SLO, one idle, one cold: each admits.
  Cycle valid(Four(), 500, 0);
  for (size_t i = 0; i < 4; ++i) valid.Predict(i, 800, 0);
  for (size_t i = 0; i < 4; ++i) valid.ctx.latency.info[i].tpot_valid = true;
  EXPECT_NE(admit(valid, -1), "admit");
  valid.Predict(2, 300, 0);
  valid.ctx.latency.info[2].tpot_valid = true;
  EXPECT_EQ(admit(valid, -1), "admit");
  valid.Predict(2, 900, 0);
  valid.ctx.latency.info[2].tpot_valid = true;
  EXPECT_NE(admit(valid, -1), "admit");
  valid.pool[1].metrics.running_requests = 0;
  EXPECT_EQ(admit(valid, -1), "admit");
  valid.pool[1].metrics.running_requests = 3;
  valid.pool[3].metrics.kv_cache_usage = 0.01;
  EXPECT_EQ(admit(valid, -1), "admit");
  // No SLO, or no prediction: admitted (fail open).
  Cycle no_slo(Four(), 0, 0);
  for (size_t i = 0; i < 4; ++i) no_slo.Predict(i, 800, 0);
  EXPECT_EQ(admit(no_slo, -1), "admit");
  Cycle unpredicted(Four(), 500, 0);
  EXPECT_EQ(admit(unpredicted, -1), "admit");
}

// ---- the producer: in-flight accounting, training from the response path, predictions

class ProducerRun {
 public:
  explicit ProducerRun(std::string params = "{streamingMode: true}") {
    yaml_ = std::string(R"(apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: approx-prefix-cache-producer
- type: predicted-latency-producer
  parameters: )") + params + R"(
- type: slo-headroom-tier-filter
  parameters: {epsilonExploreNeg: 0}
- type: latency-scorer
- type: latency-slo-admitter
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: slo-headroom-tier-filter
  - pluginRef: latency-scorer
  - pluginRef: max-score-picker
)";
    absl::StatusOr<Built> b = Build(yaml_);
    EXPECT_TRUE(b.ok()) << b.status();
    built_ = std::move(*b);
  }
  Scheduler& scheduler() { return *built_.scheduler; }
  ManualClock& clock() { return *built_.clock; }

 private:
  std::string yaml_;
  Built built_;
};

InferenceRequest SloReq(int i, const std::string& ttft_ms, int priority = 0) {
  auto r = ParseOpenAIRequest("/v1/completions",
                              R"({"model":"m","prompt":"question number )" + std::to_string(i) + R"( about the moon"})");
  EXPECT_TRUE(r.ok()) << r.status();
  if (!ttft_ms.empty()) r->headers.emplace_back("x-llm-d-slo-ttft-ms", ttft_ms);
  r->priority = priority;
  return *r;
}

// Servers whose first token takes 100 ms (a, b) or 1.5 s (c), 20 ms per further token. Each
// request is picked, its first token and end reported: the predictor learns the speeds, and
// then the tier filter leaves c out for a 1 s TTFT SLO.
TEST(LatencyPluginsTest, ProducerLearnsFromTheResponsePathAndRoutesAroundASlowServer) {
  ProducerRun run;
  std::vector<Endpoint> pool = {EndpointBuilder("a:1").Queue(0).Running(1).Kv(0.3),
                                EndpointBuilder("b:1").Queue(0).Running(1).Kv(0.3),
                                EndpointBuilder("c:1").Queue(0).Running(1).Kv(0.3)};
  auto serve = [&](int i, const std::string& slo) {
    PickResult r = run.scheduler().Pick(SloReq(i, slo), pool);
    EXPECT_EQ(r.status, 200) << r.reason;
    if (r.status != 200) return r;
    const int64_t first = r.endpoints[0] == "c:1" ? 1'500'000 : 100'000;
    const int64_t start = run.clock().NowMicros();
    run.scheduler().ObserveFirstToken(r.pick_id, r.endpoints[0], start + first);
    ResponseCompletion done;
    done.at_us = start + first + 9 * 20'000;
    done.usage.completion_tokens = 10;
    done.chunks = 10;
    done.streamed = true;
    run.scheduler().ObserveCompletion(r.pick_id, r.endpoints[0], done);
    run.scheduler().Release(r);
    run.clock().Advance(50'000);
    return r;
  };
  // Before any sample: no prediction (the composite fallback), -1 in the result.
  PickResult cold = serve(0, "1000");
  EXPECT_EQ(cold.predicted_ttft_ms, -1);
  EXPECT_EQ(cold.slo_ttft_ms, 1000);
  // The composite ties: max-score-picker spreads the early picks, so every server is timed.
  for (int i = 1; i < 240; ++i) serve(i, "");
  int on_c = 0;
  for (int i = 240; i < 300; ++i) {
    PickResult r = serve(i, "1000");
    // c had few samples until now: the pool model scaled by them, still an under-estimate, so
    // with llm-d's "least" (tightest fit) c takes picks until its responses (1.5 s) are learnt,
    // at the next training round (the replay's second); after that, none.
    if (i >= 270) {
      on_c += r.endpoints[0] == "c:1";
      EXPECT_GT(r.predicted_ttft_ms, 0) << i;
      EXPECT_LT(r.predicted_ttft_ms, 1000) << i;
    }
    EXPECT_GT(r.predicted_ttft_ms, 0) << i;
    EXPECT_LT(r.predicted_ttft_ms, 1000) << i;
  }
  EXPECT_EQ(on_c, 0);
  // The explanation names the prediction; c is removed for missing the SLO.
  PickResult t = run.scheduler().Pick(SloReq(1000, "1000"), pool, {.trace = true, .record = false});
  ASSERT_EQ(t.status, 200) << t.reason;
  ASSERT_FALSE(t.profiles[0].filters.empty());
  const FilterTrace& ft = t.profiles[0].filters[0];
  ASSERT_EQ(ft.removed.size(), 1u);
  EXPECT_EQ(ft.removed[0].endpoint, "c:1");
  EXPECT_NE(ft.removed[0].reason.find("misses the SLOs"), std::string::npos) << ft.removed[0].reason;
  // The metrics llm-d exports.
  bool predicted = false, violations = false;
  for (const PluginMetric& m : run.scheduler().PluginMetrics()) {
    predicted |= m.name == "llm_d_epp_request_predicted_ttft_seconds" && m.count > 0;
    violations |= m.name == "inference_objective_request_slo_violation_total";
  }
  EXPECT_TRUE(predicted);
  EXPECT_TRUE(violations);
}

// A sheddable request with an SLO no server can meet is shed with 429 and llm-d's
// rejected-saturated reason once the servers are busy and the predictor knows them.
TEST(LatencyPluginsTest, AdmitterShedsThroughTheScheduler) {
  ProducerRun run;
  std::vector<Endpoint> pool = {EndpointBuilder("a:1").Queue(2).Running(4).Kv(0.5),
                                EndpointBuilder("b:1").Queue(2).Running(4).Kv(0.5)};
  for (int i = 0; i < 80; ++i) {
    PickResult r = run.scheduler().Pick(SloReq(i, ""), pool);
    ASSERT_EQ(r.status, 200) << r.reason;
    const int64_t start = run.clock().NowMicros();
    run.scheduler().ObserveFirstToken(r.pick_id, r.endpoints[0], start + 800'000);
    run.scheduler().ObserveCompletion(r.pick_id, r.endpoints[0],
                                      ResponseCompletion{start + 900'000, ResponseUsage{10, 6, 16, {}}, 6, true});
    run.scheduler().Release(r);
    run.clock().Advance(100'000);
  }
  for (Endpoint& e : pool) e.metrics_time_us = run.clock().NowMicros();  // fresh: not saturated
  PickResult shed = run.scheduler().Pick(SloReq(100, "50", -1), pool);
  EXPECT_EQ(shed.status, 429) << shed.reason;
  EXPECT_EQ(shed.dropped_reason, "rejected-saturated");
  EXPECT_NE(shed.reason.find("request cannot be admitted"), std::string::npos) << shed.reason;
  PickResult kept = run.scheduler().Pick(SloReq(101, "50", 0), pool);
  EXPECT_EQ(kept.status, 200) << kept.reason;
  PickResult easy = run.scheduler().Pick(SloReq(102, "5000", -1), pool);
  EXPECT_EQ(easy.status, 200) << easy.reason;
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

std::unique_ptr<Plugin> Plug(const std::string& type, const std::string& yaml_params) {
  Made m = Make(type, yaml_params);
  EXPECT_TRUE(m.plugin.ok()) << type << ": " << m.plugin.status();
  return m.plugin.ok() ? std::move(*m.plugin) : nullptr;
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
  EXPECT_TRUE(quiet.warnings.empty()) << ::testing::PrintToString(quiet.warnings);

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

namespace epp {
namespace {

// estimated-ttft-scorer with the producer's predictions: learnSpeeds runs a server the predictor
// finds twice as fast at twice the configured prefill rate (and ignores speeds within 20% of 1);
// sloAware multiplies the cost of a server predicted to miss the SLO by how far it misses.
TEST(LatencyPluginsTest, EstimatedTtftScorerLearnsSpeedsAndHonoursSlos) {
  std::vector<Endpoint> pool = {EndpointBuilder("a:1").Queue(0).Running(1).Kv(0.2),
                                EndpointBuilder("b:1").Queue(0).Running(1).Kv(0.2),
                                EndpointBuilder("c:1").Queue(0).Running(1).Kv(0.2)};
  Cycle c(pool, 0, 0);
  for (size_t i = 0; i < 3; ++i) c.Predict(i, 100, 0);
  c.ctx.latency.info[0].relative_speed = 2.0;
  c.ctx.latency.info[1].relative_speed = 1.1;  // noise
  c.ctx.latency.info[2].relative_speed = 0.5;
  std::unique_ptr<Plugin> s = Plug("estimated-ttft-scorer", "{prefillTokensPerSecond: 1000}");
  std::vector<double> sc = Scores(*s, c);
  EXPECT_NE(s->AsScorer()->Explain(c.ctx, c.pool[0]).find("at 2000 tokens/s"), std::string::npos)
      << s->AsScorer()->Explain(c.ctx, c.pool[0]);
  EXPECT_NE(s->AsScorer()->Explain(c.ctx, c.pool[1]).find("at 1000 tokens/s"), std::string::npos);
  EXPECT_NE(s->AsScorer()->Explain(c.ctx, c.pool[2]).find("at 500 tokens/s"), std::string::npos);
  EXPECT_EQ(sc[0], 1.0);
  EXPECT_GT(sc[1], sc[2]);
  std::unique_ptr<Plugin> fixed = Plug("estimated-ttft-scorer", "{prefillTokensPerSecond: 1000, learnSpeeds: false}");
  std::vector<double> same = Scores(*fixed, c);
  EXPECT_EQ(same[0], same[1]);
  EXPECT_EQ(same[1], same[2]);

  // speedSource: lightLoad drains each queue at the rate measured on light responses
  // (light_rate_tps), not prefillTokensPerSecond times a speed; in a mixed pool each at its own,
  // a near-1 one included (1100 here).
  for (size_t i = 0; i < 3; ++i) c.ctx.latency.info[i].relative_speed = 1.0;
  const double speeds[3] = {2.0, 1.1, 0.5}, rates[3] = {4000, 2200, 1000};
  for (size_t i = 0; i < 3; ++i) {
    c.ctx.latency.info[i].light_speed = speeds[i];
    c.ctx.latency.info[i].light_rate_tps = rates[i];
  }
  auto at = [&](const Plugin& p, size_t i, const std::string& rate) {
    const std::string why = p.AsScorer()->Explain(c.ctx, c.pool[i]);
    EXPECT_NE(why.find("at " + rate + " tokens/s"), std::string::npos) << i << ": " << why;
  };
  // A fresh scorer with speedSource: lightLoad that has scored c once (its rates are set then).
  auto light_scored = [&] {
    std::unique_ptr<Plugin> p = Plug("estimated-ttft-scorer", "{prefillTokensPerSecond: 1000, speedSource: lightLoad}");
    Scores(*p, c);
    return p;
  };
  std::unique_ptr<Plugin> light = light_scored();
  at(*light, 0, "4000");
  at(*light, 1, "2200");
  at(*light, 2, "1000");
  // Explain says where the rate came from.
  EXPECT_NE(light->AsScorer()->Explain(c.ctx, c.pool[0]).find("(measured on its lightly loaded responses)"),
            std::string::npos)
      << light->AsScorer()->Explain(c.ctx, c.pool[0]);
  // Every light speed within 20% of 1: a uniform pool, all at the geometric mean of the rates
  // (1000 x 1100 x 1210 -> 1100).
  const double uniform_speeds[3] = {0.91, 1.0, 1.1}, uniform_rates[3] = {1000, 1100, 1210};
  for (size_t i = 0; i < 3; ++i) {
    c.ctx.latency.info[i].light_speed = uniform_speeds[i];
    c.ctx.latency.info[i].light_rate_tps = uniform_rates[i];
  }
  std::unique_ptr<Plugin> uniform = light_scored();
  for (size_t i = 0; i < 3; ++i) at(*uniform, i, "1100");
  // Nothing measured yet: prefillTokensPerSecond.
  for (size_t i = 0; i < 3; ++i) {
    c.ctx.latency.info[i].light_speed = 1;
    c.ctx.latency.info[i].light_rate_tps = 0;
  }
  std::unique_ptr<Plugin> fresh = light_scored();
  for (size_t i = 0; i < 3; ++i) at(*fresh, i, "1000");
  EXPECT_NE(fresh->AsScorer()->Explain(c.ctx, c.pool[0]).find("(not measured yet: configured)"), std::string::npos)
      << fresh->AsScorer()->Explain(c.ctx, c.pool[0]);
  // Two measured (4000 and 1000) and one never lightly loaded: it runs at the rate it got through
  // its queue (busy_rate_tps), floored at a quarter of the slowest measured rate.
  c.ctx.latency.info[0].light_speed = 2.0;
  c.ctx.latency.info[0].light_rate_tps = 4000;
  c.ctx.latency.info[2].light_speed = 0.5;
  c.ctx.latency.info[2].light_rate_tps = 1000;
  c.ctx.latency.info[1].busy_rate_tps = 3000;
  std::unique_ptr<Plugin> busy = light_scored();
  at(*busy, 0, "4000");
  at(*busy, 1, "3000");
  at(*busy, 2, "1000");
  EXPECT_NE(busy->AsScorer()->Explain(c.ctx, c.pool[1]).find("(not lightly loaded yet: the rate it got through its prefill queue"),
            std::string::npos)
      << busy->AsScorer()->Explain(c.ctx, c.pool[1]);
  // With the measured ones' busy rates known (8000 and 2000: geometric mean 4000), its own 3000 is
  // a speed of 0.75, times the measured light rates' geometric mean (2000): 1500.
  c.ctx.latency.info[0].busy_rate_tps = 8000;
  c.ctx.latency.info[2].busy_rate_tps = 2000;
  std::unique_ptr<Plugin> relative = light_scored();
  at(*relative, 1, "1500");
  EXPECT_NE(relative->AsScorer()->Explain(c.ctx, c.pool[1]).find("the pool's measured mean x its speed from the rates"),
            std::string::npos)
      << relative->AsScorer()->Explain(c.ctx, c.pool[1]);
  // 3600 is within 20% of the others' 4000: the measured mean itself.
  c.ctx.latency.info[1].busy_rate_tps = 3600;
  std::unique_ptr<Plugin> near = light_scored();
  at(*near, 1, "2000");
  c.ctx.latency.info[1].busy_rate_tps = 40;  // waits that were not prefill
  std::unique_ptr<Plugin> starved = light_scored();
  at(*starved, 1, "250");
  EXPECT_NE(starved->AsScorer()->Explain(c.ctx, c.pool[1]).find("a quarter of the slowest measured rate"), std::string::npos)
      << starved->AsScorer()->Explain(c.ctx, c.pool[1]);
  const Made bad = Make("estimated-ttft-scorer", "{speedSource: fastest}");
  ASSERT_FALSE(bad.plugin.ok());
  EXPECT_NE(bad.plugin.status().message().find("speedSource"), std::string_view::npos) << bad.plugin.status();

  // sloAware (off by default): a and b meet a 200 ms SLO, c is predicted at 400 ms (twice over).
  Cycle slo(pool, 200, 0);
  slo.Predict(0, 100, 0);
  slo.Predict(1, 150, 0);
  slo.Predict(2, 400, 0);
  for (size_t i = 0; i < 3; ++i) slo.ctx.latency.info[i].tpot_headroom_ms = 0;
  std::unique_ptr<Plugin> plain = Plug("estimated-ttft-scorer", "{prefillTokensPerSecond: 1000}");
  std::unique_ptr<Plugin> aware = Plug("estimated-ttft-scorer", "{prefillTokensPerSecond: 1000, sloAware: true}");
  const std::vector<double> p = Scores(*plain, slo), a = Scores(*aware, slo);
  EXPECT_EQ(p[0], p[2]);  // the same estimate without the predictions
  EXPECT_EQ(a[0], p[0]);
  EXPECT_DOUBLE_EQ(a[2], p[2] / 2);
  EXPECT_NE(aware->AsScorer()->Explain(slo.ctx, slo.pool[2]).find("predicted TTFT 400 ms vs SLO 200 ms"),
            std::string::npos);
  // Fewer than half meeting it: an overloaded pool, no steering.
  slo.Predict(1, 300, 0);
  slo.ctx.latency.info[1].tpot_headroom_ms = 0;
  EXPECT_EQ(Scores(*aware, slo), Scores(*plain, slo));
}

}  // namespace
}  // namespace epp
