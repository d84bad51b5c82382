// Private: data-layer plugins (extractors.cc): what llm-d's data layer extracts from an endpoint
// for the scheduling plugins, here read from what the endpoint pool already keeps.
//   core-metrics-extractor: the engine mappings (engineConfigs with customMetrics, engineLabelKey,
//     defaultEngine) the pool reads metrics with; `eppctl serve`, `pick` and `explain` apply them.
//   topology-extractor: an endpoint's host, rack, zone and region from its labels.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "epp/metrics.h"
#include "plugins/plugin_util.h"

namespace epp::plugins {

inline constexpr std::string_view kCoreMetricsExtractorType = "core-metrics-extractor";
inline constexpr std::string_view kTopologyExtractorType = "topology-extractor";

PluginOr CreateCoreMetricsExtractor(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateTopologyExtractor(const std::string& name, const Params& params, const PluginContext& ctx);
PluginSchema CoreMetricsExtractorSchema();
PluginSchema TopologyExtractorSchema();

// Implemented by core-metrics-extractor (Scheduler::ConfigureScrape finds it).
class ScrapeSettingsSource {
 public:
  virtual ~ScrapeSettingsSource() = default;
  virtual void ConfigureScrape(ScrapeOptions& options) const = 0;
  // True when one of its engine configs has a customMetrics entry for `attribute`.
  virtual bool DeclaresAttribute(std::string_view attribute) const = 0;
};

// Where an endpoint sits, tightest level first. Empty fields are unknown.
struct Topology {
  std::string host, rack, zone, region;
  bool empty() const { return host.empty() && rack.empty() && zone.empty() && region.empty(); }
};

// The tightest level two endpoints share (llm-d's order: host < rack < zone < region < none).
// A level is shared when both values are equal and non-empty; the looser levels are not checked
// (a shared host is "host" even if the racks differ), as llm-d compares.
enum class TopologyLevel { kHost = 0, kRack = 1, kZone = 2, kRegion = 3, kNone = 4 };
TopologyLevel CompareTopology(const Topology& a, const Topology& b);
const char* TopologyLevelName(TopologyLevel level);  // "host", ..., "none"

// Implemented by topology-extractor.
class TopologySource {
 public:
  virtual ~TopologySource() = default;
  // The endpoint's topology; nullopt when none of its labels is set (llm-d writes no attribute).
  virtual std::optional<Topology> TopologyOf(const Endpoint& e) const = 0;
};

}  // namespace epp::plugins
