// llm-d Router plugin types added for issue #36, each through a real configuration and the
// scheduler's cycle (trace = what `eppctl explain` prints): context-length-aware (tiers, filter
// mode), header-label-affinity-scorer, utilization-filter (model-server metrics and epp's own
// in-flight counts), session-id-producer and agent-identity (request attributes, the fairness id,
// session affinity reading them), and the multicluster variants. Expected numbers are worked out
// by hand from llm-d's rules, written beside each check.
#include <gtest/gtest.h>

#include <map>
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

std::string Config(const std::string& plugins, const std::string& profiles) {
  return "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n" + plugins + "schedulingProfiles:\n" +
         profiles;
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

// A completions request whose prompt is `tokens` token ids (prompt_tokens = tokens exactly).
InferenceRequest TokensReq(int tokens) {
  std::string ids;
  for (int i = 0; i < tokens; ++i) {
    if (i) ids.push_back(',');
    ids.append(std::to_string(i % 50000));
  }
  std::string body = R"({"model":"m","prompt":[)";
  body.append(ids).append("]}");
  auto r = ParseOpenAIRequest("/v1/completions", body);
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

InferenceRequest Req(std::vector<std::pair<std::string, std::string>> headers = {}, const std::string& prompt = "hello") {
  auto r = ParseOpenAIRequest("/v1/completions", R"({"model":"m","prompt":")" + prompt + R"("})");
  EXPECT_TRUE(r.ok()) << r.status();
  r->headers = std::move(headers);
  return *r;
}

PickResult Trace(const Scheduler& s, const InferenceRequest& r, std::span<const Endpoint> pool, bool record = false) {
  PickOptions o;
  o.trace = true;
  o.record = record;
  return s.Pick(r, pool, o);
}

// Raw score of `scorer` per endpoint in the primary profile's trace.
std::map<std::string, double> Raw(const PickResult& r, const std::string& scorer) {
  std::map<std::string, double> out;
  if (r.profiles.empty()) return out;
  for (const EndpointScoreTrace& e : r.profiles.front().scores)
    for (const ScorerTrace& s : e.scorers)
      if (s.plugin == scorer) out[e.endpoint] = s.raw;
  return out;
}

std::string Detail(const PickResult& r, const std::string& endpoint, const std::string& scorer) {
  for (const EndpointScoreTrace& e : r.profiles.front().scores)
    if (e.endpoint == endpoint)
      for (const ScorerTrace& s : e.scorers)
        if (s.plugin == scorer) return s.detail;
  return "?";
}

const FilterTrace* FilterOf(const PickResult& r, const std::string& name) {
  if (r.profiles.empty()) return nullptr;
  for (const FilterTrace& f : r.profiles.front().filters)
    if (f.plugin == name) return &f;
  return nullptr;
}

std::string CreateError(const std::string& plugin_yaml) {
  auto s = Build(Config(plugin_yaml, "- name: default\n  plugins: []\n"));
  return s.ok() ? "" : std::string(s.status().message());
}

// ---- context-length-aware

std::vector<Endpoint> ContextPool() {
  const std::string l = "llm-d.ai/context-length-range";
  return {EndpointBuilder("10.0.0.1:8000").Queue(0).Label(l, "0-2048"),
          EndpointBuilder("10.0.0.2:8000").Queue(0).Label(l, "2048-8192"),
          EndpointBuilder("10.0.0.3:8000").Queue(0),
          EndpointBuilder("10.0.0.4:8000").Queue(0).Label(l, "bad"),
          EndpointBuilder("10.0.0.5:8000").Queue(0).Label(l, "1000 - +1000"),
          EndpointBuilder("10.0.0.6:8000").Queue(0).Label(l, "0-500")};
}

TEST(ContextLengthAwareTest, ScoresByRangeTiers) {
  auto s = MustBuild(Config("- type: context-length-aware\n",
                            "- name: default\n  plugins:\n  - pluginRef: context-length-aware\n"));
  ASSERT_NE(s, nullptr);
  const std::vector<Endpoint> pool = ContextPool();
  PickResult r = Trace(*s, TokensReq(1000), pool);
  ASSERT_EQ(r.status, 200) << r.reason;
  std::map<std::string, double> raw = Raw(r, "context-length-aware");
  // 0-2048 holds 1000: 0.3 + 0.7 * (0.7 / (1 + 2048/10000) + 0.3 * (2048-1000)/2048).
  EXPECT_NEAR(raw["10.0.0.1:8000"], 0.8141674448041167, 1e-12);
  // 2048-8192 misses it by 1048 tokens: 0.3 / (1 + 1048/1000).
  EXPECT_NEAR(raw["10.0.0.2:8000"], 0.146484375, 1e-12);
  EXPECT_DOUBLE_EQ(raw["10.0.0.3:8000"], 0.5);  // no label: neutral
  EXPECT_DOUBLE_EQ(raw["10.0.0.4:8000"], 0.0);  // unreadable range
  EXPECT_DOUBLE_EQ(raw["10.0.0.5:8000"], 1.0);  // a one-length range holding it exactly (blanks and '+' allowed)
  EXPECT_NEAR(raw["10.0.0.6:8000"], 0.2, 1e-12);  // 0-500 misses it by 500: 0.3 / 1.5
  EXPECT_EQ(r.endpoints.front(), "10.0.0.5:8000");
  EXPECT_EQ(Detail(r, "10.0.0.1:8000", "context-length-aware"), "1000 tokens within 0-2048");
  EXPECT_EQ(Detail(r, "10.0.0.2:8000", "context-length-aware"), "1000 tokens outside 2048-8192");
  // No filtering by default: every endpoint stays.
  EXPECT_TRUE(r.profiles.front().filters.empty());
}

TEST(ContextLengthAwareTest, EnableFilteringMakesItAFilterToo) {
  auto s = MustBuild(Config("- type: context-length-aware\n  name: ctx\n  parameters:\n    enableFiltering: true\n"
                            "    label: llm-d.ai/context-length-range\n",
                            "- name: default\n  plugins:\n  - pluginRef: ctx\n    weight: 8\n"));
  ASSERT_NE(s, nullptr);
  const std::vector<Endpoint> pool = ContextPool();
  PickResult r = Trace(*s, TokensReq(3000), pool);
  ASSERT_EQ(r.status, 200) << r.reason;
  const FilterTrace* f = FilterOf(r, "ctx");
  ASSERT_NE(f, nullptr);
  // Kept: the range holding 3000 and the unlabelled endpoint; removed: the others, the
  // unreadable one included.
  EXPECT_EQ(f->kept, (std::vector<std::string>{"10.0.0.2:8000", "10.0.0.3:8000"}));
  ASSERT_EQ(f->removed.size(), 4u);
  EXPECT_EQ(f->removed[0].reason, "3000 tokens outside 0-2048");
  EXPECT_EQ(f->removed[1].reason, "unreadable llm-d.ai/context-length-range 'bad'");
  // And it scores the survivors: 2048-8192 holds 3000: 0.3 + 0.7 * (0.7 / 1.6144 + 0.3 * 5192/6144).
  std::map<std::string, double> raw = Raw(r, "ctx");
  EXPECT_NEAR(raw["10.0.0.2:8000"], 0.3 + 0.7 * (0.7 / 1.6144 + 0.3 * 5192.0 / 6144.0), 1e-12);
  EXPECT_DOUBLE_EQ(raw["10.0.0.3:8000"], 0.5);
  EXPECT_EQ(r.endpoints.front(), "10.0.0.2:8000");
  // The effective config says so.
  EXPECT_NE(s->EffectiveConfigYaml().find("enableFiltering: true"), std::string::npos);
}

TEST(ContextLengthAwareTest, RejectsAnEmptyLabel) {
  EXPECT_NE(CreateError("- type: context-length-aware\n  parameters:\n    label: ''\n").find("label: must not be empty"),
            std::string::npos);
}

// ---- header-label-affinity-scorer

TEST(HeaderLabelAffinityTest, OneForTheMatchingLabel) {
  auto s = MustBuild(Config("- type: header-label-affinity-scorer\n  name: zone\n  parameters:\n"
                            "    headerName: X-Preferred-Zone\n    labelKey: topology.kubernetes.io/zone\n",
                            "- name: default\n  plugins:\n  - pluginRef: zone\n    weight: 3\n"));
  ASSERT_NE(s, nullptr);
  const std::string l = "topology.kubernetes.io/zone";
  const std::vector<Endpoint> pool = {EndpointBuilder("10.0.0.1:8000").Label(l, "us-east"),
                                      EndpointBuilder("10.0.0.2:8000").Label(l, "us-west"),
                                      EndpointBuilder("10.0.0.3:8000")};
  PickResult r = Trace(*s, Req({{"x-preferred-zone", "us-west"}}), pool);
  ASSERT_EQ(r.status, 200) << r.reason;
  std::map<std::string, double> raw = Raw(r, "zone");
  EXPECT_EQ(raw, (std::map<std::string, double>{{"10.0.0.1:8000", 0}, {"10.0.0.2:8000", 1}, {"10.0.0.3:8000", 0}}));
  EXPECT_EQ(r.endpoints.front(), "10.0.0.2:8000");
  EXPECT_EQ(Detail(r, "10.0.0.2:8000", "zone"), "topology.kubernetes.io/zone=us-west matches x-preferred-zone");
  // No header, or a value no endpoint has: 0 everywhere (nobody is removed).
  for (const InferenceRequest& q : {Req(), Req({{"x-preferred-zone", "eu"}})}) {
    PickResult n = Trace(*s, q, pool);
    ASSERT_EQ(n.status, 200);
    for (const auto& [ep, v] : Raw(n, "zone")) EXPECT_EQ(v, 0) << ep;
  }
}

TEST(HeaderLabelAffinityTest, BothParametersRequired) {
  EXPECT_NE(CreateError("- type: header-label-affinity-scorer\n  parameters:\n    labelKey: k\n").find("headerName: is required"),
            std::string::npos);
  EXPECT_NE(CreateError("- type: header-label-affinity-scorer\n  parameters:\n    headerName: h\n").find("labelKey: is required"),
            std::string::npos);
  EXPECT_NE(CreateError("- type: header-label-affinity-scorer\n").find("headerName: is required"), std::string::npos);
}

// ---- utilization-filter

TEST(UtilizationFilterTest, KeepsEndpointsUnderEveryCap) {
  auto s = MustBuild(Config("- type: utilization-filter\n  name: cap\n  parameters:\n    conditions:\n"
                            "    - {metric: running-requests, maxValue: 40}\n"
                            "    - {metric: waiting-queue, maxValue: 0}\n"
                            "    - {metric: kv-cache-utilization, maxValue: 0.8}\n",
                            "- name: default\n  plugins:\n  - pluginRef: cap\n"));
  ASSERT_NE(s, nullptr);
  const std::vector<Endpoint> pool = {
      EndpointBuilder("10.0.0.1:8000").Running(40).Queue(0).Kv(0.8),    // every cap met exactly: kept
      EndpointBuilder("10.0.0.2:8000").Running(41).Queue(0).Kv(0.1),    // running over
      EndpointBuilder("10.0.0.3:8000").Running(1).Queue(1).Kv(0.9),     // queue and KV over
      EndpointBuilder("10.0.0.4:8000"),                                 // reports nothing: zeros, kept
  };
  PickResult r = Trace(*s, Req(), pool);
  ASSERT_EQ(r.status, 200) << r.reason;
  const FilterTrace* f = FilterOf(r, "cap");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->kept, (std::vector<std::string>{"10.0.0.1:8000", "10.0.0.4:8000"}));
  ASSERT_EQ(f->removed.size(), 2u);
  EXPECT_EQ(f->removed[0].reason, "running-requests 41 > 40");
  EXPECT_EQ(f->removed[1].reason, "waiting-queue 1 > 0, kv-cache-utilization 0.9 > 0.8");
}

TEST(UtilizationFilterTest, ActiveRequestsAreEppsInFlightCounts) {
  const std::string plugin = "- type: utilization-filter\n  name: cap\n  parameters:\n    conditions:\n"
                             "    - {metric: active-requests, maxValue: 0}\n";
  const std::string profile = "- name: default\n  plugins:\n  - pluginRef: cap\n";
  const std::vector<Endpoint> pool = {EndpointBuilder("10.0.0.1:8000"), EndpointBuilder("10.0.0.2:8000")};
  auto s = MustBuild(Config(plugin, profile));
  ASSERT_NE(s, nullptr);
  // Two recorded picks fill both endpoints with one request each; each pick avoids the busy one.
  PickResult a = Trace(*s, Req(), pool, true), b = Trace(*s, Req(), pool, true);
  ASSERT_EQ(a.status, 200);
  ASSERT_EQ(b.status, 200);
  EXPECT_NE(a.endpoints.front(), b.endpoints.front());
  EXPECT_EQ(FilterOf(b, "cap")->removed.at(0).reason, "active-requests 1 > 0");
  // Now both are over the cap: a saturated pool (429), not an empty one.
  PickResult c = Trace(*s, Req(), pool);
  EXPECT_EQ(c.status, 429) << c.reason;
  // Released: the endpoint is eligible again.
  s->Release(a);
  PickResult d = Trace(*s, Req(), pool);
  ASSERT_EQ(d.status, 200);
  EXPECT_EQ(d.endpoints.front(), a.endpoints.front());

  // fallbackOnEmpty: all over the cap keeps them all.
  auto f = MustBuild(Config(plugin + "    fallbackOnEmpty: true\n", profile));
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(Trace(*f, Req(), pool, true).status, 200);
  ASSERT_EQ(Trace(*f, Req(), pool, true).status, 200);
  PickResult g = Trace(*f, Req(), pool);
  EXPECT_EQ(g.status, 200);
  EXPECT_EQ(FilterOf(g, "cap")->kept.size(), 2u);
}

TEST(UtilizationFilterTest, ParameterErrorsNameTheCondition) {
  const std::string head = "- type: utilization-filter\n  parameters:\n    conditions:\n    - {metric: waiting-queue, maxValue: 1}\n";
  EXPECT_NE(CreateError(head + "    - {metric: gpu, maxValue: 1}\n").find("conditions[1].metric: must be one of"), std::string::npos);
  EXPECT_NE(CreateError(head + "    - {metric: kv-cache-utilization, maxValue: 1.5}\n").find("conditions[1].maxValue: kv-cache-utilization is a fraction"),
            std::string::npos);
  EXPECT_NE(CreateError(head + "    - {metric: waiting-queue, maxValue: -1}\n").find("conditions[1].maxValue: must be >= 0"),
            std::string::npos);
  EXPECT_NE(CreateError(head + "    - {metric: waiting-queue}\n").find("conditions[1].maxValue: required"), std::string::npos);
  EXPECT_NE(CreateError("- type: utilization-filter\n").find("conditions: at least one condition is required"),
            std::string::npos);
}

// ---- session-id-producer, agent-identity and what reads them

TEST(SessionIdProducerTest, SessionAffinityFilterPinsByCookie) {
  auto s = MustBuild(Config(
      "- type: session-id-producer\n  parameters:\n    cookieName: llm-d-session\n"
      "- type: session-affinity-filter\n  name: pin\n  parameters:\n    strategy: session_id\n    sessionIdConfig:\n"
      "      sources:\n      - {header: x-session-id}\n      - {attribute: SessionIDDataKey, producer: session-id-producer}\n"
      "- type: queue-scorer\n",
      "- name: default\n  plugins:\n  - pluginRef: pin\n  - pluginRef: queue-scorer\n"));
  ASSERT_NE(s, nullptr);
  std::vector<Endpoint> pool = {testing::Ep("10.0.0.1:8000", 0), testing::Ep("10.0.0.2:8000", 5)};
  const InferenceRequest first = Req({{"cookie", "theme=dark; llm-d-session=abc ; x=1"}});
  PickResult a = Trace(*s, first, pool, true);
  ASSERT_EQ(a.status, 200);
  EXPECT_EQ(a.endpoints.front(), "10.0.0.1:8000");  // unbound: the shorter queue
  // The queues turn around; the session stays where it was bound.
  pool[0].metrics.waiting_queue_size = 9;
  PickResult b = Trace(*s, first, pool, true);
  ASSERT_EQ(b.status, 200);
  EXPECT_EQ(FilterOf(b, "pin")->kept, std::vector<std::string>{"10.0.0.1:8000"});
  // Another cookie value, or none, is no preference: the shorter queue wins.
  for (const InferenceRequest& q : {Req({{"cookie", "llm-d-session=other"}}), Req({{"cookie", "llm-d-sessionx=abc"}}), Req()})
    EXPECT_EQ(Trace(*s, q, pool).endpoints.front(), "10.0.0.2:8000");
  // The header source comes first: it names another session.
  EXPECT_EQ(Trace(*s, Req({{"x-session-id", "h"}, {"cookie", "llm-d-session=abc"}}), pool).endpoints.front(), "10.0.0.2:8000");
}

TEST(SessionIdProducerTest, HeaderSourceAndParameters) {
  auto s = MustBuild(Config(
      "- type: session-id-producer\n  name: sid\n  parameters:\n    headerName: X-Conversation\n"
      "- type: session-affinity-scorer\n  name: sticky\n  parameters:\n    strategy: session_id\n    sessionIdConfig:\n"
      "      sources:\n      - {attribute: SessionIDDataKey, producer: sid}\n"
      "- type: queue-scorer\n",
      "- name: default\n  plugins:\n  - pluginRef: sticky\n    weight: 10\n  - pluginRef: queue-scorer\n"));
  ASSERT_NE(s, nullptr);
  std::vector<Endpoint> pool = {testing::Ep("10.0.0.1:8000", 0), testing::Ep("10.0.0.2:8000", 5)};
  const InferenceRequest q = Req({{"x-conversation", "  c-42 "}});
  ASSERT_EQ(Trace(*s, q, pool, true).endpoints.front(), "10.0.0.1:8000");
  pool[0].metrics.waiting_queue_size = 9;
  PickResult b = Trace(*s, q, pool);
  EXPECT_EQ(Raw(b, "sticky"), (std::map<std::string, double>{{"10.0.0.1:8000", 1}, {"10.0.0.2:8000", 0}}));
  EXPECT_EQ(b.endpoints.front(), "10.0.0.1:8000");
  const std::string eff = s->EffectiveConfigYaml();
  EXPECT_NE(eff.find("headerName: x-conversation"), std::string::npos) << eff;
  EXPECT_NE(eff.find("producer: sid"), std::string::npos) << eff;

  EXPECT_NE(CreateError("- type: session-id-producer\n").find("exactly one of headerName or cookieName must be set"),
            std::string::npos);
  EXPECT_NE(CreateError("- type: session-id-producer\n  parameters:\n    headerName: a\n    cookieName: b\n").find("not both"),
            std::string::npos);
}

TEST(AgentIdentityTest, FairnessIdFromTheAgentsSessionHeader) {
  auto s = MustBuild(Config("- type: agent-identity\n", "- name: default\n  plugins: []\n"));
  ASSERT_NE(s, nullptr);
  const std::vector<Endpoint> pool = {testing::Ep("10.0.0.1:8000")};
  struct Case {
    std::vector<std::pair<std::string, std::string>> headers;
    std::string fairness;  // set by the caller from x-llm-d-inference-fairness-id
    std::string want;
  };
  const Case cases[] = {
      {{{"x-claude-code-session-id", "cc-1"}, {"session-id", "codex"}}, "", "cc-1"},  // the first in llm-d's order
      {{{"session_id", "legacy"}, {"x-session-affinity", "oc-7"}}, "", "oc-7"},       // OpenCode before Codex
      {{{"session_id", "legacy"}}, "", "legacy"},
      {{{"session-id", ""}, {"session_id", "u"}}, "", "u"},                            // empty values do not count
      {{{"x-claude-code-session-id", "cc-1"}}, "tenant-a", "tenant-a"},                // an explicit id wins
      {{}, "", ""},
  };
  for (const Case& c : cases) {
    InferenceRequest r = Req(c.headers);
    r.fairness_id = c.fairness;
    EXPECT_EQ(s->Pick(r, pool).fairness_id, c.want);  // Pick derives it by itself
    s->PrepareRequest(r);                              // and a caller before flow control too
    EXPECT_EQ(r.fairness_id, c.want);
  }
  // Without agent-identity nothing is derived.
  auto plain = MustBuild(Config("- type: queue-scorer\n", "- name: default\n  plugins: []\n"));
  InferenceRequest r = Req({{"x-claude-code-session-id", "cc-1"}});
  plain->PrepareRequest(r);
  EXPECT_EQ(r.fairness_id, "");
  EXPECT_EQ(plain->Pick(r, pool).fairness_id, "");
}

TEST(AgentIdentityTest, AdditionalHeadersFirstAndSessionAffinityReadsIt) {
  auto s = MustBuild(Config(
      "- type: agent-identity\n  parameters:\n    additionalSessionHeaders: [X-My-Agent]\n"
      "- type: session-affinity-filter\n  name: pin\n  parameters:\n    strategy: session_id\n    sessionIdConfig:\n"
      "      sources:\n      - {attribute: agent-identity}\n"
      "- type: queue-scorer\n",
      "- name: default\n  plugins:\n  - pluginRef: pin\n  - pluginRef: queue-scorer\n"));
  ASSERT_NE(s, nullptr);
  std::vector<Endpoint> pool = {testing::Ep("10.0.0.1:8000", 0), testing::Ep("10.0.0.2:8000", 5)};
  const InferenceRequest q = Req({{"x-claude-code-session-id", "cc"}, {"x-my-agent", "mine"}});
  PickResult a = Trace(*s, q, pool, true);
  EXPECT_EQ(a.fairness_id, "mine");
  ASSERT_EQ(a.endpoints.front(), "10.0.0.1:8000");
  pool[0].metrics.waiting_queue_size = 9;
  EXPECT_EQ(FilterOf(Trace(*s, q, pool), "pin")->kept, std::vector<std::string>{"10.0.0.1:8000"});
  // The same agent session through its built-in header alone is another session id ("cc").
  EXPECT_EQ(Trace(*s, Req({{"x-claude-code-session-id", "cc"}}), pool).endpoints.front(), "10.0.0.2:8000");
  EXPECT_NE(s->EffectiveConfigYaml().find("x-my-agent"), std::string::npos);
}

// ---- multicluster variants

void PoolAttr(Endpoint& e, const std::string& key, double v) {
  e.attributes.values.push_back(EndpointAttributes::Value{key, "multicluster-metrics-extractor", "mc", v});
}

TEST(MultiClusterTest, QueueAndKvScorersReadThePoolAggregates) {
  auto s = MustBuild(Config("- type: multicluster-metrics-extractor\n"
                            "- type: multicluster-queue-scorer\n- type: multicluster-kv-cache-utilization-scorer\n",
                            "- name: default\n  plugins:\n  - pluginRef: multicluster-queue-scorer\n"
                            "  - pluginRef: multicluster-kv-cache-utilization-scorer\n"));
  ASSERT_NE(s, nullptr);
  // Cluster endpoints carry no per-server metrics, only the pool's aggregates.
  std::vector<Endpoint> pool = {EndpointBuilder("gw-a:443"), EndpointBuilder("gw-b:443"), EndpointBuilder("gw-c:443"),
                                EndpointBuilder("gw-d:443")};
  PoolAttr(pool[0], "llm-d.ai/multicluster-queue-size", 2);
  PoolAttr(pool[1], "llm-d.ai/multicluster-queue-size", 6);
  PoolAttr(pool[2], "llm-d.ai/multicluster-queue-size", 10);
  PoolAttr(pool[0], "llm-d.ai/multicluster-kv-cache-utilization", 0.75);
  PoolAttr(pool[1], "llm-d.ai/multicluster-kv-cache-utilization", 0);
  PickResult r = Trace(*s, Req(), pool);
  ASSERT_EQ(r.status, 200) << r.reason;
  // Queue: min-max over the pools reporting it, (10 - q) / (10 - 2); none reported: 0.
  EXPECT_EQ(Raw(r, "multicluster-queue-scorer"),
            (std::map<std::string, double>{{"gw-a:443", 1}, {"gw-b:443", 0.5}, {"gw-c:443", 0}, {"gw-d:443", 0}}));
  // KV: 1 - utilization; none reported: 0.
  EXPECT_EQ(Raw(r, "multicluster-kv-cache-utilization-scorer"),
            (std::map<std::string, double>{{"gw-a:443", 0.25}, {"gw-b:443", 1}, {"gw-c:443", 0}, {"gw-d:443", 0}}));
  EXPECT_EQ(r.endpoints.front(), "gw-b:443");  // 0.5 + 1 against 1 + 0.25
}

TEST(MultiClusterTest, QueueScorerEqualPoolsScoreOne) {
  auto s = MustBuild(Config("- type: multicluster-metrics-extractor\n- type: multicluster-queue-scorer\n",
                            "- name: default\n  plugins:\n  - pluginRef: multicluster-queue-scorer\n"));
  ASSERT_NE(s, nullptr);
  std::vector<Endpoint> pool = {EndpointBuilder("gw-a:443"), EndpointBuilder("gw-b:443")};
  PoolAttr(pool[0], "llm-d.ai/multicluster-queue-size", 3);
  PoolAttr(pool[1], "llm-d.ai/multicluster-queue-size", 3);
  EXPECT_EQ(Raw(Trace(*s, Req(), pool), "multicluster-queue-scorer"),
            (std::map<std::string, double>{{"gw-a:443", 1}, {"gw-b:443", 1}}));
}

TEST(MultiClusterTest, PoolScorersWithoutTheExtractorFailToLoad) {
  for (const std::string type : {"multicluster-queue-scorer", "multicluster-kv-cache-utilization-scorer"}) {
    auto s = Build(Config("- type: " + type + "\n", "- name: default\n  plugins:\n  - pluginRef: " + type + "\n"));
    ASSERT_FALSE(s.ok()) << type;
    EXPECT_NE(std::string(s.status().message()).find("which only a multicluster-metrics-extractor produces"), std::string::npos)
        << s.status();
  }
}

TEST(MultiClusterTest, PrefixProducerAndScorerRouteARepeatedPrefixToItsCluster) {
  auto s = MustBuild(Config("- type: multicluster-approx-prefix-cache-producer\n  parameters:\n    autoTune: false\n"
                            "    blockSizeTokens: 4\n"
                            "- type: multicluster-prefix-cache-scorer\n",
                            "- name: default\n  plugins:\n  - pluginRef: multicluster-prefix-cache-scorer\n"));
  ASSERT_NE(s, nullptr);
  const std::vector<Endpoint> pool = {EndpointBuilder("gw-a:443"), EndpointBuilder("gw-b:443")};
  const std::string prompt(200, 'x');
  PickResult first = Trace(*s, Req({}, prompt), pool, true);
  ASSERT_EQ(first.status, 200);
  PickResult again = Trace(*s, Req({}, prompt), pool);
  ASSERT_EQ(again.status, 200);
  EXPECT_EQ(again.endpoints.front(), first.endpoints.front());
  EXPECT_EQ(Raw(again, "multicluster-prefix-cache-scorer")[first.endpoints.front()], 1.0);
  // Its producer is the one prefix producer in use: no default approx-prefix-cache-producer added.
  const std::string eff = s->EffectiveConfigYaml();
  EXPECT_EQ(eff.find("type: approx-prefix-cache-producer"), std::string::npos) << eff;
}

TEST(MultiClusterTest, SessionAffinityFilterPinsToTheCluster) {
  auto s = MustBuild(Config("- type: multicluster-session-affinity-filter\n  name: pin\n",
                            "- name: default\n  plugins:\n  - pluginRef: pin\n"));
  ASSERT_NE(s, nullptr);
  const std::vector<Endpoint> pool = {EndpointBuilder("gw-a:443"), EndpointBuilder("gw-b:443")};
  // The token of the cluster that served the session: base64("gw-b:443").
  PickResult r = Trace(*s, Req({{"x-session-token", "Z3ctYjo0NDM="}}), pool);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(FilterOf(r, "pin")->kept, std::vector<std::string>{"gw-b:443"});
  ASSERT_FALSE(r.response_headers.empty());
  EXPECT_EQ(r.response_headers.front(), (std::pair<std::string, std::string>{"x-session-token", "Z3ctYjo0NDM="}));
}

}  // namespace
}  // namespace epp
