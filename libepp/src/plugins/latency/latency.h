// Private: llm-d Router's SLO-aware latency plugins (latency_plugins.cc). For now epp knows their
// types and checks their parameters exactly as llm-d does (names, types, defaults, ranges), so a
// config naming them loads and `eppctl config effective` shows what they would run with; what
// they do (an in-process latency predictor, headroom tiers and scores, SLO admission) is not
// implemented yet, and each factory says so in one config warning.
//
//   predicted-latency-producer  llm-d's per-endpoint TTFT/TPOT predictor and its training
//   latency-scorer              scores by headroom (SLO - predicted); without predictions, a
//                               composite of free KV cache, queue depth and prefix match
//   slo-headroom-tier-filter    keeps the tier that meets the SLOs, exploring the other tier
//                               with probability epsilonExploreNeg
//   latency-slo-admitter        rejects sheddable requests no endpoint can serve within its SLOs
#pragma once

#include <string>
#include <string_view>

#include "plugins/plugin_util.h"

namespace epp::plugins {

inline constexpr std::string_view kPredictedLatencyProducerType = "predicted-latency-producer";
inline constexpr std::string_view kLatencyScorerType = "latency-scorer";
inline constexpr std::string_view kSloHeadroomTierFilterType = "slo-headroom-tier-filter";
inline constexpr std::string_view kLatencySloAdmitterType = "latency-slo-admitter";

PluginOr CreatePredictedLatencyProducer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateLatencyScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateSloHeadroomTierFilter(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateLatencySloAdmitter(const std::string& name, const Params& params, const PluginContext& ctx);

PluginSchema PredictedLatencyProducerSchema();
PluginSchema LatencyScorerSchema();
PluginSchema SloHeadroomTierFilterSchema();
PluginSchema LatencySloAdmitterSchema();

}  // namespace epp::plugins
