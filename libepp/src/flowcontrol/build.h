// Private: the flow-control layer's configuration from a parsed EndpointPickerConfig: the
// `flowControl:` section (EppConfig::flow_control) with the policy plugins it names, resolved by
// name and checked for their kind (FlowControlPoliciesOf). Defaults are the reference's
// (llm-d-router pkg/epp/config/loader/flowcontrol.go): fcfs-ordering-policy,
// global-strict-fairness-policy and static-usage-limit-policy, looked up by those names first (a
// config may define them) and created when absent.
#pragma once

#include <functional>
#include <string_view>

#include "epp/config.h"
#include "epp/plugin.h"
#include "epp/registry.h"
#include "flowcontrol/controller.h"

namespace epp {
class EndpointSource;
class Scheduler;
}

namespace epp::flowcontrol {

// The plugin a config names, or nullptr.
using PluginLookup = std::function<const Plugin*(std::string_view name)>;

// Errors name the config path: "config.yaml:12: flowControl.priorityBands[1].fairnessPolicyRef:
// plugin 'x' (type: max-score-picker) is not a fairness policy".
absl::StatusOr<ControllerConfig> BuildControllerConfig(const EppConfig& config, const PluginLookup& lookup,
                                                       const PluginRegistry& registry,
                                                       const PluginContext& context = {});

// Over the plugins of a scheduler built from `config` (BuildScheduler instantiates every plugin
// of the config, referenced by a profile or not).
absl::StatusOr<ControllerConfig> BuildControllerConfig(const EppConfig& config, const Scheduler& scheduler,
                                                       const PluginRegistry& registry);

// The pool as the dispatcher sees it: `scheduler`'s saturation detector over every endpoint of
// `source` (per stage with llm-d roles: StageSaturation), reading the scheduler's own in-flight
// counts, so a request picked in the dispatch callback counts at the next cycle. No detector:
// saturation 0. `source` must outlive the sampler.
PoolSampler MakePoolSampler(std::shared_ptr<const Scheduler> scheduler, const EndpointSource& source);
// One sample of `pool` as MakePoolSampler's sampler takes it (the replay samples its own pool).
PoolSample SamplePool(const Scheduler& scheduler, const std::vector<Endpoint>& pool);

// True when the configuration's featureGates turn the layer on.
bool FlowControlEnabled(const EppConfig& config);

}  // namespace epp::flowcontrol
