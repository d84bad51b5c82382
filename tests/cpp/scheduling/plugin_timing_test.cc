// Scheduler::PluginTimings() and CycleTiming(): one histogram per (extension point, plugin
// instance), counts that follow the calls a pick makes, bucket placement, concurrent picks.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "epp/config.h"
#include "epp/registry.h"
#include "epp/request.h"
#include "epp/scheduler.h"
#include "scheduling/scheduler_impl.h"
#include "testing/epp_testing.h"

namespace epp {
namespace {

constexpr std::string_view kConfig = R"(
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
  - name: gold-only
    type: label-selector-filter
    parameters:
      matchLabels: {pool: gold}
  - name: queue
    type: queue-scorer
  - name: kv
    type: kv-cache-utilization-scorer
  - name: prefix
    type: prefix-cache-scorer
  - name: best
    type: max-score-picker
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: gold-only
      - pluginRef: queue
        weight: 2
      - pluginRef: kv
      - pluginRef: prefix
        weight: 3
      - pluginRef: best
)";

Endpoint Ep(std::string addr, std::string pool, double queue) {
  return testing::EndpointBuilder(std::move(addr)).Queue(queue).Running(0).Kv(0.2).Label("pool", std::move(pool));
}

InferenceRequest Chat(int i) {
  std::string body = R"({"model":"m","messages":[{"role":"user","content":"request )" + std::to_string(i) +
                     std::string(300, 'x') + R"("}]})";
  auto r = ParseOpenAIRequest("/v1/chat/completions", body);
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

struct Fixture {
  ManualClock clock{1000000};
  SeededRng rng{7};
  std::unique_ptr<Scheduler> sched;

  Fixture() {
    auto cfg = ParseConfig(kConfig, "timing.yaml");
    EXPECT_TRUE(cfg.ok()) << cfg.status();
    auto s = BuildScheduler(*cfg, BuiltinRegistry(), PluginContext{&clock, &rng});
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) sched = std::move(*s);
  }
};

// (extension point, type, name) -> timing.
using Key = std::tuple<std::string, std::string, std::string>;
std::map<Key, PluginTiming> ByKey(const std::vector<PluginTiming>& timings) {
  std::map<Key, PluginTiming> out;
  for (const PluginTiming& t : timings) {
    const bool inserted = out.emplace(Key{t.extension_point, t.plugin_type, t.plugin_name}, t).second;
    EXPECT_TRUE(inserted) << "duplicate entry " << t.extension_point << " " << t.plugin_name;
  }
  return out;
}

uint64_t CountOf(const std::map<Key, PluginTiming>& m, const std::string& point, const std::string& type,
                 const std::string& name) {
  auto it = m.find(Key{point, type, name});
  EXPECT_NE(it, m.end()) << "no timing for " << point << " " << type << "/" << name;
  return it == m.end() ? ~uint64_t{0} : it->second.count;
}

// Every (extension point, type, name) of kConfig's scheduler and its calls per recorded pick.
struct ExpectedCalls {
  const char* point;
  const char* type;
  const char* name;
  uint64_t per_pick;
};
constexpr ExpectedCalls kCallsPerPick[] = {
    {"Filter", "label-selector-filter", "gold-only", 1},
    {"Scorer", "queue-scorer", "queue", 1},
    {"Scorer", "kv-cache-utilization-scorer", "kv", 1},
    {"Scorer", "prefix-cache-scorer", "prefix", 1},
    {"Picker", "max-score-picker", "best", 1},
    // PickProfiles is asked until it returns nothing: once with the profile, once empty.
    {"ProfilePicker", "single-profile-handler", "single-profile-handler", 2},
    {"ProcessProfilesResults", "single-profile-handler", "single-profile-handler", 1},
    {"SaturationDetector", "utilization-detector", "utilization-detector", 1},
    // The prefix scorer pulls in the default producer, which also observes recorded picks.
    {"DataProducer", "approx-prefix-cache-producer", "approx-prefix-cache-producer", 1},
    {"PreRequest", "approx-prefix-cache-producer", "approx-prefix-cache-producer", 1},
};

void ExpectCallsAfterPicks(const std::map<Key, PluginTiming>& m, uint64_t picks) {
  for (const ExpectedCalls& c : kCallsPerPick)
    EXPECT_EQ(CountOf(m, c.point, c.type, c.name), c.per_pick * picks) << c.point << " " << c.name;
}

void ExpectValidHistogram(uint64_t count, double sum_seconds, const std::vector<uint64_t>& buckets,
                          const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(buckets.size(), kTimingBucketBoundsSeconds.size());
  for (size_t i = 1; i < buckets.size(); ++i) EXPECT_LE(buckets[i - 1], buckets[i]) << "bucket " << i;
  EXPECT_LE(buckets.back(), count);
  EXPECT_GE(sum_seconds, 0.0);
  if (count == 0) {
    EXPECT_EQ(sum_seconds, 0.0);
  }
}

TEST(PluginTimingTest, EveryConfiguredPluginHasAnEntryBeforeAnyPick) {
  Fixture f;
  ASSERT_NE(f.sched, nullptr);
  ExpectCallsAfterPicks(ByKey(f.sched->PluginTimings()), 0);
  EXPECT_EQ(f.sched->CycleTiming().count, 0u);
}

TEST(PluginTimingTest, CountsGrowPerPluginAndExtensionPoint) {
  Fixture f;
  ASSERT_NE(f.sched, nullptr);
  std::vector<Endpoint> pool = {Ep("10.0.0.1:8000", "gold", 3), Ep("10.0.0.2:8000", "silver", 0),
                                Ep("10.0.0.3:8000", "gold", 1)};
  constexpr int kPicks = 25;
  for (int i = 0; i < kPicks; ++i) {
    PickResult r = f.sched->Pick(Chat(i), pool);
    ASSERT_EQ(r.status, 200) << r.reason;
    EXPECT_NE(r.endpoints[0], "10.0.0.2:8000");  // the filter ran
    f.sched->Release(r);
  }
  const std::vector<PluginTiming> timings = f.sched->PluginTimings();
  auto m = ByKey(timings);
  ExpectCallsAfterPicks(m, kPicks);
  double plugin_seconds = 0;
  for (const PluginTiming& t : timings) {
    ExpectValidHistogram(t.count, t.sum_seconds, t.bucket_counts, t.extension_point + " " + t.plugin_name);
    plugin_seconds += t.sum_seconds;
  }
  // Real time even though the scheduler's clock is a ManualClock that never moved.
  EXPECT_GT(m.at(Key{"Scorer", "prefix-cache-scorer", "prefix"}).sum_seconds, 0.0);
  const DurationHistogram cycle = f.sched->CycleTiming();
  EXPECT_EQ(cycle.count, uint64_t{kPicks});
  ExpectValidHistogram(cycle.count, cycle.sum_seconds, cycle.bucket_counts, "cycle");
  // The plugins run inside the cycles.
  EXPECT_GT(cycle.sum_seconds, 0.0);
  EXPECT_LE(plugin_seconds, cycle.sum_seconds);
}

TEST(PluginTimingTest, OnlyTheCallsAPickMakesAreCounted) {
  Fixture f;
  ASSERT_NE(f.sched, nullptr);
  // What-if picks: no request observer call.
  std::vector<Endpoint> pool = {Ep("10.0.0.1:8000", "gold", 0), Ep("10.0.0.3:8000", "gold", 1)};
  PickOptions what_if;
  what_if.record = false;
  for (int i = 0; i < 4; ++i) ASSERT_EQ(f.sched->Pick(Chat(i), pool, what_if).status, 200);
  // The filter removes everything: scorers and picker are not called, the cycle still counts.
  std::vector<Endpoint> silver = {Ep("10.0.0.2:8000", "silver", 0)};
  for (int i = 0; i < 3; ++i) ASSERT_EQ(f.sched->Pick(Chat(i), silver).status, 503);
  // No candidate at all (empty subset hint): nothing but the cycle.
  PickOptions none;
  none.subset = std::vector<std::string>{};
  ASSERT_EQ(f.sched->Pick(Chat(0), pool, none).status, 503);

  auto m = ByKey(f.sched->PluginTimings());
  EXPECT_EQ(CountOf(m, "PreRequest", "approx-prefix-cache-producer", "approx-prefix-cache-producer"), 0u);
  EXPECT_EQ(CountOf(m, "DataProducer", "approx-prefix-cache-producer", "approx-prefix-cache-producer"), 7u);
  EXPECT_EQ(CountOf(m, "Filter", "label-selector-filter", "gold-only"), 7u);
  EXPECT_EQ(CountOf(m, "Scorer", "queue-scorer", "queue"), 4u);
  EXPECT_EQ(CountOf(m, "Picker", "max-score-picker", "best"), 4u);
  EXPECT_EQ(f.sched->CycleTiming().count, 8u);
}

TEST(PluginTimingTest, ConcurrentPicksLoseNoCount) {
  Fixture f;
  ASSERT_NE(f.sched, nullptr);
  std::vector<Endpoint> pool = {Ep("10.0.0.1:8000", "gold", 0), Ep("10.0.0.3:8000", "gold", 1)};
  constexpr int kThreads = 4, kPerThread = 200;
  std::vector<InferenceRequest> requests;
  for (int i = 0; i < 8; ++i) requests.push_back(Chat(i));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) f.sched->Release(f.sched->Pick(requests[(t + i) % requests.size()], pool));
    });
  for (std::thread& t : threads) t.join();
  auto m = ByKey(f.sched->PluginTimings());
  const uint64_t n = kThreads * kPerThread;
  EXPECT_EQ(CountOf(m, "Filter", "label-selector-filter", "gold-only"), n);
  EXPECT_EQ(CountOf(m, "Scorer", "kv-cache-utilization-scorer", "kv"), n);
  EXPECT_EQ(CountOf(m, "Picker", "max-score-picker", "best"), n);
  EXPECT_EQ(f.sched->CycleTiming().count, n);
}

TEST(PluginTimingTest, HistogramBucketsAreCumulativeWithInclusiveBounds) {
  TimingHistogram h;
  h.Record(1000);        // exactly 1 us: inside le=1e-06
  h.Record(1001);        // just above: le=2.5e-06
  h.Record(150000);      // 150 us: le=0.0002
  h.Record(2000000000);  // 2 s: only +Inf
  h.Record(-5);          // a clock step backwards counts as 0
  const DurationHistogram s = h.Snapshot();
  EXPECT_EQ(s.count, 5u);
  EXPECT_NEAR(s.sum_seconds, (1000 + 1001 + 150000 + 2000000000) / 1e9, 1e-12);
  ASSERT_EQ(s.bucket_counts.size(), kTimingBucketBoundsSeconds.size());
  EXPECT_EQ(s.bucket_counts[0], 2u);  // -5 -> 0 and 1000
  EXPECT_EQ(s.bucket_counts[1], 3u);
  EXPECT_EQ(kTimingBucketBoundsSeconds[7], 2e-4);
  EXPECT_EQ(s.bucket_counts[6], 3u);  // le=1e-4
  EXPECT_EQ(s.bucket_counts[7], 4u);  // le=2e-4
  EXPECT_EQ(s.bucket_counts.back(), 4u);
}

}  // namespace
}  // namespace epp
