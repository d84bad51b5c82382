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

namespace epp::plugins {
namespace {

// ---- k8s-notification-source: one Kubernetes kind, whose events llm-d hands to the
// NotificationExtractors wired to it. Facts: llm-d-router's datalayer/source/notifications.
struct NotificationOptions {
  std::string group, version, kind;
};

const ParamTable<NotificationOptions>& NotificationTable() {
  static const auto* t = &(*new ParamTable<NotificationOptions>())
                              .String("group", &NotificationOptions::group, "the API group; empty for the core group")
                              .String("version", &NotificationOptions::version, "the API version, e.g. v1 (required)")
                              .String("kind", &NotificationOptions::kind, "the kind, e.g. Pod (required)");
  return *t;
}

// epp has no notification extractor (llm-d has none in tree either: its extractors are
// out-of-tree plugins), so wiring one is refused (WireDataLayer: no extractor accepts Kubernetes
// objects) and the source starts no watch: it loads, with its parameters checked, and says so.
class K8sNotificationSource final : public Plugin, public DataSourcePlugin {
 public:
  K8sNotificationSource(TypedName tn, NotificationOptions o) : Plugin(std::move(tn)), o_(std::move(o)) {}
  Params EffectiveParams() const override { return NotificationTable().Effective(o_); }
  bool HasReferences() const override { return true; }
  DataPayload Provides() const override { return DataPayload::kKubeObjects; }
  void AddExtractor(std::string, std::shared_ptr<const DataExtractor>) override {}

 private:
  NotificationOptions o_;
};

}  // namespace

PluginOr CreateK8sNotificationSource(const std::string& name, const Params& params, const PluginContext& ctx) {
  EPP_ASSIGN_OR_RETURN(NotificationOptions o, NotificationTable().Read(params));
  if (o.version.empty() || o.kind.empty())
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ": version and kind are required for k8s-notification-source"));
  if (ctx.warnings)
    ctx.warnings->push_back(absl::StrCat("plugin '", name, "' (k8s-notification-source, ", o.group.empty() ? "" : o.group + "/",
                                         o.version, " ", o.kind,
                                         "): epp has no notification extractors, so it starts no watch"));
  return std::make_unique<K8sNotificationSource>(TN(kK8sNotificationSourceType, name), std::move(o));
}
PluginSchema K8sNotificationSourceSchema() { return NotificationTable().Schema(); }

}  // namespace epp::plugins
