// Private: the data producers (prefix_producer.cc).
#pragma once

#include <string>
#include <string_view>

#include "plugins/plugin_util.h"

namespace epp::plugins {

inline constexpr std::string_view kApproxPrefixProducerType = "approx-prefix-cache-producer";

PluginOr CreateApproxPrefixProducer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginSchema ApproxPrefixProducerSchema();

inline constexpr std::string_view kPrecisePrefixProducerType = "precise-prefix-cache-producer";
inline constexpr std::string_view kPrecisePrefixScorerType = "precise-prefix-cache-scorer";  // deprecated wrapper
inline constexpr std::string_view kTokenProducerType = "token-producer";
inline constexpr std::string_view kTokenizerType = "tokenizer";  // token-producer's legacy name
inline constexpr std::string_view kEndpointNotificationSourceType = "endpoint-notification-source";

PluginOr CreatePrecisePrefixProducer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreatePrecisePrefixScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateTokenProducer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateEndpointNotificationSource(const std::string& name, const Params& params, const PluginContext& ctx);
PluginSchema PrecisePrefixProducerSchema();  // precise-prefix-cache-scorer's too
PluginSchema TokenProducerSchema();

}  // namespace epp::plugins
