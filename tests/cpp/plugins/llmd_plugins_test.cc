// llm-d Router's single-profile plugins: no-hit-lru-scorer, load-aware-scorer,
// active-request-scorer, probabilistic-admitter (formulas from llm-d, values computed by hand).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "epp/config.h"
#include "epp/registry.h"
#include "epp/scheduler.h"
#include "epp/scheduling.h"
#include "testing/epp_testing.h"

namespace epp {
namespace {

using testing::EndpointBuilder;

struct Cycle : testing::CycleFixture {
  explicit Cycle(std::vector<Endpoint> eps) {
    endpoints = std::move(eps);
    Finish();
    ctx.prefix.match_blocks.assign(endpoints.size(), 0);
  }
  std::vector<double> Scores(const Plugin& p) const {
    std::vector<double> s(candidates.size(), -1);
    p.AsScorer()->Score(ctx, candidates, s);
    return s;
  }
};

std::unique_ptr<Plugin> Make(const std::string& type, const std::string& params_yaml = "") {
  static SeededRng rng(1);
  std::string yaml = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: " + type + "\n";
  if (!params_yaml.empty()) yaml += "  parameters:\n" + params_yaml;
  auto cfg = ParseConfig(yaml, "t.yaml");
  EXPECT_TRUE(cfg.ok()) << cfg.status();
  Params params = cfg->plugins[0].parameters;
  params.SetPath("plugins[0].parameters");
  auto p = BuiltinRegistry().Create(type, type, params, PluginContext{&SteadyClock::Get(), &rng});
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

std::vector<Endpoint> Three() {
  return {EndpointBuilder("a:1").Queue(0), EndpointBuilder("b:1").Queue(64), EndpointBuilder("c:1").Queue(500)};
}

TEST(LlmdScorersTest, NoHitLruSpreadsColdRequestsOverLeastRecentlyUsedEndpoints) {
  auto p = Make("no-hit-lru-scorer");
  Cycle c(Three());
  // Nothing used yet: 1 - i/(N-1) in candidate order.
  EXPECT_EQ(c.Scores(*p), (std::vector<double>{1.0, 0.5, 0.0}));
  // a then c took cold requests: b (never used) 1; a (LRU 0) 1 - (1+0)/2 = 0.5; c (LRU 1) 0.
  p->AsRequestObserver()->PreRequest(c.ctx, c.endpoints[0]);
  p->AsRequestObserver()->PreRequest(c.ctx, c.endpoints[2]);
  EXPECT_EQ(c.Scores(*p), (std::vector<double>{0.5, 1.0, 0.0}));
  // A warm request (a prefix hit on any candidate): 0.5 everywhere, and the LRU does not learn.
  c.ctx.prefix.match_blocks[1] = 3;
  EXPECT_EQ(c.Scores(*p), (std::vector<double>{0.5, 0.5, 0.5}));
  p->AsRequestObserver()->PreRequest(c.ctx, c.endpoints[1]);
  c.ctx.prefix.match_blocks[1] = 0;
  EXPECT_EQ(c.Scores(*p), (std::vector<double>{0.5, 1.0, 0.0}));
  EXPECT_EQ(p->EffectiveParams().Find("lruSize")->text(), "1024");
}

TEST(LlmdScorersTest, LoadAwareIsHalfForAnEmptyQueueAndFallsToZeroAtTheThreshold) {
  auto p = Make("load-aware-scorer");
  Cycle c(Three());
  EXPECT_EQ(c.Scores(*p), (std::vector<double>{0.5, 0.25, 0.0}));  // 0.5 x (1 - 64/128); capped at 128
  auto small = Make("load-aware-scorer", "    threshold: -3\n");
  EXPECT_EQ(small->EffectiveParams().Find("threshold")->text(), "128") << "non-positive means the default";
  Cycle none({EndpointBuilder("x:1")});
  EXPECT_EQ(none.Scores(*p), std::vector<double>{0.0}) << "no queue metric";
}

TEST(LlmdScorersTest, ActiveRequestScoresAgainstTheBusiestCandidate) {
  auto p = Make("active-request-scorer", "    idleThreshold: 1\n    maxBusyScore: 0.5\n");
  Cycle c(Three());
  c.ctx.inflight_requests = {1, 2, 4};
  // a: <= idleThreshold -> 1; b: (4-2)/4 x 0.5 = 0.25; c: 0.
  EXPECT_EQ(c.Scores(*p), (std::vector<double>{1.0, 0.25, 0.0}));
  c.ctx.inflight_requests = {0, 0, 0};
  EXPECT_EQ(c.Scores(*p), (std::vector<double>{1.0, 1.0, 1.0}));
  EXPECT_EQ(Make("active-request-scorer", "    maxBusyScore: 7\n")->EffectiveParams().Find("maxBusyScore")->text(), "1")
      << "outside [0, 1] is ignored";
}

TEST(ProbabilisticAdmitterTest, ShedsOnlySheddableRequestsWithTheSaturationProbability) {
  auto p = Make("probabilistic-admitter");
  ASSERT_NE(p->AsAdmitter(), nullptr);
  // Idle pool: saturation 0 -> p = 0, always admitted.
  Cycle idle({EndpointBuilder("a:1").Queue(0).Kv(0)});
  idle.request.priority = -1;
  std::string why;
  for (int i = 0; i < 50; ++i) EXPECT_TRUE(p->AsAdmitter()->Admit(idle.ctx, idle.candidates, why));
  // Saturation 0.5 (queue 2.5 of 5): p = min(1, 0.5^5 x 300) = 1 -> always rejected.
  Cycle busy({EndpointBuilder("a:1").Queue(2.5).Kv(0)});
  busy.request.priority = -1;
  EXPECT_FALSE(p->AsAdmitter()->Admit(busy.ctx, busy.candidates, why));
  EXPECT_NE(why.find("saturation 0.5, rejection probability 1"), std::string::npos) << why;
  busy.request.priority = 0;
  EXPECT_TRUE(p->AsAdmitter()->Admit(busy.ctx, busy.candidates, why)) << "priority >= 0 is always admitted";
  // Saturation 0.2 (kv 0.16 of 0.8): p = 0.2^5 x 300 = 0.096; over 2000 draws about 192 rejections.
  Cycle mid({EndpointBuilder("a:1").Queue(0).Kv(0.16)});
  mid.request.priority = -1;
  int rejected = 0;
  for (int i = 0; i < 2000; ++i) rejected += !p->AsAdmitter()->Admit(mid.ctx, mid.candidates, why);
  EXPECT_GT(rejected, 140);
  EXPECT_LT(rejected, 250);
  // Missing metrics count as saturation 1.
  Cycle blind({EndpointBuilder("a:1")});
  blind.request.priority = -1;
  EXPECT_FALSE(p->AsAdmitter()->Admit(blind.ctx, blind.candidates, why));
}

TEST(ProbabilisticAdmitterTest, TheSchedulerAnswers429AndTimesTheAdmitter) {
  auto cfg = ParseConfig("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: probabilistic-admitter\n"
                         "- type: random-picker\n- type: utilization-detector\n  parameters:\n    queueDepthThreshold: 999999999\n"
                         "    kvCacheUtilThreshold: 1.0\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: random-picker\n",
                         "admitter.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  ManualClock clock(testing::kNowUs);
  SeededRng rng(2);
  auto s = BuildScheduler(*cfg, BuiltinRegistry(), PluginContext{&clock, &rng});
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<Endpoint> pool = {testing::Ep("a:1", 4, 0.5)};  // saturation 0.8 -> p = 1
  InferenceRequest req;
  req.model = "m";
  req.priority = -1;
  PickResult r = (*s)->Pick(req, pool);
  EXPECT_EQ(r.status, 429);
  EXPECT_NE(r.reason.find("probabilistic-admitter"), std::string::npos) << r.reason;
  req.priority = 0;
  EXPECT_EQ((*s)->Pick(req, pool).status, 200);
  bool timed = false;
  for (const PluginTiming& t : (*s)->PluginTimings())
    if (t.extension_point == "Admitter" && t.plugin_type == "probabilistic-admitter") timed = t.count == 2;
  EXPECT_TRUE(timed);
}

}  // namespace
}  // namespace epp
