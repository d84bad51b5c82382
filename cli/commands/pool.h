// Flags shared by the commands that schedule (explain, pick): the configuration, the endpoint
// set and the seed, turned into a Scheduler and a snapshot of endpoints.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "epp/endpoint.h"
#include "epp/kv/subscriber.h"
#include "epp/plugin.h"
#include "epp/scheduler.h"
#include "epp/status.h"

namespace eppctl {

struct PoolOptions {
  std::string config;                  // EndpointPickerConfig file; empty = GIE's default
  std::string endpoints_file;          // endpoints YAML/JSON
  std::vector<std::string> endpoints;  // ADDR[=METRICS]
  uint64_t seed = 0;
  std::string engine = "auto";
  double timeout_s = 2.0;
  bool insecure = false;
  std::string region, zone;  // PluginContext: where the EPP runs (locality plugins)
};

void AddPoolFlags(CLI::App* cmd, PoolOptions& o);

// A frozen moment: metrics are read (or scraped) once and stamped with a clock that does not
// move, so a long analysis never sees them go stale.
struct Pool {
  epp::ManualClock clock{0};
  std::unique_ptr<epp::SeededRng> rng;
  std::unique_ptr<epp::Scheduler> scheduler;
  std::vector<epp::Endpoint> endpoints;
  // With a precise prefix producer: what each endpoint's KV-event replay said it holds.
  std::vector<epp::KvEndpointStats> kv;
};

// Loads config and endpoints; prints config warnings and endpoint metric errors on stderr.
// kInvalidArgument / kNotFound for bad flags, files or configs (exit 2).
absl::StatusOr<std::unique_ptr<Pool>> BuildPool(const PoolOptions& o);

// Splits "a,b , c" into trimmed non-empty items.
std::vector<std::string> SplitList(const std::string& s);

}  // namespace eppctl
