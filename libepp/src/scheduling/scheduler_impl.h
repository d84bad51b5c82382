// Private: the Scheduler's state, shared by scheduler.cc (the cycle) and build.cc (BuildScheduler).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "epp/params.h"
#include "epp/plugin.h"
#include "epp/scheduler.h"
#include "epp/scheduling.h"

namespace epp {

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
};

// Requests and estimated tokens in flight per endpoint address.
class LoadTracker {
 public:
  void Add(std::string_view endpoint, int64_t requests, int64_t tokens);
  // Fills per-endpoint counters aligned with `endpoints`.
  void Snapshot(std::span<const Endpoint> endpoints, std::vector<int64_t>& requests, std::vector<int64_t>& tokens) const;
  std::pair<int64_t, int64_t> Get(std::string_view endpoint) const;
  void Forget(std::string_view endpoint);

 private:
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, std::pair<int64_t, int64_t>> load_;
};

struct Scheduler::Impl {
  std::unique_ptr<Rng> owned_rng;
  Rng* rng = nullptr;
  Clock* clock = nullptr;
  std::vector<std::unique_ptr<Plugin>> plugins;  // owns every plugin, config order
  std::vector<Profile> profiles;
  const ProfileHandler* handler = nullptr;
  const Plugin* handler_plugin = nullptr;
  const SaturationDetector* detector = nullptr;
  const Plugin* detector_plugin = nullptr;
  std::vector<const DataProducer*> producers;
  std::vector<const RequestObserver*> observers;
  std::vector<std::string> warnings;
  Params effective;  // the effective configuration document
  mutable LoadTracker load;
};

}  // namespace epp
