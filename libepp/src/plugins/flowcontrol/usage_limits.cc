// The usage-limit policies: the saturation up to which each active priority band may dispatch.
// static-usage-limit-policy (one ceiling for every band), priority-holdback-policy (ceilings
// spread from maxCeiling for the highest band to minCeiling for the lowest) and
// soft-reflective-ceiling-policy (ceilings that shrink as saturation rises, with a duty cycle
// once a band's ceiling is reached).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "epp/param_table.h"
#include "flowcontrol/policies.h"
#include "plugins/flowcontrol/flowcontrol.h"

namespace epp::plugins {
namespace {

using flowcontrol::UsageLimitPolicy;
using internal::Num;

// ---- static-usage-limit-policy ----

struct StaticOptions {
  double threshold = 1.0;
};

// The reference documents (0, 1] but checks nothing. A ceiling of 0 or below would gate every band
// forever (saturation >= ceiling always holds), so it is refused; above 1 is kept, as the reference
// runs it: with a detector whose saturation passes 1 (concurrency-detector), it lets bands dispatch
// into that overload.
const ParamTable<StaticOptions>& StaticTable() {
  static const auto* t = &(*new ParamTable<StaticOptions>())
                              .Number("threshold", &StaticOptions::threshold, Range::Above(0),
                                      "the ceiling of every priority band; 1 gates nothing below saturation");
  return *t;
}

class StaticUsageLimit : public Plugin, public UsageLimitPolicy {
 public:
  StaticUsageLimit(TypedName tn, StaticOptions o) : Plugin(std::move(tn)), o_(o) {}
  Params EffectiveParams() const override { return StaticTable().Effective(o_); }
  void ComputeLimits(double, std::span<const int>, std::span<double> ceilings) const override {
    std::fill(ceilings.begin(), ceilings.end(), o_.threshold);
  }

 private:
  StaticOptions o_;
};

// ---- priority-holdback-policy ----

struct HoldbackOptions {
  std::string shape = "linear";
  std::string domain = "rank";
  std::optional<double> min_ceiling;  // required
  double max_ceiling = 1.0;
};

const ParamTable<HoldbackOptions>& HoldbackTable() {
  static const auto* t =
      &(*new ParamTable<HoldbackOptions>())
           .String("shape", &HoldbackOptions::shape, "interpolation curve between the ceilings", {"linear"})
           .String("domain", &HoldbackOptions::domain,
                   "rank: equal steps by rank; value: proportional to the numeric priorities", {"rank", "value"})
           .Custom(
               "minCeiling", ParamType::kNumber, "required: the ceiling of the lowest active priority, in [0, 1)",
               [](const Params& v, HoldbackOptions& o) -> absl::Status {
                 EPP_ASSIGN_OR_RETURN(double x, v.AsDouble());
                 if (!(x >= 0 && x < 1))
                   return absl::InvalidArgumentError(
                       absl::StrCat(v.path().empty() ? "minCeiling" : v.path(), ": must be in [0, 1), got ", v.text()));
                 o.min_ceiling = x;
                 return absl::OkStatus();
               },
               [](const HoldbackOptions& o) { return o.min_ceiling ? Params::Number(*o.min_ceiling) : Params(); })
           .Number("maxCeiling", &HoldbackOptions::max_ceiling, Range::OpenClosed(0, 1),
                   "the ceiling of the highest active priority");
  return *t;
}

class PriorityHoldback : public Plugin, public UsageLimitPolicy {
 public:
  PriorityHoldback(TypedName tn, HoldbackOptions o) : Plugin(std::move(tn)), o_(std::move(o)) {}
  Params EffectiveParams() const override { return HoldbackTable().Effective(o_); }

  void ComputeLimits(double, std::span<const int> priorities, std::span<double> ceilings) const override {
    const size_t n = priorities.size();
    const double lo = *o_.min_ceiling, hi = o_.max_ceiling;
    if (n == 0) return;
    // One band alone is never held back below maxCeiling (work conserving).
    if (n == 1) {
      ceilings[0] = hi;
      return;
    }
    if (o_.domain == "rank") {
      // c_i = hi - i (hi - lo) / (n - 1)
      for (size_t i = 0; i < n; ++i)
        ceilings[i] = hi - static_cast<double>(i) * (hi - lo) / static_cast<double>(n - 1);
      return;
    }
    // value: c_i = lo + (p_i - p_min) / (p_max - p_min) (hi - lo); equal priorities all get hi.
    const double p_max = priorities.front(), p_min = priorities.back();
    for (size_t i = 0; i < n; ++i)
      ceilings[i] = p_max == p_min ? hi : lo + (priorities[i] - p_min) / (p_max - p_min) * (hi - lo);
  }

 private:
  HoldbackOptions o_;
};

// ---- soft-reflective-ceiling-policy ----

// Band i of n (0 highest) reflects at 1 - i * saturation / (n - 1). Below it the band is open;
// at or past it (and saturation < 1) every such band opens together on one call in
// round(saturation / (1 - saturation)), counted by one tick shared by all bands, so the bands
// gated on a call are always a suffix of the list (dispatch stops at the first gated band).
class SoftReflectiveCeiling : public Plugin, public UsageLimitPolicy {
 public:
  explicit SoftReflectiveCeiling(TypedName tn) : Plugin(std::move(tn)) {}

  void ComputeLimits(double saturation, std::span<const int> priorities, std::span<double> ceilings) const override {
    const size_t n = priorities.size();
    if (n == 0) return;
    if (n == 1) {
      ceilings[0] = 1.0;
      return;
    }
    // Some band reflects exactly when the lowest one does (its ceiling, 1 - saturation, is the
    // smallest); only then does the tick advance.
    const bool alternating = saturation >= 1.0 - saturation && saturation < 1.0;
    bool open = false;
    if (alternating) {
      // The 1e-9 is the reference's guard against dividing by almost nothing near 1.
      const int64_t period = static_cast<int64_t>(std::max(1.0, std::round(saturation / (1.0 - saturation + 1e-9))));
      open = (tick_.fetch_add(1, std::memory_order_relaxed) + 1) % period == 0;
    }
    ceilings[0] = 1.0;
    for (size_t i = 1; i < n; ++i) {
      const double reflective = 1.0 - static_cast<double>(i) * saturation / static_cast<double>(n - 1);
      if (saturation < reflective) ceilings[i] = 1.0;
      else if (saturation >= 1.0) ceilings[i] = 0.0;
      else ceilings[i] = open ? 1.0 : 0.0;
    }
  }

 private:
  mutable std::atomic<int64_t> tick_{0};
};

}  // namespace

PluginSchema StaticUsageLimitSchema() { return StaticTable().Schema(); }
PluginSchema PriorityHoldbackSchema() { return HoldbackTable().Schema(); }

PluginOr CreateStaticUsageLimit(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(StaticOptions o, StaticTable().Read(params));
  return std::make_unique<StaticUsageLimit>(TN(kStaticUsageLimitType, name), o);
}

PluginOr CreatePriorityHoldback(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(HoldbackOptions o, HoldbackTable().Read(params));
  // No default: how hard the lowest priority is held back has no answer right for every pool.
  if (!o.min_ceiling) return absl::InvalidArgumentError("minCeiling: required (the ceiling of the lowest priority, in [0, 1))");
  if (*o.min_ceiling >= o.max_ceiling)
    return absl::InvalidArgumentError(absl::StrCat("minCeiling (", Num(*o.min_ceiling), ") must be less than maxCeiling (",
                                                   Num(o.max_ceiling), ")"));
  return std::make_unique<PriorityHoldback>(TN(kPriorityHoldbackType, name), std::move(o));
}

PluginOr CreateSoftReflectiveCeiling(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<SoftReflectiveCeiling>(TN(kSoftReflectiveCeilingType, name));
}

}  // namespace epp::plugins
