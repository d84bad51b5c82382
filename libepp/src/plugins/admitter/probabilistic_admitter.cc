// probabilistic-admitter (llm-d requestcontrol/admitter/probabilisticadmitter): sheds sheddable
// requests (priority < 0) with a probability that rises steeply with pool saturation, instead of
// the utilization detector's hard cut at 1.0. saturation = mean over candidates of
// max(queue / queueDepthThreshold, kv / kvCacheUtilThreshold), ratios not capped, an endpoint
// without metrics counting 1; p = min(saturation^power x k, 1); the request is rejected (429) when
// a uniform draw from the scheduler's RNG is below p. Requests with priority >= 0 are always
// admitted, as are requests with no candidates (the cycle answers those).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "epp/scheduling.h"
#include "plugins/admitter/admitter.h"

namespace epp::plugins {
namespace {

using internal::Num;

struct AdmitterOptions {
  int64_t queue_depth = 5;
  double kv_util = 0.8;
  double power = 5.0;
  double k = 300.0;
};

// llm-d's names and defaults.
const ParamTable<AdmitterOptions>& Table() {
  static const auto* t =
      &(*new ParamTable<AdmitterOptions>())
           .Int("queueDepthThreshold", &AdmitterOptions::queue_depth, Range::Above(0),
                "waiting requests at which an endpoint's saturation is 1")
           .Number("kvCacheUtilThreshold", &AdmitterOptions::kv_util, Range::Above(0),
                   "KV-cache use at which an endpoint's saturation is 1")
           .Number("power", &AdmitterOptions::power, Range::Above(0), "exponent of the saturation")
           .Number("k", &AdmitterOptions::k, Range::Above(0), "multiplier: p = min(saturation^power x k, 1)");
  return *t;
}

class ProbabilisticAdmitter : public Plugin, public Admitter {
 public:
  ProbabilisticAdmitter(TypedName tn, AdmitterOptions o) : Plugin(std::move(tn)), o_(o) {}
  const Admitter* AsAdmitter() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kWaitingQueue, PluginInput::kKvCacheUsage}; }
  Params EffectiveParams() const override { return Table().Effective(o_); }

  bool Admit(const SchedulingContext& ctx, Candidates candidates, std::string& why) const override {
    if (ctx.request == nullptr || ctx.request->priority >= 0 || candidates.empty()) return true;
    double sum = 0;
    for (const Endpoint* e : candidates) {
      const auto& m = e->metrics;
      if (!m.waiting_queue_size || !m.kv_cache_usage) {
        sum += 1.0;
        continue;
      }
      sum += std::max(*m.waiting_queue_size / static_cast<double>(o_.queue_depth), *m.kv_cache_usage / o_.kv_util);
    }
    const double sat = sum / static_cast<double>(candidates.size());
    const double p = std::min(1.0, std::pow(sat, o_.power) * o_.k);
    const double draw = ctx.rng ? ctx.rng->Uniform() : 0.0;
    if (draw >= p) return true;
    why = absl::StrCat("probabilistic-admitter: sheddable request rejected (priority ", ctx.request->priority,
                       ", saturation ", Num(sat), ", rejection probability ", Num(p), ")");
    return false;
  }

 private:
  AdmitterOptions o_;
};

}  // namespace

PluginOr CreateProbabilisticAdmitter(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(AdmitterOptions o, Table().Read(params));
  return std::make_unique<ProbabilisticAdmitter>(TN(kProbabilisticAdmitterType, name), o);
}

PluginSchema ProbabilisticAdmitterSchema() { return Table().Schema(); }

}  // namespace epp::plugins
