// flowControl section -> ControllerConfig (build.h).
#include "flowcontrol/build.h"

#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "epp/runtime/extproc.h"
#include "epp/scheduler.h"
#include "plugins/capabilities.h"
#include "scheduling/scheduler_impl.h"

namespace epp::flowcontrol {
namespace {

constexpr std::string_view kDefaultOrdering = "fcfs-ordering-policy";
constexpr std::string_view kDefaultFairness = "global-strict-fairness-policy";
constexpr std::string_view kDefaultUsageLimit = "static-usage-limit-policy";
constexpr std::string_view kDefaultEvictionFilter = "sheddable-eviction-filter";
constexpr std::string_view kDefaultEvictionOrder = "priority-then-time-eviction-order-policy";
// The reference's evictionLeadingSensorGrace: a detector reading the EPP's own in-flight counts
// sees a revocation at once; one reading scrapes needs its default 500 ms.
constexpr int64_t kLeadingSensorGraceUs = 10'000;

class Resolver {
 public:
  Resolver(const EppConfig& config, const PluginLookup& lookup, const PluginRegistry& registry,
           const PluginContext& context, ControllerConfig& out)
      : config_(config), lookup_(lookup), registry_(registry), context_(context), out_(out) {}

  absl::Status Error(int line, std::string_view path, std::string_view message) const {
    std::string where = config_.source;
    if (line > 0) absl::StrAppend(&where, ":", line);
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", std::string(path), ": ", std::string(message)));
  }

  // The plugin named `ref`; a default name the config does not define is created from its type.
  absl::StatusOr<const Plugin*> Find(const std::string& ref, std::string_view default_type, int line,
                                     std::string_view path) {
    if (const Plugin* p = lookup_ ? lookup_(ref) : nullptr) return p;
    if (ref != default_type) return Error(line, path, absl::StrCat("references undefined plugin '", ref, "'"));
    // One instance per default, shared by the bands that use it (as the reference registers it once).
    if (auto it = created_.find(ref); it != created_.end()) return it->second;
    auto created = registry_.Create(ref, ref, Params(), context_);
    if (!created.ok()) return Error(line, path, std::string(created.status().message()));
    std::shared_ptr<const Plugin> owned(std::move(*created));
    out_.owned.push_back(owned);
    created_[ref] = owned.get();
    return owned.get();
  }

  template <typename T>
  absl::StatusOr<const T*> Resolve(const std::string& ref, std::string_view default_type, int line,
                                   std::string_view path, std::string_view kind, const T* plugins::FlowControlPolicies::*field) {
    const std::string name = ref.empty() ? std::string(default_type) : ref;
    EPP_ASSIGN_OR_RETURN(const Plugin* p, Find(name, default_type, line, path));
    const T* policy = plugins::FlowControlPoliciesOf(*p).*field;
    if (policy == nullptr)
      return Error(line, path, absl::StrCat("plugin '", name, "' (type: ", p->type(), ") is not ", std::string(kind)));
    return policy;
  }

  absl::StatusOr<BandConfig> Band(const FlowControlBandSpec& spec) {
    BandConfig b;
    b.priority = spec.priority;
    EPP_ASSIGN_OR_RETURN(b.fairness, Resolve(spec.fairness_policy_ref, kDefaultFairness, spec.line,
                                             spec.path + ".fairnessPolicyRef", "a fairness policy",
                                             &plugins::FlowControlPolicies::fairness));
    EPP_ASSIGN_OR_RETURN(b.ordering, Resolve(spec.ordering_policy_ref, kDefaultOrdering, spec.line,
                                             spec.path + ".orderingPolicyRef", "an ordering policy",
                                             &plugins::FlowControlPolicies::ordering));
    // 0 means unset: per-band limits are always bounded (the reference's defaults).
    if (spec.max_bytes > 0) b.max_bytes = spec.max_bytes;
    if (spec.max_requests > 0) b.max_requests = spec.max_requests;
    return b;
  }

 private:
  const EppConfig& config_;
  const PluginLookup& lookup_;
  const PluginRegistry& registry_;
  const PluginContext& context_;
  ControllerConfig& out_;
  std::map<std::string, const Plugin*, std::less<>> created_;
};

}  // namespace

absl::StatusOr<ControllerConfig> BuildControllerConfig(const EppConfig& config, const PluginLookup& lookup,
                                                       const PluginRegistry& registry, const PluginContext& context) {
  const FlowControlSpec& spec = config.flow_control;
  ControllerConfig out;
  Resolver r(config, lookup, registry, context, out);
  out.max_bytes = spec.max_bytes;
  out.max_requests = spec.max_requests;
  if (spec.default_request_ttl_us) out.default_request_ttl_us = *spec.default_request_ttl_us;
  // noEndpointRequestTTL follows defaultRequestTTL when only that one is set.
  if (spec.no_endpoint_request_ttl_us) {
    out.no_endpoint_request_ttl_us = *spec.no_endpoint_request_ttl_us;
  } else if (spec.default_request_ttl_us) {
    out.no_endpoint_request_ttl_us = *spec.default_request_ttl_us;
  }
  FlowControlBandSpec implicit;
  implicit.path = "flowControl.defaultPriorityBand";
  implicit.line = spec.line;
  EPP_ASSIGN_OR_RETURN(out.default_band, r.Band(spec.default_band ? *spec.default_band : implicit));
  if (spec.default_negative_band) {
    EPP_ASSIGN_OR_RETURN(out.default_negative_band, r.Band(*spec.default_negative_band));
  }
  for (const FlowControlBandSpec& b : spec.bands) {
    EPP_ASSIGN_OR_RETURN(BandConfig band, r.Band(b));
    out.bands.push_back(band);
  }
  EPP_ASSIGN_OR_RETURN(out.usage_limit,
                       r.Resolve(spec.usage_limit_policy_ref, kDefaultUsageLimit,
                                 spec.usage_limit_policy_line > 0 ? spec.usage_limit_policy_line : spec.line,
                                 "flowControl.usageLimitPolicyPluginRef", "a usage-limit policy",
                                 &plugins::FlowControlPolicies::usage_limit));
  out.enable_eviction = spec.enable_eviction;
  if (spec.enable_eviction) {
    // The reference wires these two and nothing else (runner.go): a config may define them under
    // their type names (with parameters); otherwise they are created.
    const int line = spec.line;
    EPP_ASSIGN_OR_RETURN(out.eviction_filter,
                         r.Resolve("", kDefaultEvictionFilter, line, "flowControl.enableEviction", "an eviction filter",
                                   &plugins::FlowControlPolicies::eviction_filter));
    EPP_ASSIGN_OR_RETURN(out.eviction_order,
                         r.Resolve("", kDefaultEvictionOrder, line, "flowControl.enableEviction", "an eviction order",
                                   &plugins::FlowControlPolicies::eviction_order));
  }
  return out;
}

absl::StatusOr<ControllerConfig> BuildControllerConfig(const EppConfig& config, const Scheduler& scheduler,
                                                       const PluginRegistry& registry) {
  const Scheduler::Impl& impl = scheduler.impl();
  PluginLookup lookup = [&impl](std::string_view name) -> const Plugin* {
    for (const auto& p : impl.plugins) {
      if (p->name() == name) return p.get();
    }
    return nullptr;
  };
  PluginContext context;
  if (impl.clock != nullptr) context.clock = impl.clock;
  context.shared_prefix = impl.shared_prefix;
  EPP_ASSIGN_OR_RETURN(ControllerConfig out, BuildControllerConfig(config, lookup, registry, context));
  if (impl.detector_plugin != nullptr && impl.detector_plugin->type() == "concurrency-detector")
    out.eviction_confirmation_grace_us = kLeadingSensorGraceUs;
  return out;
}

PoolSample SamplePool(const Scheduler& scheduler, const std::vector<Endpoint>& pool) {
  PoolSample sample;
  sample.empty = pool.empty();
  const Scheduler::Impl& impl = scheduler.impl();
  if (impl.detector == nullptr) return sample;
  SchedulingContext ctx;
  ctx.endpoints = pool;
  ctx.rng = impl.rng;
  ctx.now_us = impl.clock != nullptr ? impl.clock->NowMicros() : SteadyClock::Get().NowMicros();
  impl.load->Snapshot(pool, ctx.inflight_requests, ctx.inflight_tokens);
  std::vector<const Endpoint*> candidates;
  candidates.reserve(pool.size());
  for (const Endpoint& e : pool) candidates.push_back(&e);
  sample.saturation = StageSaturation(*impl.detector, ctx, candidates, &sample.prefill, &sample.decode);
  return sample;
}

PoolSampler MakePoolSampler(std::shared_ptr<const Scheduler> scheduler, const EndpointSource& source) {
  return [scheduler = std::move(scheduler), &source]() { return SamplePool(*scheduler, *source.Snapshot()); };
}

bool FlowControlEnabled(const EppConfig& config) {
  for (const std::string& g : config.feature_gates)
    if (g == "flowControl") return true;
  return false;
}

}  // namespace epp::flowcontrol
