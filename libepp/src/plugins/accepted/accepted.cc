// metrics-data-source, inflight-load-producer: plugin types of GIE's and llm-d's configs that
// name what epp does anyway; their parameters are kept verbatim for the effective config.
#include "plugins/accepted/accepted.h"

#include "absl/strings/str_cat.h"

namespace epp::plugins {
namespace {

// GIE's metrics-data-source takes the scrape settings of GIE's own data layer; epp scrapes with
// its own (serve's flags and core-metrics-extractor), so whatever is given is only kept.
struct DataSourceOptions {
  Params given;
};

const ParamTable<DataSourceOptions>& DataSourceTable() {
  static const auto* t = &(*new ParamTable<DataSourceOptions>())
                              .OtherKeys(&DataSourceOptions::given,
                                         "any: GIE's scrape settings, kept for the effective config and not used");
  return *t;
}

struct InflightOptions {
  bool add_output = false;
  double ratio = 1.5;
  int64_t max_out = 0;
  std::string prefix;
  bool sync = true;
};

// llm-d's names, defaults and checks; the values do not change epp's counts.
const ParamTable<InflightOptions>& InflightTable() {
  static const auto* t =
      &(*new ParamTable<InflightOptions>())
           .Bool("addEstimatedOutputTokens", &InflightOptions::add_output, "llm-d: count an output estimate too (kept)")
           .Number("outputRatio", &InflightOptions::ratio, Range::AtLeast(0), "llm-d: output tokens per prompt token (kept)")
           .Int("maxEstimatedOutputTokens", &InflightOptions::max_out, Range::AtLeast(0),
                "llm-d: cap of the output estimate, 0: none (kept)")
           .String("prefixMatchInfoProducerName", &InflightOptions::prefix, "llm-d: the prefix producer read (kept)")
           .OmitEmpty()
           .Bool("syncCrossReplicaState", &InflightOptions::sync,
                 "llm-d: share counts across replicas; epp replicas each count their own (kept)");
  return *t;
}

}  // namespace

PluginOr CreateMetricsDataSource(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(DataSourceOptions o, DataSourceTable().Read(params));
  return std::make_unique<ParamsOnlyPlugin>(TN(kMetricsDataSourceType, name), DataSourceTable().Effective(o));
}

// inflight-load-producer: its parameters are checked as llm-d checks them and kept; the counts
// themselves are the scheduler's (requests and GIE's token estimate per endpoint, added at the
// pick, released when the response ends), which active-request-scorer and token-load-scorer read.
PluginOr CreateInflightLoadProducer(const std::string& name, const Params& params, const PluginContext& ctx) {
  EPP_ASSIGN_OR_RETURN(InflightOptions o, InflightTable().Read(params));
  if (ctx.warnings)
    ctx.warnings->push_back(absl::StrCat(
        "plugin '", name, "' (", std::string(kInflightLoadProducerType),
        "): epp counts in-flight requests and tokens itself (tokens: the prompt plus 1.5x as output, "
        "not llm-d's uncached-prompt estimate); its parameters are kept but do not change the counts",
        o.sync ? "; syncCrossReplicaState: each epp replica counts only its own requests" : ""));
  return std::make_unique<ParamsOnlyPlugin>(TN(kInflightLoadProducerType, name), InflightTable().Effective(o));
}

PluginSchema MetricsDataSourceSchema() { return DataSourceTable().Schema(); }
PluginSchema InflightLoadProducerSchema() { return InflightTable().Schema(); }

}  // namespace epp::plugins
