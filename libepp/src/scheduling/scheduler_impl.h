// Private: the Scheduler's state, shared by scheduler.cc (the cycle) and config/build*.cc (BuildScheduler).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "epp/params.h"
#include "epp/plugin.h"
#include "epp/scheduler.h"
#include "epp/scheduling.h"
#include "plugins/capabilities.h"

namespace epp {

// Steady-clock nanoseconds: plugin timings measure real time even when the scheduler runs on a
// ManualClock (tests, virtual-time replay).
inline int64_t TimingNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One latency histogram (a plugin at an extension point, or the whole cycle). Record() is two
// relaxed atomic adds, so concurrent picks only contend on the cache line; the count is the sum of
// the buckets, which keeps it equal to the +Inf bucket in every snapshot.
class TimingHistogram {
 public:
  static constexpr size_t kBounds = kTimingBucketBoundsSeconds.size();

  void Record(int64_t ns) {
    if (ns < 0) ns = 0;
    size_t b = 0;
    while (b < kBounds && ns > kBoundsNs[b]) ++b;  // `le`: a value equal to a bound is inside it
    buckets_[b].fetch_add(1, std::memory_order_relaxed);
    sum_ns_.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
  }
  DurationHistogram Snapshot() const;

 private:
  static constexpr std::array<int64_t, kBounds> kBoundsNs = [] {
    std::array<int64_t, kBounds> ns{};
    for (size_t i = 0; i < kBounds; ++i) ns[i] = static_cast<int64_t>(kTimingBucketBoundsSeconds[i] * 1e9 + 0.5);
    return ns;
  }();
  std::array<std::atomic<uint64_t>, kBounds + 1> buckets_{};  // per bucket, not cumulative; last = +Inf
  std::atomic<uint64_t> sum_ns_{0};
};

struct PluginTimer {
  const char* extension_point = "";
  const Plugin* plugin = nullptr;
  TimingHistogram histogram;
  // The OpenTelemetry span name of a call ("llm_d.epp.scorer.<type>", ...), made once.
  std::string span_name;
};

// Records the time from construction to destruction (a scope with several exits).
class ScopedTiming {
 public:
  explicit ScopedTiming(TimingHistogram& histogram) : histogram_(histogram), start_(TimingNowNs()) {}
  ~ScopedTiming() { histogram_.Record(TimingNowNs() - start_); }
  ScopedTiming(const ScopedTiming&) = delete;
  ScopedTiming& operator=(const ScopedTiming&) = delete;

 private:
  TimingHistogram& histogram_;
  int64_t start_;
};

struct WeightedScorer {
  const Plugin* plugin = nullptr;
  const Scorer* scorer = nullptr;
  double weight = 1.0;
};

struct Profile {
  std::string name;
  std::vector<std::pair<const Plugin*, const Filter*>> filters;
  std::vector<WeightedScorer> scorers;
  const Plugin* picker_plugin = nullptr;
  const Picker* picker = nullptr;
  // Set by the Scheduler's constructor (SetUpTimers), aligned with filters / scorers.
  std::vector<PluginTimer*> filter_timers;
  std::vector<PluginTimer*> scorer_timers;
  PluginTimer* picker_timer = nullptr;
};

// Requests and estimated tokens in flight per endpoint address.
class LoadTracker {
 public:
  void Add(std::string_view endpoint, int64_t requests, int64_t tokens);
  // Fills per-endpoint counters aligned with `endpoints`.
  void Snapshot(std::span<const Endpoint> endpoints, std::vector<int64_t>& requests, std::vector<int64_t>& tokens) const;
  std::pair<int64_t, int64_t> Get(std::string_view endpoint) const;
  void Forget(std::string_view endpoint);
  // Shared state: the other replicas' counts, added to this replica's in Snapshot (not in Get).
  void SetRemote(std::span<const RemoteLoad> remote);
  std::pair<int64_t, int64_t> GetRemote(std::string_view endpoint) const;

 private:
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, std::pair<int64_t, int64_t>> load_;
  absl::flat_hash_map<std::string, std::pair<int64_t, int64_t>> remote_;
};

struct Scheduler::Impl {
  std::unique_ptr<Rng> owned_rng;
  Rng* rng = nullptr;
  Clock* clock = nullptr;
  SharedPrefixBus* shared_prefix = nullptr;  // the PluginContext's: flow-control policies built later share through it
  // Every plugin, config order. Shared: a rebuilt scheduler (config reload) keeps the instances
  // whose name, type and effective parameters did not change, state included.
  std::vector<std::shared_ptr<Plugin>> plugins;
  std::vector<Profile> profiles;
  std::vector<std::string> profile_names;  // aligned with profiles
  const ProfileHandler* handler = nullptr;
  std::vector<std::string> owned_headers;  // handler->OwnedHeaders(), lowercase
  const Plugin* handler_plugin = nullptr;
  const SaturationDetector* detector = nullptr;
  const Plugin* detector_plugin = nullptr;
  std::vector<const DataProducer*> producers;
  // Which parser reads a request, by path: the configured requestHandler.parsers, else llm-d's default list.
  ParserSet parsers = ParserSet::Default();
  std::vector<const ResponseHeaderSource*> response_header_sources;
  std::vector<const ResponseMetadataSource*> response_metadata_sources;
  std::vector<const RequestObserver*> observers;
  std::vector<const Admitter*> admitters;
  std::vector<const Screener*> screeners;                        // config order
  std::vector<const RequestHeaderSource*> request_header_sources;  // config order
  std::vector<const RequestHeaderProcessor*> header_processors;  // config order
  // The plugins' runtime capabilities and what they add up to, indexed by the Scheduler's
  // constructor once the plugins above are in place.
  plugins::Capabilities caps;
  RuntimeNeeds needs;
  std::vector<std::string> warnings;
  Params effective;  // the effective configuration document
  // Shared with the schedulers rebuilt from this one, so that requests picked by one and
  // released by another are counted once.
  std::shared_ptr<LoadTracker> load = std::make_shared<LoadTracker>();

  // Plugin timings, set up by the Scheduler's constructor once the plugins above are in place.
  // `timers` owns them in the order PluginTimings() reports; the others point into it, aligned
  // with producers / observers.
  std::vector<std::unique_ptr<PluginTimer>> timers;
  std::vector<PluginTimer*> producer_timers;
  std::vector<PluginTimer*> observer_timers;
  std::vector<PluginTimer*> admitter_timers;
  std::vector<PluginTimer*> screener_timers;
  PluginTimer* detector_timer = nullptr;
  PluginTimer* profile_picker_timer = nullptr;
  PluginTimer* process_results_timer = nullptr;
  mutable TimingHistogram cycle_timing;  // whole Pick() calls
};

}  // namespace epp
