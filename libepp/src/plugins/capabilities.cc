// IndexCapabilities: the only place that looks for the plugins' private runtime interfaces.
#include "plugins/capabilities.h"

#include "flowcontrol/policies.h"
#include "plugins/datalayer/datalayer.h"
#include "plugins/plugin_util.h"

namespace epp::plugins {
namespace {

// A plugin class implements a capability by deriving from its interface; the cast runs once per
// plugin and capability, when a scheduler is built.
template <typename Capability>
const Capability* Find(const Plugin& plugin) {
  return dynamic_cast<const Capability*>(&plugin);
}

template <typename Capability>
void Collect(const Plugin& plugin, std::vector<const Capability*>& out) {
  if (const Capability* c = Find<Capability>(plugin)) out.push_back(c);
}

}  // namespace

Capabilities IndexCapabilities(std::span<const std::shared_ptr<Plugin>> plugins) {
  Capabilities caps;
  for (const std::shared_ptr<Plugin>& p : plugins) {
    Collect(*p, caps.first_token_observers);
    Collect(*p, caps.completion_observers);
    Collect(*p, caps.endpoint_states);
    Collect(*p, caps.scrape_settings);
    Collect(*p, caps.token_sources);
    if (caps.kv_events == nullptr) caps.kv_events = Find<KvEventsSource>(*p);
  }
  return caps;
}

bool IsTokenSource(const Plugin& plugin) { return Find<TokenSource>(plugin) != nullptr; }

FlowControlPolicies FlowControlPoliciesOf(const Plugin& plugin) {
  return FlowControlPolicies{Find<flowcontrol::FairnessPolicy>(plugin), Find<flowcontrol::OrderingPolicy>(plugin),
                             Find<flowcontrol::UsageLimitPolicy>(plugin), Find<flowcontrol::EvictionFilter>(plugin),
                             Find<flowcontrol::EvictionOrder>(plugin)};
}

}  // namespace epp::plugins
