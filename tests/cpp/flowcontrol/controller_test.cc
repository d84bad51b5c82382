// The flow-control layer (flowcontrol/controller.h) driven synchronously with a ManualClock
// (DispatchOnce / ExpireOnce), the outcome -> answer mapping, the builder from a parsed
// flowControl section, and a concurrency test with the dispatcher thread running.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "epp/config.h"
#include "epp/registry.h"
#include "epp/runtime/extproc.h"
#include "epp/scheduler.h"
#include "flowcontrol/build.h"
#include "flowcontrol/controller.h"
#include "plugins/capabilities.h"
#include "testing/epp_testing.h"

namespace epp::flowcontrol {
namespace {

constexpr int64_t kSec = 1'000'000;

class ControllerTest : public ::testing::Test {
 protected:
  const Plugin& Make(const std::string& type, const Params& params = Params()) {
    auto p = BuiltinRegistry().Create(type, type, params, PluginContext{});
    EXPECT_TRUE(p.ok()) << p.status();
    plugins_.push_back(std::move(*p));
    return *plugins_.back();
  }
  const FairnessPolicy* Fairness(const std::string& type) { return plugins::FlowControlPoliciesOf(Make(type)).fairness; }
  const OrderingPolicy* Ordering(const std::string& type) { return plugins::FlowControlPoliciesOf(Make(type)).ordering; }

  ControllerConfig Config(const std::string& fairness = "global-strict-fairness-policy") {
    ControllerConfig c;
    c.default_band.fairness = Fairness(fairness);
    c.default_band.ordering = Ordering("fcfs-ordering-policy");
    c.default_request_ttl_us = 10 * kSec;
    c.no_endpoint_request_ttl_us = 30 * kSec;
    return c;
  }
  BandConfig Band(int priority, const ControllerConfig& c) {
    BandConfig b = c.default_band;
    b.priority = priority;
    return b;
  }
  std::unique_ptr<FlowController> Controller(ControllerConfig c) {
    return std::make_unique<FlowController>(std::move(c), [this] {
      PoolSample s;
      s.saturation = saturation_;
      s.empty = empty_;
      return s;
    }, clock_);
  }
  // Enqueues and records the outcome under `id`.
  Handle Add(FlowController& fc, const std::string& id, int priority = 0, const std::string& flow = "",
             uint64_t bytes = 1) {
    EnqueueRequest r;
    r.request_id = id;
    r.fairness_id = flow;
    r.priority = priority;
    r.bytes = bytes;
    return fc.Enqueue(r, [this, id](const Completion& c) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.emplace_back(id, c.outcome);
    });
  }
  std::vector<std::string> DispatchAll(FlowController& fc) {
    std::vector<std::string> order;
    while (fc.DispatchOnce()) order.push_back(done_.back().first);
    return order;
  }
  Outcome OutcomeOf(const std::string& id) {
    for (const auto& [i, o] : done_) {
      if (i == id) return o;
    }
    ADD_FAILURE() << id << " not answered";
    return Outcome::kDispatched;
  }

  ManualClock clock_{1000 * kSec};
  double saturation_ = 0;
  bool empty_ = false;
  std::mutex mu_;
  std::vector<std::pair<std::string, Outcome>> done_;
  std::vector<std::unique_ptr<Plugin>> plugins_;
};

TEST_F(ControllerTest, StrictPriorityAcrossBands) {
  ControllerConfig c = Config();
  c.bands = {Band(10, c), Band(0, c), Band(-5, c)};
  auto fc = Controller(c);
  saturation_ = 1.0;  // saturated: everything waits
  Add(*fc, "low", -5);
  Add(*fc, "mid1", 0);
  Add(*fc, "mid2", 0);
  Add(*fc, "high", 10);
  EXPECT_FALSE(fc->DispatchOnce());
  EXPECT_EQ(fc->queued(), 4u);
  EXPECT_TRUE(done_.empty());
  saturation_ = 0.5;
  EXPECT_EQ(DispatchAll(*fc), (std::vector<std::string>{"high", "mid1", "mid2", "low"}));
}

TEST_F(ControllerTest, UnconfiguredPriorityGetsItsOwnBand) {
  ControllerConfig c = Config();
  auto fc = Controller(c);
  saturation_ = 1.0;
  Add(*fc, "p0", 0);
  Add(*fc, "p7", 7);
  Add(*fc, "neg", -1);
  saturation_ = 0;
  EXPECT_EQ(DispatchAll(*fc), (std::vector<std::string>{"p7", "p0", "neg"}));
  const ControllerStats s = fc->Stats();
  ASSERT_EQ(s.bands.size(), 3u);
  EXPECT_EQ(s.bands[0].priority, 7);
  EXPECT_EQ(s.bands[2].priority, -1);
  EXPECT_EQ(s.bands[2].max_requests, kDefaultBandMaxRequests);
}

TEST_F(ControllerTest, RoundRobinBetweenFlowsFcfsWithin) {
  auto fc = Controller(Config("round-robin-fairness-policy"));
  saturation_ = 1.0;
  for (const char* id : {"a1", "a2", "a3"}) Add(*fc, id, 0, "tenant-a");
  for (const char* id : {"b1", "b2"}) Add(*fc, id, 0, "tenant-b");
  Add(*fc, "c1", 0, "tenant-c");
  saturation_ = 0;
  EXPECT_EQ(DispatchAll(*fc), (std::vector<std::string>{"a1", "b1", "c1", "a2", "b2", "a3"}));
}

TEST_F(ControllerTest, GlobalStrictIsFcfsAcrossFlowsAndEmptyIdIsDefaultFlow) {
  auto fc = Controller(Config());
  saturation_ = 1.0;
  Add(*fc, "1", 0, "x");
  clock_.Advance(1);
  Add(*fc, "2", 0, "");
  clock_.Advance(1);
  Add(*fc, "3", 0, "x");
  Add(*fc, "4", 0, "");
  const ControllerStats s = fc->Stats();
  ASSERT_EQ(s.flows.size(), 2u);
  EXPECT_EQ(s.flows[0].flow_id, "default-flow");
  EXPECT_EQ(s.flows[0].queued, 2u);
  EXPECT_EQ(s.flows[1].flow_id, "x");
  saturation_ = 0;
  EXPECT_EQ(DispatchAll(*fc), (std::vector<std::string>{"1", "2", "3", "4"}));
  EXPECT_TRUE(fc->Stats().flows.empty());  // emptied flows are gone
}

TEST_F(ControllerTest, GlobalCapacityRejects) {
  ControllerConfig c = Config();
  c.max_requests = 2;
  c.max_bytes = 100;
  auto fc = Controller(c);
  saturation_ = 1.0;
  EXPECT_NE(Add(*fc, "a", 0, "", 10), kNoHandle);
  EXPECT_NE(Add(*fc, "b", 5, "", 10), kNoHandle);  // another band: the limit is global
  EXPECT_EQ(Add(*fc, "c", 0, "", 10), kNoHandle);  // answered before Enqueue returned
  EXPECT_EQ(OutcomeOf("c"), Outcome::kRejectedCapacity);
  const DropAnswer a = AnswerFor(Outcome::kRejectedCapacity);
  EXPECT_EQ(a.status, 429);
  EXPECT_EQ(a.reason, "rejected-saturated");

  auto fb = Controller(c);
  EXPECT_NE(Add(*fb, "x", 0, "", 60), kNoHandle);
  EXPECT_EQ(Add(*fb, "y", 1, "", 41), kNoHandle);  // 60 + 41 > 100
  EXPECT_NE(Add(*fb, "z", 1, "", 40), kNoHandle);  // exactly 100 fits
}

TEST_F(ControllerTest, BandCapacityRejects) {
  ControllerConfig c = Config();
  BandConfig small = Band(0, c);
  small.max_requests = 1;
  BandConfig bytes = Band(1, c);
  bytes.max_bytes = 50;
  c.bands = {small, bytes};
  auto fc = Controller(c);
  saturation_ = 1.0;
  EXPECT_NE(Add(*fc, "a", 0), kNoHandle);
  EXPECT_EQ(Add(*fc, "b", 0), kNoHandle);
  EXPECT_EQ(OutcomeOf("b"), Outcome::kRejectedCapacity);
  EXPECT_NE(Add(*fc, "c", 1, "", 50), kNoHandle);
  EXPECT_EQ(Add(*fc, "d", 1, "", 1), kNoHandle);
  const ControllerStats s = fc->Stats();
  EXPECT_EQ(s.outcomes[static_cast<size_t>(Outcome::kRejectedCapacity)], 2u);
  ASSERT_EQ(s.bands.size(), 2u);
  EXPECT_EQ(s.bands[0].bytes, 50u);
  EXPECT_EQ(s.bands[0].max_bytes, 50u);
  EXPECT_EQ(s.bands[1].max_requests, 1u);
}

TEST_F(ControllerTest, CapacityWithEmptyPoolIsNoEndpoints) {
  ControllerConfig c = Config();
  c.max_requests = 1;
  auto fc = Controller(c);
  empty_ = true;
  saturation_ = 1.0;
  Add(*fc, "a");
  EXPECT_FALSE(fc->DispatchOnce());  // the cycle learns the pool is empty
  EXPECT_EQ(Add(*fc, "b"), kNoHandle);
  EXPECT_EQ(OutcomeOf("b"), Outcome::kRejectedNoEndpoints);
  const DropAnswer a = AnswerFor(Outcome::kRejectedNoEndpoints);
  EXPECT_EQ(a.status, 503);
  EXPECT_EQ(a.reason, "rejected-no-endpoints");
}

TEST_F(ControllerTest, TtlExpiry) {
  auto fc = Controller(Config());
  saturation_ = 1.0;
  Add(*fc, "a");
  clock_.Advance(4 * kSec);
  Add(*fc, "b");
  EXPECT_EQ(fc->ExpireOnce(clock_.NowMicros() + 6 * kSec - 1), 0u);
  clock_.Advance(6 * kSec);
  EXPECT_EQ(fc->ExpireOnce(clock_.NowMicros()), 1u);
  EXPECT_EQ(OutcomeOf("a"), Outcome::kEvictedTTL);
  EXPECT_EQ(fc->queued(), 1u);
  DropAnswer a = AnswerFor(Outcome::kEvictedTTL);
  EXPECT_EQ(a.status, 429);
  EXPECT_EQ(a.reason, "rejected-ttl-expired");
  // The reference probes the pool on a TTL eviction: empty by then is unavailability.
  a = AnswerFor(Outcome::kEvictedTTL, /*pool_empty=*/true);
  EXPECT_EQ(a.status, 503);
  EXPECT_EQ(a.reason, "rejected-no-endpoints");
}

TEST_F(ControllerTest, NoEndpointTtlRestartsBudgetOnRegimeChange) {
  auto fc = Controller(Config());  // 10 s with endpoints, 30 s without
  saturation_ = 1.0;
  Add(*fc, "a");
  clock_.Advance(5 * kSec);
  empty_ = true;
  EXPECT_FALSE(fc->DispatchOnce());  // regime: empty since t + 5 s
  clock_.Advance(30 * kSec - 1);
  EXPECT_EQ(fc->ExpireOnce(clock_.NowMicros()), 0u);
  clock_.Advance(1);
  EXPECT_EQ(fc->ExpireOnce(clock_.NowMicros()), 1u);
  EXPECT_EQ(OutcomeOf("a"), Outcome::kEvictedNoEndpoints);
  const DropAnswer a = AnswerFor(Outcome::kEvictedNoEndpoints);
  EXPECT_EQ(a.status, 503);
  EXPECT_EQ(a.reason, "rejected-no-endpoints");
}

TEST_F(ControllerTest, ZeroTtlNeverExpires) {
  ControllerConfig c = Config();
  c.default_request_ttl_us = 0;
  auto fc = Controller(c);
  saturation_ = 1.0;
  Add(*fc, "a");
  clock_.Advance(3600 * kSec);
  EXPECT_EQ(fc->ExpireOnce(clock_.NowMicros()), 0u);
  EXPECT_EQ(fc->queued(), 1u);
}

TEST_F(ControllerTest, CancelRemovesAtOnceAndFreesCapacity) {
  ControllerConfig c = Config("round-robin-fairness-policy");
  c.max_requests = 2;
  auto fc = Controller(c);
  saturation_ = 1.0;
  const Handle a = Add(*fc, "a", 0, "t1");
  Add(*fc, "b", 0, "t2");
  EXPECT_EQ(Add(*fc, "full", 0, "t1"), kNoHandle);
  EXPECT_TRUE(fc->Cancel(a));
  EXPECT_EQ(OutcomeOf("a"), Outcome::kEvictedContextCancelled);
  EXPECT_FALSE(fc->Cancel(a));  // answered once only
  EXPECT_EQ(fc->queued(), 1u);
  EXPECT_NE(Add(*fc, "c", 0, "t1"), kNoHandle);  // the freed slot
  const DropAnswer ans = AnswerFor(Outcome::kEvictedContextCancelled);
  EXPECT_EQ(ans.status, 503);
  EXPECT_EQ(ans.reason, "rejected-context-cancelled");
  saturation_ = 0;
  EXPECT_EQ(DispatchAll(*fc), (std::vector<std::string>{"c", "b"}));
  EXPECT_FALSE(fc->Cancel(kNoHandle));
}

TEST_F(ControllerTest, CancelOfANonHeadItemKeepsOrder) {
  auto fc = Controller(Config());
  saturation_ = 1.0;
  std::vector<Handle> h;
  for (int i = 0; i < 8; ++i) h.push_back(Add(*fc, std::to_string(i)));
  EXPECT_TRUE(fc->Cancel(h[3]));
  EXPECT_TRUE(fc->Cancel(h[0]));
  EXPECT_TRUE(fc->Cancel(h[7]));
  saturation_ = 0;
  EXPECT_EQ(DispatchAll(*fc), (std::vector<std::string>{"1", "2", "4", "5", "6"}));
}

TEST_F(ControllerTest, DispatchesOnlyWhileBelowSaturationAndResumes) {
  // A detector over in-flight requests with room for 2: the dispatch callback accounts the load,
  // as the scheduler's Pick does.
  int inflight = 0;
  ControllerConfig c = Config();
  FlowController fc(c, [&] { return PoolSample{inflight / 2.0, -1, -1, false}; }, clock_);
  std::vector<std::string> order;
  for (const char* id : {"a", "b", "c", "d"}) {
    EnqueueRequest r;
    r.request_id = id;
    fc.Enqueue(r, [&, id = std::string(id)](const Completion& done) {
      if (done.outcome != Outcome::kDispatched) return;  // "d", at destruction
      ++inflight;
      order.push_back(id);
    });
  }
  while (fc.DispatchOnce()) {
  }
  EXPECT_EQ(order, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(fc.queued(), 2u);
  --inflight;  // a request finished
  while (fc.DispatchOnce()) {
  }
  EXPECT_EQ(order, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_DOUBLE_EQ(fc.Stats().pool.saturation, 1.0);
}

TEST_F(ControllerTest, UsageLimitGatesLowerBands) {
  ControllerConfig c = Config();
  c.bands = {Band(1, c), Band(0, c)};
  Params p = Params::Map();
  p.Set("minCeiling", Params::Number(0.5));
  c.usage_limit = plugins::FlowControlPoliciesOf(Make("priority-holdback-policy", p)).usage_limit;
  ASSERT_NE(c.usage_limit, nullptr);
  auto fc = Controller(c);
  saturation_ = 0.7;  // ceilings: band 1 -> 1.0, band 0 -> 0.5
  Add(*fc, "low", 0);
  EXPECT_FALSE(fc->DispatchOnce());
  Add(*fc, "high", 1);
  EXPECT_EQ(DispatchAll(*fc), (std::vector<std::string>{"high"}));
  const ControllerStats s = fc->Stats();
  EXPECT_DOUBLE_EQ(s.bands[1].ceiling, 0.5);
  saturation_ = 0.4;
  EXPECT_EQ(DispatchAll(*fc), (std::vector<std::string>{"low"}));
}

TEST_F(ControllerTest, ShutdownAnswersEveryQueuedRequest) {
  auto fc = Controller(Config());
  saturation_ = 1.0;
  Add(*fc, "a", 0);
  Add(*fc, "b", 3, "t");
  fc->Shutdown();
  EXPECT_EQ(OutcomeOf("a"), Outcome::kEvictedShuttingDown);
  EXPECT_EQ(OutcomeOf("b"), Outcome::kEvictedShuttingDown);
  EXPECT_EQ(fc->queued(), 0u);
  EXPECT_EQ(Add(*fc, "late"), kNoHandle);
  EXPECT_EQ(OutcomeOf("late"), Outcome::kRejectedShuttingDown);
  for (Outcome o : {Outcome::kEvictedShuttingDown, Outcome::kRejectedShuttingDown}) {
    const DropAnswer a = AnswerFor(o);
    EXPECT_EQ(a.status, 503);
    EXPECT_EQ(a.reason, "rejected-shutting-down");
  }
  EXPECT_EQ(OutcomeName(Outcome::kEvictedShuttingDown), "EvictedOther");
  EXPECT_EQ(OutcomeName(Outcome::kRejectedShuttingDown), "RejectedOther");
}

TEST_F(ControllerTest, EvictionAnswers) {
  EXPECT_EQ(EvictionAnswer(EvictionReason::kEvicted).reason, "evicted");
  EXPECT_EQ(EvictionAnswer(EvictionReason::kQueuePressure).reason, "evicted-queue-pressure");
  EXPECT_EQ(EvictionAnswer(EvictionReason::kPriority).reason, "evicted-priority");
  EXPECT_EQ(EvictionAnswer(EvictionReason::kPriority).status, 429);
  EXPECT_EQ(AnswerFor(Outcome::kDispatched).status, 0);
}

TEST_F(ControllerTest, StatsCountWaitsAndBytes) {
  auto fc = Controller(Config());
  saturation_ = 1.0;
  Add(*fc, "a", 0, "t", 100);
  Add(*fc, "b", 0, "u", 50);
  ControllerStats s = fc->Stats();
  EXPECT_EQ(s.queued, 2u);
  EXPECT_EQ(s.bytes, 150u);
  clock_.Advance(20'000);  // 20 ms
  saturation_ = 0;
  ASSERT_TRUE(fc->DispatchOnce());
  s = fc->Stats();
  const WaitHistogram& h = s.waits[static_cast<size_t>(Outcome::kDispatched)];
  EXPECT_EQ(h.count, 1u);
  EXPECT_NEAR(h.sum_s, 0.02, 1e-9);
  ASSERT_EQ(h.buckets.size(), s.wait_bounds_s.size() + 1);
  size_t b = 0;
  while (s.wait_bounds_s[b] < 0.02) ++b;
  EXPECT_EQ(h.buckets[b], 1u);  // (0.01, 0.025]
  EXPECT_EQ(s.bytes, 50u);
  EXPECT_EQ(s.bands[0].outcomes[static_cast<size_t>(Outcome::kDispatched)], 1u);
}

// ---- The builder ----

constexpr char kFlowConfig[] = R"(apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: max-score-picker
- name: rr
  type: round-robin-fairness-policy
- name: edf
  type: edf-ordering-policy
- name: holdback
  type: priority-holdback-policy
  parameters: {minCeiling: 0.5}
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: max-score-picker
flowControl:
  maxRequests: 1k
  maxBytes: 1Gi
  defaultRequestTTL: 30s
  usageLimitPolicyPluginRef: holdback
  defaultNegativePriorityBand:
    maxRequests: 10
  priorityBands:
  - priority: 100
    fairnessPolicyRef: rr
    orderingPolicyRef: edf
    maxBytes: 500M
  - priority: 0
)";

TEST(FlowControlBuild, FromConfig) {
  auto cfg = ParseConfig(kFlowConfig, "fc.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  const FlowControlSpec& spec = cfg->flow_control;
  EXPECT_TRUE(spec.present);
  EXPECT_EQ(spec.max_requests, 1000u);
  EXPECT_EQ(spec.max_bytes, uint64_t{1} << 30);
  ASSERT_EQ(spec.bands.size(), 2u);
  EXPECT_EQ(spec.bands[0].max_bytes, 500'000'000u);

  auto sched = BuildScheduler(*cfg, BuiltinRegistry());
  ASSERT_TRUE(sched.ok()) << sched.status();
  auto built = BuildControllerConfig(*cfg, **sched, BuiltinRegistry());
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->max_requests, 1000u);
  EXPECT_EQ(built->default_request_ttl_us, 30 * kSec);
  EXPECT_EQ(built->no_endpoint_request_ttl_us, 30 * kSec);  // follows defaultRequestTTL
  ASSERT_EQ(built->bands.size(), 2u);
  EXPECT_EQ(built->bands[0].max_bytes, 500'000'000u);
  EXPECT_EQ(built->bands[0].max_requests, kDefaultBandMaxRequests);
  EXPECT_EQ(built->bands[1].max_bytes, kDefaultBandMaxBytes);
  EXPECT_NE(built->bands[0].fairness, built->bands[1].fairness);  // rr vs the created default
  ASSERT_TRUE(built->default_negative_band.has_value());
  EXPECT_EQ(built->default_negative_band->max_requests, 10u);
  EXPECT_NE(built->usage_limit, nullptr);
  EXPECT_EQ(built->owned.size(), 2u);  // global-strict and fcfs, which the config does not define

  // The built configuration runs: band 100 dispatches before band 0, edf within it.
  ManualClock clock;
  FlowController fc(*built, [] { return PoolSample{}; }, clock);
  std::vector<int> order;
  for (int p : {0, 100, -3}) {
    EnqueueRequest r;
    r.priority = p;
    fc.Enqueue(r, [&order, p](const Completion&) { order.push_back(p); });
  }
  while (fc.DispatchOnce()) {
  }
  EXPECT_EQ(order, (std::vector<int>{100, 0, -3}));
}

absl::Status BuildError(const std::string& flow_control, const std::string& extra_plugins = "") {
  const std::string yaml = std::string(R"(apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: max-score-picker
- name: rr
  type: round-robin-fairness-policy
)") + extra_plugins + R"(schedulingProfiles:
- name: default
  plugins:
  - pluginRef: max-score-picker
flowControl:
)" + flow_control;
  auto cfg = ParseConfig(yaml, "fc.yaml");
  if (!cfg.ok()) return cfg.status();
  auto sched = BuildScheduler(*cfg, BuiltinRegistry());
  if (!sched.ok()) return sched.status();
  return BuildControllerConfig(*cfg, **sched, BuiltinRegistry()).status();
}

TEST(FlowControlBuild, ErrorsNameThePath) {
  absl::Status s = BuildError("  priorityBands:\n  - priority: 1\n  - priority: 2\n    fairnessPolicyRef: max-score-picker\n");
  EXPECT_NE(s.message().find("flowControl.priorityBands[1].fairnessPolicyRef: plugin 'max-score-picker' (type: "
                             "max-score-picker) is not a fairness policy"),
            std::string::npos)
      << s;
  s = BuildError("  priorityBands:\n  - priority: 1\n    orderingPolicyRef: rr\n");
  EXPECT_NE(s.message().find("flowControl.priorityBands[0].orderingPolicyRef: plugin 'rr'"), std::string::npos) << s;
  s = BuildError("  usageLimitPolicyPluginRef: rr\n");
  EXPECT_NE(s.message().find("flowControl.usageLimitPolicyPluginRef: plugin 'rr' (type: round-robin-fairness-policy) "
                             "is not a usage-limit policy"),
            std::string::npos)
      << s;
  s = BuildError("  priorityBands:\n  - priority: 1\n    fairnessPolicyRef: nope\n");
  EXPECT_NE(s.message().find("flowControl.priorityBands[0].fairnessPolicyRef: references undefined plugin 'nope'"),
            std::string::npos)
      << s;
  s = BuildError("  priorityBands:\n  - priority: 1\n  - priority: 1\n");
  EXPECT_NE(s.message().find("flowControl.priorityBands[1].priority: duplicate priority level 1"), std::string::npos)
      << s;
  s = BuildError("  maxBytes: -1\n");
  EXPECT_NE(s.message().find("flowControl.maxBytes: '-1' is not a non-negative quantity"), std::string::npos) << s;
  s = BuildError("  defaultRequestTTL: soon\n");
  EXPECT_NE(s.message().find("flowControl.defaultRequestTTL"), std::string::npos) << s;
  s = BuildError("  priorityBands:\n  - priority: 1\n    weight: 3\n");
  EXPECT_NE(s.message().find("unknown key 'weight'"), std::string::npos) << s;
  // The reference's default policy names resolve without a plugins entry.
  EXPECT_TRUE(BuildError("  priorityBands:\n  - priority: 1\n    fairnessPolicyRef: global-strict-fairness-policy\n"
                         "    orderingPolicyRef: fcfs-ordering-policy\n")
                  .ok());
}

TEST(FlowControlBuild, Quantities) {
  auto parse = [](const std::string& q) -> absl::StatusOr<uint64_t> {
    auto cfg = ParseConfig("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nflowControl:\n  maxBytes: " + q +
                           "\n");
    if (!cfg.ok()) return cfg.status();
    return cfg->flow_control.max_bytes;
  };
  EXPECT_EQ(*parse("100"), 100u);
  EXPECT_EQ(*parse("1k"), 1000u);
  EXPECT_EQ(*parse("2Mi"), 2u << 20);
  EXPECT_EQ(*parse("1.5G"), 1'500'000'000u);
  EXPECT_EQ(*parse("1e3"), 1000u);
  EXPECT_EQ(*parse("1500m"), 2u);  // Value() rounds up
  EXPECT_EQ(*parse("\"0\""), 0u);
  EXPECT_FALSE(parse("1KB").ok());
  EXPECT_FALSE(parse("100Ei").ok());  // beyond int64
  // 30 digits scaled by 2^60 or 10^30 overflow even 128 bits: refused, not wrapped to a small value.
  EXPECT_FALSE(parse("999999999999999999999999999999Ei").ok());
  EXPECT_FALSE(parse("999999999999999999999999999999e30").ok());
  // A tiny positive quantity rounds up to 1, even when its denominator passes 128 bits.
  EXPECT_EQ(*parse("0.0000000000000000000000001e-30"), 1u);
  EXPECT_EQ(*parse("0.0e-30"), 0u);
}

// ---- Concurrency ----

TEST(FlowControllerConcurrency, EnqueueCancelWhileDispatching) {
  auto policies = [](const std::string& type) {
    return std::shared_ptr<Plugin>(*BuiltinRegistry().Create(type, type, Params(), PluginContext{}));
  };
  auto rr = policies("round-robin-fairness-policy");
  auto fcfs = policies("fcfs-ordering-policy");
  ControllerConfig c;
  c.default_band.fairness = plugins::FlowControlPoliciesOf(*rr).fairness;
  c.default_band.ordering = plugins::FlowControlPoliciesOf(*fcfs).ordering;
  c.max_requests = 500;
  c.poll_interval_us = 200;
  // Capacity 8 in flight; a "server" thread completes dispatched requests.
  std::atomic<int> inflight{0};
  FlowController fc(c, [&] { return PoolSample{inflight.load() / 8.0, -1, -1, false}; }, SteadyClock::Get());
  fc.Start();

  constexpr int kThreads = 4, kPerThread = 2000;
  std::atomic<int> answered{0}, dispatched{0}, cancelled{0}, rejected{0};
  std::atomic<int> twice{0};
  std::atomic<bool> done_enqueueing{false};
  std::thread server([&] {
    while (!done_enqueueing.load() || answered.load() < kThreads * kPerThread) {
      if (inflight.load() > 0) {
        inflight.fetch_sub(1);
        fc.NotifyCapacity();
      }
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<Handle> mine;
      for (int i = 0; i < kPerThread; ++i) {
        EnqueueRequest r;
        r.fairness_id = "tenant-" + std::to_string(rng() % 16);
        r.priority = static_cast<int>(rng() % 3) - 1;
        r.bytes = 100;
        auto seen = std::make_shared<std::atomic<int>>(0);
        Handle h = fc.Enqueue(r, [&, seen](const Completion& done) {
          if (seen->fetch_add(1) > 0) twice.fetch_add(1);
          if (done.outcome == Outcome::kDispatched) {
            inflight.fetch_add(1);
            dispatched.fetch_add(1);
          } else if (done.outcome == Outcome::kEvictedContextCancelled) {
            cancelled.fetch_add(1);
          } else {
            rejected.fetch_add(1);
          }
          answered.fetch_add(1);
        });
        if (h != kNoHandle) mine.push_back(h);
        if (rng() % 4 == 0 && !mine.empty()) {
          const size_t k = rng() % mine.size();
          fc.Cancel(mine[k]);  // may already be dispatched: then false
          mine[k] = mine.back();
          mine.pop_back();
        }
      }
    });
  }
  for (std::thread& th : clients) th.join();
  done_enqueueing = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (answered.load() < kThreads * kPerThread && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(answered.load(), kThreads * kPerThread);
  server.join();
  fc.Shutdown();
  EXPECT_EQ(twice.load(), 0);
  EXPECT_EQ(dispatched.load() + cancelled.load() + rejected.load(), kThreads * kPerThread);
  EXPECT_GT(dispatched.load(), 0);
  EXPECT_EQ(fc.queued(), 0u);
  const ControllerStats s = fc.Stats();
  EXPECT_EQ(s.bytes, 0u);
  EXPECT_EQ(s.outcomes[static_cast<size_t>(Outcome::kDispatched)], static_cast<uint64_t>(dispatched.load()));
}

}  // namespace
}  // namespace epp::flowcontrol

namespace epp::flowcontrol {
namespace {

// The sampler serve gives the layer: the configured detector over every endpoint, reading the
// scheduler's own in-flight counts, so a pick made in the dispatch callback is seen at once.
TEST(FlowControlBuild, PoolSamplerReadsTheSchedulersInflightCounts) {
  auto cfg = ParseConfig(R"(apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: concurrency-detector
  parameters: {maxConcurrency: 1}
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: max-score-picker
flowControl:
  saturationDetector: {pluginRef: concurrency-detector}
)",
                         "fc.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_TRUE(FlowControlEnabled(*cfg));
  auto built = BuildScheduler(*cfg, BuiltinRegistry());
  ASSERT_TRUE(built.ok()) << built.status();
  std::shared_ptr<const Scheduler> sched(std::move(*built));
  EndpointSnapshot pool({epp::testing::Ep("10.0.0.1:8000"), epp::testing::Ep("10.0.0.2:8000")});
  PoolSampler sample = MakePoolSampler(sched, pool);
  EXPECT_DOUBLE_EQ(sample().saturation, 0.0);
  EXPECT_FALSE(sample().empty);
  InferenceRequest req;
  req.model = "m";
  req.prompt = "hello";
  PickOptions po;
  po.record = true;
  const std::shared_ptr<const std::vector<Endpoint>> eps = pool.Snapshot();
  PickResult r = sched->Pick(req, *eps, po);
  ASSERT_EQ(r.status, 200) << r.reason;
  EXPECT_DOUBLE_EQ(sample().saturation, 0.5);  // one of two requests' worth in flight
  sched->Release(r);
  EXPECT_DOUBLE_EQ(sample().saturation, 0.0);
  pool.Set({});
  EXPECT_TRUE(sample().empty);
  EXPECT_DOUBLE_EQ(sample().saturation, 1.0);  // no candidates: saturated, as the reference
}

}  // namespace
}  // namespace epp::flowcontrol
