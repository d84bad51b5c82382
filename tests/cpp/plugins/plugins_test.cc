// Each built-in plugin's formula, table-driven: normal cases, ties and degenerate inputs, and
// missing metrics.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "epp/prefix_cache.h"
#include "epp/registry.h"
#include "epp/scheduling.h"
#include "plugins/plugins.h"
#include "testing/epp_testing.h"

namespace epp {
namespace {

using Pool = testing::CycleFixture;

Endpoint Ep(std::string addr, std::optional<double> queue, std::optional<double> running = std::nullopt,
            std::optional<double> kv = std::nullopt) {
  return testing::EndpointBuilder(std::move(addr)).Queue(queue).Running(running).Kv(kv);
}

std::unique_ptr<Plugin> Make(std::string_view type, Params params = Params()) {
  static SeededRng rng(1);
  PluginRegistry reg = BuiltinRegistry();
  params.SetPath("plugins[0].parameters");
  auto p = reg.Create(std::string(type), std::string(type), params, PluginContext{&SteadyClock::Get(), &rng});
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

std::vector<double> Scores(const Plugin& p, Pool& pool) {
  std::vector<double> s(pool.candidates.size(), -1);
  p.AsScorer()->Score(pool.ctx, pool.candidates, s);
  return s;
}

void ExpectScores(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-9) << "index " << i;
}

TEST(QueueScorerTest, MinMaxNormalisation) {
  struct Case {
    const char* name;
    std::vector<std::optional<double>> queues;
    std::vector<double> want;
  };
  const Case cases[] = {
      {"spread", {0, 5, 10}, {1, 0.5, 0}},
      {"all equal scores one", {3, 3, 3}, {1, 1, 1}},
      {"single endpoint", {7}, {1}},
      {"missing metric scores zero and is ignored for min/max", {std::nullopt, 2, 4}, {0, 1, 0}},
      {"all missing", {std::nullopt, std::nullopt}, {0, 0}},
  };
  auto scorer = Make(plugins::kQueueScorerType);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Pool pool;
    for (size_t i = 0; i < c.queues.size(); ++i) pool.endpoints.push_back(Ep("10.0.0." + std::to_string(i) + ":8000", c.queues[i]));
    pool.Finish();
    ExpectScores(Scores(*scorer, pool), c.want);
  }
}

TEST(RunningRequestsScorerTest, FewestRunningScoresHighest) {
  auto scorer = Make(plugins::kRunningRequestsScorerType);
  Pool pool;
  pool.endpoints = {Ep("a:1", 0, 10), Ep("b:1", 0, 30), Ep("c:1", 0, 20)};
  pool.Finish();
  ExpectScores(Scores(*scorer, pool), {1, 0, 0.5});
}

TEST(KvCacheScorerTest, OneMinusUsage) {
  auto scorer = Make(plugins::kKvCacheScorerType);
  Pool pool;
  pool.endpoints = {Ep("a:1", 0, 0, 0.25), Ep("b:1", 0, 0, 1.0), Ep("c:1", 0, 0, std::nullopt)};
  pool.Finish();
  ExpectScores(Scores(*scorer, pool), {0.75, 0, 0});
}

TEST(LoraAffinityScorerTest, GieOrder) {
  struct Case {
    const char* name;
    std::optional<LoraInfo> lora;
    double want;
  };
  const Case cases[] = {
      {"active", LoraInfo{2, {"ad"}, {}}, 1.0},
      {"free slot", LoraInfo{2, {"x"}, {}}, 0.8},
      {"capacity check precedes waiting", LoraInfo{3, {"x"}, {"ad"}}, 0.8},
      {"waiting, no slot", LoraInfo{2, {"x"}, {"ad"}}, 0.6},
      {"absent, no slot", LoraInfo{1, {"x"}, {}}, 0.0},
      {"no LoRA metric", std::nullopt, 0.0},
      // vLLM lists an adapter with running and waiting requests in both lists: two slots, not
      // four (llm-d #2605), so a third adapter still finds a free slot.
      {"union, not sum", LoraInfo{4, {"a1", "a2"}, {"a1", "a2"}}, 0.8},
      {"union full, waiting tier reachable", LoraInfo{2, {"x", "y"}, {"x", "ad"}}, 0.6},
      {"resident on the GPU, idle", LoraInfo{2, {}, {}, {"ad"}, {}}, 1.0},
      {"resident adapters take slots", LoraInfo{2, {"x"}, {}, {"y"}, {}}, 0.0},
      {"in CPU memory, no slot", LoraInfo{1, {"x"}, {}, {"x"}, {"ad"}}, 0.6},
      {"residency only: max unknown", LoraInfo{0, {}, {}, {"x"}, {}}, 0.0},
  };
  auto scorer = Make(plugins::kLoraAffinityScorerType);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Pool pool;
    pool.request.model = "ad";
    pool.endpoints = {Ep("a:1", 0)};
    pool.endpoints[0].metrics.lora = c.lora;
    pool.Finish();
    ExpectScores(Scores(*scorer, pool), {c.want});
  }
}

// The case: a1 and a2 both running and waiting, max_lora 4, a request for a3.
TEST(LoraAffinityScorerTest, AdaptersInBothListsLeaveFreeSlots) {
  auto scorer = Make(plugins::kLoraAffinityScorerType);
  Pool pool;
  pool.request.model = "a3";
  pool.endpoints = {Ep("a:1", 0), Ep("b:1", 0)};
  pool.endpoints[0].metrics.lora = LoraInfo{4, {"a1", "a2"}, {"a1", "a2"}};
  pool.endpoints[1].metrics.lora = LoraInfo{4, {"a1", "a2", "a4"}, {"a5"}};
  pool.Finish();
  EXPECT_EQ(pool.endpoints[0].metrics.lora->SlotsInUse(), 2);
  ExpectScores(Scores(*scorer, pool), {0.8, 0.0});
  EXPECT_EQ(scorer->AsScorer()->Explain(pool.ctx, pool.endpoints[0]), "free adapter slot");
}

TEST(TokenLoadScorerTest, InflightTokensAgainstThreshold) {
  Params p = Params::Map();
  p.Set("queueThresholdTokens", Params::Int(1000));
  auto scorer = Make(plugins::kTokenLoadScorerType, p);
  Pool pool;
  pool.endpoints = {Ep("a:1", 0), Ep("b:1", 0), Ep("c:1", 0)};
  pool.Finish();
  pool.ctx.inflight_tokens = {0, 500, 5000};
  ExpectScores(Scores(*scorer, pool), {1, 0.5, 0});
}

TEST(PrefixCacheScorerTest, RatioAndMatchLength) {
  Pool pool;
  pool.endpoints = {Ep("a:1", 0), Ep("b:1", 0), Ep("c:1", 0)};
  pool.Finish();
  pool.ctx.prefix.computed = true;
  pool.ctx.prefix.block_size_tokens = 16;
  pool.ctx.prefix.hashes.assign(10, 1);
  pool.ctx.prefix.match_blocks = {10, 5, 0};
  ExpectScores(Scores(*Make(plugins::kPrefixCacheScorerType), pool), {1.0, 0.5, 0});

  Params p = Params::Map();
  p.Set("matchLengthWeight", Params::Number(0.5));
  p.Set("matchLengthScaleTokens", Params::Int(160));
  // w * min(1, m*16/160)^2 + (1-w) * m/10
  ExpectScores(Scores(*Make(plugins::kPrefixCacheScorerType, p), pool),
               {0.5 * 1 + 0.5 * 1.0, 0.5 * 0.25 + 0.5 * 0.5, 0});

  pool.ctx.prefix.hashes.clear();  // prompt shorter than a block
  ExpectScores(Scores(*Make(plugins::kPrefixCacheScorerType), pool), {0, 0, 0});
}

TEST(PrefixCacheScorerTest, BadParameters) {
  PluginRegistry reg = BuiltinRegistry();
  SeededRng rng(1);
  Params p = Params::Map();
  p.Set("matchLengthWeight", Params::Number(2));
  p.SetPath("plugins[4].parameters");
  auto r = reg.Create("prefix-cache-scorer", "pc", p, PluginContext{&SteadyClock::Get(), &rng});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("plugins[4].parameters.matchLengthWeight"), std::string::npos) << r.status();
  Params q = Params::Map();
  q.Set("matchLenghtWeight", Params::Number(0.1));
  q.SetPath("plugins[4].parameters");
  r = reg.Create("prefix-cache-scorer", "pc", q, PluginContext{&SteadyClock::Get(), &rng});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("matchLenghtWeight"), std::string::npos) << r.status();
}

std::vector<std::string> PickWith(const Plugin& picker, Pool& pool, const std::vector<double>& scores) {
  std::vector<ScoredEndpoint> s;
  for (size_t i = 0; i < scores.size(); ++i) s.push_back({pool.candidates[i], scores[i]});
  std::vector<std::string> out;
  for (const Endpoint* e : picker.AsPicker()->Pick(pool.ctx, s)) out.push_back(e->address);
  return out;
}

TEST(MaxScorePickerTest, HighestWinsTiesAreRandomButSeeded) {
  auto picker = Make(plugins::kMaxScorePickerType);
  Pool pool;
  pool.endpoints = {Ep("a:1", 0), Ep("b:1", 0), Ep("c:1", 0)};
  pool.Finish();
  EXPECT_EQ(PickWith(*picker, pool, {0.1, 0.9, 0.5}), std::vector<std::string>{"b:1"});
  // Ties: both tied endpoints win sometimes, the third never.
  std::map<std::string, int> wins;
  for (int i = 0; i < 200; ++i) wins[PickWith(*picker, pool, {0.7, 0.2, 0.7})[0]]++;
  EXPECT_GT(wins["a:1"], 40);
  EXPECT_GT(wins["c:1"], 40);
  EXPECT_EQ(wins["b:1"], 0);
  // Same seed, same sequence.
  Pool p1, p2;
  p1.endpoints = p2.endpoints = pool.endpoints;
  p1.Finish();
  p2.Finish();
  for (int i = 0; i < 20; ++i) EXPECT_EQ(PickWith(*picker, p1, {1, 1, 1}), PickWith(*picker, p2, {1, 1, 1}));
}

TEST(MaxScorePickerTest, MaxNumOfEndpointsOrdersByScore) {
  Params p = Params::Map();
  p.Set("maxNumOfEndpoints", Params::Int(2));
  auto picker = Make(plugins::kMaxScorePickerType, p);
  Pool pool;
  pool.endpoints = {Ep("a:1", 0), Ep("b:1", 0), Ep("c:1", 0)};
  pool.Finish();
  EXPECT_EQ(PickWith(*picker, pool, {0.2, 0.9, 0.5}), (std::vector<std::string>{"b:1", "c:1"}));
  // Invalid counts fall back to 1, as in GIE.
  p.Set("maxNumOfEndpoints", Params::Int(0));
  EXPECT_EQ(PickWith(*Make(plugins::kMaxScorePickerType, p), pool, {0.2, 0.9, 0.5}).size(), 1u);
}

TEST(WeightedRandomPickerTest, ProportionalToScoreAndNeverZero) {
  auto picker = Make(plugins::kWeightedRandomPickerType);
  Pool pool;
  pool.endpoints = {Ep("a:1", 0), Ep("b:1", 0), Ep("c:1", 0)};
  pool.Finish();
  std::map<std::string, int> wins;
  const int n = 20000;
  for (int i = 0; i < n; ++i) wins[PickWith(*picker, pool, {3, 1, 0})[0]]++;
  EXPECT_EQ(wins["c:1"], 0);
  EXPECT_NEAR(static_cast<double>(wins["a:1"]) / n, 0.75, 0.02);
  // All zero: uniform.
  wins.clear();
  for (int i = 0; i < 3000; ++i) wins[PickWith(*picker, pool, {0, 0, 0})[0]]++;
  for (const char* k : {"a:1", "b:1", "c:1"}) EXPECT_GT(wins[k], 800) << k;
}

TEST(SoftmaxPickerTest, DynamosSelectionAtATemperature) {
  Pool pool;
  pool.endpoints = {Ep("a:1", 0), Ep("b:1", 0), Ep("c:1", 0)};
  pool.Finish();
  // Temperature 0 (the default): the best score, as max-score-picker.
  auto zero = Make(plugins::kSoftmaxPickerType);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(PickWith(*zero, pool, {0.2, 0.9, 0.5})[0], "b:1");
  // Temperature 1 over scores 1, 0, 0: weights 1, e^-1, e^-1.
  Params p = Params::Map();
  p.Set("temperature", Params::Number(1));
  auto warm = Make(plugins::kSoftmaxPickerType, p);
  std::map<std::string, int> wins;
  const int n = 20000;
  for (int i = 0; i < n; ++i) wins[PickWith(*warm, pool, {1, 0, 0})[0]]++;
  const double e1 = std::exp(-1.0);
  EXPECT_NEAR(static_cast<double>(wins["a:1"]) / n, 1 / (1 + 2 * e1), 0.015);
  EXPECT_NEAR(static_cast<double>(wins["b:1"]) / n, e1 / (1 + 2 * e1), 0.015);
  // Only the spread matters: scores 0.6, 0.5, 0.5 draw the same way.
  wins.clear();
  for (int i = 0; i < n; ++i) wins[PickWith(*warm, pool, {0.6, 0.5, 0.5})[0]]++;
  EXPECT_NEAR(static_cast<double>(wins["a:1"]) / n, 1 / (1 + 2 * e1), 0.015);
  // All equal: uniform.
  wins.clear();
  for (int i = 0; i < 3000; ++i) wins[PickWith(*warm, pool, {0.4, 0.4, 0.4})[0]]++;
  for (const char* k : {"a:1", "b:1", "c:1"}) EXPECT_GT(wins[k], 850) << k;
  // Several endpoints: drawn without replacement.
  p.Set("maxNumOfEndpoints", Params::Int(3));
  const std::vector<std::string> all = PickWith(*Make(plugins::kSoftmaxPickerType, p), pool, {1, 0, 0.5});
  EXPECT_EQ(std::set<std::string>(all.begin(), all.end()).size(), 3u);
  p.Set("temperature", Params::Number(-1));
  SeededRng rng(1);
  auto bad = BuiltinRegistry().Create(std::string(plugins::kSoftmaxPickerType), "s", p, PluginContext{&SteadyClock::Get(), &rng});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("temperature: must be in [0, 1000000], got -1"), std::string::npos) << bad.status();
}

TEST(RandomPickerTest, IgnoresScores) {
  auto picker = Make(plugins::kRandomPickerType);
  Pool pool;
  pool.endpoints = {Ep("a:1", 0), Ep("b:1", 0)};
  pool.Finish();
  std::map<std::string, int> wins;
  for (int i = 0; i < 1000; ++i) wins[PickWith(*picker, pool, {1, 0})[0]]++;
  EXPECT_GT(wins["b:1"], 350);
}

TEST(UtilizationDetectorTest, SaturationIsMeanOfWorstRatio) {
  auto det = Make(plugins::kUtilizationDetectorType);
  Pool pool;
  // queue/5 vs kv/0.8: 0.2 | 1.0 (kv) | 2.0 (queue); stale endpoint counts 1.
  pool.endpoints = {Ep("a:1", 1, 0, 0.1), Ep("b:1", 0, 0, 0.8), Ep("c:1", 10, 0, 0.0), Ep("d:1", 0, 0, 0)};
  pool.endpoints[3].metrics_time_us = 0;  // 1 s old at now = 1 s: stale (200 ms)
  pool.Finish();
  EXPECT_NEAR(det->AsSaturationDetector()->Saturation(pool.ctx, pool.candidates), (0.2 + 1.0 + 2.0 + 1.0) / 4, 1e-9);
  EXPECT_NEAR(det->AsSaturationDetector()->Saturation(pool.ctx, {}), 1.0, 1e-12);
  // As a filter: keeps fresh endpoints under both thresholds.
  auto kept = det->AsFilter()->Apply(pool.ctx, pool.candidates);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0]->address, "a:1");
  EXPECT_NE(det->AsFilter()->WhyRemoved(pool.ctx, pool.endpoints[2]).find("queue 10"), std::string::npos);
  EXPECT_NE(det->AsFilter()->WhyRemoved(pool.ctx, pool.endpoints[3]).find("older"), std::string::npos);
  // Fail open when nothing passes.
  std::vector<const Endpoint*> busy = {&pool.endpoints[1], &pool.endpoints[2]};
  EXPECT_EQ(det->AsFilter()->Apply(pool.ctx, busy).size(), 2u);
}

TEST(UtilizationDetectorTest, HeadroomAndParameters) {
  Params p = Params::Map();
  p.Set("queueDepthThreshold", Params::Int(10));
  p.Set("headroom", Params::Number(0.5));
  p.Set("metricsStalenessThreshold", Params::String("2s"));
  auto det = Make(plugins::kUtilizationDetectorType, p);
  Pool pool;
  pool.endpoints = {Ep("a:1", 14, 0, 0.1), Ep("b:1", 15, 0, 0.1)};
  pool.endpoints[1].metrics_time_us = 0;
  pool.Finish();
  auto kept = det->AsFilter()->Apply(pool.ctx, pool.candidates);
  ASSERT_EQ(kept.size(), 1u);  // 14 < 15 passes, 15 does not
  EXPECT_EQ(kept[0]->address, "a:1");
}

TEST(LabelSelectorFilterTest, MatchLabelsAndExpressions) {
  Params p = Params::Map();
  p.Set("matchLabels", Params::Map().Set("pool", Params::String("gold")));
  Params expr = Params::Map();
  expr.Set("key", Params::String("zone"));
  expr.Set("operator", Params::String("In"));
  expr.Set("values", Params::List().Append(Params::String("a")).Append(Params::String("b")));
  p.Set("matchExpressions", Params::List().Append(expr));
  auto f = Make(plugins::kLabelSelectorFilterType, p);
  Pool pool;
  pool.endpoints = {Ep("1:1", 0), Ep("2:1", 0), Ep("3:1", 0), Ep("4:1", 0)};
  pool.endpoints[0].labels = {{"pool", "gold"}, {"zone", "a"}};
  pool.endpoints[1].labels = {{"pool", "gold"}, {"zone", "c"}};
  pool.endpoints[2].labels = {{"pool", "silver"}, {"zone", "a"}};
  pool.Finish();
  auto kept = f->AsFilter()->Apply(pool.ctx, pool.candidates);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0]->address, "1:1");
  EXPECT_EQ(f->AsFilter()->WhyRemoved(pool.ctx, pool.endpoints[2]), "label pool=silver (want gold)");
  EXPECT_EQ(f->AsFilter()->WhyRemoved(pool.ctx, pool.endpoints[3]), "label pool missing (want gold)");
  EXPECT_NE(f->AsFilter()->WhyRemoved(pool.ctx, pool.endpoints[1]).find("not in [a, b]"), std::string::npos);
}

TEST(RoleFilterTest, DecodeKeepsUnlabeledPrefillDoesNot) {
  Pool pool;
  pool.endpoints = {Ep("d:1", 0), Ep("p:1", 0), Ep("b:1", 0), Ep("u:1", 0)};
  pool.endpoints[0].labels = {{"llm-d.ai/role", "decode"}};
  pool.endpoints[1].labels = {{"llm-d.ai/role", "prefill"}};
  pool.endpoints[2].labels = {{"llm-d.ai/role", "both"}};
  pool.Finish();
  auto names = [](const std::vector<const Endpoint*>& v) {
    std::vector<std::string> out;
    for (auto* e : v) out.push_back(e->address);
    return out;
  };
  EXPECT_EQ(names(Make(plugins::kDecodeFilterType)->AsFilter()->Apply(pool.ctx, pool.candidates)),
            (std::vector<std::string>{"d:1", "b:1", "u:1"}));
  EXPECT_EQ(names(Make(plugins::kPrefillFilterType)->AsFilter()->Apply(pool.ctx, pool.candidates)),
            (std::vector<std::string>{"p:1", "b:1"}));
}

TEST(PrefixAffinityFilterTest, KeepsStickyEndpointsWhenAny) {
  auto f = Make(plugins::kPrefixAffinityFilterType);
  Pool pool;
  pool.endpoints = {Ep("a:1", 0), Ep("b:1", 0), Ep("c:1", 0)};
  pool.Finish();
  pool.ctx.prefix.computed = true;
  pool.ctx.prefix.hashes.assign(10, 1);
  pool.ctx.prefix.match_blocks = {9, 8, 2};
  EXPECT_EQ(f->AsFilter()->Apply(pool.ctx, pool.candidates).size(), 2u);  // 0.9, 0.8 >= 0.8
  pool.ctx.prefix.match_blocks = {7, 0, 2};
  EXPECT_EQ(f->AsFilter()->Apply(pool.ctx, pool.candidates).size(), 3u);  // none sticky: keep all
  // A sticky endpoint far busier than the others breaks stickiness (TTFT penalty).
  pool.ctx.prefix.match_blocks = {10, 0, 0};
  pool.ctx.inflight_tokens = {100000000, 0, 0};
  EXPECT_EQ(f->AsFilter()->Apply(pool.ctx, pool.candidates).size(), 3u);
}

TEST(RegistryTest, BuiltinsAndErrors) {
  PluginRegistry reg = BuiltinRegistry();
  for (const char* t : {"queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer", "lora-affinity-scorer",
                        "running-requests-size-scorer", "token-load-scorer", "cache-aware-scorer", "label-selector-filter",
                        "prefix-cache-affinity-filter", "max-score-picker", "random-picker", "weighted-random-picker",
                        "single-profile-handler", "utilization-detector", "approx-prefix-cache-producer",
                        "metrics-data-source", "core-metrics-extractor", "openai-parser", "decode-filter"})
    EXPECT_TRUE(reg.Has(t)) << t;
  EXPECT_EQ(reg.Register("queue-scorer", plugins::CreateQueueScorer).code(), absl::StatusCode::kAlreadyExists);
  SeededRng rng(1);
  auto r = reg.Create("nope", "n", Params(), PluginContext{&SteadyClock::Get(), &rng});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("known:"), std::string::npos);
}

}  // namespace
}  // namespace epp
