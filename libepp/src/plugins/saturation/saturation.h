// Private: the saturation detectors (utilization_detector.cc, concurrency_detector.cc).
#pragma once

#include <string>
#include <string_view>

#include "plugins/plugin_util.h"

namespace epp::plugins {

inline constexpr std::string_view kUtilizationDetectorType = "utilization-detector";

PluginOr CreateUtilizationDetector(const std::string& name, const Params& params, const PluginContext& ctx);
PluginSchema UtilizationDetectorSchema();

// llm-d Router's detector from the scheduler's in-flight requests / tokens; also a filter.
inline constexpr std::string_view kConcurrencyDetectorType = "concurrency-detector";

PluginOr CreateConcurrencyDetector(const std::string& name, const Params& params, const PluginContext& ctx);
PluginSchema ConcurrencyDetectorSchema();

}  // namespace epp::plugins
