// llm-d Router's request-control producers and screener: mm-embeddings-cache-producer/-scorer
// (with the parser's media items and the plugin metrics), burst-prefix-cache-producer (real
// concurrent windows), p2p-source-producer and disaggregatedset-rollout-screener, each through a
// built scheduler as a config names them.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "epp/config.h"
#include "epp/registry.h"
#include "epp/request.h"
#include "epp/scheduler.h"
#include "epp/scheduling.h"
#include "plugins/plugins.h"
#include "testing/epp_testing.h"

namespace epp {
namespace {

using testing::EndpointBuilder;

std::string Config(const std::string& plugins, const std::string& profile_plugins) {
  return "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n" + plugins +
         "schedulingProfiles:\n- name: default\n  plugins:\n" + profile_plugins;
}

absl::StatusOr<std::unique_ptr<Scheduler>> Build(const std::string& yaml, uint64_t seed = 7) {
  static SeededRng rng(seed);
  EPP_ASSIGN_OR_RETURN(EppConfig cfg, ParseConfig(yaml, "t.yaml"));
  return BuildScheduler(cfg, BuiltinRegistry(), PluginContext{&SteadyClock::Get(), &rng});
}

std::unique_ptr<Scheduler> MustBuild(const std::string& yaml) {
  auto s = Build(yaml);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

InferenceRequest Chat(const std::string& content_json, std::vector<std::pair<std::string, std::string>> headers = {}) {
  auto r = ParseOpenAIRequest("/v1/chat/completions",
                              R"({"model":"m","messages":[{"role":"user","content":)" + content_json + "}]}");
  EXPECT_TRUE(r.ok()) << r.status();
  InferenceRequest req = r.ok() ? *r : InferenceRequest{};
  req.headers = std::move(headers);
  return req;
}

std::string Image(const std::string& url) { return R"({"type":"image_url","image_url":{"url":")" + url + R"("}})"; }

const PluginMetric* FindMetric(const std::vector<PluginMetric>& ms, const std::string& name,
                               const std::vector<std::pair<std::string, std::string>>& labels) {
  for (const PluginMetric& m : ms) {
    if (m.name != name) continue;
    bool all = true;
    for (const auto& l : labels)
      all = all && std::find(m.labels.begin(), m.labels.end(), l) != m.labels.end();
    if (all) return &m;
  }
  return nullptr;
}

// ---- media items -------------------------------------------------------------------------------

TEST(MediaItemsTest, ChatAndResponsesPartsAreIdentifiedByWhatNamesTheirContent) {
  InferenceRequest r = Chat(
      "[" + Image("https://x/cat.png") + R"(,{"type":"text","text":"and"},)" + Image("https://x/cat.png") + "," +
      Image("https://x/dog.png") +
      R"(,{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}},)"
      R"({"type":"input_audio","input_audio":{"data":"AAAA","format":"mp3"}},)"
      R"({"type":"video_url","video_url":{"url":"https://x/v.mp4"}},{"type":"audio_url","audio_url":"https://x/a.mp3"}])");
  ASSERT_EQ(r.media_parts, 7);
  ASSERT_EQ(r.media_items.size(), 7u);
  EXPECT_EQ(r.media_items[0], r.media_items[1]) << "the same URL twice";
  EXPECT_NE(r.media_items[0].hash, r.media_items[2].hash);
  EXPECT_EQ(r.media_items[0].hash, MediaContentHash("https://x/cat.png"));
  EXPECT_EQ(r.media_items[3].modality, MediaModality::kAudio);
  EXPECT_NE(r.media_items[3].hash, r.media_items[4].hash) << "the format is part of an audio clip's identity";
  EXPECT_EQ(r.media_items[5].modality, MediaModality::kVideo);
  EXPECT_EQ(r.media_items[5].hash, MediaContentHash("https://x/v.mp4"));
  EXPECT_EQ(r.media_items[6].modality, MediaModality::kAudio);
  EXPECT_EQ(r.media_items[6].hash, MediaContentHash("https://x/a.mp3"));
  EXPECT_EQ(MediaModalityName(MediaModality::kVideo), "video");

  auto resp = ParseOpenAIRequest(
      "/v1/responses",
      R"({"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"https://x/cat.png"}]}]})");
  ASSERT_TRUE(resp.ok()) << resp.status();
  ASSERT_EQ(resp->media_items.size(), 1u);
  EXPECT_EQ(resp->media_items[0], r.media_items[0]) << "one image, whichever API carried it";
  EXPECT_TRUE(Chat(R"("plain text")").media_items.empty());
}

// ---- mm-embeddings-cache ----------------------------------------------------------------------

TEST(MmEmbeddingsCacheTest, SendsAnImageBackToTheServerThatEncodedItAndExportsLlmdMetrics) {
  // Only the scorer is configured: the producer is added as llm-d's default producer.
  auto s = MustBuild(Config("- type: mm-embeddings-cache-scorer\n- type: max-score-picker\n",
                            "  - pluginRef: mm-embeddings-cache-scorer\n  - pluginRef: max-score-picker\n"));
  ASSERT_NE(s, nullptr);
  std::vector<Endpoint> eps = {EndpointBuilder("10.0.0.1:8000"), EndpointBuilder("10.0.0.2:8000"),
                               EndpointBuilder("10.0.0.3:8000")};
  const InferenceRequest cat = Chat("[" + Image("https://x/cat.png") + "]");
  PickResult first = s->Pick(cat, eps);
  ASSERT_EQ(first.status, 200) << first.reason;
  for (int i = 0; i < 5; ++i) {
    PickResult again = s->Pick(cat, eps, PickOptions{.trace = true});
    ASSERT_EQ(again.status, 200);
    EXPECT_EQ(again.endpoints.front(), first.endpoints.front());
    EXPECT_EQ(again.profiles[0].scores[0].scorers[0].raw, 1.0);
    EXPECT_EQ(again.profiles[0].scores[0].scorers[0].detail, "1/1 media items recently sent here");
  }
  // Two images, one seen: half a match on the server that holds the cat.
  PickResult half = s->Pick(Chat("[" + Image("https://x/cat.png") + "," + Image("https://x/owl.png") + "]"), eps,
                            PickOptions{.trace = true, .record = false});
  EXPECT_EQ(half.endpoints.front(), first.endpoints.front());
  EXPECT_EQ(half.profiles[0].scores[0].scorers[0].raw, 0.5);

  const std::vector<PluginMetric> ms = s->PluginMetrics();
  const PluginMetric* q = FindMetric(ms, "llm_d_epp_encoder_cache_queries_total", {{"modality", "image"}});
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->value, 8) << "one lookup per distinct item: 1 + 5 + 2";
  EXPECT_EQ(q->type, "counter");
  const PluginMetric* h =
      FindMetric(ms, "llm_d_epp_encoder_cache_hits_total", {{"pod", first.endpoints.front()}, {"modality", "image"}});
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->value, 6);
  const PluginMetric* ratio = FindMetric(ms, "llm_d_epp_encoder_cache_hit_ratio", {{"plugin_name", "mm-embeddings-cache-producer"}});
  ASSERT_NE(ratio, nullptr);
  EXPECT_EQ(ratio->count, 21u) << "per candidate per request: 7 requests x 3";
  EXPECT_DOUBLE_EQ(ratio->sum, 5 * 1.0 + 0.5);
  EXPECT_EQ(ratio->cumulative.front(), 15u) << "le=0: 3 on the first request, 2 on each of the next 6";
}

TEST(MmEmbeddingsCacheTest, LruHoldsCacheSizeOverTwoMibItemsPerEndpoint) {
  // 4 MiB at 2 MiB an item: two items per endpoint; the deploy sample's cacheSizeInMB is accepted.
  auto s = MustBuild(Config("- type: mm-embeddings-cache-producer\n  parameters:\n    cacheSizeInMB: 4\n"
                            "- type: mm-embeddings-cache-scorer\n- type: max-score-picker\n",
                            "  - pluginRef: mm-embeddings-cache-scorer\n  - pluginRef: max-score-picker\n"));
  ASSERT_NE(s, nullptr);
  std::vector<Endpoint> eps = {EndpointBuilder("10.0.0.1:8000")};
  for (const char* u : {"https://x/1", "https://x/2", "https://x/3"}) ASSERT_EQ(s->Pick(Chat("[" + Image(u) + "]"), eps).status, 200);
  auto score = [&](const std::string& u) {
    PickResult r = s->Pick(Chat("[" + Image(u) + "]"), eps, PickOptions{.trace = true, .record = false});
    return r.profiles[0].scores[0].scorers[0].raw;
  };
  EXPECT_EQ(score("https://x/1"), 0.0) << "evicted: least recently sent";
  EXPECT_EQ(score("https://x/2"), 1.0);
  EXPECT_EQ(score("https://x/3"), 1.0);
  // ForgetEndpoint drops what the producer remembered of a server that left.
  s->ForgetEndpoint("10.0.0.1:8000");
  EXPECT_EQ(score("https://x/3"), 0.0);

  auto defaults = BuiltinRegistry().Create("mm-embeddings-cache-producer", "p", Params(), PluginContext{});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ((*defaults)->EffectiveParams().Find("cacheSizeInMBPerServer")->text(), "4096");
  auto nonpositive = BuiltinRegistry().Create(
      "mm-embeddings-cache-producer", "p", Params::Map().Set("cacheSizeInMBPerServer", Params::Int(-1)), PluginContext{});
  ASSERT_TRUE(nonpositive.ok());
  EXPECT_EQ((*nonpositive)->EffectiveParams().Find("cacheSizeInMBPerServer")->text(), "4096") << "llm-d: <= 0 is the default";
}

TEST(MmEmbeddingsCacheTest, RunsBesideAPrefixProducer) {
  auto s = MustBuild(Config("- type: mm-embeddings-cache-producer\n- type: mm-embeddings-cache-scorer\n"
                            "- type: prefix-cache-scorer\n- type: max-score-picker\n",
                            "  - pluginRef: mm-embeddings-cache-scorer\n  - pluginRef: prefix-cache-scorer\n"
                            "  - pluginRef: max-score-picker\n"));
  ASSERT_NE(s, nullptr) << "the multimodal producer is not a second prefix producer";
}

// ---- burst-prefix-cache-producer ---------------------------------------------------------------

std::string BurstConfig(const std::string& params) {
  return Config("- type: burst-prefix-cache-producer\n  parameters:\n" + params +
                    "- type: prefix-cache-scorer\n  parameters:\n    prefixMatchInfoProducerName: burst-prefix-cache-producer\n"
                    "- type: max-score-picker\n",
                "  - pluginRef: prefix-cache-scorer\n  - pluginRef: max-score-picker\n");
}

// Picks every prompt at once (one thread each) and returns the endpoint each went to.
std::vector<std::string> PickTogether(const Scheduler& s, const std::vector<Endpoint>& eps, const std::vector<std::string>& prompts) {
  std::vector<std::string> out(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i)
    threads.emplace_back([&, i] {
      auto r = ParseOpenAIRequest("/v1/completions", R"({"model":"m","prompt":")" + prompts[i] + R"("})");
      ASSERT_TRUE(r.ok());
      PickResult p = s.Pick(*r, eps);
      out[i] = p.status == 200 ? p.endpoints.front() : p.reason;
    });
  for (auto& t : threads) t.join();
  return out;
}

std::vector<Endpoint> Four() {
  return {EndpointBuilder("10.0.0.1:8000").Running(0), EndpointBuilder("10.0.0.2:8000").Running(0),
          EndpointBuilder("10.0.0.3:8000").Running(0), EndpointBuilder("10.0.0.4:8000").Running(0)};
}

TEST(BurstPrefixProducerTest, ABurstOfOnePromptLandsOnOneServerAndAnotherPromptOnAnother) {
  auto s = MustBuild(BurstConfig("    windowDurationMs: 300\n    blockSizeTokens: 4\n"));
  ASSERT_NE(s, nullptr);
  const std::string p(200, 'a'), q(200, 'b');
  std::vector<std::string> prompts(6, p);
  prompts.insert(prompts.end(), 3, q);
  const std::vector<std::string> got = PickTogether(*s, Four(), prompts);
  for (int i = 1; i < 6; ++i) EXPECT_EQ(got[i], got[0]) << "sample " << i;
  for (int i = 7; i < 9; ++i) EXPECT_EQ(got[i], got[6]);
  EXPECT_NE(got[0], got[6]) << "the second group goes to the least loaded server";
}

TEST(BurstPrefixProducerTest, MaxPerReplicaSpillsAGroupOverServers) {
  auto s = MustBuild(BurstConfig("    windowDurationMs: 300\n    blockSizeTokens: 4\n    maxPerReplica: 2\n"));
  ASSERT_NE(s, nullptr);
  const std::vector<std::string> got = PickTogether(*s, Four(), std::vector<std::string>(6, std::string(100, 'z')));
  std::map<std::string, int> per;
  for (const std::string& e : got) ++per[e];
  ASSERT_EQ(per.size(), 3u);
  for (const auto& [e, n] : per) EXPECT_EQ(n, 2) << e;
}

TEST(BurstPrefixProducerTest, MinColocateBlocksPairsPromptsSharingALeadingPrefix) {
  auto s = MustBuild(BurstConfig("    windowDurationMs: 300\n    blockSizeTokens: 4\n    minColocateBlocks: 2\n"));
  ASSERT_NE(s, nullptr);
  // Two pairs of distinct prompts: each pair shares its first two 16-character blocks.
  const std::string a(32, 'a'), b(32, 'b');
  const std::vector<std::string> prompts = {a + std::string(16, 'x'), a + std::string(16, 'y'),
                                            b + std::string(16, 'x'), b + std::string(16, 'y')};
  std::vector<Endpoint> two = {EndpointBuilder("10.0.0.1:8000").Running(0), EndpointBuilder("10.0.0.2:8000").Running(0)};
  const std::vector<std::string> got = PickTogether(*s, two, prompts);
  EXPECT_EQ(got[0], got[1]);
  EXPECT_EQ(got[2], got[3]);
  EXPECT_NE(got[0], got[2]) << "a server's fair share of the window (4 units / 2 servers) bounds co-location";
  // Without minColocateBlocks distinct prompts are not placed: no affinity, so a tie everywhere.
  auto plain = MustBuild(BurstConfig("    windowDurationMs: 5\n    blockSizeTokens: 4\n"));
  auto r = ParseOpenAIRequest("/v1/completions", R"({"model":"m","prompt":")" + prompts[0] + R"("})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(plain->Pick(*r, two).prefix_match_blocks, 0);
}

TEST(BurstPrefixProducerTest, ALoneRequestGetsNoAffinity) {
  auto s = MustBuild(BurstConfig("    windowDurationMs: 5\n    blockSizeTokens: 4\n"));
  ASSERT_NE(s, nullptr);
  auto r = ParseOpenAIRequest("/v1/completions", R"({"model":"m","prompt":"a prompt of a few blocks"})");
  ASSERT_TRUE(r.ok());
  std::vector<Endpoint> eps = Four();
  PickResult p = s->Pick(*r, eps);
  ASSERT_EQ(p.status, 200);
  EXPECT_GT(p.prefix_blocks, 0);
  EXPECT_EQ(p.prefix_match_blocks, 0);
}

TEST(BurstPrefixProducerTest, ParametersFollowLlmd) {
  auto err = [](const std::string& params) { return std::string(Build(BurstConfig(params)).status().message()); };
  EXPECT_EQ(err("    windowDurationMs: 100\n"), "");
  EXPECT_NE(err("    windowDurationMs: 0\n").find("windowDurationMs: must be in [1, 10000]"), std::string::npos);
  EXPECT_NE(err("    windowDurationMs: 10001\n").find("windowDurationMs"), std::string::npos);
  EXPECT_NE(err("    maxPerReplica: 0\n").find("maxPerReplica: must be -1 (unlimited) or >= 1"), std::string::npos);
  EXPECT_NE(err("    maxBatchSize: 0\n").find("maxBatchSize"), std::string::npos);
  EXPECT_NE(err("    maxPrefixTokensToMatch: 10\n").find("maxPrefixTokensToMatch: must be 0 or >= blockSizeTokens (64)"),
            std::string::npos);
  EXPECT_NE(err("    balanceBy: bytes\n").find("balanceBy"), std::string::npos);
  auto p = BuiltinRegistry().Create("burst-prefix-cache-producer", "b", Params(), PluginContext{});
  ASSERT_TRUE(p.ok());
  const Params eff = (*p)->EffectiveParams();
  EXPECT_EQ(eff.Find("windowDurationMs")->text(), "100");
  EXPECT_EQ(eff.Find("maxPerReplica")->text(), "-1");
  EXPECT_EQ(eff.Find("blockSizeTokens")->text(), "64");
  EXPECT_EQ(eff.Find("maxBatchSize")->text(), "1000");
  EXPECT_EQ(eff.Find("balanceBy")->text(), "requests");
}

TEST(BurstPrefixProducerTest, AFullWindowLeavesLaterRequestsWithoutAffinity) {
  auto s = MustBuild(BurstConfig("    windowDurationMs: 300\n    blockSizeTokens: 4\n    maxBatchSize: 2\n"));
  ASSERT_NE(s, nullptr);
  std::vector<Endpoint> eps = Four();
  std::vector<int> matched(5, -1);
  std::vector<std::thread> threads;
  for (int i = 0; i < 5; ++i)
    threads.emplace_back([&, i] {
      auto r = ParseOpenAIRequest("/v1/completions", R"({"model":"m","prompt":")" + std::string(64, 'q') + R"("})");
      matched[i] = s->Pick(*r, eps).prefix_match_blocks;
    });
  for (auto& t : threads) t.join();
  int with = 0;
  for (int m : matched) with += m > 0 ? 1 : 0;
  EXPECT_EQ(with, 2) << "the two requests in the window share it; the other three were refused";
}

// ---- p2p-source-producer ------------------------------------------------------------------------

TEST(P2pSourceProducerTest, NamesThePeerHoldingThePromptWhenThePickComputesItElsewhere) {
  auto s = MustBuild(Config(
      "- type: approx-prefix-cache-producer\n  parameters: {autoTune: false, blockSizeTokens: 4}\n"
      "- type: p2p-source-producer\n- type: prefix-cache-scorer\n- type: queue-scorer\n- type: max-score-picker\n",
      "  - pluginRef: queue-scorer\n  - pluginRef: prefix-cache-scorer\n    weight: 0\n  - pluginRef: max-score-picker\n"));
  ASSERT_NE(s, nullptr);
  EXPECT_NE(std::find(s->OwnedHeaders().begin(), s->OwnedHeaders().end(), "x-kv-cache-source-host-port"),
            s->OwnedHeaders().end()) << "a client's own header is dropped";
  auto r = ParseOpenAIRequest("/v1/completions", R"({"model":"m","prompt":")" + std::string(80, 'p') + R"("})");
  ASSERT_TRUE(r.ok());
  // The queue decides: first b (records the prompt there), then a.
  std::vector<Endpoint> eps = {EndpointBuilder("10.0.0.1:8000").Queue(5), EndpointBuilder("10.0.0.2:8000").Queue(0)};
  PickResult warm = s->Pick(*r, eps);
  ASSERT_EQ(warm.endpoints.front(), "10.0.0.2:8000");
  EXPECT_TRUE(warm.headers.empty()) << "nobody held the prompt yet";
  eps[0].metrics.waiting_queue_size = 0;
  eps[1].metrics.waiting_queue_size = 5;
  PickResult pulled = s->Pick(*r, eps);
  ASSERT_EQ(pulled.endpoints.front(), "10.0.0.1:8000");
  ASSERT_EQ(pulled.headers.size(), 1u);
  EXPECT_EQ(pulled.headers[0], (std::pair<std::string, std::string>{"x-kv-cache-source-host-port", "10.0.0.2:8000"}));
  // Both hold it now: no header whichever is picked.
  EXPECT_TRUE(s->Pick(*r, eps).headers.empty());
}

TEST(P2pSourceProducerTest, DeltaBandAndPrefillProfileFollowLlmd) {
  auto p = BuiltinRegistry().Create("p2p-source-producer", "p",
                                    Params::Map().Set("minCachedTokenDelta", Params::Int(40)), PluginContext{});
  ASSERT_TRUE(p.ok()) << p.status();
  const RequestHeaderSource* src = (*p)->AsRequestHeaderSource();
  ASSERT_NE(src, nullptr);
  testing::CycleFixture c;
  c.endpoints = {EndpointBuilder("a:1").Queue(0), EndpointBuilder("b:1").Queue(0), EndpointBuilder("c:1").Queue(1000)};
  c.Finish();
  c.ctx.prefix.computed = true;
  c.ctx.prefix.block_size_tokens = 16;
  c.ctx.prefix.hashes.assign(8, 1);
  c.ctx.prefix.match_blocks = {0, 3, 4};  // b is one block short of c: both in the band
  auto header = [&](std::vector<ProfileRun> runs, const std::string& id) {
    c.request.headers = {{"x-request-id", id}};
    std::vector<std::pair<std::string, std::string>> out;
    src->RequestHeaders(c.ctx, runs, "decode", out);
    return out.empty() ? std::string() : out[0].second;
  };
  const ProfileRun decode_a{"decode", true, {&c.endpoints[0]}, {}, {}};
  // c's deep queue (weight 1/1001) leaves nearly every request to b.
  int to_b = 0;
  for (int i = 0; i < 200; ++i) to_b += header({decode_a}, "req-" + std::to_string(i)) == "b:1" ? 1 : 0;
  EXPECT_GE(to_b, 195);
  EXPECT_EQ(header({decode_a}, "same"), header({decode_a}, "same")) << "one request, one answer";
  // The prefill pick computes the prefix: b (48 cached) vs a source of at most 64: delta < 40.
  const ProfileRun prefill_b{"prefill", true, {&c.endpoints[1]}, {}, {}};
  EXPECT_EQ(header({prefill_b, decode_a}, "x"), "") << "delta 16 or 0 < minCachedTokenDelta 40";
  auto bad = BuiltinRegistry().Create("p2p-source-producer", "p",
                                      Params::Map().Set("minCachedTokenDelta", Params::Int(0)), PluginContext{});
  EXPECT_FALSE(bad.ok());
}

// ---- disaggregatedset-rollout-screener ------------------------------------------------------------

constexpr const char* kRev = "disaggregatedset.x-k8s.io/revision";
constexpr const char* kRole = "disaggregatedset.x-k8s.io/role";

Endpoint Pod(const std::string& addr, const std::string& rev, const std::string& role, const std::string& slice = "s1") {
  return EndpointBuilder(addr).Queue(0).Label(kRev, rev).Label(kRole, role).Label("app", "set").Label(
      "disaggregatedset.x-k8s.io/slice", slice);
}

std::string ScreenerConfig(const std::string& mode) {
  return Config("- type: disaggregatedset-rollout-screener\n  parameters:\n"
                "    scope: {labelSelector: app=set}\n"
                "    headerSelectors:\n"
                "    - {name: revision, headerName: X-Disagg-Revision, labelKey: disaggregatedset.x-k8s.io/revision, mode: strict}\n"
                "    - {name: slice, headerName: x-disagg-slice, labelKey: disaggregatedset.x-k8s.io/slice, mode: prefer}\n"
                "    revisionGating:\n      mode: " + mode + "\n      requireRoles: {values: [prefill, decode]}\n"
                "- type: random-picker\n",
                "  - pluginRef: random-picker\n");
}

std::map<std::string, int> RevisionCounts(const Scheduler& s, const std::vector<Endpoint>& eps, int n) {
  std::map<std::string, int> out;
  for (int i = 0; i < n; ++i) {
    PickResult r = s.Pick(Chat(R"("hi")"), eps, PickOptions{.record = false});
    if (r.status != 200) {
      ++out["status " + std::to_string(r.status)];
      continue;
    }
    for (const Endpoint& e : eps)
      if (e.address == r.endpoints.front()) ++out[e.labels.at(kRev)];
  }
  return out;
}

TEST(RolloutScreenerTest, OnlyRevisionsWithEveryRoleServeWeightedByReadyPods) {
  auto s = MustBuild(ScreenerConfig("sum"));
  ASSERT_NE(s, nullptr);
  // A: 1 prefill + 2 decode (two ports of one decode Pod count once); B: prefill only; C: outside the scope.
  std::vector<Endpoint> eps = {Pod("10.0.0.1:8000", "A", "prefill"), Pod("10.0.0.2:8000", "A", "decode"),
                               Pod("10.0.0.3:8000", "A", "decode"), Pod("10.0.0.3:8001", "A", "decode"),
                               Pod("10.0.1.1:8000", "B", "prefill")};
  EXPECT_EQ(RevisionCounts(*s, eps, 50), (std::map<std::string, int>{{"A", 50}}));
  // B gets a decode Pod: weights A 1+2 = 3, B 1+1 = 2.
  eps.push_back(Pod("10.0.1.2:8000", "B", "decode"));
  std::map<std::string, int> c = RevisionCounts(*s, eps, 2000);
  EXPECT_NEAR(c["A"], 1200, 90);
  EXPECT_NEAR(c["B"], 800, 90);
  const std::vector<PluginMetric> ms = s->PluginMetrics();
  const PluginMetric* share = FindMetric(ms, "llm_d_epp_disaggregatedset_revision_gating_share", {{"revision", "B"}, {"mode", "sum"}});
  ASSERT_NE(share, nullptr);
  EXPECT_DOUBLE_EQ(share->value, 0.4);
  // max-role: decode is the larger role (3 Pods vs 2): A 2, B 1.
  auto m = MustBuild(ScreenerConfig("max-role"));
  std::map<std::string, int> mc = RevisionCounts(*m, eps, 2000);
  EXPECT_NEAR(mc["A"], 1333, 90);
  // No revision with both roles: 503.
  std::vector<Endpoint> broken = {Pod("10.0.1.1:8000", "B", "prefill")};
  PickResult none = s->Pick(Chat(R"("hi")"), broken);
  EXPECT_EQ(none.status, 503);
  EXPECT_NE(none.reason.find("screeners eliminated all endpoint candidates"), std::string::npos) << none.reason;
}

TEST(RolloutScreenerTest, OneRevisionPerCycleForEveryProfile) {
  auto p = BuiltinRegistry().Create("disaggregatedset-rollout-screener", "r",
                                    Params(), PluginContext{});
  EXPECT_FALSE(p.ok()) << "parameters are required";
  auto cfg = ParseConfig(ScreenerConfig("sum"), "t.yaml");
  ASSERT_TRUE(cfg.ok());
  SeededRng rng(3);
  auto plugin = BuiltinRegistry().Create("disaggregatedset-rollout-screener", "r", cfg->plugins[0].parameters,
                                         PluginContext{&SteadyClock::Get(), &rng});
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  const Screener* screener = (*plugin)->AsScreener();
  ASSERT_NE(screener, nullptr);
  testing::CycleFixture c;
  c.endpoints = {Pod("10.0.0.1:8000", "A", "prefill"), Pod("10.0.0.2:8000", "A", "decode"),
                 Pod("10.0.1.1:8000", "B", "prefill"), Pod("10.0.1.2:8000", "B", "decode")};
  c.Finish();
  std::set<std::string> seen;
  for (int i = 0; i < 50; ++i) {
    std::vector<const Endpoint*> kept = screener->Screen(c.ctx, c.candidates);
    ASSERT_EQ(kept.size(), 2u) << "one revision's prefill and decode";
    EXPECT_EQ(kept[0]->labels.at(kRev), kept[1]->labels.at(kRev));
    seen.insert(kept[0]->labels.at(kRev));
  }
  EXPECT_EQ(seen.size(), 2u);
}

TEST(RolloutScreenerTest, StrictHeaderPinsTheRevisionAndEverySelectorStampsTheResponse) {
  auto s = MustBuild(ScreenerConfig("sum"));
  ASSERT_NE(s, nullptr);
  std::vector<Endpoint> eps = {Pod("10.0.0.1:8000", "A", "prefill"), Pod("10.0.0.2:8000", "A", "decode", "s7"),
                               Pod("10.0.1.1:8000", "B", "prefill"), Pod("10.0.1.2:8000", "B", "decode", "s9")};
  for (int i = 0; i < 20; ++i) {
    PickResult r = s->Pick(Chat(R"("hi")", {{"x-disagg-revision", "B"}}), eps);
    ASSERT_EQ(r.status, 200);
    EXPECT_TRUE(r.endpoints.front() == "10.0.1.1:8000" || r.endpoints.front() == "10.0.1.2:8000");
    std::map<std::string, std::string> hs(r.response_headers.begin(), r.response_headers.end());
    EXPECT_EQ(hs["x-disagg-revision"], "B");
    EXPECT_EQ(hs["x-disagg-slice"], r.endpoints.front() == "10.0.1.2:8000" ? "s9" : "s1");
  }
  PickResult none = s->Pick(Chat(R"("hi")", {{"x-disagg-revision", "Z"}}), eps);
  EXPECT_EQ(none.status, 503);
  const std::vector<PluginMetric> metrics = s->PluginMetrics();  // kept: m points into it
  const PluginMetric* m = FindMetric(metrics, "llm_d_epp_disaggregatedset_strict_header_no_match_total",
                                     {{"selector", "revision"}});
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->value, 1);
  // disabled: no gating, the strict header still screens.
  auto d = MustBuild(ScreenerConfig("disabled"));
  std::vector<Endpoint> only_b = {Pod("10.0.1.1:8000", "B", "prefill")};
  EXPECT_EQ(d->Pick(Chat(R"("hi")"), only_b).status, 200) << "no coverage check";
  EXPECT_EQ(d->Pick(Chat(R"("hi")", {{"x-disagg-revision", "A"}}), only_b).status, 503);
}

TEST(RolloutScreenerTest, ConfigErrorsNameTheParameter) {
  auto err = [](const std::string& params) {
    return std::string(Build(Config("- type: disaggregatedset-rollout-screener\n  parameters:\n" + params +
                                        "- type: random-picker\n",
                                    "  - pluginRef: random-picker\n"))
                           .status()
                           .message());
  };
  const std::string gating = "    revisionGating: {mode: sum, requireRoles: {values: [prefill, decode]}}\n";
  EXPECT_EQ(err("    scope: {labelSelector: app=set}\n" + gating), "");
  EXPECT_NE(err(gating).find("scope.labelSelector: is required"), std::string::npos) << err(gating);
  EXPECT_NE(err("    scope: {labelSelector: 'app in (a'}\n" + gating).find("scope.labelSelector"), std::string::npos);
  EXPECT_NE(err("    scope: {labelSelector: app=set}\n").find("revisionGating: is required"), std::string::npos);
  EXPECT_NE(err("    scope: {labelSelector: app=set}\n    revisionGating: {mode: sum}\n").find("requireRoles: is required"),
            std::string::npos);
  EXPECT_NE(err("    scope: {labelSelector: app=set}\n    revisionGating: {mode: newest}\n").find("must be sum, max-role or disabled"),
            std::string::npos);
  EXPECT_NE(err("    scope: {labelSelector: app=set}\n" + gating +
                "    headerSelectors: [{name: r, headerName: h, labelKey: k, mode: strict}, {name: r, headerName: g, labelKey: k, mode: prefer}]\n")
                .find("duplicate selector name 'r'"),
            std::string::npos);
  EXPECT_NE(err("    scope: {labelSelector: app=set}\n" + gating + "    headerSelectors: [{name: r, headerName: h, labelKey: k, mode: soft}]\n")
                .find("must be strict or prefer"),
            std::string::npos);
}

}  // namespace
}  // namespace epp
