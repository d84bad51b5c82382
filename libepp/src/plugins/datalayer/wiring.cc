// WireDataLayer (datalayer.h): dataLayer.sources bound to the plugins, as llm-d's
// buildDataLayerConfig and the data-layer runtime's type check do.
#include <set>

#include "absl/strings/str_cat.h"
#include "plugins/accepted/accepted.h"
#include "plugins/datalayer/datalayer.h"
#include "plugins/producer/producer.h"  // kEndpointNotificationSourceType

namespace epp::plugins {
namespace {

std::string Describe(const Plugin& p) { return absl::StrCat("'", p.name(), "' (", p.type(), ")"); }

// Sources epp serves without a DataSourcePlugin: its own metrics scrape (read with
// core-metrics-extractor's mappings), and endpoint events, which every plugin keeping
// per-endpoint state gets from the pool anyway (EndpointState::ForgetEndpoint).
bool BuiltInPair(const Plugin& source, const Plugin& extractor) {
  if (source.type() == kMetricsDataSourceType) return extractor.type() == kCoreMetricsExtractorType;
  return source.type() == kEndpointNotificationSourceType;
}

}  // namespace

absl::Status WireDataLayer(const DataLayerSpec& spec, std::span<const std::shared_ptr<Plugin>> plugins,
                           const std::function<std::string(int line, std::string_view path)>& where,
                           std::vector<std::string>* warnings) {
  auto find = [&](const std::string& name) -> Plugin* {
    for (const auto& p : plugins)
      if (p->name() == name) return p.get();
    return nullptr;
  };
  auto error = [&](int line, const std::string& path, const std::string& message) {
    return absl::InvalidArgumentError(absl::StrCat(where(line, path), ": ", message));
  };
  auto warn = [&](std::string w) {
    if (warnings) warnings->push_back(std::move(w));
  };
  std::set<std::string> listed;
  for (const DataLayerSourceSpec& src : spec.sources) {
    Plugin* source = find(src.plugin_ref);
    if (source == nullptr) return error(src.line, src.path + ".pluginRef", "no plugin named '" + src.plugin_ref + "'");
    listed.insert(source->name());
    auto* ds = dynamic_cast<DataSourcePlugin*>(source);
    const bool built_in = source->type() == kMetricsDataSourceType || source->type() == kEndpointNotificationSourceType;
    if (ds == nullptr && !built_in) return error(src.line, src.path + ".pluginRef", Describe(*source) + " is not a data source");
    for (size_t j = 0; j < src.extractor_refs.size(); ++j) {
      const std::string at = absl::StrCat(src.path, ".extractors[", j, "].pluginRef");
      Plugin* ex = find(src.extractor_refs[j]);
      if (ex == nullptr) return error(src.line, at, "no plugin named '" + src.extractor_refs[j] + "'");
      if (ds == nullptr) {
        if (!BuiltInPair(*source, *ex))
          return error(src.line, at,
                       absl::StrCat(Describe(*ex), " cannot extract from ", Describe(*source),
                                    ": epp reads the model servers' metrics with core-metrics-extractor only"));
        continue;
      }
      auto* ep = dynamic_cast<const ExtractorPlugin*>(ex);
      if (ep == nullptr) return error(src.line, at, Describe(*ex) + " is not an extractor of " + DataPayloadName(ds->Provides()));
      if (ep->Extractor()->Accepts() != ds->Provides())
        return error(src.line, at,
                     absl::StrCat(Describe(*ex), " reads ", DataPayloadName(ep->Extractor()->Accepts()), " but ",
                                  Describe(*source), " provides ", DataPayloadName(ds->Provides())));
      ds->AddExtractor(ex->name(), ep->Extractor());
    }
    if (src.extractor_refs.empty() && ds != nullptr)
      warn(absl::StrCat(src.path, ": source ", Describe(*source), " has no extractors; it reads nothing"));
  }
  for (const auto& p : plugins)
    if (dynamic_cast<const DataSourcePlugin*>(p.get()) != nullptr && !listed.count(p->name()))
      warn(absl::StrCat("plugin ", Describe(*p), " is in no dataLayer.sources entry; it reads nothing (as in llm-d)"));
  EndpointDiscoverySource* discovery = nullptr;
  if (!spec.discovery_ref.empty()) {
    Plugin* p = find(spec.discovery_ref);
    if (p == nullptr) return error(spec.discovery_line, "dataLayer.discovery.pluginRef", "no plugin named '" + spec.discovery_ref + "'");
    discovery = dynamic_cast<EndpointDiscoverySource*>(p);
    if (discovery == nullptr)
      return error(spec.discovery_line, "dataLayer.discovery.pluginRef", Describe(*p) + " is not an endpoint discovery plugin");
    discovery->Select();
  }
  for (const auto& p : plugins)
    if (auto* d = dynamic_cast<const EndpointDiscoverySource*>(p.get()); d != nullptr && d != discovery)
      warn(absl::StrCat("plugin ", Describe(*p), " is not dataLayer.discovery; it lists nothing"));
  if (spec.inject_defaults == false)
    warn("dataLayer.injectDefaults: false: epp still reads every endpoint's metrics (its scheduling needs them)");
  return absl::OkStatus();
}

}  // namespace epp::plugins
