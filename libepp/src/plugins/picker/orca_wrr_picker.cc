// orca-wrr-picker: Envoy's client_side_weighted_round_robin (ORCA load reports) as a picker, the
// non-EPP alternative: per-endpoint weights, no per-request affinity. From Envoy's public
// description (../shared/reference/peers.md section 6):
//   weight_e = qps_e / (utilization_e + errorUtilizationPenalty x eps_e / qps_e)
//   qps_e: requests per second this picker sent to e over the last weightUpdatePeriod (the
//     endpoint's own reported rate in Envoy; the EPP is its only client here);
//   utilization_e: the endpoint's KV-cache usage as scraped (what an LLM server would report
//     as application utilization); eps_e: 0 (the EPP sees no errors at pick time).
//   A weight is valid once the endpoint has reported for blackoutPeriod and while its
//   utilization is > 0; endpoints without a valid weight get the median of the valid ones (1 if
//   none). Weights are recomputed every weightUpdatePeriod; picks follow them by smooth weighted
//   round robin (each pick adds every weight to its endpoint's credit and takes the largest).
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "plugins/picker/picker.h"

namespace epp::plugins {
namespace {

struct OrcaOptions {
  double update_ms = 1000;
  double blackout_ms = 10000;
  double penalty = 1.0;
};

// Envoy's client-side weighted round robin settings, in milliseconds.
const ParamTable<OrcaOptions>& Table() {
  static const auto* t =
      &(*new ParamTable<OrcaOptions>())
           .Number("weightUpdatePeriodMs", &OrcaOptions::update_ms, Range::Closed(100, 3.6e6),
                   "how often weights are recomputed (Envoy's floor is 100 ms)")
           .Number("blackoutPeriodMs", &OrcaOptions::blackout_ms, Range::Closed(0, 3.6e6),
                   "an endpoint's first load reports are ignored this long")
           .Number("errorUtilizationPenalty", &OrcaOptions::penalty, Range::AtLeast(0),
                   "weight of the error rate in the utilization");
  return *t;
}

class OrcaWrrPicker : public Plugin, public Picker {
 public:
  OrcaWrrPicker(TypedName tn, OrcaOptions o)
      : Plugin(std::move(tn)),
        o_(o),
        update_us_(static_cast<int64_t>(o.update_ms * 1000)),
        blackout_us_(static_cast<int64_t>(o.blackout_ms * 1000)),
        penalty_(o.penalty) {}
  const Picker* AsPicker() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kKvCacheUsage}; }
  Params EffectiveParams() const override { return Table().Effective(o_); }

  std::vector<const Endpoint*> Pick(const SchedulingContext& ctx, std::span<const ScoredEndpoint> scored) const override {
    if (scored.empty()) return {};
    std::lock_guard<std::mutex> lock(mu_);
    if (last_update_us_ < 0 || ctx.now_us - last_update_us_ >= update_us_) UpdateLocked(ctx, scored);
    // Weights of endpoints not seen at the last update: the median (1 if none is valid).
    double total = 0;
    const ScoredEndpoint* best = nullptr;
    double best_credit = -INFINITY;
    for (const ScoredEndpoint& s : scored) {
      State& st = state_[s.endpoint->address];
      const double w = st.weight > 0 ? st.weight : median_;
      st.credit += w;
      total += w;
      if (st.credit > best_credit) {
        best_credit = st.credit;
        best = &s;
      }
    }
    State& chosen = state_[best->endpoint->address];
    chosen.credit -= total;
    chosen.picks_in_period++;
    return {best->endpoint};
  }

 private:
  struct State {
    int64_t first_seen_us = -1;
    int64_t picks_in_period = 0;
    double weight = 0;  // 0: no valid weight
    double credit = 0;
  };

  void UpdateLocked(const SchedulingContext& ctx, std::span<const ScoredEndpoint> scored) const {
    const double period_s = last_update_us_ < 0 ? 0 : static_cast<double>(ctx.now_us - last_update_us_) / 1e6;
    std::vector<double> valid;
    for (const ScoredEndpoint& s : scored) {
      State& st = state_[s.endpoint->address];
      if (st.first_seen_us < 0) st.first_seen_us = ctx.now_us;
      const double qps = period_s > 0 ? static_cast<double>(st.picks_in_period) / period_s : 0;
      const double util = s.endpoint->metrics.kv_cache_usage.value_or(0);
      st.weight = 0;
      // Envoy drops a report with qps <= 0 or utilization <= 0, and one inside the blackout.
      const double eps = 0;  // errors per second: none seen at pick time
      if (qps > 0 && util > 0 && ctx.now_us - st.first_seen_us >= blackout_us_) st.weight = qps / (util + penalty_ * eps / qps);
      if (st.weight > 0) valid.push_back(st.weight);
      st.picks_in_period = 0;
    }
    median_ = 1;
    if (!valid.empty()) {
      std::sort(valid.begin(), valid.end());
      median_ = valid.size() % 2 ? valid[valid.size() / 2] : (valid[valid.size() / 2 - 1] + valid[valid.size() / 2]) / 2;
    }
    last_update_us_ = ctx.now_us;
  }

  const OrcaOptions o_;  // as configured, for EffectiveParams
  const int64_t update_us_, blackout_us_;
  const double penalty_;
  mutable std::mutex mu_;
  mutable std::map<std::string, State, std::less<>> state_;
  mutable int64_t last_update_us_ = -1;
  mutable double median_ = 1;
};

}  // namespace

PluginOr CreateOrcaWrrPicker(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(OrcaOptions o, Table().Read(params));
  return std::make_unique<OrcaWrrPicker>(TN(kOrcaWrrPickerType, name), o);
}

PluginSchema OrcaWrrPickerSchema() { return Table().Schema(); }

}  // namespace epp::plugins
