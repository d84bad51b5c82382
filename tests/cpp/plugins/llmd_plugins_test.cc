// llm-d Router's single-profile plugins: no-hit-lru-scorer, load-aware-scorer,
// active-request-scorer, probabilistic-admitter (formulas from llm-d, values computed by hand).
#include <gtest/gtest.h>

#include <map>
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

// epp's estimated-ttft-scorer (ttft_scorer.cc), numbers by hand: rate 1000 tokens/s, overhead 10 ms.
TEST(EstimatedTtftScorerTest, QueuedPrefillAndUncachedTokensAtTheRateWithTheMissPenalty) {
  auto p = Make("estimated-ttft-scorer", "    prefillTokensPerSecond: 1000\n    stepOverheadMs: 10\n    missPenalty: 0\n");
  ASSERT_NE(p, nullptr);
  Cycle c(Three());
  c.request.prompt_tokens = 100;
  c.ctx.prefix.computed = true;
  c.ctx.prefix.block_size_tokens = 16;
  c.ctx.prefix.match_blocks = {0, 5, 0};  // b holds 80 of the 100 tokens
  // a, c: 10 ms + 100 / 1000 s = 110 ms; b: 10 + 20 = 30 ms. Scores: 30 / cost.
  std::vector<double> s = c.Scores(*p);
  EXPECT_NEAR(s[0], 30.0 / 110.0, 1e-12);
  EXPECT_DOUBLE_EQ(s[1], 1.0);
  EXPECT_NEAR(s[2], 30.0 / 110.0, 1e-12);
  EXPECT_NE(p->AsScorer()->Explain(c.ctx, c.endpoints[1]).find("est. TTFT 30 ms: 0 tokens queued + 20 uncached of 100"),
            std::string::npos)
      << p->AsScorer()->Explain(c.ctx, c.endpoints[1]);
  // Two picks of b at once: 40 tokens queued there. Same instant: b costs 10 + (40 + 20) = 70 ms,
  // still below a's 110; a third pick makes it 90, a fourth 110 (a tie), a fifth 130 (a wins).
  p->AsRequestObserver()->PreRequest(c.ctx, c.endpoints[1]);
  p->AsRequestObserver()->PreRequest(c.ctx, c.endpoints[1]);
  s = c.Scores(*p);
  EXPECT_NEAR(s[1], 1.0, 1e-12);
  EXPECT_NEAR(s[0], 70.0 / 110.0, 1e-12);
  for (int i = 0; i < 3; ++i) p->AsRequestObserver()->PreRequest(c.ctx, c.endpoints[1]);
  s = c.Scores(*p);
  EXPECT_NEAR(s[0], 1.0, 1e-12);
  EXPECT_NEAR(s[1], 110.0 / 130.0, 1e-12);
  // The queue drains at the rate: 50 ms later 100 - 50 = 50 tokens remain on b (80 ms there).
  c.Finish(testing::kNowUs + 50000);
  c.ctx.prefix.computed = true;
  c.ctx.prefix.block_size_tokens = 16;
  c.ctx.prefix.match_blocks = {0, 5, 0};
  s = c.Scores(*p);
  EXPECT_NEAR(s[1], 1.0, 1e-12);
  EXPECT_NEAR(s[0], 80.0 / 110.0, 1e-12);
}

TEST(EstimatedTtftScorerTest, SequencesInFlightSlowTheRequestsDecode) {
  auto p = Make("estimated-ttft-scorer",
                "    prefillTokensPerSecond: 1000\n    stepOverheadMs: 10\n    missPenalty: 0\n"
                "    decodeMsPerSequence: 0.5\n    expectedOutputTokens: 100\n");
  ASSERT_NE(p, nullptr);
  Cycle c(Three());
  c.request.prompt_tokens = 100;
  c.ctx.inflight_requests = {2, 0, 1};
  // Each: 10 + 100 ms to the first token; decode: 0.5 ms x 100 tokens x in flight: 100, 0, 50 ms.
  std::vector<double> s = c.Scores(*p);
  EXPECT_NEAR(s[0], 110.0 / 210.0, 1e-12);
  EXPECT_DOUBLE_EQ(s[1], 1.0);
  EXPECT_NEAR(s[2], 110.0 / 160.0, 1e-12);
  EXPECT_NE(p->AsScorer()->Explain(c.ctx, c.endpoints[0]).find("decode slowdown 100 ms (2 in flight)"), std::string::npos)
      << p->AsScorer()->Explain(c.ctx, c.endpoints[0]);
}

TEST(EstimatedTtftScorerTest, TheMissPenaltyChargesTheExtraPrefillAndParametersAreChecked) {
  auto p = Make("estimated-ttft-scorer", "    prefillTokensPerSecond: 1000\n    stepOverheadMs: 10\n    missPenalty: 2\n");
  Cycle c(Three());
  c.request.prompt_tokens = 100;
  c.ctx.prefix.computed = true;
  c.ctx.prefix.block_size_tokens = 16;
  c.ctx.prefix.match_blocks = {0, 5, 0};
  // a: 110 ms + 2 x (100 - 20) / 1000 s = 270 ms; b: 30 ms.
  std::vector<double> s = c.Scores(*p);
  EXPECT_NEAR(s[0], 30.0 / 270.0, 1e-12);
  // A fully cached prompt still computes one token.
  c.ctx.prefix.match_blocks = {0, 7, 0};  // 112 >= 100 tokens
  EXPECT_NE(p->AsScorer()->Explain(c.ctx, c.endpoints[1]).find("1 uncached of 100"), std::string::npos);
  for (const char* bad : {"    prefillTokensPerSecond: 0\n", "    missPenalty: -1\n", "    stepOverheadMs: -2\n", "    nope: 1\n",
                          "    decodeMsPerSequence: -1\n", "    expectedOutputTokens: -5\n"}) {
    std::string yaml = std::string("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: estimated-ttft-scorer\n  parameters:\n") + bad;
    auto cfg = ParseConfig(yaml, "t.yaml");
    ASSERT_TRUE(cfg.ok()) << cfg.status();
    Params params = cfg->plugins[0].parameters;
    params.SetPath("plugins[0].parameters");
    SeededRng rng(1);
    EXPECT_EQ(BuiltinRegistry().Create("estimated-ttft-scorer", "x", params, PluginContext{&SteadyClock::Get(), &rng}).status().code(),
              absl::StatusCode::kInvalidArgument) << bad;
  }
}

// Peers' costs (peer_scorers.cc), by hand.
TEST(PeerScorersTest, VllmLoadAwareIsMatchedShareMinusRelativeLoadNormalised) {
  auto p = Make("vllm-loadaware-scorer", "    beta: 1\n");
  ASSERT_NE(p, nullptr);
  Cycle c(Three());
  c.request.prompt_tokens = 160;
  c.ctx.prefix.computed = true;
  c.ctx.prefix.block_size_tokens = 16;
  c.ctx.prefix.match_blocks = {10, 5, 0};   // matched shares 1, 0.5, 0
  c.ctx.inflight_requests = {4, 1, 1};      // mean 2: relative loads 1, -0.5, -0.5
  // values 1 - 1 = 0, 0.5 + 0.5 = 1, 0 + 0.5 = 0.5; normalised 0, 1, 0.5.
  EXPECT_EQ(c.Scores(*p), (std::vector<double>{0.0, 1.0, 0.5}));
  c.ctx.inflight_requests = {0, 0, 0};      // mean 0 (divided by 1): the matched shares alone
  EXPECT_EQ(c.Scores(*p), (std::vector<double>{1.0, 0.5, 0.0}));
}

TEST(PeerScorersTest, DynamoCostIsScaledPrefillPlusDecodeLowestWins) {
  auto p = Make("dynamo-kv-cost-scorer", "    prefillLoadScale: 1\n    blockSize: 16\n    prefillTokensPerSecond: 16000\n");
  ASSERT_NE(p, nullptr);
  Cycle c(Three());
  c.request.prompt_tokens = 160;             // 10 blocks
  c.ctx.prefix.computed = true;
  c.ctx.prefix.block_size_tokens = 16;
  c.ctx.prefix.match_blocks = {8, 0, 0};
  c.ctx.inflight_tokens = {320, 0, 160};    // 20, 0, 10 decode blocks
  // a: prefill 10 - 8 = 2, decode 20 + 10 = 30: 32. b: 10 + 10 = 20. c: 10 + 20 = 30.
  // Normalised (max - cost) / (max - min): a 0, b 1, c 2/12.
  std::vector<double> s = c.Scores(*p);
  EXPECT_DOUBLE_EQ(s[0], 0.0);
  EXPECT_DOUBLE_EQ(s[1], 1.0);
  EXPECT_NEAR(s[2], 2.0 / 12.0, 1e-12);
  // A pick of b queues its 160 prompt tokens (10 blocks) as active prefill there: b 30, now tied with c.
  p->AsRequestObserver()->PreRequest(c.ctx, c.endpoints[1]);
  s = c.Scores(*p);
  EXPECT_DOUBLE_EQ(s[1], s[2]);
  EXPECT_NE(p->AsScorer()->Explain(c.ctx, c.endpoints[1]).find("cost 30 = 1 x prefill 20 blocks + decode 10 blocks"),
            std::string::npos)
      << p->AsScorer()->Explain(c.ctx, c.endpoints[1]);
  // It drains at the prefill rate: 10 ms later 160 - 160 = 0 tokens are left.
  c.Finish(testing::kNowUs + 10000);
  c.ctx.prefix.computed = true;
  c.ctx.prefix.block_size_tokens = 16;
  c.ctx.prefix.match_blocks = {8, 0, 0};
  c.ctx.inflight_tokens = {320, 0, 160};
  EXPECT_DOUBLE_EQ(c.Scores(*p)[1], 1.0);
}

TEST(PeerScorersTest, DynamoFirstTokenModelHoldsPrefillUntilTheFirstTokenOrTheTimeout) {
  auto p = Make("dynamo-kv-cost-scorer", "    prefillLoadModel: firstToken\n    firstTokenTimeoutMs: 1000\n");
  ASSERT_NE(p, nullptr);
  Cycle c(Three());
  c.request.prompt_tokens = 160;  // 10 blocks, nothing cached
  auto explain = [&](size_t i) { return p->AsScorer()->Explain(c.ctx, c.endpoints[i]); };
  c.ctx.pick_id = 41;
  p->AsRequestObserver()->PreRequest(c.ctx, c.endpoints[1]);
  c.ctx.pick_id = 42;
  p->AsRequestObserver()->PreRequest(c.ctx, c.endpoints[1]);
  c.ctx.pick_id = 0;
  EXPECT_NE(explain(1).find("prefill 30 blocks"), std::string::npos) << explain(1);
  // No draining: 500 ms later both are still held.
  c.Finish(testing::kNowUs + 500000);
  c.request.prompt_tokens = 160;
  EXPECT_NE(explain(1).find("prefill 30 blocks"), std::string::npos) << explain(1);
  // Pick 41's first token releases its 10 blocks; an unknown pick changes nothing.
  auto* ft = dynamic_cast<const FirstTokenObserver*>(p.get());
  ASSERT_NE(ft, nullptr);
  ft->FirstToken(41, "b:1", testing::kNowUs + 500000);
  ft->FirstToken(7, "b:1", testing::kNowUs + 500000);
  EXPECT_NE(explain(1).find("prefill 20 blocks"), std::string::npos) << explain(1);
  // Pick 42 never reports (a non-streamed answer): dropped after the timeout.
  c.Finish(testing::kNowUs + 1000001);
  c.request.prompt_tokens = 160;
  EXPECT_NE(explain(1).find("prefill 10 blocks"), std::string::npos) << explain(1);
  Params bad = Params::Map();
  bad.Set("prefillLoadModel", Params::String("aic"));
  bad.SetPath("plugins[0].parameters");
  SeededRng rng(1);
  auto r = BuiltinRegistry().Create("dynamo-kv-cost-scorer", "d", bad, PluginContext{&SteadyClock::Get(), &rng});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("plugins[0].parameters.prefillLoadModel: expected drain or firstToken, got 'aic'"), std::string::npos)
      << r.status();
}

TEST(PeerScorersTest, OrcaWrrWeightsAreQpsOverUtilizationAfterTheBlackout) {
  auto p = Make("orca-wrr-picker", "    weightUpdatePeriodMs: 1000\n    blackoutPeriodMs: 0\n");
  ASSERT_NE(p, nullptr);
  std::vector<Endpoint> eps = {EndpointBuilder("a:1").Kv(0.5), EndpointBuilder("b:1").Kv(0.25), EndpointBuilder("c:1")};
  Cycle c(eps);
  auto pick = [&](int64_t now) {
    c.ctx.now_us = now;
    std::vector<ScoredEndpoint> scored;
    for (const Endpoint* e : c.candidates) scored.push_back({e, 0});
    return p->AsPicker()->Pick(c.ctx, scored).front()->address;
  };
  // The first period: no valid weight, all at the median 1: plain round robin.
  std::map<std::string, int> first;
  for (int i = 0; i < 30; ++i) first[pick(testing::kNowUs + i)]++;
  EXPECT_EQ(first, (std::map<std::string, int>{{"a:1", 10}, {"b:1", 10}, {"c:1", 10}}));
  // After 1 s: qps 10 each (30 picks over 1 s... 10 per endpoint); weights a 10 / 0.5 = 20,
  // b 10 / 0.25 = 40, c no utilization (no KV figure): the median of 20 and 40, 30. Smooth WRR
  // over 20 : 40 : 30 gives 2 : 4 : 3 in every 9 picks.
  std::map<std::string, int> second;
  for (int i = 0; i < 90; ++i) second[pick(testing::kNowUs + 1'000'000 + i)]++;
  EXPECT_EQ(second, (std::map<std::string, int>{{"a:1", 20}, {"b:1", 40}, {"c:1", 30}}));
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

namespace epp {
namespace {

// A scheduler of queue-scorer (weight 1) and a session plugin (weight 10 as a scorer).
struct SessionEnv {
  ManualClock clock{testing::kNowUs};
  SeededRng rng{5};
  std::unique_ptr<Scheduler> sched;
  explicit SessionEnv(const std::string& plugin, const std::string& extra_refs = "") {
    const std::string yaml = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n" + plugin +
                             "- type: queue-scorer\n- type: max-score-picker\nschedulingProfiles:\n- name: default\n"
                             "  plugins:\n  - {pluginRef: session, weight: 10}\n" + extra_refs +
                             "  - {pluginRef: queue-scorer, weight: 1}\n  - pluginRef: max-score-picker\n";
    auto cfg = ParseConfig(yaml, "s.yaml");
    EXPECT_TRUE(cfg.ok()) << cfg.status();
    auto s = BuildScheduler(*cfg, BuiltinRegistry(), PluginContext{&clock, &rng});
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) sched = std::move(*s);
  }
  PickResult Pick(const std::vector<Endpoint>& pool, std::vector<std::pair<std::string, std::string>> headers = {}) {
    auto r = ParseOpenAIRequest("/v1/completions", R"({"model":"m","prompt":"hi"})");
    EXPECT_TRUE(r.ok());
    r->headers = std::move(headers);
    return sched->Pick(*r, pool);
  }
};

std::vector<Endpoint> Queues(double a, double b, double c) {
  return {EndpointBuilder("10.0.0.1:8000").Queue(a), EndpointBuilder("10.0.0.2:8000").Queue(b),
          EndpointBuilder("10.0.0.3:8000").Queue(c)};
}

std::string ResponseHeader(const PickResult& r, const std::string& name) {
  for (const auto& [k, v] : r.response_headers)
    if (k == name) return v;
  return "";
}

TEST(SessionAffinityTest, EncodedTokenComesBackOnTheResponseAndSteersTheNextPick) {
  SessionEnv env("- name: session\n  type: session-affinity-scorer\n");
  ASSERT_NE(env.sched, nullptr);
  PickResult first = env.Pick(Queues(5, 0, 9));  // no token: the shortest queue
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(first.endpoints[0], "10.0.0.2:8000");
  const std::string token = ResponseHeader(first, "x-session-token");
  EXPECT_EQ(token, "MTAuMC4wLjI6ODAwMA==");  // base64("10.0.0.2:8000")
  // Now 10.0.0.2 is the busiest, but the session stays.
  PickResult again = env.Pick(Queues(0, 9, 5), {{"x-session-token", token}});
  EXPECT_EQ(again.endpoints[0], "10.0.0.2:8000");
  // Its endpoint gone, or a token that does not decode: no preference.
  EXPECT_EQ(env.Pick({EndpointBuilder("10.0.0.1:8000").Queue(3), EndpointBuilder("10.0.0.3:8000").Queue(0)},
                     {{"x-session-token", token}}).endpoints[0], "10.0.0.3:8000");
  EXPECT_EQ(env.Pick(Queues(0, 9, 5), {{"x-session-token", "%%%"}}).endpoints[0], "10.0.0.1:8000");
}

TEST(SessionAffinityTest, FilterKeepsOnlyTheSessionsEndpointWhileItIsThere) {
  SessionEnv env("- name: session\n  type: session-affinity-filter\n"
                 "  parameters: {encodedEndpointHeaderConfig: {header: X-My-Session}}\n");
  ASSERT_NE(env.sched, nullptr);
  const std::string token = "MTAuMC4wLjM6ODAwMA==";  // 10.0.0.3:8000
  PickResult r = env.Pick(Queues(0, 0, 50), {{"x-my-session", token}});
  EXPECT_EQ(r.endpoints[0], "10.0.0.3:8000");
  EXPECT_EQ(ResponseHeader(r, "x-my-session"), token);
}

TEST(SessionAffinityTest, SessionIdsBindMoveWhenTheirEndpointLeavesAndExpire) {
  SessionEnv env("- name: session\n  type: session-affinity-scorer\n  parameters:\n    strategy: session_id\n"
                 "    sessionIdConfig: {sources: [{header: x-chat-id}], evictionTtlSeconds: 60, evictionSweepSeconds: 1}\n");
  ASSERT_NE(env.sched, nullptr);
  const std::vector<std::pair<std::string, std::string>> id = {{"x-chat-id", "c-42"}};
  EXPECT_EQ(env.Pick(Queues(5, 0, 9), id).endpoints[0], "10.0.0.2:8000");  // binds
  PickResult r = env.Pick(Queues(0, 9, 5), id);
  EXPECT_EQ(r.endpoints[0], "10.0.0.2:8000");
  EXPECT_TRUE(r.response_headers.empty());  // nothing written back with session ids
  // Another session is free to go elsewhere.
  EXPECT_EQ(env.Pick(Queues(0, 9, 5), {{"x-chat-id", "c-7"}}).endpoints[0], "10.0.0.1:8000");
  // 10.0.0.2 leaves: the session moves to the pick, and stays there when 10.0.0.2 is back.
  EXPECT_EQ(env.Pick({EndpointBuilder("10.0.0.1:8000").Queue(3), EndpointBuilder("10.0.0.3:8000").Queue(0)}, id).endpoints[0],
            "10.0.0.3:8000");
  EXPECT_EQ(env.Pick(Queues(0, 0, 9), id).endpoints[0], "10.0.0.3:8000");
  // Unused for longer than the TTL: forgotten at the next sweep.
  env.clock.Advance(61'000'000);
  env.Pick(Queues(0, 0, 0), {{"x-chat-id", "other"}});  // a pick that sweeps
  EXPECT_NE(env.Pick(Queues(0, 0, 9), id).endpoints[0], "10.0.0.3:8000");
}

TEST(SessionAffinityTest, TwoInstancesKeepTheirOwnBindings) {
  // One session per header: each instance binds its own (they once shared one per-thread slot).
  SessionEnv env("- name: session\n  type: session-affinity-scorer\n  parameters:\n    strategy: session_id\n"
                 "    sessionIdConfig: {sources: [{header: x-a}]}\n"
                 "- name: other\n  type: session-affinity-scorer\n  parameters:\n    strategy: session_id\n"
                 "    sessionIdConfig: {sources: [{header: x-b}]}\n",
                 "  - {pluginRef: other, weight: 10}\n");
  ASSERT_NE(env.sched, nullptr);
  EXPECT_EQ(env.Pick(Queues(5, 0, 9), {{"x-a", "1"}, {"x-b", "2"}}).endpoints[0], "10.0.0.2:8000");
  // Only x-b now: "other" must have bound its session too, or 10.0.0.1's shorter queue wins.
  EXPECT_EQ(env.Pick(Queues(0, 1, 9), {{"x-b", "2"}}).endpoints[0], "10.0.0.2:8000");
  EXPECT_EQ(env.Pick(Queues(0, 1, 9), {{"x-a", "1"}}).endpoints[0], "10.0.0.2:8000");
}

TEST(SessionAffinityTest, ParametersAreCheckedNamingThePlace) {
  const std::pair<const char*, const char*> bad[] = {
      {"{strategy: cookie}", "strategy"},
      {"{strategy: session_id, sessionIdConfig: {sources: [{header: a, attribute: b}]}}", "exactly one of header or attribute"},
      {"{strategy: session_id, sessionIdConfig: {evictionTtlSeconds: -1}}", "evictionTtlSeconds"},
      {"{strategy: session_id, profileName: prefill}", "profileName"},
      {"{headerName: x-session-token}", "headerName"},
  };
  for (const auto& [params, needle] : bad) {
    const std::string yaml = std::string("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
                                         "- type: session-affinity-scorer\n  parameters: ") + params + "\n";
    auto cfg = ParseConfig(yaml, "s.yaml");
    ASSERT_TRUE(cfg.ok()) << cfg.status();
    auto s = BuildScheduler(*cfg, BuiltinRegistry());
    ASSERT_FALSE(s.ok()) << params;
    EXPECT_NE(s.status().message().find(needle), std::string::npos) << params << ": " << s.status().message();
  }
}

}  // namespace
}  // namespace epp

namespace epp {
namespace {

TEST(PassthroughParserTest, RoutesWithoutParsingWhereNoOpenAIParserClaimsThePath) {
  auto build = [](const std::string& tail) {
    auto cfg = ParseConfig("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: openai-parser\n"
                           "- type: passthrough-parser\n- type: queue-scorer\n" + tail, "p.yaml");
    EXPECT_TRUE(cfg.ok()) << cfg.status();
    auto s = BuildScheduler(*cfg, BuiltinRegistry());
    EXPECT_TRUE(s.ok()) << s.status();
    return std::move(*s);
  };
  auto only = build("requestHandler:\n  parsers:\n  - pluginRef: passthrough-parser\n  - pluginRef: openai-parser\n");
  EXPECT_TRUE(only->RoutesUnparsed("/v1/chat/completions"));  // the fallback ends the list
  EXPECT_TRUE(only->RoutesUnparsed("/v2/models/m/infer"));
  auto both = build("requestHandler:\n  parsers:\n  - pluginRef: openai-parser\n  - pluginRef: passthrough-parser\n");
  EXPECT_FALSE(both->RoutesUnparsed("/v1/chat/completions"));
  EXPECT_FALSE(both->RoutesUnparsed("/v1/completions?x=1"));
  EXPECT_TRUE(both->RoutesUnparsed("/v2/models/m/infer"));
  // No list: llm-d's default (openai, anthropic, vllmhttp, then passthrough), whatever is declared.
  auto declared = build("");
  EXPECT_FALSE(declared->RoutesUnparsed("/v1/embeddings"));
  EXPECT_FALSE(declared->RoutesUnparsed("/v1/messages"));
  EXPECT_TRUE(declared->RoutesUnparsed("/generate"));  // sglanghttp-parser is not in the default
  auto none = BuildScheduler(DefaultConfig(), BuiltinRegistry());
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE((*none)->RoutesUnparsed("/v2/models/m/infer"));  // llm-d #2507: the default ends in passthrough
}

}  // namespace
}  // namespace epp

namespace epp {
namespace {

TEST(InflightLoadProducerTest, AcceptedWithItsParametersCheckedAndAWarning) {
  auto build = [](const std::string& params) {
    auto cfg = ParseConfig("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: inflight-load-producer\n"
                           "  parameters: " + params + "\n- type: active-request-scorer\n", "i.yaml");
    EXPECT_TRUE(cfg.ok()) << cfg.status();
    return BuildScheduler(*cfg, BuiltinRegistry());
  };
  auto ok = build("{addEstimatedOutputTokens: true, outputRatio: 2, maxEstimatedOutputTokens: 512}");
  ASSERT_TRUE(ok.ok()) << ok.status();
  bool warned = false;
  for (const std::string& w : (*ok)->warnings()) warned = warned || w.find("counts in-flight requests") != std::string::npos;
  EXPECT_TRUE(warned);
  for (const auto& [params, needle] : std::vector<std::pair<std::string, std::string>>{
           {"{outputRatio: -1}", "outputRatio"}, {"{maxEstimatedOutputTokens: -5}", "maxEstimatedOutputTokens"},
           {"{nope: 1}", "nope"}}) {
    auto bad = build(params);
    ASSERT_FALSE(bad.ok()) << params;
    EXPECT_NE(bad.status().message().find(needle), std::string::npos) << bad.status();
  }
}

}  // namespace
}  // namespace epp

namespace epp {
namespace {

TEST(RequestAttributeReporterTest, ReportsTheTruncatedNumberUnlessZeroOrTheConditionFails) {
  auto build = [](const std::string& attr) {
    auto cfg = ParseConfig("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
                           "- type: request-attribute-reporter\n  parameters:\n    attributes:\n" + attr, "r.yaml");
    EXPECT_TRUE(cfg.ok()) << cfg.status();
    return BuildScheduler(*cfg, BuiltinRegistry());
  };
  auto s = build("    - key: {name: x-gateway-inference-request-cost}\n      expression: usage.completion_tokens * 1.5\n"
                 "      condition: has(usage.completion_tokens)\n");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE((*s)->WantsResponseMetadata());
  ResponseUsage u;
  u.prompt_tokens = 32;
  u.completion_tokens = 7;
  auto m = (*s)->ResponseMetadata(u);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].ns, "envoy.lb");
  EXPECT_EQ(m[0].key, "x-gateway-inference-request-cost");
  EXPECT_EQ(m[0].value, 10);  // 10.5 truncated
  EXPECT_TRUE((*s)->ResponseMetadata(ResponseUsage{}).empty());  // 0 is not written
  auto cond = build("    - key: {namespace: custom-ns, name: cached}\n      expression: usage.prompt_tokens_details.cached_tokens\n"
                    "      condition: usage.prompt_tokens > 100\n");
  ASSERT_TRUE(cond.ok()) << cond.status();
  u.cached_tokens = 50;
  EXPECT_TRUE((*cond)->ResponseMetadata(u).empty());  // condition false
  u.prompt_tokens = 200;
  ASSERT_EQ((*cond)->ResponseMetadata(u).size(), 1u);
  EXPECT_EQ((*cond)->ResponseMetadata(u)[0].ns, "custom-ns");
  u.cached_tokens.reset();
  EXPECT_TRUE((*cond)->ResponseMetadata(u).empty());  // the field is missing: nothing written
  // Configuration errors name the place.
  for (const auto& [attr, needle] : std::vector<std::pair<std::string, std::string>>{
           {"    - key: {name: a}\n      expression: 'usage.prompt_tokens + -'\n", "attributes[0].expression"},
           {"    - key: {name: a}\n      expression: usage.x\n      condition: 'request.y'\n", "unknown variable 'request'"},
           {"    - key: {name: ''}\n      expression: '1'\n", "name: must not be empty"},
           {"    - key: {name: a}\n      expression: '1'\n    - key: {name: b}\n      expression: '2'\n", "exactly one entry"}}) {
    auto bad = build(attr);
    ASSERT_FALSE(bad.ok()) << attr;
    EXPECT_NE(bad.status().message().find(needle), std::string::npos) << bad.status();
  }
}

}  // namespace
}  // namespace epp
