// Private: the data producers (prefix_producer.cc).
#pragma once

#include <string>
#include <string_view>

#include "plugins/plugin_util.h"

namespace epp::plugins {

inline constexpr std::string_view kApproxPrefixProducerType = "approx-prefix-cache-producer";

PluginOr CreateApproxPrefixProducer(const std::string& name, const Params& params, const PluginContext& ctx);

}  // namespace epp::plugins
