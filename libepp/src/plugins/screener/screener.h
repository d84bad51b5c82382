// Private: the screeners (llm-d's request-control Screener extension point: scheduling.h's
// Screener), which narrow the candidates once per request before every profile.
#pragma once

#include <string>
#include <string_view>

#include "plugins/plugin_util.h"

namespace epp::plugins {

inline constexpr std::string_view kDisaggregatedSetRolloutScreenerType = "disaggregatedset-rollout-screener";
// The DisaggregatedSet operator's Pod labels, the defaults of revisionGating's label keys.
inline constexpr std::string_view kDisaggregatedSetRevisionLabel = "disaggregatedset.x-k8s.io/revision";
inline constexpr std::string_view kDisaggregatedSetRoleLabel = "disaggregatedset.x-k8s.io/role";

PluginOr CreateDisaggregatedSetRolloutScreener(const std::string& name, const Params& params, const PluginContext& ctx);
PluginSchema DisaggregatedSetRolloutScreenerSchema();

}  // namespace epp::plugins
