// metrics-data-source, core-metrics-extractor, openai-parser: plugin types of GIE's configs that
// name what epp does anyway; their parameters are kept verbatim for the effective config.
#include "plugins/accepted/accepted.h"

namespace epp::plugins {
namespace {

// A plugin type that names what epp does anyway; its parameters are kept verbatim.
class PassivePlugin : public Plugin {
 public:
  PassivePlugin(TypedName tn, Params params) : Plugin(std::move(tn)), params_(std::move(params)) {}
  Params EffectiveParams() const override { return params_.is_null() ? Params::Map() : params_; }

 private:
  Params params_;
};

}  // namespace

PluginOr CreateMetricsDataSource(const std::string& name, const Params& params, const PluginContext&) {
  return std::make_unique<PassivePlugin>(TN(kMetricsDataSourceType, name), params);
}
PluginOr CreateCoreMetricsExtractor(const std::string& name, const Params& params, const PluginContext&) {
  return std::make_unique<PassivePlugin>(TN(kCoreMetricsExtractorType, name), params);
}
PluginOr CreateOpenAIParser(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(params.CheckKeys({}));
  return std::make_unique<PassivePlugin>(TN(kOpenAIParserType, name), params);
}

PluginOr CreatePassthroughParser(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(params.CheckKeys({}));
  return std::make_unique<PassivePlugin>(TN(kPassthroughParserType, name), params);
}

}  // namespace epp::plugins
