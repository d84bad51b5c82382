// Private: the runtime capabilities of a scheduler's plugins, found once when it is built.
//
// The public extension points (filter, scorer, picker, producer, observer, ...) are reached
// through Plugin::As*(). What the runtime around a scheduler needs from its plugins (an index
// the KV-event subscriber feeds, per-endpoint state to forget when a Pod leaves, scrape settings,
// tokenizer counters, first-token timing) are private interfaces of the plugin folders
// (plugin_util.h, datalayer/datalayer.h). IndexCapabilities finds them once, when the Scheduler
// is constructed; nothing casts at pick, poll or render time.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "epp/plugin.h"
#include "epp/scheduling.h"

namespace epp::flowcontrol {
class EvictionFilter;
class EvictionOrder;
class FairnessPolicy;
class OrderingPolicy;
class UsageLimitPolicy;
}  // namespace epp::flowcontrol

namespace epp::plugins {

class EndpointState;
class KvEventsSource;
class ScrapeSettingsSource;
class TokenSource;

struct Capabilities {
  // Each list in config order.
  std::vector<const FirstTokenObserver*> first_token_observers;
  std::vector<const CompletionObserver*> completion_observers;
  std::vector<const EndpointState*> endpoint_states;
  std::vector<const ScrapeSettingsSource*> scrape_settings;
  std::vector<const TokenSource*> token_sources;
  // The first precise prefix producer (BuildScheduler allows one): the index the runtime feeds.
  const KvEventsSource* kv_events = nullptr;
};

Capabilities IndexCapabilities(std::span<const std::shared_ptr<Plugin>> plugins);

// True for token-producer: the scheduler runs it before the other data producers, and it is not
// a prefix producer (BuildScheduler's stages ask before the Scheduler exists).
bool IsTokenSource(const Plugin& plugin);

// The flow-control policy a plugin implements (flowcontrol/policies.h); null for the others. The
// flow-control layer and the config's checks of flowControl references ask once per plugin named.
struct FlowControlPolicies {
  const flowcontrol::FairnessPolicy* fairness = nullptr;
  const flowcontrol::OrderingPolicy* ordering = nullptr;
  const flowcontrol::UsageLimitPolicy* usage_limit = nullptr;
  const flowcontrol::EvictionFilter* eviction_filter = nullptr;
  const flowcontrol::EvictionOrder* eviction_order = nullptr;
};
FlowControlPolicies FlowControlPoliciesOf(const Plugin& plugin);

}  // namespace epp::plugins
