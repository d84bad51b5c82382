// Private: the built-in plugin types and their factories. Users reach plugins through the
// registry by type string; tests include this header to build one directly.
//
// Plugins are grouped by extension point in a few files (scorers.cc, filters.cc, pickers.cc,
// prefix_producer.cc, cache_aware_scorer.cc, misc.cc) rather than one file each: most are a
// dozen lines, and grouping keeps the shared helpers (min-max normalisation, parameter reading)
// in one place.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "epp/params.h"
#include "epp/plugin.h"
#include "epp/status.h"

namespace epp::plugins {

// Scorers.
inline constexpr std::string_view kQueueScorerType = "queue-scorer";
inline constexpr std::string_view kRunningRequestsScorerType = "running-requests-size-scorer";
inline constexpr std::string_view kKvCacheScorerType = "kv-cache-utilization-scorer";
inline constexpr std::string_view kLoraAffinityScorerType = "lora-affinity-scorer";
inline constexpr std::string_view kTokenLoadScorerType = "token-load-scorer";
inline constexpr std::string_view kPrefixCacheScorerType = "prefix-cache-scorer";
inline constexpr std::string_view kCacheAwareScorerType = "cache-aware-scorer";
// Filters.
inline constexpr std::string_view kLabelSelectorFilterType = "label-selector-filter";
inline constexpr std::string_view kByLabelSelectorFilterType = "by-label-selector";  // deprecated alias
inline constexpr std::string_view kByLabelFilterType = "by-label";
inline constexpr std::string_view kDecodeFilterType = "decode-filter";
inline constexpr std::string_view kPrefillFilterType = "prefill-filter";
inline constexpr std::string_view kEncodeFilterType = "encode-filter";
inline constexpr std::string_view kPrefixAffinityFilterType = "prefix-cache-affinity-filter";
// Pickers.
inline constexpr std::string_view kMaxScorePickerType = "max-score-picker";
inline constexpr std::string_view kRandomPickerType = "random-picker";
inline constexpr std::string_view kWeightedRandomPickerType = "weighted-random-picker";
inline constexpr std::string_view kRoundRobinPickerType = "round-robin-picker";  // epp's own
// Others.
inline constexpr std::string_view kSingleProfileHandlerType = "single-profile-handler";
inline constexpr std::string_view kUtilizationDetectorType = "utilization-detector";
inline constexpr std::string_view kApproxPrefixProducerType = "approx-prefix-cache-producer";
inline constexpr std::string_view kMetricsDataSourceType = "metrics-data-source";
inline constexpr std::string_view kCoreMetricsExtractorType = "core-metrics-extractor";
inline constexpr std::string_view kOpenAIParserType = "openai-parser";

// The label llm-d's role filters read.
inline constexpr std::string_view kRoleLabel = "llm-d.ai/role";

using PluginOr = absl::StatusOr<std::unique_ptr<Plugin>>;

PluginOr CreateQueueScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateRunningRequestsScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateKvCacheScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateLoraAffinityScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateTokenLoadScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreatePrefixCacheScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateCacheAwareScorer(const std::string& name, const Params& params, const PluginContext& ctx);

PluginOr CreateLabelSelectorFilter(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateByLabelFilter(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateDecodeFilter(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreatePrefillFilter(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateEncodeFilter(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreatePrefixAffinityFilter(const std::string& name, const Params& params, const PluginContext& ctx);

PluginOr CreateMaxScorePicker(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateRandomPicker(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateWeightedRandomPicker(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateRoundRobinPicker(const std::string& name, const Params& params, const PluginContext& ctx);

PluginOr CreateSingleProfileHandler(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateUtilizationDetector(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateApproxPrefixProducer(const std::string& name, const Params& params, const PluginContext& ctx);
// metrics-data-source, core-metrics-extractor, openai-parser: what epp does anyway; their
// parameters are validated and kept for the effective config.
PluginOr CreateMetricsDataSource(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateCoreMetricsExtractor(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateOpenAIParser(const std::string& name, const Params& params, const PluginContext& ctx);

// Implemented by plugins that keep per-endpoint state (the prefix index, the cache-aware tree);
// the scheduler finds them with dynamic_cast.
class EndpointState {
 public:
  virtual ~EndpointState() = default;
  virtual void ForgetEndpoint(std::string_view endpoint) const = 0;
  virtual size_t PrefixEntries() const { return 0; }  // prefix index entries, for metrics
};

// Exposed for the scheduler's explain text: the prefix ratio score GIE's scorer computes.
double PrefixRatio(int match_blocks, int total_blocks);

}  // namespace epp::plugins
