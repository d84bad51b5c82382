// Private: the saturation detectors (utilization_detector.cc).
#pragma once

#include <string>
#include <string_view>

#include "plugins/plugin_util.h"

namespace epp::plugins {

inline constexpr std::string_view kUtilizationDetectorType = "utilization-detector";

PluginOr CreateUtilizationDetector(const std::string& name, const Params& params, const PluginContext& ctx);
PluginSchema UtilizationDetectorSchema();

}  // namespace epp::plugins
