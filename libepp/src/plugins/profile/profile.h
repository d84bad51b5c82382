// Private: the profile handlers (single_profile_handler.cc).
#pragma once

#include <string>
#include <string_view>

#include "plugins/plugin_util.h"

namespace epp::plugins {

inline constexpr std::string_view kSingleProfileHandlerType = "single-profile-handler";

PluginOr CreateSingleProfileHandler(const std::string& name, const Params& params, const PluginContext& ctx);

}  // namespace epp::plugins
