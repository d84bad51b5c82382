// The flow-control policy plugins (plugins/flowcontrol/) on hand-built queues, through the
// interfaces the flow-control layer will call (flowcontrol/policies.h), and the
// concurrency-detector as a saturation detector and filter, alone and in a real scheduler.
// Expected values are computed by hand from the formulas in docs/flow-control.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "epp/config.h"
#include "epp/registry.h"
#include "epp/request.h"
#include "epp/scheduler.h"
#include "flowcontrol/policies.h"
#include "plugins/plugins.h"
#include "testing/epp_testing.h"

namespace epp {
namespace {

using flowcontrol::EvictionKey;
using flowcontrol::FairnessState;
using flowcontrol::FlowQueue;
using flowcontrol::InflightItem;
using flowcontrol::kNoDeadline;
using flowcontrol::OrderingKey;
using flowcontrol::OrderingPolicy;
using flowcontrol::QueuedItem;
using plugins::FlowControlPoliciesOf;

constexpr int64_t kSec = 1'000'000;

std::unique_ptr<Plugin> Make(const std::string& type, const Params& params = Params(), PluginContext ctx = {}) {
  auto p = BuiltinRegistry().Create(type, type, params, ctx);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

absl::Status MakeError(const std::string& type, const Params& params) {
  return BuiltinRegistry().Create(type, type, params, PluginContext{}).status();
}

Params Map(std::vector<std::pair<std::string, Params>> entries) {
  Params p = Params::Map();
  for (auto& [k, v] : entries) p.Set(k, std::move(v));
  return p;
}

// A flow's queue as the layer will keep it: items ordered by the band's ordering key.
class TestQueue : public FlowQueue {
 public:
  TestQueue(std::string id, const OrderingPolicy& ordering) : id_(std::move(id)), ordering_(ordering) {}
  std::string_view flow_id() const override { return id_; }
  size_t size() const override { return items_.size(); }
  uint64_t bytes() const override {
    uint64_t b = 0;
    for (const auto& [k, item] : items_) b += item.bytes;
    return b;
  }
  const QueuedItem& head() const override { return items_.begin()->second; }
  OrderingKey head_key() const override { return items_.begin()->first; }

  void Push(QueuedItem item) {
    item.flow_id = id_;
    items_.emplace(ordering_.Key(item), item);
  }
  QueuedItem Pop() {
    QueuedItem item = items_.begin()->second;
    items_.erase(items_.begin());
    return item;
  }

 private:
  std::string id_;
  const OrderingPolicy& ordering_;
  std::map<OrderingKey, QueuedItem> items_;
};

// A band: queues by flow id, the fairness state told of every head change.
struct Band {
  Band(const Plugin& fairness, const Plugin& ordering)
      : ordering(*FlowControlPoliciesOf(ordering).ordering), state(FlowControlPoliciesOf(fairness).fairness->NewBandState(0)) {}

  void Add(const std::string& flow, QueuedItem item) {
    auto it = queues.find(flow);
    if (it == queues.end()) it = queues.emplace(flow, std::make_unique<TestQueue>(flow, ordering)).first;
    item.seq = ++seq;
    it->second->Push(item);
    state->HeadChanged(*it->second);
  }
  // Picks a flow and dispatches its head; "" when the band is empty.
  std::string Dispatch(int64_t now_us = 0, QueuedItem* out = nullptr) {
    const FlowQueue* q = state->Pick(now_us);
    if (q == nullptr) return "";
    TestQueue& tq = *queues.at(std::string(q->flow_id()));
    QueuedItem item = tq.Pop();
    if (out) *out = item;
    state->HeadChanged(tq);
    return std::string(q->flow_id());
  }

  const OrderingPolicy& ordering;
  std::unique_ptr<FairnessState> state;
  std::map<std::string, std::unique_ptr<TestQueue>> queues;
  uint64_t seq = 0;
};

QueuedItem At(int64_t enqueue_us, int64_t ttl_us = 0) {
  QueuedItem i;
  i.enqueue_us = enqueue_us;
  i.received_us = enqueue_us;
  i.ttl_us = ttl_us;
  return i;
}

// ---- Kinds and registration ----

TEST(FlowControlPolicies, EachTypeImplementsItsInterfaceOnly) {
  struct Want {
    std::string type;
    int kind;  // 0 fairness, 1 ordering, 2 usage limit, 3 eviction filter, 4 eviction order
  };
  const Want wants[] = {{"global-strict-fairness-policy", 0}, {"round-robin-fairness-policy", 0},
                        {"program-aware-fairness", 0},        {"fcfs-ordering-policy", 1},
                        {"edf-ordering-policy", 1},           {"slo-deadline-ordering-policy", 1},
                        {"static-usage-limit-policy", 2},     {"soft-reflective-ceiling-policy", 2},
                        {"sheddable-eviction-filter", 3},     {"priority-then-time-eviction-order-policy", 4}};
  for (const Want& w : wants) {
    auto p = Make(w.type);
    ASSERT_NE(p, nullptr) << w.type;
    const auto f = FlowControlPoliciesOf(*p);
    const bool has[] = {f.fairness != nullptr, f.ordering != nullptr, f.usage_limit != nullptr,
                        f.eviction_filter != nullptr, f.eviction_order != nullptr};
    for (int k = 0; k < 5; ++k) EXPECT_EQ(has[k], k == w.kind) << w.type << " kind " << k;
    // Not scheduling plugins.
    EXPECT_EQ(p->AsFilter(), nullptr) << w.type;
    EXPECT_EQ(p->AsScorer(), nullptr) << w.type;
  }
  auto holdback = Make("priority-holdback-policy", Map({{"minCeiling", Params::Number(0.4)}}));
  ASSERT_NE(holdback, nullptr);
  EXPECT_NE(FlowControlPoliciesOf(*holdback).usage_limit, nullptr);
  // A scorer is no policy.
  auto scorer = Make("queue-scorer");
  const auto none = FlowControlPoliciesOf(*scorer);
  EXPECT_TRUE(!none.fairness && !none.ordering && !none.usage_limit && !none.eviction_filter && !none.eviction_order);
}

TEST(FlowControlPolicies, ParameterlessTypesRejectParameters) {
  for (const char* type : {"global-strict-fairness-policy", "round-robin-fairness-policy", "fcfs-ordering-policy",
                           "edf-ordering-policy", "slo-deadline-ordering-policy", "soft-reflective-ceiling-policy",
                           "sheddable-eviction-filter", "priority-then-time-eviction-order-policy"}) {
    const absl::Status s = MakeError(type, Map({{"x", Params::Number(1)}}));
    EXPECT_FALSE(s.ok()) << type;
    EXPECT_NE(s.message().find("unknown parameter 'x'"), std::string::npos) << s;
  }
}

// llm-d's flowControl section with every policy named loads, and each named plugin is found with
// the interface its reference expects.
TEST(FlowControlPolicies, ConfigWithAFlowControlSectionBuilds) {
  const std::string yaml = R"(apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
featureGates: ["flowControl"]
plugins:
- type: queue-scorer
- type: concurrency-detector
  parameters: {concurrencyMode: hybrid, maxConcurrency: 64}
- type: program-aware-fairness
  parameters: {lasHalfLifeSeconds: 30}
- type: round-robin-fairness-policy
- type: edf-ordering-policy
- type: priority-holdback-policy
  name: holdback
  parameters: {minCeiling: 0.4, maxCeiling: 0.9}
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
flowControl:
  defaultRequestTTL: 30s
  usageLimitPolicyPluginRef: holdback
  saturationDetector:
    pluginRef: concurrency-detector
  defaultPriorityBand:
    fairnessPolicyRef: program-aware-fairness
  priorityBands:
  - priority: 10
    fairnessPolicyRef: round-robin-fairness-policy
    orderingPolicyRef: edf-ordering-policy
)";
  auto cfg = ParseConfig(yaml, "t.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  ManualClock clock(testing::kNowUs);
  SeededRng rng(1);
  auto sched = BuildScheduler(*cfg, BuiltinRegistry(), PluginContext{&clock, &rng});
  ASSERT_TRUE(sched.ok()) << sched.status();
  const std::string eff = (*sched)->EffectiveConfigYaml();
  EXPECT_NE(eff.find("type: program-aware-fairness"), std::string::npos) << eff;
  EXPECT_NE(eff.find("saturationDetector:\n  pluginRef: concurrency-detector"), std::string::npos) << eff;
  EXPECT_NE(eff.find("minCeiling: 0.4"), std::string::npos) << eff;
  EXPECT_NE(eff.find("concurrencyMode: hybrid"), std::string::npos) << eff;
}

// ---- Ordering ----

TEST(FlowControlOrdering, FcfsByEnqueueTime) {
  auto fcfs = Make("fcfs-ordering-policy");
  const OrderingPolicy& o = *FlowControlPoliciesOf(*fcfs).ordering;
  QueuedItem a = At(5), b = At(3), c = At(5);
  a.seq = 1, b.seq = 2, c.seq = 3;
  b.ttl_us = 1;  // TTL plays no part
  EXPECT_LT(o.Key(b), o.Key(a));
  EXPECT_LT(o.Key(a), o.Key(c));  // same time: arrival order
}

TEST(FlowControlOrdering, EdfByDeadlineThenEnqueueNoTtlLast) {
  auto edf = Make("edf-ordering-policy");
  const OrderingPolicy& o = *FlowControlPoliciesOf(*edf).ordering;
  const QueuedItem early_long = At(0, 10 * kSec);  // deadline 10 s
  const QueuedItem late_short = At(2 * kSec, 3 * kSec);  // deadline 5 s
  const QueuedItem no_ttl = At(-kSec);
  const QueuedItem same_deadline = At(1 * kSec, 9 * kSec);  // deadline 10 s, enqueued later
  EXPECT_EQ(o.Key(late_short).primary, 5 * kSec);
  EXPECT_LT(o.Key(late_short), o.Key(early_long));
  EXPECT_LT(o.Key(early_long), o.Key(same_deadline));
  EXPECT_EQ(o.Key(no_ttl).primary, kNoDeadline);
  EXPECT_LT(o.Key(same_deadline), o.Key(no_ttl));
  // Both without TTL: earlier enqueue first.
  EXPECT_LT(o.Key(At(-kSec)), o.Key(At(0)));
}

TEST(FlowControlOrdering, SloTtftHeaderParsing) {
  InferenceRequest r;
  EXPECT_EQ(flowcontrol::SloTtftMs(r), -1);
  r.headers = {{"x-llm-d-slo-ttft-ms", " 250 "}};
  EXPECT_EQ(flowcontrol::SloTtftMs(r), 250);
  r.headers = {{"x-slo-ttft-ms", "+40"}};  // the deprecated spelling, Go's sign
  EXPECT_EQ(flowcontrol::SloTtftMs(r), 40);
  r.headers = {{"x-slo-ttft-ms", "40"}, {"x-llm-d-slo-ttft-ms", "70"}};  // the current one wins
  EXPECT_EQ(flowcontrol::SloTtftMs(r), 70);
  r.headers = {{"x-slo-ttft-ms", "40"}, {"x-llm-d-slo-ttft-ms", ""}};  // present but empty: none
  EXPECT_EQ(flowcontrol::SloTtftMs(r), -1);
  for (const char* bad : {"-5", "1.5", "abc", "12ms", "9223372036855", "+-1"}) {
    r.headers = {{"x-llm-d-slo-ttft-ms", bad}};
    EXPECT_EQ(flowcontrol::SloTtftMs(r), -1) << bad;
  }
  r.headers = {{"x-llm-d-slo-ttft-ms", "9223372036854"}};  // the largest that fits in nanoseconds
  EXPECT_EQ(flowcontrol::SloTtftMs(r), 9223372036854);
  r.headers = {{"x-llm-d-slo-ttft-ms", "-0"}};
  EXPECT_EQ(flowcontrol::SloTtftMs(r), 0);
}

TEST(FlowControlOrdering, SloDeadlineByReceivePlusSlo) {
  auto slo = Make("slo-deadline-ordering-policy");
  const OrderingPolicy& o = *FlowControlPoliciesOf(*slo).ordering;
  QueuedItem a, b, none, none_earlier;
  a.received_us = 0, a.enqueue_us = 9 * kSec, a.slo_ttft_ms = 500;  // deadline 0.5 s
  b.received_us = 100'000, b.enqueue_us = 0, b.slo_ttft_ms = 300;   // deadline 0.4 s
  none.received_us = 0;
  none_earlier.received_us = -1;
  EXPECT_EQ(o.Key(a).primary, 500'000);
  EXPECT_EQ(o.Key(b).primary, 400'000);
  EXPECT_LT(o.Key(b), o.Key(a));  // enqueue time plays no part
  EXPECT_LT(o.Key(a), o.Key(none));
  EXPECT_LT(o.Key(none_earlier), o.Key(none));  // both without SLO: receive order
  // Same deadline: earlier receive first.
  QueuedItem c;
  c.received_us = 200'000, c.slo_ttft_ms = 200;  // deadline 0.4 s like b
  EXPECT_LT(o.Key(b), o.Key(c));
}

// ---- Fairness ----

TEST(FlowControlFairness, RoundRobinCyclesThroughNonEmptyFlowsInIdOrder) {
  auto rr = Make("round-robin-fairness-policy");
  auto fcfs = Make("fcfs-ordering-policy");
  Band band(*rr, *fcfs);
  EXPECT_EQ(band.Dispatch(), "");
  for (int i = 0; i < 3; ++i) band.Add("b", At(i));
  band.Add("a", At(10));
  band.Add("c", At(20));
  band.Add("c", At(21));
  // a, b, c in turn; a is then empty and skipped.
  std::vector<std::string> order;
  for (std::string f = band.Dispatch(); !f.empty(); f = band.Dispatch()) order.push_back(f);
  EXPECT_EQ(order, (std::vector<std::string>{"a", "b", "c", "b", "c", "b"}));
}

TEST(FlowControlFairness, RoundRobinResumesAfterTheLastFlowServed) {
  auto rr = Make("round-robin-fairness-policy");
  auto fcfs = Make("fcfs-ordering-policy");
  Band band(*rr, *fcfs);
  band.Add("a", At(0));
  band.Add("c", At(1));
  EXPECT_EQ(band.Dispatch(), "a");
  // A flow arriving between the last served and the next keeps its turn.
  band.Add("b", At(2));
  band.Add("a", At(3));
  EXPECT_EQ(band.Dispatch(), "b");
  EXPECT_EQ(band.Dispatch(), "c");
  EXPECT_EQ(band.Dispatch(), "a");
  EXPECT_EQ(band.Dispatch(), "");
}

TEST(FlowControlFairness, GlobalStrictPicksTheBandsBestHead) {
  auto gs = Make("global-strict-fairness-policy");
  auto edf = Make("edf-ordering-policy");
  Band band(*gs, *edf);
  band.Add("tenant-a", At(0, 10 * kSec));       // deadline 10
  band.Add("tenant-a", At(1 * kSec, 2 * kSec));  // deadline 3: a's head
  band.Add("tenant-b", At(0, 5 * kSec));         // deadline 5
  band.Add("tenant-c", At(0));                   // none
  std::vector<std::string> order;
  std::vector<int64_t> deadlines;
  QueuedItem item;
  for (std::string f = band.Dispatch(0, &item); !f.empty(); f = band.Dispatch(0, &item)) {
    order.push_back(f);
    deadlines.push_back(item.ttl_us > 0 ? item.enqueue_us + item.ttl_us : -1);
  }
  // One logical queue by deadline: 3 (a), 5 (b), 10 (a), then c without one.
  EXPECT_EQ(order, (std::vector<std::string>{"tenant-a", "tenant-b", "tenant-a", "tenant-c"}));
  EXPECT_EQ(deadlines, (std::vector<int64_t>{3 * kSec, 5 * kSec, 10 * kSec, -1}));
}

TEST(FlowControlFairness, GlobalStrictFollowsAHeadThatImproves) {
  auto gs = Make("global-strict-fairness-policy");
  auto fcfs = Make("fcfs-ordering-policy");
  Band band(*gs, *fcfs);
  band.Add("a", At(10));
  band.Add("b", At(20));
  band.Add("b", At(5));  // b's new head is now the oldest item of the band
  EXPECT_EQ(band.Dispatch(), "b");
  EXPECT_EQ(band.Dispatch(), "a");
  EXPECT_EQ(band.Dispatch(), "b");
  EXPECT_EQ(band.Dispatch(), "");
}

// ---- program-aware-fairness ----

const plugins::ProgramAwareStats& Stats(const Plugin& p) { return dynamic_cast<const plugins::ProgramAwareStats&>(p); }

ResponseUsage Usage(double in, double out) {
  ResponseUsage u;
  u.prompt_tokens = in;
  u.completion_tokens = out;
  return u;
}

TEST(FlowControlProgramAware, Defaults) {
  auto p = Make("program-aware-fairness");
  const Params e = p->EffectiveParams();
  EXPECT_EQ(e.Find("strategy")->text(), "las");
  EXPECT_DOUBLE_EQ(*e.Find("lasWeightService")->AsDouble(), 0.8);
  EXPECT_DOUBLE_EQ(*e.Find("lasWeightHeadWait")->AsDouble(), 0.2);
  EXPECT_DOUBLE_EQ(*e.Find("lasHalfLifeSeconds")->AsDouble(), 60);
  EXPECT_DOUBLE_EQ(*e.Find("evictionTtlSeconds")->AsDouble(), 3600);
  EXPECT_DOUBLE_EQ(*e.Find("evictionSweepSeconds")->AsDouble(), 300);
}

TEST(FlowControlProgramAware, ServiceIsInputPlusTwiceOutputHalvedEveryHalfLife) {
  auto p = Make("program-aware-fairness");
  const auto& fair = *FlowControlPoliciesOf(*p).fairness;
  const auto& stats = Stats(*p);
  fair.Completed("agent-1", Usage(100, 50), 0);  // 100 + 2 x 50 = 200
  EXPECT_DOUBLE_EQ(stats.AttainedService("agent-1", 0), 200);
  EXPECT_DOUBLE_EQ(stats.AttainedService("agent-1", 60 * kSec), 100);  // one half-life
  // 30 s later: 100 x 2^-0.5, then +10 input tokens.
  fair.Completed("agent-1", Usage(10, 0), 90 * kSec);
  EXPECT_NEAR(stats.AttainedService("agent-1", 90 * kSec), 100 / std::sqrt(2.0) + 10, 1e-9);
  // 120 s more: two half-lives.
  EXPECT_NEAR(stats.AttainedService("agent-1", 210 * kSec), (100 / std::sqrt(2.0) + 10) / 4, 1e-9);
  EXPECT_DOUBLE_EQ(stats.AttainedService("unknown", 0), 0);
}

TEST(FlowControlProgramAware, HalfLifeZeroNeverDecays) {
  auto p = Make("program-aware-fairness", Map({{"lasHalfLifeSeconds", Params::Number(0)}}));
  FlowControlPoliciesOf(*p).fairness->Completed("x", Usage(3, 4), 0);
  EXPECT_DOUBLE_EQ(Stats(*p).AttainedService("x", 1000 * kSec), 11);
}

TEST(FlowControlProgramAware, LeastAttainedServiceWinsThenTheOldestHead) {
  auto p = Make("program-aware-fairness");
  auto fcfs = Make("fcfs-ordering-policy");
  const auto& fair = *FlowControlPoliciesOf(*p).fairness;
  Band band(*p, *fcfs);
  const int64_t now = 100 * kSec;
  // Cold start: equal (zero) service, so the head wait decides: b waited 5 s, a 1 s.
  band.Add("a", At(now - 1 * kSec));
  band.Add("b", At(now - 5 * kSec));
  EXPECT_EQ(band.Dispatch(now), "b");
  band.Add("b", At(now - 5 * kSec));
  // a has used 1000 tokens of service, b 100: scores a = 0.8 x 0 + 0.2 x 0 = 0,
  // b = 0.8 x 1 + 0.2 x 1 = 1 (b's head is older).
  fair.Completed("a", Usage(1000, 0), now);
  fair.Completed("b", Usage(100, 0), now);
  EXPECT_EQ(band.Dispatch(now), "b");
  // Now b's head is the younger one, with c the oldest at 10 s: services a 1000, b 100, c 0.
  band.Add("b", At(now));
  band.Add("c", At(now - 10 * kSec));
  // a: 0.8 x 0 + 0.2 x 0.1 = 0.02; b: 0.8 x 0.9 + 0 = 0.72; c: 0.8 + 0.2 = 1.
  EXPECT_EQ(band.Dispatch(now), "c");
  // a (service 1000, waiting 1 s) against b (100, waiting 0 s): 0.2 against 0.8.
  EXPECT_EQ(band.Dispatch(now), "b");
  EXPECT_EQ(band.Dispatch(now), "a");
  EXPECT_EQ(band.Dispatch(now), "");
}

TEST(FlowControlProgramAware, HeadWaitOutweighsServiceOnlyWithItsWeight) {
  // With the head-wait weight above the service weight, the oldest head wins over the least served.
  auto p = Make("program-aware-fairness",
                Map({{"lasWeightService", Params::Number(0.3)}, {"lasWeightHeadWait", Params::Number(0.7)}}));
  auto fcfs = Make("fcfs-ordering-policy");
  const auto& fair = *FlowControlPoliciesOf(*p).fairness;
  Band band(*p, *fcfs);
  fair.Completed("heavy", Usage(5000, 0), 0);
  band.Add("heavy", At(-9 * kSec));
  band.Add("light", At(-1 * kSec));
  // heavy: 0.3 x 0 + 0.7 x 1 = 0.7; light: 0.3 x 1 + 0 = 0.3.
  EXPECT_EQ(band.Dispatch(0), "heavy");
}

TEST(FlowControlProgramAware, WaitsInFlightAndJainsIndex) {
  auto p = Make("program-aware-fairness");
  const auto& fair = *FlowControlPoliciesOf(*p).fairness;
  const auto& stats = Stats(*p);
  EXPECT_DOUBLE_EQ(stats.JainsFairnessIndex(), 1.0);
  QueuedItem a = At(0), b = At(0);
  a.flow_id = "a", b.flow_id = "b";
  fair.Dispatched(a, 100'999);  // 100 ms (whole milliseconds, as the reference)
  fair.Dispatched(a, 300'000);  // 300 ms: mean 200
  EXPECT_DOUBLE_EQ(stats.AverageWaitMs("a"), 200);
  EXPECT_EQ(stats.InFlight("a"), 2);
  EXPECT_DOUBLE_EQ(stats.JainsFairnessIndex(), 1.0);  // one program observed
  fair.Dispatched(b, 600'000);  // b: 600
  // (200 + 600)^2 / (2 x (200^2 + 600^2)) = 640000 / 800000 = 0.8
  EXPECT_DOUBLE_EQ(stats.JainsFairnessIndex(), 0.8);
  fair.Completed("a", Usage(1, 1), 1 * kSec);
  EXPECT_EQ(stats.InFlight("a"), 1);
}

TEST(FlowControlProgramAware, IdleProgramsAreForgottenAfterTheTtl) {
  auto p = Make("program-aware-fairness",
                Map({{"evictionTtlSeconds", Params::Number(10)}, {"evictionSweepSeconds", Params::Number(5)}}));
  const auto& fair = *FlowControlPoliciesOf(*p).fairness;
  const auto& stats = Stats(*p);
  QueuedItem busy = At(0);
  busy.flow_id = "busy";
  fair.Dispatched(busy, 0);                    // in flight: never evicted
  fair.Completed("idle", Usage(10, 0), 0);     // completed at 0
  EXPECT_EQ(stats.Programs(), 2u);
  fair.Completed("other", Usage(1, 0), 8 * kSec);  // a sweep at 8 s: idle only 8 s
  EXPECT_EQ(stats.Programs(), 3u);
  fair.Completed("other", Usage(1, 0), 11 * kSec);  // 3 s after the last sweep: no sweep yet
  EXPECT_EQ(stats.Programs(), 3u);
  fair.Completed("other", Usage(1, 0), 14 * kSec);  // sweep: idle for 14 s > 10 s goes
  EXPECT_EQ(stats.Programs(), 2u);
  EXPECT_DOUBLE_EQ(stats.AttainedService("idle", 14 * kSec), 0);
  EXPECT_EQ(stats.InFlight("busy"), 1);
}

TEST(FlowControlProgramAware, RemovedDecayFactorFailsNamingItsReplacement) {
  const absl::Status s = MakeError("program-aware-fairness", Map({{"lasDecayFactor", Params::Number(0.99997)}}));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("lasDecayFactor: removed"), std::string::npos) << s;
  EXPECT_NE(s.message().find("lasHalfLifeSeconds"), std::string::npos) << s;
  // Through a whole config, with its path.
  const std::string yaml =
      "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
      "- type: program-aware-fairness\n  parameters:\n    lasDecayFactor: 0.9\n"
      "- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n";
  auto cfg = ParseConfig(yaml, "t.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  ManualClock clock(testing::kNowUs);
  SeededRng rng(1);
  auto built = BuildScheduler(*cfg, BuiltinRegistry(), PluginContext{&clock, &rng});
  ASSERT_FALSE(built.ok());
  EXPECT_NE(built.status().message().find("lasDecayFactor: removed"), std::string::npos) << built.status();
}

TEST(FlowControlProgramAware, ParameterChecks) {
  EXPECT_FALSE(MakeError("program-aware-fairness", Map({{"strategy", Params::String("drr")}})).ok());
  EXPECT_TRUE(MakeError("program-aware-fairness", Map({{"strategy", Params::String("")}})).ok());
  EXPECT_FALSE(MakeError("program-aware-fairness", Map({{"evictionSweepSeconds", Params::Number(0)}})).ok());
  EXPECT_FALSE(MakeError("program-aware-fairness", Map({{"lasWeightService", Params::Number(-1)}})).ok());
  EXPECT_FALSE(MakeError("program-aware-fairness", Map({{"lasHalfLifeSeconds", Params::Number(-1)}})).ok());
  EXPECT_TRUE(MakeError("program-aware-fairness", Map({{"evictionTtlSeconds", Params::Number(0)}})).ok());
}

// ---- Usage limits ----

std::vector<double> Limits(const Plugin& p, double saturation, std::vector<int> priorities) {
  std::vector<double> ceilings(priorities.size(), 1.0);
  FlowControlPoliciesOf(p).usage_limit->ComputeLimits(saturation, priorities, ceilings);
  return ceilings;
}

TEST(FlowControlUsageLimits, StaticAppliesOneThresholdToEveryBand) {
  auto def = Make("static-usage-limit-policy");
  EXPECT_EQ(Limits(*def, 0.5, {10, 0, -1}), (std::vector<double>{1, 1, 1}));
  auto p = Make("static-usage-limit-policy", Map({{"threshold", Params::Number(0.8)}}));
  EXPECT_EQ(Limits(*p, 0.5, {10, 0, -1}), (std::vector<double>{0.8, 0.8, 0.8}));
  EXPECT_FALSE(flowcontrol::Gated(0.79, 0.8));
  EXPECT_TRUE(flowcontrol::Gated(0.8, 0.8));
  EXPECT_FALSE(MakeError("static-usage-limit-policy", Map({{"threshold", Params::Number(0)}})).ok());
}

TEST(FlowControlUsageLimits, HoldbackByRank) {
  auto p = Make("priority-holdback-policy", Map({{"minCeiling", Params::Number(0.4)}, {"maxCeiling", Params::Number(0.9)}}));
  // c_i = 0.9 - i x 0.5 / 3
  const auto c = Limits(*p, 0.5, {100, 50, 0, -7});
  ASSERT_EQ(c.size(), 4u);
  EXPECT_DOUBLE_EQ(c[0], 0.9);
  EXPECT_NEAR(c[1], 0.9 - 0.5 / 3, 1e-12);
  EXPECT_NEAR(c[2], 0.9 - 1.0 / 3, 1e-12);
  EXPECT_NEAR(c[3], 0.4, 1e-12);
  EXPECT_EQ(Limits(*p, 0.5, {3}), (std::vector<double>{0.9}));  // one band: never held back
  EXPECT_TRUE(Limits(*p, 0.5, {}).empty());
}

TEST(FlowControlUsageLimits, HoldbackByValue) {
  auto p = Make("priority-holdback-policy",
                Map({{"minCeiling", Params::Number(0.2)}, {"domain", Params::String("value")}}));
  // r = (p - (-10)) / 110; c = 0.2 + r x 0.8
  const auto c = Limits(*p, 0.5, {100, 0, -10});
  EXPECT_DOUBLE_EQ(c[0], 1.0);
  EXPECT_NEAR(c[1], 0.2 + 10.0 / 110 * 0.8, 1e-12);
  EXPECT_NEAR(c[2], 0.2, 1e-12);
  EXPECT_EQ(Limits(*p, 0.5, {5, 5}), (std::vector<double>{1, 1}));  // no spread: all maxCeiling
}

TEST(FlowControlUsageLimits, HoldbackParameterChecks) {
  const absl::Status missing = MakeError("priority-holdback-policy", Params());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("minCeiling: required"), std::string::npos) << missing;
  EXPECT_FALSE(MakeError("priority-holdback-policy", Map({{"minCeiling", Params::Number(1)}})).ok());
  EXPECT_FALSE(MakeError("priority-holdback-policy",
                         Map({{"minCeiling", Params::Number(0.6)}, {"maxCeiling", Params::Number(0.5)}}))
                   .ok());
  EXPECT_FALSE(MakeError("priority-holdback-policy", Map({{"minCeiling", Params::Number(0.1)}, {"shape", Params::String("sigmoid")}})).ok());
  EXPECT_FALSE(MakeError("priority-holdback-policy", Map({{"minCeiling", Params::Number(0.1)}, {"domain", Params::String("log")}})).ok());
  EXPECT_TRUE(MakeError("priority-holdback-policy", Map({{"minCeiling", Params::Number(0)}})).ok());
}

TEST(FlowControlUsageLimits, SoftReflectiveCeiling) {
  auto p = Make("soft-reflective-ceiling-policy");
  const std::vector<int> three = {2, 1, 0};
  // Low saturation (0.3 < 1 - 0.3): every band open, no tick.
  EXPECT_EQ(Limits(*p, 0.3, three), (std::vector<double>{1, 1, 1}));
  // 0.75: band 1 reflects at 1 - 0.375 = 0.625, band 2 at 0.25; both reached; period
  // round(0.75 / 0.25) = 3: open on every third call.
  EXPECT_EQ(Limits(*p, 0.75, three), (std::vector<double>{1, 0, 0}));
  EXPECT_EQ(Limits(*p, 0.75, three), (std::vector<double>{1, 0, 0}));
  EXPECT_EQ(Limits(*p, 0.75, three), (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(Limits(*p, 0.75, three), (std::vector<double>{1, 0, 0}));
  // 0.55: band 1 reflects at 0.725 (open), band 2 at 0.45 (alternating, period round(1.22) = 1).
  EXPECT_EQ(Limits(*p, 0.55, three), (std::vector<double>{1, 1, 1}));
  // Saturated: every band below the first closed (and the first gated by saturation >= 1 itself).
  EXPECT_EQ(Limits(*p, 1.0, three), (std::vector<double>{1, 0, 0}));
  EXPECT_EQ(Limits(*p, 0.99, {7}), (std::vector<double>{1}));
}

TEST(FlowControlUsageLimits, SoftReflectiveTicksOnlyWhileAlternating) {
  auto p = Make("soft-reflective-ceiling-policy");
  const std::vector<int> two = {1, 0};
  // 0.8, two bands: band 1 reflects at 0.2; period round(4) = 4.
  EXPECT_EQ(Limits(*p, 0.8, two), (std::vector<double>{1, 0}));  // tick 1
  EXPECT_EQ(Limits(*p, 0.1, two), (std::vector<double>{1, 1}));  // no tick
  EXPECT_EQ(Limits(*p, 0.8, two), (std::vector<double>{1, 0}));  // tick 2
  EXPECT_EQ(Limits(*p, 0.8, two), (std::vector<double>{1, 0}));  // tick 3
  EXPECT_EQ(Limits(*p, 0.8, two), (std::vector<double>{1, 1}));  // tick 4
}

// ---- Eviction ----

TEST(FlowControlEviction, SheddableFilterKeepsOnlyNegativePriorities) {
  auto p = Make("sheddable-eviction-filter");
  const auto& f = *FlowControlPoliciesOf(*p).eviction_filter;
  InflightItem i;
  i.priority = -1;
  EXPECT_TRUE(f.Accept(i));
  i.priority = 0;
  EXPECT_FALSE(f.Accept(i));
  i.priority = 5;
  EXPECT_FALSE(f.Accept(i));
}

TEST(FlowControlEviction, PriorityThenNewestDispatchFirst) {
  auto p = Make("priority-then-time-eviction-order-policy");
  const auto& o = *FlowControlPoliciesOf(*p).eviction_order;
  auto item = [](int priority, int64_t dispatch_us) {
    InflightItem i;
    i.priority = priority;
    i.dispatch_us = dispatch_us;
    return i;
  };
  std::vector<std::pair<EvictionKey, std::string>> queue = {
      {o.Key(item(-1, 100)), "-1 old"}, {o.Key(item(-2, 50)), "-2 old"}, {o.Key(item(-1, 300)), "-1 new"},
      {o.Key(item(0, 400)), "0"},       {o.Key(item(-2, 60)), "-2 new"}};
  std::sort(queue.begin(), queue.end());
  std::vector<std::string> order;
  for (const auto& [k, name] : queue) order.push_back(name);
  EXPECT_EQ(order, (std::vector<std::string>{"-2 new", "-2 old", "-1 new", "-1 old", "0"}));
}

// ---- concurrency-detector ----

struct Detector {
  std::unique_ptr<Plugin> plugin;
  const SaturationDetector* sat = nullptr;
  const Filter* filter = nullptr;
};

Detector MakeDetector(const Params& params) {
  Detector d;
  d.plugin = Make("concurrency-detector", params);
  if (d.plugin) {
    d.sat = d.plugin->AsSaturationDetector();
    d.filter = d.plugin->AsFilter();
  }
  return d;
}

// Endpoints with (in-flight requests, in-flight tokens) each.
void Pool(testing::CycleFixture& f, std::vector<std::pair<int64_t, int64_t>> load) {
  for (size_t i = 0; i < load.size(); ++i) f.endpoints.push_back(testing::Ep("10.0.0." + std::to_string(i + 1) + ":8000"));
  f.Finish();
  for (size_t i = 0; i < load.size(); ++i) {
    f.ctx.inflight_requests[i] = load[i].first;
    f.ctx.inflight_tokens[i] = load[i].second;
  }
}

std::vector<std::string> Kept(const Detector& d, const testing::CycleFixture& f) {
  std::vector<std::string> out;
  for (const Endpoint* e : d.filter->Apply(f.ctx, f.candidates)) out.push_back(e->address);
  return out;
}

TEST(ConcurrencyDetector, Defaults) {
  Detector d = MakeDetector(Params());
  ASSERT_NE(d.sat, nullptr);
  ASSERT_NE(d.filter, nullptr);
  const Params e = d.plugin->EffectiveParams();
  EXPECT_EQ(e.Find("concurrencyMode")->text(), "requests");
  EXPECT_EQ(*e.Find("maxConcurrency")->AsInt(), 100);
  EXPECT_EQ(*e.Find("maxTokenConcurrency")->AsInt(), 1000000);
  EXPECT_DOUBLE_EQ(*e.Find("headroom")->AsDouble(), 0);
  EXPECT_EQ(e.Find("inFlightLoadProducerName"), nullptr);
  EXPECT_TRUE(d.plugin->Consumes().has(PluginInput::kInflightLoad));
}

TEST(ConcurrencyDetector, RequestsModeIsAnAggregateRatio) {
  Detector d = MakeDetector(Map({{"maxConcurrency", Params::Int(10)}}));
  testing::CycleFixture f;
  Pool(f, {{10, 0}, {2, 999999}, {0, 0}});
  // 12 / (3 x 10)
  EXPECT_DOUBLE_EQ(d.sat->Saturation(f.ctx, f.candidates), 0.4);
  EXPECT_EQ(d.sat->ExplainSaturation(f.ctx, f.candidates), "12 requests in flight / (3 endpoints x maxConcurrency 10) = 0.4");
  EXPECT_EQ(Kept(d, f), (std::vector<std::string>{"10.0.0.2:8000", "10.0.0.3:8000"}));
  EXPECT_EQ(d.filter->WhyRemoved(f.ctx, f.endpoints[0]),
            "10 requests in flight >= limit 10 (maxConcurrency 10 x (1 + headroom 0))");
  EXPECT_DOUBLE_EQ(d.sat->Saturation(f.ctx, {}), 1.0);
  testing::CycleFixture over;
  Pool(over, {{25, 0}});
  EXPECT_DOUBLE_EQ(d.sat->Saturation(over.ctx, over.candidates), 2.5);  // overload shows past 1
}

TEST(ConcurrencyDetector, TokensMode) {
  Detector d = MakeDetector(Map({{"concurrencyMode", Params::String("tokens")}, {"maxTokenConcurrency", Params::Int(1000)},
                                 {"headroom", Params::Number(0.5)}}));
  testing::CycleFixture f;
  Pool(f, {{500, 1499}, {0, 1500}});
  // (1499 + 1500) / 2000; requests play no part.
  EXPECT_DOUBLE_EQ(d.sat->Saturation(f.ctx, f.candidates), 2999.0 / 2000);
  // Limit 1000 x 1.5 = 1500.
  EXPECT_EQ(Kept(d, f), (std::vector<std::string>{"10.0.0.1:8000"}));
  EXPECT_EQ(d.filter->WhyRemoved(f.ctx, f.endpoints[1]),
            "1500 tokens in flight >= limit 1500 (maxTokenConcurrency 1000 x (1 + headroom 0.5))");
}

TEST(ConcurrencyDetector, HybridAveragesEachEndpointsWorseRatio) {
  Detector d = MakeDetector(Map({{"concurrencyMode", Params::String("hybrid")}, {"maxConcurrency", Params::Int(10)},
                                 {"maxTokenConcurrency", Params::Int(1000)}, {"headroom", Params::Number(0.2)}}));
  // e1 full on requests (12/10 = 1.2, tokens 0.1), e2 on tokens (0.1, 1.0), e3 idle.
  testing::CycleFixture f;
  Pool(f, {{12, 100}, {1, 1000}, {0, 0}});
  // (1.2 + 1.0 + 0) / 3; the aggregates (13/30, 1100/3000) would both read low.
  EXPECT_NEAR(d.sat->Saturation(f.ctx, f.candidates), 2.2 / 3, 1e-12);
  // Limits 12 requests and 1200 tokens: e1 reaches the request limit.
  EXPECT_EQ(Kept(d, f), (std::vector<std::string>{"10.0.0.2:8000", "10.0.0.3:8000"}));
  testing::CycleFixture g;
  Pool(g, {{0, 1200}});
  EXPECT_TRUE(Kept(d, g).empty());  // no fail-open: every endpoint at its limit leaves none
}

TEST(ConcurrencyDetector, ParameterChecks) {
  EXPECT_FALSE(MakeError("concurrency-detector", Map({{"maxConcurrency", Params::Int(0)}})).ok());
  EXPECT_FALSE(MakeError("concurrency-detector", Map({{"maxTokenConcurrency", Params::Int(-1)}})).ok());
  EXPECT_FALSE(MakeError("concurrency-detector", Map({{"headroom", Params::Number(-0.1)}})).ok());
  EXPECT_FALSE(MakeError("concurrency-detector", Map({{"concurrencyMode", Params::String("bytes")}})).ok());
  std::vector<std::string> warnings;
  PluginContext ctx;
  ctx.warnings = &warnings;
  auto p = BuiltinRegistry().Create("concurrency-detector", "cd", Map({{"headroom", Params::Number(20)}}), ctx);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("headroom is a fraction"), std::string::npos) << warnings[0];
}

TEST(ConcurrencyDetector, StageSaturationIsTheWorseStage) {
  Detector d = MakeDetector(Map({{"maxConcurrency", Params::Int(10)}}));
  testing::CycleFixture f;
  f.endpoints = {testing::EndpointBuilder("p1").Label("llm-d.ai/role", "prefill"),
                 testing::EndpointBuilder("d1").Label("llm-d.ai/role", "decode"),
                 testing::EndpointBuilder("d2"),  // unlabelled: decode
                 testing::EndpointBuilder("both").Label("llm-d.ai/role", "prefill-decode"),
                 testing::EndpointBuilder("enc").Label("llm-d.ai/role", "encode")};
  f.Finish();
  f.ctx.inflight_requests = {9, 1, 1, 5, 10};
  // prefill {p1, both}: 14/20 = 0.7; decode {d1, d2, both}: 7/30; encode counts nowhere.
  EXPECT_DOUBLE_EQ(flowcontrol::StageSaturation(*d.sat, f.ctx, f.candidates), 0.7);
  // The whole pool would read 26/50.
  EXPECT_DOUBLE_EQ(d.sat->Saturation(f.ctx, f.candidates), 0.52);
  // Only encode pods: over all of them.
  std::vector<const Endpoint*> enc = {&f.endpoints[4]};
  EXPECT_DOUBLE_EQ(flowcontrol::StageSaturation(*d.sat, f.ctx, enc), 1.0);
}

// The detector in a real scheduler: the in-flight load of recorded picks saturates the pool; a
// sheddable request is shed with 429, and the filter leaves no endpoint for the others.
TEST(ConcurrencyDetector, ShedsAndFiltersInAScheduler) {
  const std::string yaml =
      "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
      "- type: concurrency-detector\n  parameters:\n    maxConcurrency: 2\n"
      "- type: queue-scorer\n"
      "saturationDetector:\n  pluginRef: concurrency-detector\n"
      "schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: concurrency-detector\n"
      "  - pluginRef: queue-scorer\n";
  auto cfg = ParseConfig(yaml, "t.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  ManualClock clock(testing::kNowUs);
  SeededRng rng(1);
  auto sched = BuildScheduler(*cfg, BuiltinRegistry(), PluginContext{&clock, &rng});
  ASSERT_TRUE(sched.ok()) << sched.status();
  const std::vector<Endpoint> pool = {testing::Ep("a:8000"), testing::Ep("b:8000")};
  auto req = ParseOpenAIRequest("/v1/completions", R"({"model":"m","prompt":"hi"})");
  ASSERT_TRUE(req.ok());
  std::vector<PickResult> held;
  for (int i = 0; i < 3; ++i) {
    PickResult r = (*sched)->Pick(*req, pool);
    ASSERT_EQ(r.status, 200) << r.reason;
    held.push_back(r);
  }
  // 3 of 4 in flight: 0.75, a sheddable request still passes.
  InferenceRequest sheddable = *req;
  sheddable.priority = -1;
  PickResult s = (*sched)->Pick(sheddable, pool, PickOptions{.record = false});
  EXPECT_EQ(s.status, 200) << s.reason;
  EXPECT_DOUBLE_EQ(s.saturation, 0.75);
  held.push_back((*sched)->Pick(*req, pool));
  ASSERT_EQ(held.back().status, 200);
  // 4 of 4: shed.
  s = (*sched)->Pick(sheddable, pool);
  EXPECT_EQ(s.status, 429) << s.reason;
  EXPECT_NE(s.saturation_detail.find("4 requests in flight / (2 endpoints x maxConcurrency 2) = 1"), std::string::npos)
      << s.saturation_detail;
  // A non-sheddable request passes admission, and the filter finds both endpoints at their limit:
  // a busy pool, 429 as llm-d answers when filters drain the candidates.
  PickResult full = (*sched)->Pick(*req, pool);
  EXPECT_EQ(full.status, 429) << full.reason;
  EXPECT_EQ(full.dropped_reason, kDroppedSaturated);
  // Releasing one frees its endpoint.
  (*sched)->Release(held.front());
  PickResult again = (*sched)->Pick(*req, pool);
  ASSERT_EQ(again.status, 200) << again.reason;
  EXPECT_EQ(again.endpoints.front(), held.front().endpoints.front());
}

}  // namespace
}  // namespace epp
