// Private: plugins that act on the model server's response (request_attribute_reporter.cc).
#pragma once

#include <string>
#include <string_view>

#include "plugins/plugin_util.h"

namespace epp::plugins {

inline constexpr std::string_view kRequestAttributeReporterType = "request-attribute-reporter";

PluginOr CreateRequestAttributeReporter(const std::string& name, const Params& params, const PluginContext& ctx);
PluginSchema RequestAttributeReporterSchema();

}  // namespace epp::plugins
