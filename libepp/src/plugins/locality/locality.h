// Private: plugins for endpoints spread over regions and zones, and for endpoints that are whole
// pools behind their gateway (a region-level EPP, docs/multicluster.md): capacity ceilings, home-
// region spill-over, RTT and zone preference.
#pragma once

#include <string>
#include <string_view>

#include "plugins/plugin_util.h"

namespace epp::plugins {

inline constexpr std::string_view kCapacityFilterType = "capacity-filter";
inline constexpr std::string_view kCapacityScorerType = "capacity-scorer";
inline constexpr std::string_view kRegionSpilloverFilterType = "region-spillover-filter";
inline constexpr std::string_view kRegionRttScorerType = "region-rtt-scorer";
inline constexpr std::string_view kZonePreferenceScorerType = "zone-preference-scorer";

// The labels the locality plugins read by default; the Kubernetes well-known topology labels are
// the fallback when an endpoint has no label of the short name.
inline constexpr std::string_view kRegionLabel = "region";
inline constexpr std::string_view kZoneLabel = "zone";
inline constexpr std::string_view kKubeRegionLabel = "topology.kubernetes.io/region";
inline constexpr std::string_view kKubeZoneLabel = "topology.kubernetes.io/zone";

PluginOr CreateCapacityFilter(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateCapacityScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateRegionSpilloverFilter(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateRegionRttScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateZonePreferenceScorer(const std::string& name, const Params& params, const PluginContext& ctx);

// Declared parameters; CapacityPluginSchema() is capacity-filter's and capacity-scorer's.
PluginSchema CapacityPluginSchema();
PluginSchema RegionSpilloverFilterSchema();
PluginSchema RegionRttScorerSchema();
PluginSchema ZonePreferenceScorerSchema();

}  // namespace epp::plugins
