// utilization-filter: keeps the endpoints under every configured cap (`conditions`, each a
// metric and its maxValue); an endpoint over any one cap is removed. With fallbackOnEmpty, a
// cycle in which every endpoint is over a cap keeps them all instead. Metrics: active-requests
// (the requests epp has in flight there: SchedulingContext::InflightRequests, llm-d's
// inflight-load-producer count), running-requests, waiting-queue, kv-cache-utilization (a
// fraction). A metric the endpoint does not report counts as 0, as in llm-d.
// Facts: llm-d-router's scheduling/filter/utilization.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/strings.h"
#include "epp/scheduling.h"
#include "plugins/filter/filter.h"

namespace epp::plugins {
namespace {

using internal::Num;

enum class UtilMetric { kActiveRequests, kRunningRequests, kWaitingQueue, kKvCache };

struct MetricName {
  const char* name;
  UtilMetric metric;
  PluginInput input;
};
constexpr MetricName kMetrics[] = {
    {"active-requests", UtilMetric::kActiveRequests, PluginInput::kInflightLoad},
    {"running-requests", UtilMetric::kRunningRequests, PluginInput::kRunningRequests},
    {"waiting-queue", UtilMetric::kWaitingQueue, PluginInput::kWaitingQueue},
    {"kv-cache-utilization", UtilMetric::kKvCache, PluginInput::kKvCacheUsage},
};
const MetricName& NameOf(UtilMetric m) {
  for (const MetricName& n : kMetrics)
    if (n.metric == m) return n;
  return kMetrics[0];
}

struct Condition {
  UtilMetric metric = UtilMetric::kActiveRequests;
  double max_value = 0;
};

struct UtilizationOptions {
  std::vector<Condition> conditions;
  bool fallback_on_empty = false;
  std::string producer;  // inFlightLoadProducerName: epp's counts are the scheduler's own
};

absl::Status ReadConditions(const Params& v, UtilizationOptions& o) {
  if (v.kind() != Params::Kind::kList)
    return absl::InvalidArgumentError(absl::StrCat(v.path(), ": expected a list of {metric, maxValue}"));
  o.conditions.clear();
  size_t i = 0;
  for (const Params& c : v.items()) {
    const std::string at = c.path().empty() ? absl::StrCat(v.path(), "[", i, "]") : c.path();
    ++i;
    if (!c.is_map()) return absl::InvalidArgumentError(absl::StrCat(at, ": expected {metric, maxValue}"));
    EPP_RETURN_IF_ERROR(c.CheckKeys({"metric", "maxValue"}));
    EPP_ASSIGN_OR_RETURN(std::string metric, c.GetString("metric", ""));
    Condition cond;
    bool known = false;
    for (const MetricName& n : kMetrics)
      if (metric == n.name) {
        cond.metric = n.metric;
        known = true;
      }
    if (!known)
      return absl::InvalidArgumentError(absl::StrCat(at, ".metric: must be one of active-requests, running-requests, ",
                                                     "waiting-queue, kv-cache-utilization, got \"", metric, "\""));
    const Params* max = c.Find("maxValue");
    if (max == nullptr || max->is_null())
      return absl::InvalidArgumentError(absl::StrCat(at, ".maxValue: required (the cap on ", metric, ")"));
    EPP_ASSIGN_OR_RETURN(cond.max_value, max->AsDouble());
    if (!(cond.max_value >= 0))
      return absl::InvalidArgumentError(absl::StrCat(at, ".maxValue: must be >= 0, got ", Num(cond.max_value)));
    if (cond.metric == UtilMetric::kKvCache && cond.max_value > 1)
      return absl::InvalidArgumentError(
          absl::StrCat(at, ".maxValue: kv-cache-utilization is a fraction, must be at most 1, got ", Num(cond.max_value)));
    o.conditions.push_back(cond);
  }
  return absl::OkStatus();
}

Params WriteConditions(const UtilizationOptions& o) {
  Params list = Params::List();
  for (const Condition& c : o.conditions)
    list.Append(Params::Map().Set("metric", Params::String(NameOf(c.metric).name)).Set("maxValue", Params::Number(c.max_value)));
  return list;
}

const ParamTable<UtilizationOptions>& Table() {
  static const auto* t =
      &(*new ParamTable<UtilizationOptions>())
           .Custom("conditions", ParamType::kList,
                   "[{metric, maxValue}] (at least one): an endpoint is kept only under every cap; metric is "
                   "active-requests, running-requests, waiting-queue or kv-cache-utilization (maxValue <= 1)",
                   ReadConditions, WriteConditions)
           .Bool("fallbackOnEmpty", &UtilizationOptions::fallback_on_empty,
                 "keep every candidate when all of them are over a cap")
           .String("inFlightLoadProducerName", &UtilizationOptions::producer,
                   "active-requests: the in-flight load producer read (epp counts in flight requests itself)")
           .OmitEmpty();
  return *t;
}

class UtilizationFilter : public Plugin, public Filter {
 public:
  UtilizationFilter(TypedName tn, UtilizationOptions o) : Plugin(std::move(tn)), o_(std::move(o)) {}
  const Filter* AsFilter() const override { return this; }
  Params EffectiveParams() const override { return Table().Effective(o_); }
  PluginInputs Consumes() const override {
    PluginInputs in;
    for (const Condition& c : o_.conditions) in = in | PluginInputs{NameOf(c.metric).input};
    return in;
  }
  // It removes endpoints for being busy: a cycle it empties is a saturated pool (429).
  bool RemovesBusyEndpoints() const override { return true; }

  std::vector<const Endpoint*> Apply(const SchedulingContext& ctx, Candidates candidates) const override {
    std::vector<const Endpoint*> kept;
    for (const Endpoint* e : candidates)
      if (Over(ctx, *e) == nullptr) kept.push_back(e);
    if (kept.empty() && o_.fallback_on_empty) return {candidates.begin(), candidates.end()};
    return kept;
  }
  std::string WhyRemoved(const SchedulingContext& ctx, const Endpoint& e) const override {
    std::vector<std::string> over;
    for (const Condition& c : o_.conditions) {
      const double v = Value(ctx, e, c.metric);
      if (v > c.max_value) over.push_back(absl::StrCat(NameOf(c.metric).name, " ", Num(v), " > ", Num(c.max_value)));
    }
    return absl::StrJoin(over, ", ");
  }

 private:
  static double Value(const SchedulingContext& ctx, const Endpoint& e, UtilMetric m) {
    switch (m) {
      case UtilMetric::kActiveRequests: return static_cast<double>(ctx.InflightRequests(&e));
      case UtilMetric::kRunningRequests: return e.metrics.running_requests.value_or(0);
      case UtilMetric::kWaitingQueue: return e.metrics.waiting_queue_size.value_or(0);
      case UtilMetric::kKvCache: return e.metrics.kv_cache_usage.value_or(0);
    }
    return 0;
  }
  // The first condition `e` breaks, or nullptr.
  const Condition* Over(const SchedulingContext& ctx, const Endpoint& e) const {
    for (const Condition& c : o_.conditions)
      if (Value(ctx, e, c.metric) > c.max_value) return &c;
    return nullptr;
  }
  UtilizationOptions o_;
};

}  // namespace

PluginOr CreateUtilizationFilter(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(UtilizationOptions o, Table().Read(params));
  if (o.conditions.empty())
    return absl::InvalidArgumentError(absl::StrCat(params.path().empty() ? "parameters" : params.path(),
                                                   ".conditions: at least one condition is required"));
  return std::make_unique<UtilizationFilter>(TN(kUtilizationFilterType, name), std::move(o));
}

PluginSchema UtilizationFilterSchema() { return Table().Schema(); }

}  // namespace epp::plugins
