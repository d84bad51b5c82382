// In-flight eviction (flowcontrol/eviction.h, FlowController with enableEviction): the eviction
// queue's filter and order, the reclamation decision's sizing, stop-and-wait pacing (confirmation,
// grace, timeout), and the layer revoking sheddable work for a blocked higher-priority band.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "epp/config.h"
#include "epp/registry.h"
#include "epp/scheduler.h"
#include "flowcontrol/build.h"
#include "flowcontrol/controller.h"
#include "flowcontrol/eviction.h"
#include "plugins/capabilities.h"

namespace epp::flowcontrol {
namespace {

class EvictionTest : public ::testing::Test {
 protected:
  const Plugin& Make(const std::string& type) {
    auto p = BuiltinRegistry().Create(type, type, Params(), PluginContext{});
    EXPECT_TRUE(p.ok()) << p.status();
    plugins_.push_back(std::move(*p));
    return *plugins_.back();
  }
  EvictionConfig Config() {
    EvictionConfig c;
    c.filter = plugins::FlowControlPoliciesOf(Make("sheddable-eviction-filter")).eviction_filter;
    c.order = plugins::FlowControlPoliciesOf(Make("priority-then-time-eviction-order-policy")).eviction_order;
    c.grace_us = 10'000;
    c.timeout_us = 1'000'000;
    return c;
  }
  // Tracks `id` and records its eviction.
  InflightEvictor::Handle Track(InflightEvictor& e, const std::string& id, int priority) {
    return e.Track(id, priority, "10.0.0.1:8000", [this, id](const DropAnswer& a) {
      evicted_.push_back(id);
      answers_.push_back(a);
    });
  }

  ManualClock clock_{1'000'000};
  std::vector<std::unique_ptr<Plugin>> plugins_;
  std::vector<std::string> evicted_;
  std::vector<DropAnswer> answers_;
};

TEST_F(EvictionTest, OnlySheddableRequestsAreVictimsLowestPriorityThenNewestFirst) {
  InflightEvictor e(Config(), clock_);
  Track(e, "critical", 0);
  clock_.Advance(1);
  Track(e, "old-2", -2);
  clock_.Advance(1);
  Track(e, "old-1", -1);
  clock_.Advance(1);
  Track(e, "new-1", -1);
  EvictionStats s = e.Stats();
  EXPECT_EQ(s.in_flight, 4u);
  EXPECT_EQ(s.evictable, 3u);  // priority 0 is not sheddable
  EXPECT_EQ(e.VictimPriority(), -2);
  // Saturation 1 over 4 in flight: credit 0.25; target 1 - 0.5 = 0.5 -> 2 revocations (the cap).
  EXPECT_EQ(e.Reclaim(1.0, 0.5, 10), 2);
  EXPECT_EQ(evicted_, (std::vector<std::string>{"old-2", "new-1"}));
  ASSERT_EQ(answers_.size(), 2u);
  EXPECT_EQ(answers_[0].status, 429);
  EXPECT_EQ(answers_[0].reason, "evicted");
  s = e.Stats();
  EXPECT_EQ(s.in_flight, 2u);
  EXPECT_EQ(s.outstanding, 2u);
  EXPECT_DOUBLE_EQ(s.pending_reclaim, 0.5);
  EXPECT_DOUBLE_EQ(s.reclaim_target, 0.5);
  EXPECT_EQ(s.issued.at(10), 2u);
}

TEST_F(EvictionTest, VictimsMustBeBelowTheDemandsPriority) {
  InflightEvictor e(Config(), clock_);
  Track(e, "a", -1);
  EXPECT_EQ(e.Reclaim(1.0, 0.5, -1), 0);  // equal priority: not revoked
  EXPECT_EQ(e.Reclaim(1.0, 0.5, -2), 0);
  EXPECT_TRUE(evicted_.empty());
  EXPECT_EQ(e.Stats().evictable, 1u);  // still a candidate
  EXPECT_EQ(e.Reclaim(1.0, 0.5, 0), 1);
}

TEST_F(EvictionTest, StopAndWaitUntilConfirmedAndGracePassedOrTimedOut) {
  InflightEvictor e(Config(), clock_);
  const auto a = Track(e, "a", -1);
  clock_.Advance(1);
  Track(e, "b", -1);
  clock_.Advance(1);
  Track(e, "c", -1);
  EXPECT_TRUE(e.GateOpen(clock_.NowMicros()));
  // Exactly at the ceiling: at least one revocation.
  EXPECT_EQ(e.Reclaim(1.0, 1.0, 0), 1);
  EXPECT_FALSE(e.GateOpen(clock_.NowMicros()));  // outstanding
  clock_.Advance(5'000);
  e.Untrack(a + 100);  // unknown handle: ignored
  const std::string victim = evicted_.at(0);
  ASSERT_EQ(victim, "c");  // the newest of equals
  e.Untrack(a + 2);        // c's stream ended: confirmed
  EvictionStats s = e.Stats();
  EXPECT_EQ(s.confirmed, 1u);
  EXPECT_EQ(s.confirmation_count, 1u);
  EXPECT_NEAR(s.confirmation_sum_s, 0.005, 1e-9);
  EXPECT_FALSE(e.GateOpen(clock_.NowMicros()));  // cooling for the grace
  clock_.Advance(10'000);
  EXPECT_TRUE(e.GateOpen(clock_.NowMicros()));
  EXPECT_DOUBLE_EQ(e.Stats().pending_reclaim, 0);
  // A revocation never confirmed holds the gate until its timeout, then cools as confirmed.
  EXPECT_EQ(e.Reclaim(1.0, 1.0, 0), 1);
  clock_.Advance(999'999);
  EXPECT_FALSE(e.GateOpen(clock_.NowMicros()));
  clock_.Advance(1);
  EXPECT_FALSE(e.GateOpen(clock_.NowMicros()));  // timed out now: cooling
  EXPECT_EQ(e.Stats().timed_out, 1u);
  clock_.Advance(10'000);
  EXPECT_TRUE(e.GateOpen(clock_.NowMicros()));
}

TEST_F(EvictionTest, UntrackedRequestsLeaveTheQueue) {
  InflightEvictor e(Config(), clock_);
  const auto a = Track(e, "a", -1);
  e.Untrack(a);
  EXPECT_EQ(e.Stats().in_flight, 0u);
  EXPECT_FALSE(e.VictimPriority().has_value());
  EXPECT_EQ(e.Reclaim(1.0, 0.5, 0), 0);
}

// The layer: pool full (saturation 1), a sheddable request in flight, a priority-10 request
// queued. The cycle blocks on band 10 and revokes the sheddable one; once its capacity is back
// (and the grace passed), the queued request dispatches.
TEST_F(EvictionTest, ControllerRevokesSheddableWorkForABlockedHigherBand) {
  ControllerConfig c;
  c.default_band.fairness = plugins::FlowControlPoliciesOf(Make("global-strict-fairness-policy")).fairness;
  c.default_band.ordering = plugins::FlowControlPoliciesOf(Make("fcfs-ordering-policy")).ordering;
  c.enable_eviction = true;
  const EvictionConfig ec = Config();
  c.eviction_filter = ec.filter;
  c.eviction_order = ec.order;
  c.eviction_confirmation_grace_us = 10'000;
  double saturation = 1.0;
  FlowController fc(c, [&] { return PoolSample{saturation, -1, -1, false}; }, clock_);
  ASSERT_TRUE(fc.eviction_enabled());
  const Handle victim = fc.TrackInflight("low", -1, "10.0.0.1:8000", [&](const DropAnswer& a) {
    evicted_.push_back("low");
    answers_.push_back(a);
  });
  fc.TrackInflight("critical", 0, "10.0.0.2:8000", [&](const DropAnswer&) { evicted_.push_back("critical"); });
  bool dispatched = false;
  EnqueueRequest r;
  r.request_id = "high";
  r.priority = 10;
  fc.Enqueue(r, [&](const Completion& done) { dispatched = done.outcome == Outcome::kDispatched; });
  EXPECT_FALSE(fc.DispatchOnce());  // blocked: revokes
  EXPECT_EQ(evicted_, std::vector<std::string>{"low"});
  EXPECT_EQ(answers_.at(0).status, 429);
  EXPECT_FALSE(fc.DispatchOnce());  // still saturated, a revocation outstanding: nothing more
  EXPECT_EQ(evicted_.size(), 1u);
  ControllerStats s = fc.Stats();
  ASSERT_TRUE(s.eviction.has_value());
  EXPECT_EQ(s.eviction->outstanding, 1u);
  // The evicted stream ends; its capacity comes back.
  fc.UntrackInflight(victim);
  saturation = 0.5;
  EXPECT_TRUE(fc.DispatchOnce());
  EXPECT_TRUE(dispatched);
  EXPECT_EQ(fc.Stats().eviction->confirmed, 1u);
}

TEST_F(EvictionTest, WithoutEvictionNothingIsTrackedAndBlockedBandsOnlyWait) {
  ControllerConfig c;
  c.default_band.fairness = plugins::FlowControlPoliciesOf(Make("global-strict-fairness-policy")).fairness;
  c.default_band.ordering = plugins::FlowControlPoliciesOf(Make("fcfs-ordering-policy")).ordering;
  FlowController fc(c, [] { return PoolSample{1.0, -1, -1, false}; }, clock_);
  EXPECT_FALSE(fc.eviction_enabled());
  EXPECT_EQ(fc.TrackInflight("low", -1, "e", [&](const DropAnswer&) { evicted_.push_back("low"); }), kNoHandle);
  EnqueueRequest r;
  r.priority = 10;
  fc.Enqueue(r, nullptr);
  EXPECT_FALSE(fc.DispatchOnce());
  EXPECT_TRUE(evicted_.empty());
  EXPECT_FALSE(fc.Stats().eviction.has_value());
}

TEST_F(EvictionTest, BuilderResolvesTheReferencesEvictionPoliciesAndTheLeadingSensorGrace) {
  const std::string yaml =
      "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
      "featureGates: [flowControl]\n"
      "plugins:\n- type: concurrency-detector\n- type: queue-scorer\n"
      "schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n"
      "flowControl:\n  enableEviction: true\n  saturationDetector: {pluginRef: concurrency-detector}\n";
  absl::StatusOr<EppConfig> config = ParseConfig(yaml, "evict.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  auto scheduler = BuildScheduler(*config, BuiltinRegistry());
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  absl::StatusOr<ControllerConfig> cc = BuildControllerConfig(*config, **scheduler, BuiltinRegistry());
  ASSERT_TRUE(cc.ok()) << cc.status();
  EXPECT_TRUE(cc->enable_eviction);
  EXPECT_NE(cc->eviction_filter, nullptr);
  EXPECT_NE(cc->eviction_order, nullptr);
  EXPECT_EQ(cc->eviction_confirmation_grace_us, 10'000);  // the concurrency detector leads
  EXPECT_EQ(cc->max_revocations_per_decision, 2);
}

}  // namespace
}  // namespace epp::flowcontrol
