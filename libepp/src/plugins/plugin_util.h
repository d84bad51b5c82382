// Private: what every plugin folder shares. Users reach plugins through the registry by type
// string (registry.cc is the one list of them); tests include plugins.h, which includes every
// folder's header, to build one directly.
//
// One folder per extension point: scorer/, filter/, picker/, profile/ (profile handlers and the
// disaggregation deciders they ask), admitter/ (admission before scheduling),
// saturation/ (saturation detectors), producer/ (data producers), datalayer/ (what llm-d's data
// layer extracts: engine mappings, topology), response/ (plugins acting on
// the model server's response), accepted/ (types of GIE's and llm-d's configs that name what
// epp does anyway). Each folder's header declares its type names and
// factories; small plugins of one kind share a .cc with their helpers (min-max normalisation,
// parameter reading).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "epp/kv/subscriber.h"
#include "epp/param_table.h"
#include "epp/params.h"
#include "epp/plugin.h"
#include "epp/scheduler.h"
#include "epp/status.h"

namespace epp::plugins {

using PluginOr = absl::StatusOr<std::unique_ptr<Plugin>>;

inline TypedName TN(std::string_view type, const std::string& name) { return TypedName{std::string(type), name}; }

// For plugins that take no parameters: the factory's check and the registry's schema.
inline absl::Status ReadNoParams(const Params& params) { return NoParamsTable().Read(params).status(); }
inline PluginSchema NoParamsSchema() { return NoParamsTable().Schema(); }

// A plugin with no scheduling hook: a type of GIE's or llm-d's configs that names what epp does
// anyway, or a deprecated no-op. Its parameters (checked by its factory) are kept for the
// effective config.
class ParamsOnlyPlugin : public Plugin {
 public:
  ParamsOnlyPlugin(TypedName tn, Params params) : Plugin(std::move(tn)), params_(std::move(params)) {}
  Params EffectiveParams() const override { return params_.is_null() ? Params::Map() : params_; }

 private:
  Params params_;
};

// The runtime capabilities below (and ScrapeSettingsSource in datalayer/) are found once per
// scheduler by IndexCapabilities (capabilities.h).
//
// Implemented by plugins that keep per-endpoint state (the prefix index, the cache-aware tree).
class EndpointState {
 public:
  virtual ~EndpointState() = default;
  virtual void ForgetEndpoint(std::string_view endpoint) const = 0;
  virtual size_t PrefixEntries() const { return 0; }  // prefix index entries, for metrics
};

// Implemented by the precise prefix producer: the index the runtime's KV-event subscriber feeds.
class KvEventsSource {
 public:
  virtual ~KvEventsSource() = default;
  virtual const KvEventsBinding& Binding() const = 0;
};

// Implemented by token-producer: it fills SchedulingContext::tokens, so the scheduler runs it
// before the other data producers, and it is not a prefix producer.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual TokenizerCounters Counters() const = 0;
};

}  // namespace epp::plugins
