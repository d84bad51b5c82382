// Private: the pickers (pickers.cc).
#pragma once

#include <string>
#include <string_view>

#include "plugins/plugin_util.h"

namespace epp::plugins {

inline constexpr std::string_view kMaxScorePickerType = "max-score-picker";
inline constexpr std::string_view kRandomPickerType = "random-picker";
inline constexpr std::string_view kWeightedRandomPickerType = "weighted-random-picker";
inline constexpr std::string_view kRoundRobinPickerType = "round-robin-picker";  // epp's own
inline constexpr std::string_view kOrcaWrrPickerType = "orca-wrr-picker";  // Envoy's ORCA weighted round robin
inline constexpr std::string_view kSoftmaxPickerType = "softmax-picker";     // Dynamo's selection at a temperature

PluginOr CreateMaxScorePicker(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateRandomPicker(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateWeightedRandomPicker(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateRoundRobinPicker(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateSoftmaxPicker(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateOrcaWrrPicker(const std::string& name, const Params& params, const PluginContext& ctx);

// Declared parameters: PickerSchema() is the max-score, random, weighted-random and round-robin
// pickers' (maxNumOfEndpoints).
PluginSchema PickerSchema();
PluginSchema SoftmaxPickerSchema();
PluginSchema OrcaWrrPickerSchema();

}  // namespace epp::plugins
