// core-metrics-extractor and topology-extractor (datalayer.h).
#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "plugins/datalayer/datalayer.h"

namespace epp::plugins {
namespace {

// ---- core-metrics-extractor

struct ExtractorSettings {
  std::string engine_label;    // empty: the pool's default labels
  std::string default_engine;  // empty: auto-detection
  std::vector<MetricMapping> mappings;
  Params engine_configs;  // as written, for EffectiveParams
};

absl::StatusOr<MetricMapping> EngineConfig(const Params& entry) {
  if (!entry.is_map()) return absl::InvalidArgumentError(entry.path() + ": expected a map");
  MetricMapping m;
  for (const auto& [key, value] : entry.entries()) {
    const std::string at = value.path().empty() ? entry.path() + "." + key : value.path();
    if (key == "customMetrics") {
      if (value.is_null()) continue;
      if (value.kind() != Params::Kind::kList) return absl::InvalidArgumentError(at + ": expected a list");
      for (const Params& c : value.items()) {
        EPP_RETURN_IF_ERROR(c.CheckKeys({"attributeKey", "metricSpec"}));
        EPP_ASSIGN_OR_RETURN(std::string attribute, c.GetString("attributeKey", ""));
        EPP_ASSIGN_OR_RETURN(std::string spec, c.GetString("metricSpec", ""));
        if (absl::Status s = AddCustomMetric(m, attribute, spec); !s.ok())
          return absl::InvalidArgumentError(absl::StrCat(c.path(), ": ", s.message()));
      }
      continue;
    }
    if (value.kind() != Params::Kind::kScalar && !value.is_null())
      return absl::InvalidArgumentError(at + ": expected a string");
    const std::string text = value.is_null() ? std::string() : value.text();
    if (key == "name") {
      m.engine = text;
      continue;
    }
    absl::Status s = SetMappingField(m, key, text);
    if (absl::IsNotFound(s))
      return absl::InvalidArgumentError(absl::StrCat(
          at, ": unknown key (known: name, queuedRequestsSpec, runningRequestsSpec, kvUsageSpec, loraSpec, "
              "cacheInfoSpec, cacheBlockSizeLabelName, cacheNumBlocksLabelName, cacheBlockSizeSpec, "
              "cacheNumBlocksSpec, customMetrics)"));
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(at, ": ", s.message()));
  }
  if (m.engine.empty()) return absl::InvalidArgumentError(entry.path() + ".name: an engine config needs a name");
  return m;
}

absl::Status ReadEngineConfigs(const Params& list, ExtractorSettings& s) {
  if (list.kind() != Params::Kind::kList) return absl::InvalidArgumentError(list.path() + ": expected a list");
  for (const Params& entry : list.items()) {
    EPP_ASSIGN_OR_RETURN(MetricMapping m, EngineConfig(entry));
    for (const MetricMapping& prev : s.mappings)
      if (prev.engine == m.engine)
        return absl::InvalidArgumentError(absl::StrCat(entry.path(), ".name: duplicate engine '", m.engine, "'"));
    s.mappings.push_back(std::move(m));
  }
  s.engine_configs = list;
  return absl::OkStatus();
}

// llm-d's names. Strings left empty mean "not set" and are not written out.
const ParamTable<ExtractorSettings>& ExtractorTable() {
  static const auto* t =
      &(*new ParamTable<ExtractorSettings>())
           .String("engineLabelKey", &ExtractorSettings::engine_label,
                   "the endpoint label naming its engine; empty: the pool's default labels")
           .OmitEmpty()
           .String("defaultEngine", &ExtractorSettings::default_engine,
                   "the engine of endpoints without the label: a built-in or one of engineConfigs; empty: detected")
           .OmitEmpty()
           .Custom("engineConfigs", ParamType::kList,
                   "[{name, queuedRequestsSpec, runningRequestsSpec, kvUsageSpec, loraSpec, cacheInfoSpec, ..., "
                   "customMetrics: [{attributeKey, metricSpec}]}]: engines added or replaced",
                   ReadEngineConfigs, [](const ExtractorSettings& s) { return s.engine_configs; });
  return *t;
}

class CoreMetricsExtractor : public Plugin, public ScrapeSettingsSource {
 public:
  CoreMetricsExtractor(TypedName tn, ExtractorSettings s) : Plugin(std::move(tn)), s_(std::move(s)) {}
  Params EffectiveParams() const override { return ExtractorTable().Effective(s_); }

  void ConfigureScrape(ScrapeOptions& options) const override {
    for (const MetricMapping& m : s_.mappings) {
      auto same = [&](const MetricMapping& x) { return x.engine == m.engine; };
      options.custom_mappings.erase(std::remove_if(options.custom_mappings.begin(), options.custom_mappings.end(), same),
                                    options.custom_mappings.end());
      options.custom_mappings.push_back(m);
    }
    if (!s_.engine_label.empty()) options.engine_labels = {s_.engine_label};
    if (!s_.default_engine.empty() && (options.engine.empty() || options.engine == "auto"))
      options.engine = s_.default_engine;
  }
  bool DeclaresAttribute(std::string_view attribute) const override {
    for (const MetricMapping& m : s_.mappings)
      for (const auto& [key, spec] : m.custom)
        if (key == attribute) return true;
    return false;
  }

 private:
  ExtractorSettings s_;
};

// ---- topology-extractor

struct TopologyLabels {
  std::string host = "kubernetes.io/hostname";
  std::string rack = "topology.kubernetes.io/rack";
  std::string zone = "topology.kubernetes.io/zone";
  std::string region = "topology.kubernetes.io/region";
};

// Empty label names mean the default, as in llm-d.
ParamTable<TopologyLabels>::Reader LabelOrDefault(std::string TopologyLabels::*field) {
  return [field](const Params& v, TopologyLabels& l) -> absl::Status {
    EPP_ASSIGN_OR_RETURN(std::string s, v.AsString());
    if (!s.empty()) l.*field = std::move(s);
    return absl::OkStatus();
  };
}
ParamTable<TopologyLabels>::Writer LabelOf(std::string TopologyLabels::*field) {
  return [field](const TopologyLabels& l) { return Params::String(l.*field); };
}

const ParamTable<TopologyLabels>& TopologyTable() {
  static const auto* t =
      &(*new ParamTable<TopologyLabels>())
           .Custom("hostname", ParamType::kString, "label naming the endpoint's host", LabelOrDefault(&TopologyLabels::host),
                   LabelOf(&TopologyLabels::host))
           .Custom("rack", ParamType::kString, "label naming its rack", LabelOrDefault(&TopologyLabels::rack),
                   LabelOf(&TopologyLabels::rack))
           .Custom("zone", ParamType::kString, "label naming its zone", LabelOrDefault(&TopologyLabels::zone),
                   LabelOf(&TopologyLabels::zone))
           .Custom("region", ParamType::kString, "label naming its region", LabelOrDefault(&TopologyLabels::region),
                   LabelOf(&TopologyLabels::region));
  return *t;
}

class TopologyExtractor : public Plugin, public TopologySource {
 public:
  TopologyExtractor(TypedName tn, TopologyLabels labels) : Plugin(std::move(tn)), l_(std::move(labels)) {}
  PluginInputs Consumes() const override { return {PluginInput::kLabels}; }
  Params EffectiveParams() const override { return TopologyTable().Effective(l_); }
  std::optional<Topology> TopologyOf(const Endpoint& e) const override {
    auto get = [&](const std::string& label) {
      auto it = e.labels.find(label);
      return it == e.labels.end() ? std::string() : it->second;
    };
    Topology t{get(l_.host), get(l_.rack), get(l_.zone), get(l_.region)};
    if (t.empty()) return std::nullopt;
    return t;
  }

 private:
  TopologyLabels l_;
};

}  // namespace

PluginOr CreateCoreMetricsExtractor(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(ExtractorSettings s, ExtractorTable().Read(params));
  if (!s.default_engine.empty()) {
    const bool configured = std::any_of(s.mappings.begin(), s.mappings.end(),
                                        [&](const MetricMapping& m) { return m.engine == s.default_engine; });
    if (!configured && !MetricMapping::BuiltIn(s.default_engine).ok())
      return absl::InvalidArgumentError(absl::StrCat(params.path(), ".defaultEngine: '", s.default_engine,
                                                     "' is neither a built-in engine (",
                                                     absl::StrJoin(MetricMapping::BuiltInEngines(), ", "),
                                                     ") nor one of engineConfigs"));
  }
  return std::make_unique<CoreMetricsExtractor>(TN(kCoreMetricsExtractorType, name), std::move(s));
}

PluginOr CreateTopologyExtractor(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(TopologyLabels l, TopologyTable().Read(params));
  return std::make_unique<TopologyExtractor>(TN(kTopologyExtractorType, name), std::move(l));
}

PluginSchema CoreMetricsExtractorSchema() { return ExtractorTable().Schema(); }
PluginSchema TopologyExtractorSchema() { return TopologyTable().Schema(); }

TopologyLevel CompareTopology(const Topology& a, const Topology& b) {
  auto same = [](const std::string& x, const std::string& y) { return !x.empty() && x == y; };
  if (same(a.host, b.host)) return TopologyLevel::kHost;
  if (same(a.rack, b.rack)) return TopologyLevel::kRack;
  if (same(a.zone, b.zone)) return TopologyLevel::kZone;
  if (same(a.region, b.region)) return TopologyLevel::kRegion;
  return TopologyLevel::kNone;
}

const char* TopologyLevelName(TopologyLevel level) {
  switch (level) {
    case TopologyLevel::kHost: return "host";
    case TopologyLevel::kRack: return "rack";
    case TopologyLevel::kZone: return "zone";
    case TopologyLevel::kRegion: return "region";
    case TopologyLevel::kNone: break;
  }
  return "none";
}

}  // namespace epp::plugins
