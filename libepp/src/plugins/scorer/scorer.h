// Private: the scorers (scorers.cc: metric and load scorers, prefix-cache-scorer; cache_aware_scorer.cc;
// llmd_scorers.cc: llm-d's no-hit-lru, load-aware and active-request scorers;
// llmd_affinity_scorers.cc: context-length-aware, header-label-affinity-scorer).
#pragma once

#include <string>
#include <string_view>

#include "plugins/plugin_util.h"

namespace epp::plugins {

inline constexpr std::string_view kQueueScorerType = "queue-scorer";
inline constexpr std::string_view kRunningRequestsScorerType = "running-requests-size-scorer";
inline constexpr std::string_view kKvCacheScorerType = "kv-cache-utilization-scorer";
inline constexpr std::string_view kLoraAffinityScorerType = "lora-affinity-scorer";
inline constexpr std::string_view kTokenLoadScorerType = "token-load-scorer";
inline constexpr std::string_view kPrefixCacheScorerType = "prefix-cache-scorer";
inline constexpr std::string_view kCacheAwareScorerType = "cache-aware-scorer";  // epp's own
inline constexpr std::string_view kNoHitLruScorerType = "no-hit-lru-scorer";
inline constexpr std::string_view kLoadAwareScorerType = "load-aware-scorer";
inline constexpr std::string_view kActiveRequestScorerType = "active-request-scorer";
inline constexpr std::string_view kEstimatedTtftScorerType = "estimated-ttft-scorer";  // epp's own (ttft_scorer.cc)
// peer_scorers.cc: peers' routing costs for replay baselines.
inline constexpr std::string_view kVllmLoadAwareScorerType = "vllm-loadaware-scorer";
inline constexpr std::string_view kDynamoKvCostScorerType = "dynamo-kv-cost-scorer";
// session_affinity.cc: the scorer and the filter share the session logic.
inline constexpr std::string_view kSessionAffinityScorerType = "session-affinity-scorer";
inline constexpr std::string_view kSessionAffinityFilterType = "session-affinity-filter";
// llmd_affinity_scorers.cc: label-driven affinity.
inline constexpr std::string_view kContextLengthAwareType = "context-length-aware";
inline constexpr std::string_view kHeaderLabelAffinityScorerType = "header-label-affinity-scorer";
// The label context-length-aware reads by default: "min-max" prompt tokens.
inline constexpr std::string_view kContextLengthRangeLabel = "llm-d.ai/context-length-range";
// llm-d's cluster-scoped variants (candidates are whole pools behind their gateways): queue and
// KV cache read the pool aggregates multicluster-metrics-extractor writes (Endpoint::attributes,
// datalayer.h's keys) and fail the config without one;
// prefix cache and the session filter are the single-cluster plugins under their own type.
inline constexpr std::string_view kMultiClusterQueueScorerType = "multicluster-queue-scorer";
inline constexpr std::string_view kMultiClusterKvCacheScorerType = "multicluster-kv-cache-utilization-scorer";
inline constexpr std::string_view kMultiClusterPrefixCacheScorerType = "multicluster-prefix-cache-scorer";
inline constexpr std::string_view kMultiClusterSessionAffinityFilterType = "multicluster-session-affinity-filter";

PluginOr CreateQueueScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateRunningRequestsScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateKvCacheScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateLoraAffinityScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateTokenLoadScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreatePrefixCacheScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateCacheAwareScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateNoHitLruScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateLoadAwareScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateActiveRequestScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateEstimatedTtftScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateVllmLoadAwareScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateDynamoKvCostScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateSessionAffinityScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateSessionAffinityFilter(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateContextLengthAware(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateHeaderLabelAffinityScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateMultiClusterQueueScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateMultiClusterKvCacheScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateMultiClusterPrefixCacheScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateMultiClusterSessionAffinityFilter(const std::string& name, const Params& params, const PluginContext& ctx);

// Declared parameters (ParamTable::Schema()) of the types above that take any; the others use
// NoParamsSchema().
PluginSchema TokenLoadScorerSchema();
PluginSchema PrefixCacheScorerSchema();
PluginSchema CacheAwareScorerSchema();
PluginSchema NoHitLruScorerSchema();
PluginSchema LoadAwareScorerSchema();
PluginSchema ActiveRequestScorerSchema();
PluginSchema EstimatedTtftScorerSchema();
PluginSchema VllmLoadAwareScorerSchema();
PluginSchema DynamoKvCostScorerSchema();
PluginSchema SessionAffinityScorerSchema();
PluginSchema SessionAffinityFilterSchema();
PluginSchema ContextLengthAwareSchema();
PluginSchema HeaderLabelAffinityScorerSchema();

// The prefix ratio GIE's prefix scorer computes (also the affinity filter's and explain's).
double PrefixRatio(int match_blocks, int total_blocks);

}  // namespace epp::plugins
