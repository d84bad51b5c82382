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

class OrcaWrrPicker : public Plugin, public Picker {
 public:
  OrcaWrrPicker(TypedName tn, int64_t update_us, int64_t blackout_us, double penalty)
      : Plugin(std::move(tn)), update_us_(update_us), blackout_us_(blackout_us), penalty_(penalty) {}
  const Picker* AsPicker() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kKvCacheUsage}; }
  Params EffectiveParams() const override {
    return Params::Map()
        .Set("weightUpdatePeriodMs", Params::Number(static_cast<double>(update_us_) / 1000.0))
        .Set("blackoutPeriodMs", Params::Number(static_cast<double>(blackout_us_) / 1000.0))
        .Set("errorUtilizationPenalty", Params::Number(penalty_));
  }

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

  const int64_t update_us_, blackout_us_;
  const double penalty_;
  mutable std::mutex mu_;
  mutable std::map<std::string, State, std::less<>> state_;
  mutable int64_t last_update_us_ = -1;
  mutable double median_ = 1;
};

}  // namespace

PluginOr CreateOrcaWrrPicker(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(params.CheckKeys({"weightUpdatePeriodMs", "blackoutPeriodMs", "errorUtilizationPenalty"}));
  EPP_ASSIGN_OR_RETURN(double update_ms, params.GetDouble("weightUpdatePeriodMs", 1000));
  EPP_ASSIGN_OR_RETURN(double blackout_ms, params.GetDouble("blackoutPeriodMs", 10000));
  EPP_ASSIGN_OR_RETURN(double penalty, params.GetDouble("errorUtilizationPenalty", 1.0));
  if (!(update_ms >= 100) || !std::isfinite(update_ms) || update_ms > 3.6e6)
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ".weightUpdatePeriodMs: must be in [100, 3600000] (Envoy's floor is 100 ms)"));
  if (!(blackout_ms >= 0) || !std::isfinite(blackout_ms) || blackout_ms > 3.6e6)
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ".blackoutPeriodMs: must be in [0, 3600000]"));
  if (!(penalty >= 0) || !std::isfinite(penalty))
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ".errorUtilizationPenalty: must be >= 0"));
  return std::make_unique<OrcaWrrPicker>(TN(kOrcaWrrPickerType, name), static_cast<int64_t>(update_ms * 1000),
                                         static_cast<int64_t>(blackout_ms * 1000), penalty);
}

}  // namespace epp::plugins
