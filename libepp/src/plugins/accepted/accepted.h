// Private: plugin types of GIE configs that name what epp does anyway (accepted.cc); their parameters
// are validated and kept for the effective config.
#pragma once

#include <string>
#include <string_view>

#include "plugins/plugin_util.h"

namespace epp::plugins {

inline constexpr std::string_view kMetricsDataSourceType = "metrics-data-source";
inline constexpr std::string_view kOpenAIParserType = "openai-parser";
// llm-d's in-flight load producer: epp's scheduler keeps in-flight counters itself.
inline constexpr std::string_view kInflightLoadProducerType = "inflight-load-producer";
// Routes without parsing the body (Scheduler::RoutesUnparsed).
inline constexpr std::string_view kPassthroughParserType = "passthrough-parser";

PluginOr CreateMetricsDataSource(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateOpenAIParser(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateInflightLoadProducer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreatePassthroughParser(const std::string& name, const Params& params, const PluginContext& ctx);

// Declared parameters; the parsers use NoParamsSchema().
PluginSchema MetricsDataSourceSchema();
PluginSchema InflightLoadProducerSchema();

}  // namespace epp::plugins
