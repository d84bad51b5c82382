// Pickers: max-score, random and weighted-random (GIE's), round-robin (epp's own, for baselines),
// softmax (NVIDIA Dynamo's router selection at a temperature).
#include <algorithm>
#include <atomic>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "epp/scheduling.h"
#include "plugins/picker/picker.h"

namespace epp::plugins {
namespace {

enum class PickKind { kMaxScore, kRandom, kWeightedRandom };

// Orders `v` as a weighted draw without replacement (A-Res, Efraimidis-Spirakis): key U^(1/w),
// taken as log(U) / w (the same order, no underflow); weight(s) <= 0 keys lowest.
template <typename Weight>
void WeightedOrder(std::vector<ScoredEndpoint>& v, Rng& rng, Weight weight) {
  std::vector<std::pair<double, ScoredEndpoint>> keyed;
  keyed.reserve(v.size());
  for (const ScoredEndpoint& s : v) {
    double u = rng.Uniform();
    if (u <= 0) u = 1e-300;
    const double w = weight(s);
    keyed.emplace_back(w > 0 ? std::log(u) / w : -INFINITY, s);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; i < v.size(); ++i) v[i] = keyed[i].second;
}

struct PickerOptions {
  int64_t max_endpoints = 1;
  double temperature = 0;  // softmax-picker only
};

// GIE: an invalid (non-positive) count falls back to 1.
int EndpointCount(const PickerOptions& o) {
  return o.max_endpoints <= 0 ? 1 : static_cast<int>(std::min<int64_t>(o.max_endpoints, 1 << 20));
}

ParamTable<PickerOptions>& DeclareMaxEndpoints(ParamTable<PickerOptions>& t) {
  return t.Int("maxNumOfEndpoints", &PickerOptions::max_endpoints, Range::Any(),
               "endpoints returned, best first (the rest are fallbacks); non-positive means 1");
}

const ParamTable<PickerOptions>& PickerTable() {
  static const auto* t = &DeclareMaxEndpoints(*new ParamTable<PickerOptions>());
  return *t;
}

const ParamTable<PickerOptions>& SoftmaxTable() {
  static const auto* t = &DeclareMaxEndpoints(
      (*new ParamTable<PickerOptions>())
          .Number("temperature", &PickerOptions::temperature, Range::Closed(0, 1e6),
                  "0: the best score; higher spreads picks over lower scores"));
  return *t;
}

class BasicPicker : public Plugin, public Picker {
 public:
  BasicPicker(TypedName tn, PickKind kind, int max_endpoints, Rng* rng)
      : Plugin(std::move(tn)), kind_(kind), max_(max_endpoints), rng_(rng) {}
  const Picker* AsPicker() const override { return this; }
  Params EffectiveParams() const override { return PickerTable().Effective(PickerOptions{max_}); }

  std::vector<const Endpoint*> Pick(const SchedulingContext& ctx, std::span<const ScoredEndpoint> scored) const override {
    Rng& rng = *(ctx.rng ? ctx.rng : rng_);
    std::vector<ScoredEndpoint> v(scored.begin(), scored.end());
    // Shuffle first: the stable sort below then breaks ties at random (GIE's max-score picker).
    rng.Shuffle(std::span<ScoredEndpoint>(v));
    switch (kind_) {
      case PickKind::kMaxScore:
        std::stable_sort(v.begin(), v.end(), [](const ScoredEndpoint& a, const ScoredEndpoint& b) { return a.score > b.score; });
        break;
      case PickKind::kRandom:
        break;
      case PickKind::kWeightedRandom: {
        // Weight = score; zero scores last. All zero -> random (the shuffle).
        bool any = false;
        for (const auto& s : v) any |= s.score > 0;
        if (any) WeightedOrder(v, rng, [](const ScoredEndpoint& s) { return s.score; });
        break;
      }
    }
    std::vector<const Endpoint*> out;
    const size_t n = std::min(v.size(), static_cast<size_t>(max_));
    out.reserve(n);
    for (size_t i = 0; i < n; ++i) out.push_back(v[i].endpoint);
    return out;
  }

 private:
  PickKind kind_;
  int max_;
  Rng* rng_;
};

PluginOr MakePicker(std::string_view type, PickKind kind, const std::string& name, const Params& params,
                    const PluginContext& ctx) {
  EPP_ASSIGN_OR_RETURN(PickerOptions o, PickerTable().Read(params));
  if (!ctx.rng) return absl::InvalidArgumentError(absl::StrCat("plugin '", name, "' needs a random number generator"));
  return std::make_unique<BasicPicker>(TN(type, name), kind, EndpointCount(o), ctx.rng);
}

// epp's own: candidates in turn (a shared counter modulo the candidate count), for baselines.
class RoundRobinPicker : public Plugin, public Picker {
 public:
  RoundRobinPicker(TypedName tn, int max_endpoints) : Plugin(std::move(tn)), max_(max_endpoints) {}
  const Picker* AsPicker() const override { return this; }
  Params EffectiveParams() const override { return PickerTable().Effective(PickerOptions{max_}); }
  std::vector<const Endpoint*> Pick(const SchedulingContext&, std::span<const ScoredEndpoint> scored) const override {
    std::vector<const Endpoint*> out;
    if (scored.empty()) return out;
    const uint64_t start = next_.fetch_add(1, std::memory_order_relaxed);
    const size_t n = std::min(scored.size(), static_cast<size_t>(max_));
    for (size_t i = 0; i < n; ++i) out.push_back(scored[(start + i) % scored.size()].endpoint);
    return out;
  }

 private:
  int max_;
  mutable std::atomic<uint64_t> next_{0};
};

// Dynamo's KV router selection (peers.md 3.2): with its cost c and temperature T > 0, endpoint i
// is drawn with probability exp(-(c_i - c_min) / ((c_max - c_min) T)) normalised; at T = 0 the
// lowest cost wins. Over epp's scores (higher is better) the same is p_i ~ exp(-(s_max - s_i) /
// ((s_max - s_min) T)): equal for a scorer that is linear in the cost, as dynamo-kv-cost-scorer's
// min-max normalisation is. All scores equal: uniform. More than one endpoint: drawn without
// replacement (A-Res with those weights).
class SoftmaxPicker : public Plugin, public Picker {
 public:
  SoftmaxPicker(TypedName tn, double temperature, int max_endpoints, Rng* rng)
      : Plugin(std::move(tn)), t_(temperature), max_(max_endpoints), rng_(rng) {}
  const Picker* AsPicker() const override { return this; }
  Params EffectiveParams() const override { return SoftmaxTable().Effective(PickerOptions{max_, t_}); }
  std::vector<const Endpoint*> Pick(const SchedulingContext& ctx, std::span<const ScoredEndpoint> scored) const override {
    Rng& rng = *(ctx.rng ? ctx.rng : rng_);
    std::vector<ScoredEndpoint> v(scored.begin(), scored.end());
    rng.Shuffle(std::span<ScoredEndpoint>(v));  // ties at random
    double lo = INFINITY, hi = -INFINITY;
    for (const ScoredEndpoint& s : v) lo = std::min(lo, s.score), hi = std::max(hi, s.score);
    if (t_ <= 0 || !(hi > lo)) {
      // T = 0: the best; all equal: any (the shuffle), both as Dynamo.
      if (t_ <= 0)
        std::stable_sort(v.begin(), v.end(), [](const ScoredEndpoint& a, const ScoredEndpoint& b) { return a.score > b.score; });
    } else {
      // Weight in (0, 1], 1 for the best.
      WeightedOrder(v, rng, [&](const ScoredEndpoint& s) { return std::exp(-(hi - s.score) / ((hi - lo) * t_)); });
    }
    std::vector<const Endpoint*> out;
    const size_t n = std::min(v.size(), static_cast<size_t>(max_));
    for (size_t i = 0; i < n; ++i) out.push_back(v[i].endpoint);
    return out;
  }

 private:
  double t_;
  int max_;
  Rng* rng_;
};

}  // namespace

PluginOr CreateSoftmaxPicker(const std::string& name, const Params& params, const PluginContext& ctx) {
  EPP_ASSIGN_OR_RETURN(PickerOptions o, SoftmaxTable().Read(params));
  if (!ctx.rng) return absl::InvalidArgumentError(absl::StrCat("plugin '", name, "' needs a random number generator"));
  return std::make_unique<SoftmaxPicker>(TN(kSoftmaxPickerType, name), o.temperature, EndpointCount(o), ctx.rng);
}

PluginOr CreateMaxScorePicker(const std::string& name, const Params& params, const PluginContext& ctx) {
  return MakePicker(kMaxScorePickerType, PickKind::kMaxScore, name, params, ctx);
}
PluginOr CreateRandomPicker(const std::string& name, const Params& params, const PluginContext& ctx) {
  return MakePicker(kRandomPickerType, PickKind::kRandom, name, params, ctx);
}
PluginOr CreateWeightedRandomPicker(const std::string& name, const Params& params, const PluginContext& ctx) {
  return MakePicker(kWeightedRandomPickerType, PickKind::kWeightedRandom, name, params, ctx);
}

PluginOr CreateRoundRobinPicker(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(PickerOptions o, PickerTable().Read(params));
  return std::make_unique<RoundRobinPicker>(TN(kRoundRobinPickerType, name), EndpointCount(o));
}

// max-score, random, weighted-random and round-robin pickers share one table.
PluginSchema PickerSchema() { return PickerTable().Schema(); }
PluginSchema SoftmaxPickerSchema() { return SoftmaxTable().Schema(); }

}  // namespace epp::plugins
