// Private: data-layer plugins (extractors.cc): what llm-d's data layer extracts from an endpoint
// for the scheduling plugins, here read from what the endpoint pool already keeps.
//   core-metrics-extractor: the engine mappings (engineConfigs with customMetrics, engineLabelKey,
//     defaultEngine) the pool reads metrics with; `eppctl serve`, `pick` and `explain` apply them.
//   topology-extractor: an endpoint's host, rack, zone and region from its labels.
// and llm-d's other data-layer types (dataLayer.sources wires a source to its extractors,
// WireDataLayer below; the sources' reads run in the endpoint pool's scrape loop as
// ScrapeOptions::attribute_sources and land in Endpoint::attributes):
//   dcgm-data-source + dcgm-extractor (dcgm.cc, http_sources.cc): NVIDIA DCGM exporter's
//     DCGM_FI_DEV_GPU_UTIL per endpoint -> attribute GPUUtilization in [0, 1];
//   models-data-source + models-data-extractor (models.cc): the server's /v1/models -> the
//     models it serves (base models and LoRA adapters with their parent);
//   multicluster-metrics-data-source + multicluster-metrics-extractor: a peer cluster's EPP
//     metrics -> llm-d.ai/multicluster-kv-cache-utilization and -queue-size attributes;
//   k8s-notification-source (notification.cc): watches one kind of Kubernetes object;
//   file-discovery, multicluster-file-discovery (discovery.cc): the endpoints from a file, as
//     dataLayer.discovery.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epp/config.h"
#include "epp/endpoint.h"
#include "epp/metrics.h"
#include "epp/runtime/endpoints.h"
#include "epp/runtime/serve.h"
#include "plugins/plugin_util.h"

namespace epp::plugins {

inline constexpr std::string_view kCoreMetricsExtractorType = "core-metrics-extractor";
inline constexpr std::string_view kTopologyExtractorType = "topology-extractor";
inline constexpr std::string_view kDcgmDataSourceType = "dcgm-data-source";
inline constexpr std::string_view kDcgmExtractorType = "dcgm-extractor";
inline constexpr std::string_view kModelsDataSourceType = "models-data-source";
inline constexpr std::string_view kModelsDataExtractorType = "models-data-extractor";
inline constexpr std::string_view kMulticlusterMetricsDataSourceType = "multicluster-metrics-data-source";
inline constexpr std::string_view kMulticlusterMetricsExtractorType = "multicluster-metrics-extractor";
inline constexpr std::string_view kK8sNotificationSourceType = "k8s-notification-source";
inline constexpr std::string_view kFileDiscoveryType = "file-discovery";
inline constexpr std::string_view kMulticlusterFileDiscoveryType = "multicluster-file-discovery";

// llm-d's attribute names.
inline constexpr std::string_view kGpuUtilizationAttribute = "GPUUtilization";
inline constexpr std::string_view kMulticlusterKvCacheAttribute = "llm-d.ai/multicluster-kv-cache-utilization";
inline constexpr std::string_view kMulticlusterQueueAttribute = "llm-d.ai/multicluster-queue-size";

PluginOr CreateDcgmDataSource(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateModelsDataSource(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateMulticlusterMetricsDataSource(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateDcgmExtractor(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateModelsDataExtractor(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateMulticlusterMetricsExtractor(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateFileDiscovery(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateMulticlusterFileDiscovery(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateK8sNotificationSource(const std::string& name, const Params& params, const PluginContext& ctx);
PluginSchema DcgmDataSourceSchema();
PluginSchema ModelsDataSourceSchema();
PluginSchema MulticlusterMetricsDataSourceSchema();
PluginSchema MulticlusterMetricsExtractorSchema();
PluginSchema K8sNotificationSourceSchema();
PluginSchema FileDiscoverySchema();

// What a data source hands its extractors.
enum class DataPayload { kPrometheus, kModels, kKubeObjects };
const char* DataPayloadName(DataPayload p);  // "Prometheus metrics", "/v1/models", "Kubernetes objects"

// The work of an extractor, shared (it outlives a scheduler replaced by a reload while the scrape
// loop still reads with the old settings). Immutable; called from the scrape thread.
class DataExtractor {
 public:
  virtual ~DataExtractor() = default;
  virtual DataPayload Accepts() const = 0;
  // kPrometheus: the values this endpoint's answer gives (an error when it gives none).
  virtual absl::Status ExtractMetrics(const MetricFamilies& /*families*/, const EndpointSpec& /*spec*/,
                                      std::vector<EndpointAttributes::Value>& /*out*/) const {
    return absl::UnimplementedError("not a metrics extractor");
  }
  // kModels: the models the endpoint lists.
  virtual absl::Status ExtractModels(const std::vector<ServedModel>& /*models*/, EndpointAttributes& /*out*/) const {
    return absl::UnimplementedError("not a models extractor");
  }
};

// Implemented by the extractor plugins.
class ExtractorPlugin {
 public:
  virtual ~ExtractorPlugin() = default;
  virtual std::shared_ptr<const DataExtractor> Extractor() const = 0;
  // The attribute keys it writes (EndpointAttributes::values), for endpoint-attribute-filter/-scorer.
  virtual std::vector<std::string> Produces() const = 0;
};

// Implemented by the source plugins dataLayer.sources names. WireDataLayer adds the extractors
// while the scheduler is built (before any request); afterwards the plugin is only read.
class DataSourcePlugin {
 public:
  virtual ~DataSourcePlugin() = default;
  virtual DataPayload Provides() const = 0;
  virtual void AddExtractor(std::string name, std::shared_ptr<const DataExtractor> extractor) = 0;
};

// Binds dataLayer.sources to the plugins: each source gets its extractors, which must take what
// it provides. Sources and extractors epp implements otherwise (metrics-data-source with
// core-metrics-extractor, endpoint-notification-source with the precise prefix producer) are
// accepted as they are. A data source with no extractors, or configured but not listed, reads
// nothing (as in llm-d), with a warning. Errors name the config path.
// `where(line, path)` prefixes messages with the config's location ("config.yaml:12: path").
absl::Status WireDataLayer(const DataLayerSpec& spec, std::span<const std::shared_ptr<Plugin>> plugins,
                           const std::function<std::string(int line, std::string_view path)>& where,
                           std::vector<std::string>* warnings);

// Implemented by file-discovery and multicluster-file-discovery. WireDataLayer selects the one
// dataLayer.discovery names; `eppctl serve` then lists the endpoints with it (ConfiguredDiscovery)
// through the endpoint pool's discovery machinery (departures, settle rule, last set kept on
// failure), as it lists an InferencePool's Pods.
class EndpointDiscoverySource {
 public:
  virtual ~EndpointDiscoverySource() = default;
  // Reads the file now: the endpoints of its valid entries; `skipped` gets why each invalid entry
  // was left out (llm-d logs and skips them). An unreadable or malformed file is an error.
  virtual absl::StatusOr<std::vector<EndpointSpec>> Load(std::vector<std::string>* skipped) const = 0;
  virtual void Select() = 0;
  virtual bool selected() const = 0;
};

// The endpoint lister of the discovery plugin the scheduler's dataLayer.discovery selected;
// nullptr without one. `log` (may be null) gets skipped entries and reload failures.
std::shared_ptr<EndpointLister> ConfiguredDiscovery(const Scheduler& scheduler, const Logger* log);

PluginOr CreateCoreMetricsExtractor(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateTopologyExtractor(const std::string& name, const Params& params, const PluginContext& ctx);
PluginSchema CoreMetricsExtractorSchema();
PluginSchema TopologyExtractorSchema();

// Implemented by core-metrics-extractor (Scheduler::ConfigureScrape finds it).
class ScrapeSettingsSource {
 public:
  virtual ~ScrapeSettingsSource() = default;
  virtual void ConfigureScrape(ScrapeOptions& options) const = 0;
  // True when one of its engine configs has a customMetrics entry for `attribute`.
  virtual bool DeclaresAttribute(std::string_view attribute) const = 0;
};

// Where an endpoint sits, tightest level first. Empty fields are unknown.
struct Topology {
  std::string host, rack, zone, region;
  bool empty() const { return host.empty() && rack.empty() && zone.empty() && region.empty(); }
};

// The tightest level two endpoints share (llm-d's order: host < rack < zone < region < none).
// A level is shared when both values are equal and non-empty; the looser levels are not checked
// (a shared host is "host" even if the racks differ), as llm-d compares.
enum class TopologyLevel { kHost = 0, kRack = 1, kZone = 2, kRegion = 3, kNone = 4 };
TopologyLevel CompareTopology(const Topology& a, const Topology& b);
const char* TopologyLevelName(TopologyLevel level);  // "host", ..., "none"

// Implemented by topology-extractor.
class TopologySource {
 public:
  virtual ~TopologySource() = default;
  // The endpoint's topology; nullopt when none of its labels is set (llm-d writes no attribute).
  virtual std::optional<Topology> TopologyOf(const Endpoint& e) const = 0;
};

}  // namespace epp::plugins
