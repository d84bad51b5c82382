// The extractors of llm-d's HTTP data sources (datalayer.h): dcgm-extractor,
// multicluster-metrics-extractor and models-data-extractor. Facts: llm-d-router's
// datalayer/extractor/{dcgm,models,metrics/multicluster.go} and attribute/{gpu,models,metrics}.
#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "plugins/datalayer/datalayer.h"

namespace epp::plugins {
namespace {

// ---- dcgm-extractor

constexpr const char* kGpuUtilMetric = "DCGM_FI_DEV_GPU_UTIL";

// The Pod's name, which the exporter writes in its `pod` label (DaemonSet payloads carry every
// Pod of the node); empty for endpoints that are no Pod (files, flags).
std::string PodName(const EndpointSpec& spec) {
  const size_t slash = spec.instance.rfind('/');
  return slash == std::string::npos ? spec.instance : spec.instance.substr(slash + 1);
}

class DcgmExtractor final : public DataExtractor {
 public:
  DataPayload Accepts() const override { return DataPayload::kPrometheus; }
  absl::Status ExtractMetrics(const MetricFamilies& families, const EndpointSpec& spec,
                              std::vector<EndpointAttributes::Value>& out) const override {
    const auto samples = families.SamplesNamed(kGpuUtilMetric);
    if (samples.empty()) return absl::NotFoundError(absl::StrCat("metric ", kGpuUtilMetric, " not found in the DCGM answer"));
    const std::string pod = PodName(spec);
    std::optional<double> max;
    for (const auto& [family, sample] : samples) {
      // A sample without a pod label belongs to whoever asked (a sidecar exporter).
      if (!pod.empty()) {
        const std::optional<std::string_view> p = sample->label("pod");
        if (p && *p != pod) continue;
      }
      if (family->type != MetricType::kGauge)
        return absl::InvalidArgumentError(absl::StrCat("expected a gauge for ", kGpuUtilMetric, ", got ", std::string(MetricTypeName(family->type))));
      // The busiest GPU of the Pod is its utilization.
      max = std::max(max.value_or(sample->value), sample->value);
    }
    if (!max) return absl::NotFoundError(absl::StrCat("metric ", kGpuUtilMetric, " has no sample for pod '", pod, "'"));
    out.push_back({std::string(kGpuUtilizationAttribute), "", "", *max / 100.0});  // percent -> [0, 1]
    return absl::OkStatus();
  }
};

// ---- multicluster-metrics-extractor

struct MulticlusterOptions {
  std::string kv = "llm_d_epp_average_kv_cache_utilization";
  std::string queue = "llm_d_epp_average_queue_size";
};

// Empty values mean the default, as llm-d's cmp.Or.
ParamTable<MulticlusterOptions>::Reader SpecOrDefault(std::string MulticlusterOptions::*field) {
  return [field](const Params& v, MulticlusterOptions& o) -> absl::Status {
    EPP_ASSIGN_OR_RETURN(std::string s, v.AsString());
    if (s.empty()) return absl::OkStatus();
    if (absl::StatusOr<MetricSpec> spec = MetricSpec::Parse(s); !spec.ok())
      return absl::InvalidArgumentError(absl::StrCat(v.path(), ": ", spec.status().message()));
    o.*field = std::move(s);
    return absl::OkStatus();
  };
}

const ParamTable<MulticlusterOptions>& MulticlusterTable() {
  static const auto* t =
      &(*new ParamTable<MulticlusterOptions>())
           .Custom("kvCacheUtilizationMetric", ParamType::kString, "the pool's average KV-cache utilization (a metric spec)",
                   SpecOrDefault(&MulticlusterOptions::kv), [](const MulticlusterOptions& o) { return Params::String(o.kv); })
           .Custom("queueSizeMetric", ParamType::kString, "the pool's average queue size (a metric spec)",
                   SpecOrDefault(&MulticlusterOptions::queue), [](const MulticlusterOptions& o) { return Params::String(o.queue); });
  return *t;
}

class MulticlusterExtractor final : public DataExtractor {
 public:
  MulticlusterExtractor(MetricSpec kv, MetricSpec queue) {
    metrics_.emplace_back(std::move(kv), std::string(kMulticlusterKvCacheAttribute));
    metrics_.emplace_back(std::move(queue), std::string(kMulticlusterQueueAttribute));
  }
  DataPayload Accepts() const override { return DataPayload::kPrometheus; }
  absl::Status ExtractMetrics(const MetricFamilies& families, const EndpointSpec&,
                              std::vector<EndpointAttributes::Value>& out) const override {
    std::vector<std::string> missing;
    for (const auto& [spec, key] : metrics_) {
      // The matching series with the latest timestamp, the first one when none has one.
      const Sample* best = nullptr;
      for (const auto& [family, sample] : families.SamplesNamed(spec.name)) {
        if (!spec.Matches(*sample)) continue;
        if (best == nullptr || sample->timestamp_ms.value_or(INT64_MIN) > best->timestamp_ms.value_or(INT64_MIN)) best = sample;
      }
      if (best == nullptr) {
        missing.push_back(absl::StrCat(key, ": ", spec.ToString(), " not found"));
        continue;  // the other aggregate is still written
      }
      out.push_back({key, "", "", best->value});
    }
    if (!missing.empty()) return absl::NotFoundError(absl::StrJoin(missing, "; "));
    return absl::OkStatus();
  }

 private:
  std::vector<std::pair<MetricSpec, std::string>> metrics_;
};

// ---- models-data-extractor

class ModelsExtractor final : public DataExtractor {
 public:
  DataPayload Accepts() const override { return DataPayload::kModels; }
  absl::Status ExtractModels(const std::vector<ServedModel>& models, EndpointAttributes& out) const override {
    out.models = models;
    return absl::OkStatus();
  }
};

// The plugins: each hands its shared extractor to the source it is wired to.
class ExtractorPluginImpl final : public Plugin, public ExtractorPlugin {
 public:
  ExtractorPluginImpl(TypedName tn, std::shared_ptr<const DataExtractor> ex, std::vector<std::string> produces, Params effective)
      : Plugin(std::move(tn)), ex_(std::move(ex)), produces_(std::move(produces)), effective_(std::move(effective)) {}
  Params EffectiveParams() const override { return effective_; }
  std::shared_ptr<const DataExtractor> Extractor() const override { return ex_; }
  std::vector<std::string> Produces() const override { return produces_; }

 private:
  std::shared_ptr<const DataExtractor> ex_;
  std::vector<std::string> produces_;
  Params effective_;
};

}  // namespace

PluginOr CreateDcgmExtractor(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<ExtractorPluginImpl>(TN(kDcgmExtractorType, name), std::make_shared<DcgmExtractor>(),
                                               std::vector<std::string>{std::string(kGpuUtilizationAttribute)}, Params::Map());
}

PluginOr CreateMulticlusterMetricsExtractor(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(MulticlusterOptions o, MulticlusterTable().Read(params));
  EPP_ASSIGN_OR_RETURN(MetricSpec kv, MetricSpec::Parse(o.kv));
  EPP_ASSIGN_OR_RETURN(MetricSpec queue, MetricSpec::Parse(o.queue));
  return std::make_unique<ExtractorPluginImpl>(
      TN(kMulticlusterMetricsExtractorType, name), std::make_shared<MulticlusterExtractor>(std::move(kv), std::move(queue)),
      std::vector<std::string>{std::string(kMulticlusterKvCacheAttribute), std::string(kMulticlusterQueueAttribute)},
      MulticlusterTable().Effective(o));
}

PluginOr CreateModelsDataExtractor(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<ExtractorPluginImpl>(TN(kModelsDataExtractorType, name), std::make_shared<ModelsExtractor>(),
                                               std::vector<std::string>{}, Params::Map());
}

PluginSchema MulticlusterMetricsExtractorSchema() { return MulticlusterTable().Schema(); }

}  // namespace epp::plugins
