// utilization-detector: GIE's saturation detector (429 for sheddable requests when the pool is
// saturated), also usable as a filter that drops endpoints over their thresholds.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "epp/param_table.h"
#include "epp/scheduling.h"
#include "plugins/saturation/saturation.h"

namespace epp::plugins {
namespace {

using internal::Num;

struct Options {
  double queue_threshold = 5;
  double kv_threshold = 0.8;
  int64_t staleness_us = 200000;  // 200 ms
  double headroom = 0;
};

// GIE's defaults and names (flowcontrol/saturationdetector/utilization).
const ParamTable<Options>& Table() {
  static const auto* t = &(*new ParamTable<Options>())
                              .Number("queueDepthThreshold", &Options::queue_threshold, Range::Above(0),
                                      "waiting requests at which an endpoint counts as full")
                              .Number("kvCacheUtilThreshold", &Options::kv_threshold, Range::OpenClosed(0, 1),
                                      "KV-cache use (0-1) at which an endpoint counts as full")
                              .Duration("metricsStalenessThreshold", &Options::staleness_us, Range::Above(0),
                                        "metrics older than this count the endpoint as full")
                              .Number("headroom", &Options::headroom, Range::AtLeast(0),
                                      "fraction over the thresholds still accepted (burst allowance)");
  return *t;
}

// GIE's utilization detector (flowcontrol/saturationdetector/utilization).
class UtilizationDetector : public Plugin, public SaturationDetector, public Filter {
 public:
  UtilizationDetector(TypedName tn, Options o) : Plugin(std::move(tn)), o_(o) {}
  const SaturationDetector* AsSaturationDetector() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kWaitingQueue, PluginInput::kKvCacheUsage}; }
  const Filter* AsFilter() const override { return this; }
  Params EffectiveParams() const override { return Table().Effective(o_); }

  // mean over candidates of max(queue / Tq, kv / Tkv); stale or missing metrics count 1.
  double Saturation(const SchedulingContext& ctx, Candidates candidates) const override {
    if (candidates.empty()) return 1.0;
    double sum = 0;
    for (const Endpoint* e : candidates) sum += Load(ctx, *e);
    return sum / static_cast<double>(candidates.size());
  }
  std::string ExplainSaturation(const SchedulingContext& ctx, Candidates candidates) const override {
    int stale = 0;
    for (const Endpoint* e : candidates) stale += ctx.MetricsStale(*e, o_.staleness_us);
    return absl::StrCat("mean of max(queue/", Num(o_.queue_threshold), ", kv/", Num(o_.kv_threshold), ") over ",
                        candidates.size(), " candidates = ", Num(Saturation(ctx, candidates)),
                        stale ? absl::StrCat(" (", stale, " with stale or missing metrics count as 1)") : "");
  }

  std::vector<const Endpoint*> Apply(const SchedulingContext& ctx, Candidates candidates) const override {
    std::vector<const Endpoint*> out;
    for (const Endpoint* e : candidates)
      if (WhyRemoved(ctx, *e).empty()) out.push_back(e);
    // Fail open: when every endpoint is over its thresholds, keep them all.
    if (out.empty()) out.assign(candidates.begin(), candidates.end());
    return out;
  }
  bool RemovesBusyEndpoints() const override { return true; }
  std::string WhyRemoved(const SchedulingContext& ctx, const Endpoint& e) const override {
    if (ctx.MetricsStale(e, o_.staleness_us))
      return e.metrics_time_us ? absl::StrCat("metrics older than ", Num(o_.staleness_us / 1000.0), "ms")
                               : "no metrics";
    const double q = e.metrics.waiting_queue_size.value_or(0), kv = e.metrics.kv_cache_usage.value_or(0);
    const double f = 1.0 + o_.headroom;
    if (q >= o_.queue_threshold * f) return absl::StrCat("queue ", Num(q), " >= ", Num(o_.queue_threshold * f));
    if (kv >= o_.kv_threshold * f) return absl::StrCat("KV cache ", Num(kv), " >= ", Num(o_.kv_threshold * f));
    return {};
  }

 private:
  double Load(const SchedulingContext& ctx, const Endpoint& e) const {
    if (ctx.MetricsStale(e, o_.staleness_us)) return 1.0;
    const double q = e.metrics.waiting_queue_size.value_or(0) / o_.queue_threshold;
    const double kv = e.metrics.kv_cache_usage.value_or(0) / o_.kv_threshold;
    return std::max(q, kv);
  }
  Options o_;
};

}  // namespace

PluginSchema UtilizationDetectorSchema() { return Table().Schema(); }

PluginOr CreateUtilizationDetector(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(Options o, Table().Read(params));
  return std::make_unique<UtilizationDetector>(TN(kUtilizationDetectorType, name), o);
}

}  // namespace epp::plugins
