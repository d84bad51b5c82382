// Private: the filters (filters.cc): label selectors, llm-d role filters, prefix affinity;
// attribute_plugins.cc: llm-d's endpoint-attribute and topology-affinity filters with their
// scorer twins (each pair shares how it reads the endpoint).
#pragma once

#include <string>
#include <string_view>

#include "plugins/plugin_util.h"

namespace epp::plugins {

inline constexpr std::string_view kLabelSelectorFilterType = "label-selector-filter";
inline constexpr std::string_view kByLabelSelectorFilterType = "by-label-selector";  // deprecated alias
inline constexpr std::string_view kByLabelFilterType = "by-label";
inline constexpr std::string_view kDecodeFilterType = "decode-filter";
inline constexpr std::string_view kPrefillFilterType = "prefill-filter";
inline constexpr std::string_view kEncodeFilterType = "encode-filter";
inline constexpr std::string_view kPrefixAffinityFilterType = "prefix-cache-affinity-filter";
inline constexpr std::string_view kEndpointAttributeFilterType = "endpoint-attribute-filter";
inline constexpr std::string_view kEndpointAttributeScorerType = "endpoint-attribute-scorer";
inline constexpr std::string_view kTopologyAffinityFilterType = "topology-affinity-filter";
inline constexpr std::string_view kTopologyAffinityScorerType = "topology-affinity-scorer";
// utilization_filter.cc: llm-d's caps on an endpoint's load and KV cache.
inline constexpr std::string_view kUtilizationFilterType = "utilization-filter";

// The label llm-d's role filters read.
inline constexpr std::string_view kRoleLabel = "llm-d.ai/role";

PluginOr CreateLabelSelectorFilter(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateByLabelFilter(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateDecodeFilter(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreatePrefillFilter(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateEncodeFilter(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreatePrefixAffinityFilter(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateEndpointAttributeFilter(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateEndpointAttributeScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateTopologyAffinityFilter(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateTopologyAffinityScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateUtilizationFilter(const std::string& name, const Params& params, const PluginContext& ctx);

// Declared parameters (ParamTable::Schema()); the role filters use NoParamsSchema().
PluginSchema LabelSelectorFilterSchema();
PluginSchema ByLabelFilterSchema();
PluginSchema PrefixAffinityFilterSchema();
PluginSchema EndpointAttributeFilterSchema();
PluginSchema EndpointAttributeScorerSchema();
PluginSchema TopologyAffinityFilterSchema();
PluginSchema TopologyAffinityScorerSchema();
PluginSchema UtilizationFilterSchema();

}  // namespace epp::plugins
