// Private: BuildScheduler as named stages. Each stage applies one of GIE's loader rules
// (pkg/epp/config/loader/defaults.go numbers them; the numbers below are theirs) to a BuildState,
// so each rule is read, changed and tested alone. build.cc runs them in this order:
//
//   WithDefaultPlugins        rule 1: an empty config is GIE's default profile
//   MoveLegacyPrefixScorerParams  the older prefix-cache-scorer parameters go to the producer
//   CheckPluginTypes          every unknown type at once
//   CreatePlugins             instantiate, carrying unchanged instances over on a reload
//   AddDefaultProfile         rule 2: no profiles -> `default` with every filter, scorer, picker
//   ResolveProfiles           rules 4, 5: plugin references, weights, a shared default picker
//   ResolveReferences         plugins that name plugins or profiles (a handler's deciders)
//   ResolveProfileHandler     rule 3: one profile and no handler -> single-profile-handler
//   ResolveSaturationDetector rule 7: saturationDetector or a default utilization-detector
//   ResolvePrefixProducer     rule 9: a prefix consumer gets the default producer
//   IndexHooks                producers, observers and admitters in config order
//   EffectiveDocument         the configuration the scheduler runs, as a document
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "epp/status.h"
#include "epp/config.h"
#include "epp/params.h"
#include "epp/registry.h"
#include "scheduling/scheduler_impl.h"

namespace epp::build {

// What the stages share. `impl` is the scheduler being built; `previous` is the running one on a
// reload (RebuildScheduler), else null.
struct BuildState {
  BuildState(EppConfig config, const PluginRegistry& registry, const PluginContext& context,
             const Scheduler::Impl* previous);

  EppConfig config;
  const PluginRegistry& registry;
  const Scheduler::Impl* previous;
  std::unique_ptr<Scheduler::Impl> impl;
  PluginContext context;                       // the clock and rng the plugins get (impl's)
  std::map<std::string, const Plugin*> by_name;  // every plugin added so far

  // "file:line: path" for messages; "<config>" when the config has no source.
  std::string Where(int line, std::string_view path) const;
  absl::Status Error(int line, std::string_view path, std::string_view message) const;

  // Adds a plugin to the scheduler. On a reload an instance with the same name, type and
  // effective parameters replaces `created`, so its state (prefix index, LRU, counters) survives;
  // except a plugin with references (Plugin::HasReferences), which is always the new instance.
  const Plugin* Add(std::unique_ptr<Plugin> created);
  // Creates and adds a plugin the config did not name (a default).
  absl::StatusOr<const Plugin*> AddDefault(std::string_view type, std::string name, Params params = Params());
};

// Rule 1: a config without plugins and profiles becomes GIE's default profile, with a warning.
EppConfig WithDefaultPlugins(EppConfig config);
// The older prefix-cache-scorer form (GIE before the producer split; every llm-d-inference-scheduler
// sample): hashing parameters (blockSize, hashBlockSize, blockSizeTokens, maxPrefixBlocksToMatch,
// maxPrefixTokensToMatch, lruCapacityPerServer, autoTune) written on the scorer move to the
// approx-prefix-cache-producer, which is created when the config has none; a warning says so.
// Conflicting values (two scorers, or a producer with its own parameters) are an error.
absl::Status MoveLegacyPrefixScorerParams(EppConfig& config);
absl::Status CheckPluginTypes(const EppConfig& config, const PluginRegistry& registry);
absl::Status CreatePlugins(BuildState& state);
void AddDefaultProfile(BuildState& state);
absl::Status ResolveProfiles(BuildState& state);
// Plugin::Resolve for every plugin that names other plugins or profiles (HasReferences).
absl::Status ResolveReferences(BuildState& state);
absl::Status ResolveProfileHandler(BuildState& state);
absl::Status ResolveSaturationDetector(BuildState& state);
absl::Status ResolvePrefixProducer(BuildState& state);
void IndexHooks(BuildState& state);
Params EffectiveDocument(const EppConfig& config, const Scheduler::Impl& impl);

}  // namespace epp::build
