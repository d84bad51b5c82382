// Private: plugin types of GIE configs that name what epp does anyway (accepted.cc); their parameters
// are validated and kept for the effective config.
#pragma once

#include <string>
#include <string_view>

#include "plugins/plugin_util.h"

namespace epp::plugins {

inline constexpr std::string_view kMetricsDataSourceType = "metrics-data-source";
// llm-d's in-flight load producer: epp's scheduler keeps in-flight counters itself.
inline constexpr std::string_view kInflightLoadProducerType = "inflight-load-producer";

PluginOr CreateMetricsDataSource(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateInflightLoadProducer(const std::string& name, const Params& params, const PluginContext& ctx);

// Declared parameters. (The request parsers, once here, are in plugins/parser/.)
PluginSchema MetricsDataSourceSchema();
PluginSchema InflightLoadProducerSchema();

}  // namespace epp::plugins
