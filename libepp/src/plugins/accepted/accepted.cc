// metrics-data-source, openai-parser, passthrough-parser,
// inflight-load-producer: plugin types of GIE's and llm-d's configs that
// name what epp does anyway; their parameters are kept verbatim for the effective config.
#include "plugins/accepted/accepted.h"

#include "absl/strings/str_cat.h"

namespace epp::plugins {

PluginOr CreateMetricsDataSource(const std::string& name, const Params& params, const PluginContext&) {
  return std::make_unique<ParamsOnlyPlugin>(TN(kMetricsDataSourceType, name), params);
}
PluginOr CreateOpenAIParser(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(params.CheckKeys({}));
  return std::make_unique<ParamsOnlyPlugin>(TN(kOpenAIParserType, name), params);
}

// inflight-load-producer: its parameters are checked as llm-d checks them and kept; the counts
// themselves are the scheduler's (requests and GIE's token estimate per endpoint, added at the
// pick, released when the response ends), which active-request-scorer and token-load-scorer read.
PluginOr CreateInflightLoadProducer(const std::string& name, const Params& params, const PluginContext& ctx) {
  EPP_RETURN_IF_ERROR(params.CheckKeys({"addEstimatedOutputTokens", "outputRatio", "maxEstimatedOutputTokens",
                                        "prefixMatchInfoProducerName", "syncCrossReplicaState"}));
  EPP_ASSIGN_OR_RETURN(bool add_output, params.GetBool("addEstimatedOutputTokens", false));
  EPP_ASSIGN_OR_RETURN(double ratio, params.GetDouble("outputRatio", 1.5));
  EPP_ASSIGN_OR_RETURN(int64_t max_out, params.GetInt("maxEstimatedOutputTokens", 0));
  EPP_ASSIGN_OR_RETURN(std::string prefix, params.GetString("prefixMatchInfoProducerName", ""));
  EPP_ASSIGN_OR_RETURN(bool sync, params.GetBool("syncCrossReplicaState", true));
  if (ratio < 0) return absl::InvalidArgumentError(absl::StrCat(params.path(), ".outputRatio: must be non-negative, got ", ratio));
  if (max_out < 0)
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ".maxEstimatedOutputTokens: must be non-negative, got ", max_out));
  (void)add_output;
  (void)prefix;
  if (ctx.warnings)
    ctx.warnings->push_back(absl::StrCat(
        "plugin '", name, "' (", std::string(kInflightLoadProducerType),
        "): epp counts in-flight requests and tokens itself (tokens: the prompt plus 1.5x as output, "
        "not llm-d's uncached-prompt estimate); its parameters are kept but do not change the counts",
        sync ? "; syncCrossReplicaState: each epp replica counts only its own requests" : ""));
  return std::make_unique<ParamsOnlyPlugin>(TN(kInflightLoadProducerType, name), params);
}

PluginOr CreatePassthroughParser(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(params.CheckKeys({}));
  return std::make_unique<ParamsOnlyPlugin>(TN(kPassthroughParserType, name), params);
}

}  // namespace epp::plugins
