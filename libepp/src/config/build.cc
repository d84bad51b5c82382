// BuildScheduler and RebuildScheduler: the stages of build_stages.h in order. The order matters:
// default plugins (rules 2-4, 7, 9) are added after the configured ones, so the effective
// document lists the configured plugins first, and a default is only created when no configured
// plugin fills its role.
#include <memory>
#include <utility>

#include "config/build_stages.h"
#include "config/params_yaml.h"
#include "epp/config.h"
#include "epp/scheduler.h"
#include "epp/status.h"
#include "plugins/datalayer/datalayer.h"

namespace epp {
namespace {

absl::StatusOr<std::unique_ptr<Scheduler>> Build(const EppConfig& input, const PluginRegistry& registry,
                                                 const PluginContext& context, const Scheduler::Impl* previous) {
  EppConfig config = build::WithDefaultPlugins(input);
  EPP_RETURN_IF_ERROR(build::MoveLegacyPrefixScorerParams(config));
  build::BuildState st(std::move(config), registry, context, previous);
  EPP_RETURN_IF_ERROR(build::CheckPluginTypes(st.config, registry));
  EPP_RETURN_IF_ERROR(build::CreatePlugins(st));
  build::AddDefaultProfile(st);
  EPP_RETURN_IF_ERROR(build::ResolveProfiles(st));
  EPP_RETURN_IF_ERROR(build::ResolveReferences(st));
  EPP_RETURN_IF_ERROR(plugins::WireDataLayer(
      st.config.data_layer, st.impl->plugins, [&st](int line, std::string_view path) { return st.Where(line, path); },
      &st.impl->warnings));
  EPP_RETURN_IF_ERROR(build::ResolveProfileHandler(st));
  EPP_RETURN_IF_ERROR(build::ResolveSaturationDetector(st));
  EPP_RETURN_IF_ERROR(build::ResolvePrefixProducer(st));
  build::IndexHooks(st);
  st.impl->effective = build::EffectiveDocument(st.config, *st.impl);
  return std::make_unique<Scheduler>(std::move(st.impl));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Scheduler>> BuildScheduler(const EppConfig& config, const PluginRegistry& registry,
                                                          const PluginContext& context) {
  return Build(config, registry, context, nullptr);
}

absl::StatusOr<std::unique_ptr<Scheduler>> RebuildScheduler(const EppConfig& config, const PluginRegistry& registry,
                                                            const PluginContext& context, const Scheduler& previous) {
  return Build(config, registry, context, &previous.impl());
}

std::string Scheduler::EffectiveConfigYaml() const { return ParamsYaml(impl_->effective); }

}  // namespace epp
