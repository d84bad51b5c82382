// Private: llm-d Router's SLO-aware latency plugins (latency_plugins.cc), on the in-process
// latency predictor (latency/predictor.h). The producer fills SchedulingContext::latency; the
// others read it.
//
//   predicted-latency-producer  per-endpoint TTFT/TPOT predictions and headroom for every
//                               candidate; trains from the response path (first token, end)
//   latency-scorer              scores by headroom (SLO - predicted), `least`/`most`, deficit
//                               buckets; without predictions a blend of free KV, queue, prefix
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
