// Private: admission plugins (probabilistic_admitter.cc), the Admitter extension point.
#pragma once

#include <string>
#include <string_view>

#include "plugins/plugin_util.h"

namespace epp::plugins {

inline constexpr std::string_view kProbabilisticAdmitterType = "probabilistic-admitter";

PluginOr CreateProbabilisticAdmitter(const std::string& name, const Params& params, const PluginContext& ctx);
PluginSchema ProbabilisticAdmitterSchema();

}  // namespace epp::plugins
