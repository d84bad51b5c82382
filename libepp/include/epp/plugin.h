// The plugin base class and what plugins may depend on: time (Clock) and randomness (Rng).
//
// Every scheduling extension (filter, scorer, picker, profile handler, saturation detector, data
// producer) is a Plugin with a TypedName ("name/type"). A plugin exposes the extension points it
// implements through the accessors below (a utilization-detector is both a SaturationDetector and
// a Filter). Plugins get time and randomness only from the PluginContext they were created with,
// so tests and the replay engine control both (a ManualClock and a seeded Rng make every pick
// reproducible).
//
// Thread-safety: plugins are built once and then shared by all request threads; every extension
// method may be called concurrently. A plugin with mutable state (the prefix index, a radix tree)
// synchronizes it itself. Clock and Rng implementations here are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "epp/params.h"

namespace epp {

// Monotonic time in microseconds. The epoch is arbitrary but shared by everything reading the
// same clock (metrics timestamps, staleness checks).
class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowMicros() const = 0;
};

// std::chrono::steady_clock.
class SteadyClock final : public Clock {
 public:
  int64_t NowMicros() const override;
  static SteadyClock& Get();  // a process-wide instance
};

// A clock that moves only when told to: tests and virtual-time replay.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t now_us = 0) : now_(now_us) {}
  int64_t NowMicros() const override { return now_.load(std::memory_order_relaxed); }
  void Set(int64_t now_us) { now_.store(now_us, std::memory_order_relaxed); }
  void Advance(int64_t delta_us) { now_.fetch_add(delta_us, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> now_;
};

// A source of random numbers. Next() is the only virtual; the helpers derive from it.
class Rng {
 public:
  virtual ~Rng() = default;
  virtual uint64_t Next() = 0;
  // Uniform in [0, 1) with 53 bits of precision.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n). REQUIRES: n > 0.
  uint64_t Below(uint64_t n);
  // Fisher-Yates shuffle driven by Below().
  template <typename T>
  void Shuffle(std::span<T> items) {
    for (size_t i = items.size(); i > 1; --i) {
      const size_t j = static_cast<size_t>(Below(i));
      std::swap(items[i - 1], items[j]);
    }
  }
};

// A seeded generator (SplitMix64 stream), safe to share between threads (a mutex). The same seed
// gives the same sequence.
class SeededRng final : public Rng {
 public:
  explicit SeededRng(uint64_t seed) : state_(seed) {}
  uint64_t Next() override;

 private:
  std::mutex mu_;
  uint64_t state_;
};

// What a plugin factory gets besides its parameters. The pointees outlive every plugin.
class SharedPrefixBus;  // epp/shared_state.h

struct PluginContext {
  Clock* clock = &SteadyClock::Get();
  Rng* rng = nullptr;  // required for pickers and probabilistic filters
  // Config-time notes a factory reports (a deprecated parameter and what it maps to); the
  // scheduler's warnings. May be null.
  std::vector<std::string>* warnings = nullptr;
  // Where this EPP runs (serve's --region and --zone): the default home region and gateway zone of
  // the locality plugins (region-spillover-filter, region-rtt-scorer, zone-preference-scorer);
  // empty when not given.
  std::string region;
  std::string zone;
  // State shared with other EPP replicas (epp/shared_state.h): the approx-prefix-cache-producer
  // publishes the blocks it records here and adds the other replicas' to its index. May be null
  // (one replica); must outlive the plugins built with it.
  SharedPrefixBus* shared_prefix = nullptr;
};

class Plugin;

// What BuildScheduler offers a plugin whose parameters name other parts of the config (a profile
// handler naming its deciders and profiles), once every plugin and profile exists.
struct PluginReferences {
  std::function<const Plugin*(std::string_view name)> plugin;  // nullptr when no plugin has that name
  std::vector<std::string> profiles;                            // profile names, config order
  std::vector<std::string>* warnings = nullptr;                 // the scheduler's warnings
  std::vector<const Plugin*> all;                               // every plugin, config order
};

struct TypedName {
  std::string type;
  std::string name;
  // "name/type", as GIE prints it.
  std::string ToString() const { return name + "/" + type; }
};

class Filter;
class Scorer;
class Picker;
class ProfileHandler;
class SaturationDetector;
class DataProducer;
class RequestObserver;
class Admitter;
class RequestHeaderProcessor;
class Screener;
class RequestHeaderSource;
class MetricsSource;
class ResponseHeaderSource;
class ResponseMetadataSource;

// What a plugin reads besides the request (GIE's Consumes()): endpoint metrics, labels, the
// scheduler's in-flight counters and per-cycle data of a producer. BuildScheduler adds the prefix
// producer a profile needs from it; `eppctl config validate --engine/--endpoint` and `explain`
// use it to warn that a plugin reads a metric the endpoints do not expose (it then degrades:
// scores 0, keeps every endpoint).
enum class PluginInput : uint32_t {
  kWaitingQueue = 1u << 0,     // EndpointMetrics::waiting_queue_size
  kRunningRequests = 1u << 1,  // EndpointMetrics::running_requests
  kKvCacheUsage = 1u << 2,     // EndpointMetrics::kv_cache_usage
  kLora = 1u << 3,             // EndpointMetrics::lora
  kCacheGeometry = 1u << 4,    // EndpointMetrics::cache_block_size, cache_num_blocks
  kLabels = 1u << 5,           // Endpoint::labels
  kInflightLoad = 1u << 6,     // the scheduler's in-flight requests and tokens per endpoint
  kPrefixMatch = 1u << 7,      // a prefix producer's match data (SchedulingContext::prefix)
  kLatencyPrediction = 1u << 8,  // predicted-latency-producer's predictions (SchedulingContext::latency)
};
inline constexpr PluginInput kAllPluginInputs[] = {
    PluginInput::kWaitingQueue, PluginInput::kRunningRequests, PluginInput::kKvCacheUsage, PluginInput::kLora,
    PluginInput::kCacheGeometry, PluginInput::kLabels, PluginInput::kInflightLoad, PluginInput::kPrefixMatch, PluginInput::kLatencyPrediction};
// "waiting_queue_size", "running_requests", "kv_cache_usage", "lora", "cache_geometry", "labels",
// "inflight_load", "prefix_match", "latency_prediction".
std::string_view PluginInputName(PluginInput input);

class PluginInputs {
 public:
  constexpr PluginInputs() = default;
  constexpr PluginInputs(std::initializer_list<PluginInput> inputs) {
    for (PluginInput i : inputs) bits_ |= static_cast<uint32_t>(i);
  }
  constexpr bool has(PluginInput i) const { return (bits_ & static_cast<uint32_t>(i)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr PluginInputs operator|(PluginInputs o) const {
    PluginInputs r;
    r.bits_ = bits_ | o.bits_;
    return r;
  }
  // The names in kAllPluginInputs order, joined with ", "; "" when empty.
  std::string ToString() const;

 private:
  uint32_t bits_ = 0;
};

class Plugin {
 public:
  explicit Plugin(TypedName typed_name) : typed_name_(std::move(typed_name)) {}
  virtual ~Plugin() = default;
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const TypedName& typed_name() const { return typed_name_; }
  const std::string& name() const { return typed_name_.name; }
  const std::string& type() const { return typed_name_.type; }

  // The parameters in effect, defaults filled in (a map; empty for plugins without any).
  virtual Params EffectiveParams() const { return Params::Map(); }
  // What the plugin reads (see PluginInput); nothing by default.
  virtual PluginInputs Consumes() const { return {}; }
  // True for a plugin that names other plugins or profiles: BuildScheduler calls Resolve() on it
  // once the config's plugins and profiles exist, and a config reload makes a new instance (its
  // references point into one scheduler).
  virtual bool HasReferences() const { return false; }
  // Looks up what the parameters name; the error names the parameter ("plugins[3].parameters.
  // deciders.prefill: no plugin named 'x'").
  virtual absl::Status Resolve(const PluginReferences& /*refs*/) { return absl::OkStatus(); }

  // The extension points this plugin implements; nullptr for the others.
  virtual const Filter* AsFilter() const { return nullptr; }
  virtual const Scorer* AsScorer() const { return nullptr; }
  virtual const Picker* AsPicker() const { return nullptr; }
  virtual const ProfileHandler* AsProfileHandler() const { return nullptr; }
  virtual const SaturationDetector* AsSaturationDetector() const { return nullptr; }
  virtual const DataProducer* AsDataProducer() const { return nullptr; }
  virtual const RequestObserver* AsRequestObserver() const { return nullptr; }
  virtual const Admitter* AsAdmitter() const { return nullptr; }
  virtual const RequestHeaderProcessor* AsRequestHeaderProcessor() const { return nullptr; }
  virtual const Screener* AsScreener() const { return nullptr; }
  virtual const RequestHeaderSource* AsRequestHeaderSource() const { return nullptr; }
  virtual const MetricsSource* AsMetricsSource() const { return nullptr; }
  virtual const ResponseHeaderSource* AsResponseHeaderSource() const { return nullptr; }
  virtual const ResponseMetadataSource* AsResponseMetadataSource() const { return nullptr; }

 private:
  TypedName typed_name_;
};

}  // namespace epp
