// EndpointPickerConfig: load, default, validate, and build a Scheduler from it.
//
// The YAML vocabulary is GIE's (`kind: EndpointPickerConfig`, apiVersion
// `inference.networking.x-k8s.io/v1alpha1` or `llm-d.ai/v1alpha1`): `plugins[]{name, type,
// parameters}`, `schedulingProfiles[]{name, plugins[]{pluginRef, weight}}`, `saturationDetector`,
// `featureGates`, `parser`, `dataLayer`, `flowControl`, `requestHandler`. Keys are strict (an
// unknown key is an error naming its path and line). Sections epp does not implement
// (`dataLayer` wiring, `flowControl`, feature gates) load with a warning, so production configs
// work unchanged. docs/config.md has the full rules.
//
// Pipeline: ParseConfig (YAML -> EppConfig, strict) -> BuildScheduler (GIE's defaulting rules,
// plugin instantiation through a PluginRegistry, validation). A document that is not itself an
// EndpointPickerConfig but embeds exactly one as a string (a Helm values file, a ConfigMap) is
// accepted: the embedded document is loaded and its location reported in `source`.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "epp/params.h"
#include "epp/plugin.h"
#include "epp/registry.h"
#include "epp/status.h"

namespace epp {

inline constexpr std::string_view kGieApiVersion = "inference.networking.x-k8s.io/v1alpha1";
inline constexpr std::string_view kLlmdApiVersion = "llm-d.ai/v1alpha1";

struct PluginSpec {
  std::string name;  // defaults to type
  std::string type;
  Params parameters;  // null when absent
  std::string path;   // "plugins[2]"
  int line = 0;
};

struct ProfilePluginRef {
  std::string plugin_ref;
  std::optional<double> weight;
  std::string path;  // "schedulingProfiles[0].plugins[1]"
  int line = 0;
};

struct ProfileSpec {
  std::string name;
  std::vector<ProfilePluginRef> plugins;
  std::string path;
  int line = 0;
};

// llm-d's `dataLayer:` section: which data sources run, each with the extractors its answers go
// to; the discovery plugin that lists the endpoints. References name entries of `plugins`.
struct DataLayerSourceSpec {
  std::string plugin_ref;
  std::vector<std::string> extractor_refs;
  std::string path;  // "dataLayer.sources[0]"
  int line = 0;
};
struct DataLayerSpec {
  bool present = false;                 // the section was written
  std::optional<bool> inject_defaults;  // unset: true (llm-d's default)
  std::vector<DataLayerSourceSpec> sources;
  std::string discovery_ref;            // dataLayer.discovery.pluginRef; empty: none
  int discovery_line = 0;
  // Keys epp loads but does not act on (peerDiscovery, crossReplicaSyncerPluginRef,
  // crossReplicaSyncInterval), kept for the effective config.
  Params other;
};

// llm-d's `flowControl:` section (apix/config/v1alpha1 FlowControlConfig). Quantities are read
// as Kubernetes quantities ("1Gi", "500M", "1k"); 0 means "not set" as in the reference. The
// flow-control layer's builder (src/flowcontrol/build.h) turns it into a controller configuration.
struct FlowControlBandSpec {
  int priority = 0;
  uint64_t max_bytes = 0;     // 0: the reference's default (1G)
  uint64_t max_requests = 0;  // 0: the reference's default (5000)
  std::string fairness_policy_ref;  // empty: global-strict-fairness-policy
  std::string ordering_policy_ref;  // empty: fcfs-ordering-policy
  std::string path;  // "flowControl.priorityBands[1]", "flowControl.defaultPriorityBand"
  int line = 0;
};
struct FlowControlSpec {
  bool present = false;  // the section was written
  uint64_t max_bytes = 0;     // global; 0: no limit
  uint64_t max_requests = 0;  // global; 0: no limit
  std::optional<int64_t> default_request_ttl_us;      // unset: 60 s
  std::optional<int64_t> no_endpoint_request_ttl_us;  // unset: defaultRequestTTL, else 60 s
  std::optional<FlowControlBandSpec> default_band;
  std::optional<FlowControlBandSpec> default_negative_band;
  std::vector<FlowControlBandSpec> bands;
  std::string usage_limit_policy_ref;  // empty: static-usage-limit-policy
  int usage_limit_policy_line = 0;
  bool enable_eviction = false;
  int line = 0;
};

struct EppConfig {
  std::string api_version = std::string(kGieApiVersion);
  std::string source;  // file name (and embedded location) for messages; "<default>" for the default
  std::vector<std::string> feature_gates;
  std::vector<PluginSpec> plugins;
  std::vector<ProfileSpec> profiles;
  std::string saturation_detector_ref;  // empty: the default utilization-detector
  // Parameters given inline under `saturationDetector` (legacy form); applied to the default
  // utilization-detector when no pluginRef is given.
  Params saturation_detector_params;
  std::string parser_ref;                // `parser` (llm-d's deprecated single parser)
  std::vector<std::string> parser_refs;  // requestHandler.parsers, in order
  DataLayerSpec data_layer;
  FlowControlSpec flow_control;
  // Sections loaded but not acted on, and other notes, e.g.
  // "flowControl: the section is set but the flowControl feature gate is off; ...".
  std::vector<std::string> warnings;
};

// Parses a YAML document (strict keys). `source` names it in errors ("config.yaml:12: ...").
absl::StatusOr<EppConfig> ParseConfig(std::string_view yaml, std::string_view source = "<config>");
absl::StatusOr<EppConfig> LoadConfigFile(const std::string& path);

// GIE's configuration when none is given: queue-scorer 2, kv-cache-utilization-scorer 2,
// prefix-cache-scorer 3 in one profile `default`.
EppConfig DefaultConfig();

class Scheduler;

// Applies the defaulting rules, creates every plugin through `registry` and validates the
// result. Every plugin type missing from the registry is reported at once:
//   "config.yaml: unsupported plugin types: decode-filter (plugins[1]), ... ; known types: ..."
// The context's clock and rng are used by the plugins; `rng` may be null (a SeededRng(0) owned by
// the scheduler is used then).
absl::StatusOr<std::unique_ptr<Scheduler>> BuildScheduler(const EppConfig& config, const PluginRegistry& registry,
                                                          const PluginContext& context = {});

// BuildScheduler for a configuration reload: state carries over from `previous`. A plugin whose
// name, type and effective parameters equal one of `previous`'s is that same instance (the prefix
// index, cache-aware radix trees and round-robin positions go on); in-flight load is shared, so
// a request picked by `previous` and released after the reload is counted once. `previous` may be
// destroyed at any time afterwards.
absl::StatusOr<std::unique_ptr<Scheduler>> RebuildScheduler(const EppConfig& config, const PluginRegistry& registry,
                                                            const PluginContext& context, const Scheduler& previous);

}  // namespace epp
