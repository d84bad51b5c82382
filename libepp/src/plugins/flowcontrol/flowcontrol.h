// Private: llm-d Router's flow-control policy plugins (fairness.cc, ordering.cc, usage_limits.cc,
// eviction.cc). Each is a Plugin implementing one interface of flowcontrol/policies.h; the
// flow-control layer finds it by the name a config's flowControl section gives
// (FlowControlPoliciesOf in capabilities.h). The concurrency-detector, a saturation detector
// flow control also reads, lives in saturation/. docs/flow-control.md describes every type.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "plugins/plugin_util.h"

namespace epp::plugins {

// Fairness: which flow of a priority band is served next.
inline constexpr std::string_view kGlobalStrictFairnessType = "global-strict-fairness-policy";
inline constexpr std::string_view kRoundRobinFairnessType = "round-robin-fairness-policy";
inline constexpr std::string_view kProgramAwareFairnessType = "program-aware-fairness";
// Ordering: which request of a flow's queue is served next.
inline constexpr std::string_view kFcfsOrderingType = "fcfs-ordering-policy";
inline constexpr std::string_view kEdfOrderingType = "edf-ordering-policy";
inline constexpr std::string_view kSloDeadlineOrderingType = "slo-deadline-ordering-policy";
// Usage limits: the saturation up to which each priority band may dispatch.
inline constexpr std::string_view kStaticUsageLimitType = "static-usage-limit-policy";
inline constexpr std::string_view kPriorityHoldbackType = "priority-holdback-policy";
inline constexpr std::string_view kSoftReflectiveCeilingType = "soft-reflective-ceiling-policy";
// Eviction of in-flight requests: which may be evicted, and which first.
inline constexpr std::string_view kSheddableEvictionFilterType = "sheddable-eviction-filter";
inline constexpr std::string_view kPriorityThenTimeEvictionType = "priority-then-time-eviction-order-policy";

PluginOr CreateGlobalStrictFairness(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateRoundRobinFairness(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateProgramAwareFairness(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateFcfsOrdering(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateEdfOrdering(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateSloDeadlineOrdering(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateStaticUsageLimit(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreatePriorityHoldback(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateSoftReflectiveCeiling(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateSheddableEvictionFilter(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreatePriorityThenTimeEviction(const std::string& name, const Params& params, const PluginContext& ctx);

// Declared parameters; the others use NoParamsSchema().
PluginSchema ProgramAwareFairnessSchema();
PluginSchema StaticUsageLimitSchema();
PluginSchema PriorityHoldbackSchema();

// What program-aware-fairness knows about the programs (flows) it has seen, besides its picks: for
// the layer's metrics (llm-d's llm_d_epp_program_aware_* gauges) and tests.
class ProgramAwareStats {
 public:
  virtual ~ProgramAwareStats() = default;
  // Attained service of `flow_id` in weighted tokens (input + 2 x output), decayed to `now_us`;
  // 0 for a program it does not track.
  virtual double AttainedService(std::string_view flow_id, int64_t now_us) const = 0;
  // The same plus what the other replicas reported for it through shared state (the service its
  // picks compare); equal to AttainedService without shared state.
  virtual double PoolAttainedService(std::string_view flow_id, int64_t now_us) const = 0;
  // Running mean of the queue wait of the program's dispatched requests, in milliseconds.
  virtual double AverageWaitMs(std::string_view flow_id) const = 0;
  virtual int64_t InFlight(std::string_view flow_id) const = 0;
  // Jain's fairness index over the programs' mean waits, (sum x)^2 / (n * sum x^2), over the
  // programs with at least one wait observed; 1 when fewer than two have one.
  virtual double JainsFairnessIndex() const = 0;
  virtual size_t Programs() const = 0;
};

}  // namespace epp::plugins
