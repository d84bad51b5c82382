// The eviction policies for in-flight requests: sheddable-eviction-filter (only sheddable
// requests may be evicted) and priority-then-time-eviction-order-policy (lowest priority first,
// then the most recently dispatched).
#include "flowcontrol/policies.h"
#include "plugins/flowcontrol/flowcontrol.h"

namespace epp::plugins {
namespace {

using flowcontrol::EvictionFilter;
using flowcontrol::EvictionKey;
using flowcontrol::EvictionOrder;
using flowcontrol::InflightItem;

// Sheddable is priority < 0, the project-wide rule (the scheduler sheds the same requests).
class SheddableEvictionFilter : public Plugin, public EvictionFilter {
 public:
  explicit SheddableEvictionFilter(TypedName tn) : Plugin(std::move(tn)) {}
  bool Accept(const InflightItem& item) const override { return item.priority < 0; }
};

// The newest dispatch of the lowest priority goes first: it has the least KV cache invested.
class PriorityThenTimeEviction : public Plugin, public EvictionOrder {
 public:
  explicit PriorityThenTimeEviction(TypedName tn) : Plugin(std::move(tn)) {}
  EvictionKey Key(const InflightItem& item) const override { return {item.priority, -item.dispatch_us}; }
};

}  // namespace

PluginOr CreateSheddableEvictionFilter(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<SheddableEvictionFilter>(TN(kSheddableEvictionFilterType, name));
}

PluginOr CreatePriorityThenTimeEviction(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<PriorityThenTimeEviction>(TN(kPriorityThenTimeEvictionType, name));
}

}  // namespace epp::plugins
