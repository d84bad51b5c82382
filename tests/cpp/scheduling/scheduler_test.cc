// The scheduling cycle end to end: config -> BuildScheduler -> Pick, outcomes (200/429/503),
// subset hints, prefix learning, in-flight load, defaults, explain output, fixture configs.
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "epp/config.h"
#include "epp/kv/subscriber.h"
#include "epp/registry.h"
#include "epp/request.h"
#include "epp/scheduler.h"
#include "testing/epp_testing.h"

namespace epp {
namespace {

using testing::Ep;

struct Fixture {
  ManualClock clock{1000000};
  SeededRng rng{42};
  std::unique_ptr<Scheduler> sched;

  explicit Fixture(std::string_view yaml = "") {
    EppConfig cfg = DefaultConfig();
    if (!yaml.empty()) {
      auto parsed = ParseConfig(yaml, "test.yaml");
      EXPECT_TRUE(parsed.ok()) << parsed.status();
      cfg = *parsed;
    }
    auto s = BuildScheduler(cfg, BuiltinRegistry(), PluginContext{&clock, &rng});
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) sched = std::move(*s);
  }
};

InferenceRequest Chat(const std::string& text, int priority = 0) {
  std::string body = R"({"model":"m","messages":[{"role":"user","content":")" + text + R"("}]})";
  auto r = ParseOpenAIRequest("/v1/chat/completions", body);
  EXPECT_TRUE(r.ok()) << r.status();
  InferenceRequest req = *r;
  req.priority = priority;
  return req;
}

std::string Long(char c, size_t n) { return std::string(n, c); }

TEST(SchedulerTest, DefaultProfilePrefersShortQueueAndFreeCache) {
  Fixture f;
  std::vector<Endpoint> pool = {Ep("10.0.0.1:8000", 8, 0.9), Ep("10.0.0.2:8000", 0, 0.1), Ep("10.0.0.3:8000", 4, 0.5)};
  PickResult r = f.sched->Pick(Chat("hello"), pool);
  EXPECT_EQ(r.status, 200) << r.reason;
  ASSERT_EQ(r.endpoints.size(), 1u);
  EXPECT_EQ(r.endpoints[0], "10.0.0.2:8000");
  EXPECT_EQ(r.DestinationValue(), "10.0.0.2:8000");
}

TEST(SchedulerTest, PrefixIndexLearnsFromPicks) {
  Fixture f;
  std::vector<Endpoint> pool = {Ep("a:1", 0, 0.1), Ep("b:1", 0, 0.1), Ep("c:1", 0, 0.1)};
  const std::string prompt = Long('x', 4000);
  PickResult first = f.sched->Pick(Chat(prompt), pool);
  ASSERT_EQ(first.status, 200);
  EXPECT_GT(first.prefix_blocks, 10);
  EXPECT_GT(f.sched->PrefixIndexEntries(), 0u);
  // Same prompt again: all else equal, the prefix scorer sends it where the first one went.
  for (int i = 0; i < 5; ++i) {
    f.sched->Release(first);
    PickResult again = f.sched->Pick(Chat(prompt), pool);
    EXPECT_EQ(again.endpoints, first.endpoints);
  }
}

TEST(SchedulerTest, AutoTuneTakesTheFirstCandidatesBlockSizeButNotSmallerThanConfigured) {
  Fixture f;
  struct Case {
    std::optional<int64_t> server_block;
    int want;
  };
  for (const Case& c : {Case{std::nullopt, 16}, Case{64, 64}, Case{32, 32}, Case{1, 16}, Case{8, 16}}) {
    SCOPED_TRACE(c.server_block.value_or(-1));
    std::vector<Endpoint> pool = {Ep("a:1", 0, 0.1)};
    pool[0].metrics.cache_block_size = c.server_block;
    PickOptions o;
    o.record = false;
    PickResult r = f.sched->Pick(Chat(Long('k', 1024)), pool, o);
    EXPECT_EQ(r.prefix_block_size_tokens, c.want);
    // The prompt renders with a few characters of framing around the 1024 'k's.
    EXPECT_EQ(r.prefix_blocks, static_cast<int>(Chat(Long('k', 1024)).prompt.size() / (c.want * 4)));
  }
}

TEST(SchedulerTest, AutoTuneCapsTheIndexAtTheServersKvCapacity) {
  Fixture f;
  std::vector<Endpoint> pool = {Ep("a:1", 0, 0.1)};
  pool[0].metrics.cache_block_size = 16;
  pool[0].metrics.cache_num_blocks = 20;  // 20 blocks of 16 tokens = 320 tokens
  for (int i = 0; i < 5; ++i) f.sched->Pick(Chat(std::to_string(i) + Long('c', 1000)), pool);
  EXPECT_EQ(f.sched->PrefixIndexEntries(), 20u);
}

TEST(SchedulerTest, AutoTuneCapacityFromExtremeCacheMetricsSaturates) {
  // Metrics from files or Python are not bounded by the extractor: blocks x block size beyond
  // int64 used to overflow (undefined behaviour; in practice a capacity of one block).
  auto entries = [](int64_t blocks, int64_t block_size) {
    Fixture f;
    std::vector<Endpoint> pool = {Ep("a:1", 0, 0.1)};
    pool[0].metrics.cache_block_size = block_size;
    pool[0].metrics.cache_num_blocks = blocks;
    for (int i = 0; i < 5; ++i) f.sched->Pick(Chat(std::to_string(i) + Long('c', 1000)), pool);
    return f.sched->PrefixIndexEntries();
  };
  const size_t roomy = entries(1'000'000, 16);
  EXPECT_GT(roomy, 20u);
  EXPECT_EQ(entries(INT64_MAX / 2, 16), roomy);
  EXPECT_EQ(entries(INT64_MAX, 16), roomy);
  EXPECT_EQ(entries(INT64_MAX / 3, 64), entries(1'000'000, 64));  // larger server blocks, same rule
}

TEST(SchedulerTest, WhatIfPicksDoNotLearn) {
  Fixture f;
  std::vector<Endpoint> pool = {Ep("a:1", 0, 0.1), Ep("b:1", 0, 0.1)};
  PickOptions what_if;
  what_if.record = false;
  f.sched->Pick(Chat(Long('y', 2000)), pool, what_if);
  EXPECT_EQ(f.sched->PrefixIndexEntries(), 0u);
  EXPECT_EQ(f.sched->Inflight("a:1").first + f.sched->Inflight("b:1").first, 0);
}

TEST(SchedulerTest, InflightLoadIsRecordedAndReleased) {
  Fixture f;
  std::vector<Endpoint> pool = {Ep("a:1", 0, 0.1)};
  InferenceRequest req = Chat(Long('z', 400));
  PickResult r = f.sched->Pick(req, pool);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.load_tokens, Scheduler::EstimateLoadTokens(req));
  EXPECT_EQ(f.sched->Inflight("a:1"), std::make_pair(int64_t{1}, r.load_tokens));
  f.sched->Release(r);
  EXPECT_EQ(f.sched->Inflight("a:1"), std::make_pair(int64_t{0}, int64_t{0}));
  f.sched->Release(r);  // clamps at zero
  EXPECT_EQ(f.sched->Inflight("a:1").first, 0);
}

TEST(SchedulerTest, EstimateLoadTokensFollowsGie) {
  InferenceRequest r;
  r.prompt_tokens = 100;
  EXPECT_EQ(Scheduler::EstimateLoadTokens(r), 250);
  r.prompt_tokens = 0;
  EXPECT_EQ(Scheduler::EstimateLoadTokens(r), 1 + 2);  // at least one input token; round(1.5) = 2
}

TEST(SchedulerTest, SubsetHint) {
  Fixture f;
  std::vector<Endpoint> pool = {Ep("10.0.0.1:8000", 0, 0.1), Ep("10.0.0.1:8001", 5, 0.5), Ep("10.0.0.2:8000", 0, 0.0)};
  struct Case {
    const char* name;
    std::vector<std::string> subset;
    int status;
    std::set<std::string> allowed;
  };
  const Case cases[] = {
      {"exact", {"10.0.0.1:8001"}, 200, {"10.0.0.1:8001"}},
      {"bare ip matches every port", {"10.0.0.1"}, 200, {"10.0.0.1:8000", "10.0.0.1:8001"}},
      {"no match", {"10.9.9.9:8000"}, 503, {}},
      {"empty list", {}, 503, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    PickOptions o;
    o.subset = c.subset;
    PickResult r = f.sched->Pick(Chat("hi"), pool, o);
    EXPECT_EQ(r.status, c.status) << r.reason;
    if (c.status == 200) {
      ASSERT_EQ(r.endpoints.size(), 1u);
      EXPECT_TRUE(c.allowed.count(r.endpoints[0])) << r.endpoints[0];
    } else {
      EXPECT_TRUE(r.endpoints.empty());
      EXPECT_FALSE(r.reason.empty());
    }
  }
  EXPECT_TRUE(SubsetEntryMatches("::1", "[::1]:8000"));
  EXPECT_TRUE(SubsetEntryMatches(" 10.0.0.1:8000 ", "10.0.0.1:8000"));
  EXPECT_FALSE(SubsetEntryMatches("10.0.0.1:80", "10.0.0.1:8000"));
  EXPECT_FALSE(SubsetEntryMatches("10.0.0.10", "10.0.0.1:8000"));
}

TEST(SchedulerTest, UnreachableEndpointsArePassedOverWhileOthersRemain) {
  Fixture f;
  // The best-looking endpoint is gone (its scrape was refused): never picked while others exist.
  std::vector<Endpoint> pool = {Ep("10.0.0.1:8000", 0, 0.0), Ep("10.0.0.2:8000", 6, 0.7), Ep("10.0.0.3:8000", 9, 0.9)};
  pool[0].unreachable = true;
  for (int i = 0; i < 20; ++i) {
    PickResult r = f.sched->Pick(Chat("hello " + std::to_string(i)), pool);
    ASSERT_EQ(r.status, 200) << r.reason;
    EXPECT_EQ(r.endpoints[0], "10.0.0.2:8000");
    EXPECT_EQ(r.candidates, 2);
    EXPECT_EQ(r.unreachable, std::vector<std::string>{"10.0.0.1:8000"});
  }
  PickOptions traced;
  traced.trace = true;
  PickResult t = f.sched->Pick(Chat("why"), pool, traced);
  EXPECT_NE(PickResultToText(nullptr, t, false).find("passed over, last scrape refused: 10.0.0.1:8000"), std::string::npos)
      << PickResultToText(nullptr, t, false);
  EXPECT_EQ(nlohmann::json::parse(PickResultToJson(nullptr, t))["result"]["unreachable"][0], "10.0.0.1:8000");
  // A subset hint naming only the unreachable one, or a pool where every endpoint is
  // unreachable: the signal no longer narrows anything (a metrics port blocked for the whole
  // pool must not turn every request into a 503).
  PickOptions only_gone;
  only_gone.subset = std::vector<std::string>{"10.0.0.1:8000"};
  PickResult r = f.sched->Pick(Chat("hint"), pool, only_gone);
  EXPECT_EQ(r.status, 200) << r.reason;
  EXPECT_EQ(r.endpoints[0], "10.0.0.1:8000");
  EXPECT_TRUE(r.unreachable.empty());
  for (Endpoint& e : pool) e.unreachable = true;
  r = f.sched->Pick(Chat("all gone"), pool);
  EXPECT_EQ(r.status, 200) << r.reason;
  EXPECT_EQ(r.candidates, 3);
  EXPECT_TRUE(r.unreachable.empty());
}

TEST(SchedulerTest, SheddableRequestsAreDroppedOnlyWhenSaturated) {
  Fixture f;
  std::vector<Endpoint> busy = {Ep("a:1", 10, 0.9), Ep("b:1", 6, 0.5)};
  std::vector<Endpoint> idle = {Ep("a:1", 0, 0.1), Ep("b:1", 1, 0.2)};
  PickResult shed = f.sched->Pick(Chat("x", -1), busy);
  EXPECT_EQ(shed.status, 429);
  EXPECT_NE(shed.reason.find("sheddable"), std::string::npos);
  EXPECT_EQ(shed.dropped_reason, kDroppedSaturated);
  EXPECT_EQ(nlohmann::json::parse(PickResultToJson(nullptr, shed))["decision"]["immediate_response"]["headers"]
                                 ["x-llm-d-request-dropped-reason"],
            "rejected-saturated");
  EXPECT_EQ(f.sched->Pick(Chat("x", 0), busy).status, 200);  // priority >= 0 is never shed
  EXPECT_EQ(f.sched->Pick(Chat("x", -1), idle).status, 200);
  // Stale metrics count as saturated.
  std::vector<Endpoint> stale = {Ep("a:1", 0, 0.1, 0), Ep("b:1", 0, 0.1, 0)};
  EXPECT_EQ(f.sched->Pick(Chat("x", -1), stale).status, 429);
}

TEST(SchedulerTest, AllFilteredIs503AndNoEndpointsIs503) {
  Fixture f(R"(
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: label-selector-filter
  parameters:
    matchLabels: {pool: gold}
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: label-selector-filter
  - pluginRef: queue-scorer
)");
  std::vector<Endpoint> pool = {Ep("a:1", 0, 0), Ep("b:1", 0, 0)};
  PickOptions o;
  o.trace = true;
  PickResult r = f.sched->Pick(Chat("x"), pool, o);
  EXPECT_EQ(r.status, 503);
  EXPECT_NE(r.reason.find("label-selector-filter"), std::string::npos) << r.reason;
  // A label rules endpoints out for what they are, not for being busy: no endpoints, not saturated.
  EXPECT_EQ(r.dropped_reason, kDroppedNoEndpoints);
  EXPECT_NE(PickResultToText(nullptr, r, false).find("header x-llm-d-request-dropped-reason: rejected-no-endpoints"),
            std::string::npos);
  ASSERT_EQ(r.profiles.size(), 1u);
  ASSERT_EQ(r.profiles[0].filters.size(), 1u);
  EXPECT_EQ(r.profiles[0].filters[0].removed.size(), 2u);
  EXPECT_EQ(f.sched->Pick(Chat("x"), std::vector<Endpoint>{}).status, 503);
  EXPECT_EQ(f.sched->Pick(Chat("x"), std::vector<Endpoint>{}).dropped_reason, kDroppedNoEndpoints);
  pool[1].labels["pool"] = "gold";
  r = f.sched->Pick(Chat("x"), pool, o);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.endpoints[0], "b:1");
  EXPECT_EQ(r.dropped_reason, "");
}

TEST(SchedulerTest, SameSeedSamePicks) {
  std::vector<Endpoint> pool;
  for (int i = 0; i < 8; ++i) pool.push_back(Ep("10.0.0." + std::to_string(i) + ":8000", 0, 0));
  auto run = [&] {
    Fixture f;
    std::vector<std::string> picks;
    for (int i = 0; i < 50; ++i) {
      PickResult r = f.sched->Pick(Chat("request " + std::to_string(i % 7) + Long('q', 300)), pool);
      picks.push_back(r.endpoints.at(0));
    }
    return picks;
  };
  const auto a = run(), b = run();
  EXPECT_EQ(a, b);
  EXPECT_GT(std::set<std::string>(a.begin(), a.end()).size(), 1u);  // ties spread over endpoints
}

TEST(SchedulerTest, FallbacksWithMaxNumOfEndpoints) {
  Fixture f(R"(
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: max-score-picker
  parameters: {maxNumOfEndpoints: 3}
)");
  std::vector<Endpoint> pool = {Ep("a:1", 3, 0), Ep("b:1", 1, 0), Ep("c:1", 2, 0), Ep("d:1", 9, 0)};
  PickResult r = f.sched->Pick(Chat("x"), pool);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.endpoints, (std::vector<std::string>{"b:1", "c:1", "a:1"}));
  EXPECT_EQ(r.DestinationValue(), "b:1,c:1,a:1");
}

TEST(BuildSchedulerTest, DefaultsAreInjected) {
  Fixture f;
  const std::string y = f.sched->EffectiveConfigYaml();
  for (const char* want : {"single-profile-handler", "max-score-picker", "approx-prefix-cache-producer", "utilization-detector",
                           "weight: 2", "weight: 3", "maxNumOfEndpoints: 1", "lruCapacityPerServer: 31250",
                           "queueDepthThreshold: 5", "kvCacheUtilThreshold: 0.8"})
    EXPECT_NE(y.find(want), std::string::npos) << want << "\n" << y;
  // The effective document loads again and yields the same document.
  auto again = ParseConfig(y, "effective.yaml");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << y;
  auto s2 = BuildScheduler(*again, BuiltinRegistry());
  ASSERT_TRUE(s2.ok()) << s2.status();
  EXPECT_EQ((*s2)->EffectiveConfigYaml(), y);
}

TEST(BuildSchedulerTest, Errors) {
  struct Case {
    const char* name;
    const char* yaml;
    const char* want;
  };
  const Case cases[] = {
      {"unsupported types listed together", R"(
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: decode-filterz
- type: queue-scorer
- type: vertexai-parserz
)",
       "unsupported plugin types: decode-filterz (plugins[0], line 5: did you mean 'decode-filter'?), "
       "vertexai-parserz (plugins[2], line 7: did you mean 'vertexai-parser'?)"},
      {"two pickers in a profile", R"(
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: random-picker
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: random-picker
  - pluginRef: max-score-picker
)",
       "has two pickers"},
      {"two profiles without a handler", R"(
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
schedulingProfiles:
- name: a
  plugins: [{pluginRef: queue-scorer}]
- name: b
  plugins: [{pluginRef: queue-scorer}]
)",
       "profile handler"},
      {"bad parameter names its path", R"(
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: utilization-detector
  parameters:
    kvCacheUtilThreshold: 1.5
)",
       "plugins[1].parameters.kvCacheUtilThreshold"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto cfg = ParseConfig(c.yaml, "t.yaml");
    ASSERT_TRUE(cfg.ok()) << cfg.status();
    auto s = BuildScheduler(*cfg, BuiltinRegistry());
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(c.want), std::string::npos) << s.status();
  }
}

TEST(ExplainTest, JsonShapeAndTextMargin) {
  Fixture f;
  std::vector<Endpoint> pool = {Ep("10.0.0.1:8000", 0, 0.2), Ep("10.0.0.2:8000", 0, 0.2)};
  const std::string prompt = Long('w', 3000);
  f.sched->Pick(Chat(prompt), pool);  // warm: the prefix now lives on one endpoint
  PickOptions o;
  o.trace = true;
  o.record = false;
  InferenceRequest req = Chat(prompt);
  PickResult r = f.sched->Pick(req, pool, o);
  ASSERT_EQ(r.status, 200);
  auto j = nlohmann::json::parse(PickResultToJson(&req, r));
  EXPECT_EQ(j["request"]["model"], "m");
  EXPECT_EQ(j["request"]["path"], "/v1/chat/completions");
  EXPECT_GT(j["request"]["prefix_blocks"].get<int>(), 0);
  ASSERT_EQ(j["profiles"].size(), 1u);
  EXPECT_EQ(j["profiles"][0]["name"], "default");
  ASSERT_EQ(j["profiles"][0]["scores"].size(), 2u);
  EXPECT_EQ(j["profiles"][0]["scores"][0]["scorers"].size(), 3u);
  EXPECT_EQ(j["result"]["status"], 200);
  EXPECT_EQ(j["result"]["endpoint"], r.endpoints[0]);
  EXPECT_EQ(j["decision"]["header"]["x-gateway-destination-endpoint"], r.endpoints[0]);
  EXPECT_EQ(j["decision"]["dynamic_metadata"]["envoy.lb"]["x-gateway-destination-endpoint"], r.endpoints[0]);
  const std::string text = PickResultToText(&req, r);
  EXPECT_NE(text.find("won on prefix-cache-scorer: 1 x 3 = 3 vs 0 x 3 = 0"), std::string::npos) << text;
  EXPECT_NE(text.find("x-gateway-destination-endpoint: " + r.endpoints[0]), std::string::npos) << text;

  PickResult bad = PickResult::BadRequest(absl::InvalidArgumentError("messages: must not be empty"));
  auto jb = nlohmann::json::parse(PickResultToJson(nullptr, bad));
  EXPECT_EQ(jb["result"]["status"], 400);
  EXPECT_TRUE(jb["result"]["endpoint"].is_null());
}

TEST(ExplainTest, JsonOfTextThatIsNotUtf8IsLossyNotAnException) {
  // A label name in the config that is not UTF-8 reaches the filter's reasons; the JSON writer
  // threw on it and the uncaught exception aborted (found by tests/fuzz/fuzz_config).
  Fixture f("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
            "- type: by-label\n  parameters: {label: \xff}\n");
  std::vector<Endpoint> pool = {Ep("10.0.0.1:8000", 0, 0.2)};
  PickOptions o;
  o.trace = true;
  InferenceRequest req = Chat("hello");
  PickResult r = f.sched->Pick(req, pool, o);
  std::string out;
  ASSERT_NO_THROW(out = PickResultToJson(&req, r));
  auto j = nlohmann::json::parse(out);
  EXPECT_NE(out.find("\xef\xbf\xbd"), std::string::npos) << out;  // U+FFFD
  EXPECT_EQ(j["result"]["status"], r.status);
}

TEST(CacheAwareScorerTest, HitMissAndImbalance) {
  Fixture f(R"(
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: cache-aware-scorer
  parameters: {balance_abs_threshold: 2, balance_rel_threshold: 1.5, cache_threshold: 0.5}
)");
  std::vector<Endpoint> pool = {Ep("a:1", 0, 0), Ep("b:1", 0, 0), Ep("c:1", 0, 0)};
  const std::string shared = Long('s', 1000);
  PickResult first = f.sched->Pick(Chat(shared + "one"), pool);
  ASSERT_EQ(first.status, 200);
  f.sched->Release(first);
  // A request sharing > 50% of its text goes to the same endpoint (cache hit).
  PickResult hit = f.sched->Pick(Chat(shared + "two"), pool);
  EXPECT_EQ(hit.endpoints, first.endpoints);
  f.sched->Release(hit);
  // Load the holder with in-flight requests until imbalanced: the least loaded wins instead.
  std::vector<PickResult> held;
  for (int i = 0; i < 4; ++i) held.push_back(f.sched->Pick(Chat(shared + "x" + std::to_string(i)), pool));
  PickResult balanced = f.sched->Pick(Chat(shared + "three"), pool);
  ASSERT_EQ(balanced.status, 200);
  int holder_load = static_cast<int>(f.sched->Inflight(first.endpoints[0]).first);
  EXPECT_GE(holder_load, 3);
  EXPECT_NE(balanced.endpoints, first.endpoints);
}

InferenceRequest ChatFor(const std::string& model, const std::string& text) {
  InferenceRequest req = Chat(text);
  req.model = model;
  return req;
}

// Issue #41: the model name is the client's, and each name used to get its own tree under its own
// cap. Now at most max_models trees are kept, and max_tree_size bounds one endpoint over all of
// them; past either the least recently used model's tree goes (seen as that model's cache hit
// turning into a miss).
TEST(CacheAwareScorerTest, ClientChosenModelNamesCannotGrowTheTreesPastTheirBounds) {
  const std::string config = R"(
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: cache-aware-scorer
  parameters: {balance_abs_threshold: 1000, cache_threshold: 0.5, max_models: MODELS, max_tree_size: SIZE}
)";
  auto with = [&](int models, int size) {
    return absl::StrReplaceAll(config, {{"MODELS", absl::StrCat(models)}, {"SIZE", absl::StrCat(size)}});
  };
  const std::vector<Endpoint> pool = {Ep("a:1", 0, 0), Ep("b:1", 0, 0), Ep("c:1", 0, 0)};
  const std::string p0 = Long('q', 1000);
  // max_models: m0 is held on a (so b is the least loaded), five other models go to b.
  for (const auto& [models, m0_kept] : std::vector<std::pair<int, bool>>{{8, true}, {4, false}}) {
    SCOPED_TRACE(models);
    Fixture f(with(models, 1 << 20));
    PickResult first = f.sched->Pick(ChatFor("m0", p0), pool);
    ASSERT_EQ(first.endpoints, std::vector<std::string>{"a:1"});
    for (int i = 1; i <= 5; ++i) {
      PickResult r = f.sched->Pick(ChatFor(absl::StrCat("m", i), Long(static_cast<char>('a' + i), 1000)), pool);
      EXPECT_EQ(r.endpoints, std::vector<std::string>{"b:1"});
      f.sched->Release(r);
    }
    PickResult again = f.sched->Pick(ChatFor("m0", absl::StrCat(p0, "x")), pool);
    EXPECT_EQ(again.endpoints, std::vector<std::string>{m0_kept ? "a:1" : "b:1"});
  }
  // max_tree_size over all models: four 1000-character prompts of four models on a.
  for (const auto& [size, m0_kept] : std::vector<std::pair<int, bool>>{{100000, true}, {3000, false}}) {
    SCOPED_TRACE(size);
    Fixture f(with(256, size));
    for (int i = 0; i < 4; ++i) {
      PickResult r = f.sched->Pick(ChatFor(absl::StrCat("m", i), i == 0 ? p0 : Long(static_cast<char>('a' + i), 1000)), pool);
      EXPECT_EQ(r.endpoints, std::vector<std::string>{"a:1"});
      f.sched->Release(r);
    }
    PickResult held = f.sched->Pick(ChatFor("m3", absl::StrCat(Long('d', 1000), "y")), pool);  // a hit: a is loaded
    ASSERT_EQ(held.endpoints, std::vector<std::string>{"a:1"});
    PickResult again = f.sched->Pick(ChatFor("m0", absl::StrCat(p0, "x")), pool);
    EXPECT_EQ(again.endpoints, std::vector<std::string>{m0_kept ? "a:1" : "b:1"});
  }
}

// Every real config in ../shared/fixtures/configs either loads, or fails naming its unsupported
// plugin types.
TEST(FixtureConfigsTest, LoadOrNameUnsupportedTypes) {
  EPP_REQUIRE_SHARED_FIXTURES("configs");
  const std::filesystem::path dir = testing::SharedFixtures("configs");
  const std::map<std::string, std::vector<std::string>> unsupported = {
      {"gie-1748e829__test_testdata_configloader_1_test.yaml", {"test-one", "test-profile-handler", "test-two", "test-picker", "test-source", "test-extractor"}},
  };
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    ++files;
    auto cfg = LoadConfigFile(entry.path().string());
    ASSERT_TRUE(cfg.ok()) << cfg.status();
    auto s = BuildScheduler(*cfg, BuiltinRegistry());
    auto it = unsupported.find(name);
    if (it == unsupported.end()) {
      ASSERT_TRUE(s.ok()) << s.status();
      if (name == "llm-d-router__deploy_config_epp-precise-prefix-cache-config.yaml") {
        // llm-d's precise prefix deployment: token-producer, endpoint-notification-source and the
        // precise producer with tokenProcessorConfig.blockSize 64 and default kvEventsConfig.
        const KvEventsBinding* kv = (*s)->KvEvents();
        ASSERT_NE(kv, nullptr);
        EXPECT_TRUE(kv->discover_pods);
        EXPECT_EQ(kv->socket_port, 5557);
        EXPECT_EQ(kv->topic_filter, "kv@");
        EXPECT_NE((*s)->EffectiveConfigYaml().find("blockSizeTokens: 64"), std::string::npos) << (*s)->EffectiveConfigYaml();
        // Its token-producer asks the model server (vllm backend, url http://localhost:8000).
        const std::vector<TokenizerCounters> tokenizers = (*s)->Tokenizers();
        ASSERT_EQ(tokenizers.size(), 1u);
        EXPECT_EQ(tokenizers[0].backend, "vllm");
        EXPECT_NE((*s)->EffectiveConfigYaml().find("http://localhost:8000"), std::string::npos);
      }
    } else {
      ASSERT_FALSE(s.ok());
      for (const std::string& t : it->second) EXPECT_NE(s.status().message().find(t), std::string::npos) << t << ": " << s.status();
    }
  }
  EXPECT_GE(files, 9);
}

}  // namespace
}  // namespace epp
