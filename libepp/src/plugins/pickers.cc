// Pickers (max-score, random, weighted-random), the single-profile handler, the utilization
// detector (saturation and filter), and the plugin types that name what epp does anyway.
#include <algorithm>
#include <atomic>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "epp/scheduling.h"
#include "plugins/plugins.h"

namespace epp::plugins {
namespace {

using internal::Num;

TypedName TN(std::string_view type, const std::string& name) { return TypedName{std::string(type), name}; }

enum class PickKind { kMaxScore, kRandom, kWeightedRandom };

class BasicPicker : public Plugin, public Picker {
 public:
  BasicPicker(TypedName tn, PickKind kind, int max_endpoints, Rng* rng)
      : Plugin(std::move(tn)), kind_(kind), max_(max_endpoints), rng_(rng) {}
  const Picker* AsPicker() const override { return this; }
  Params EffectiveParams() const override {
    Params p = Params::Map();
    p.Set("maxNumOfEndpoints", Params::Int(max_));
    return p;
  }

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
        // A-Res (Efraimidis-Spirakis): key = U^(1/score); zero scores key 0. All zero -> random.
        bool any = false;
        for (const auto& s : v) any |= s.score > 0;
        if (!any) break;
        std::vector<std::pair<double, ScoredEndpoint>> keyed;
        keyed.reserve(v.size());
        for (const auto& s : v) {
          double u = rng.Uniform();
          if (u <= 0) u = 1e-10;
          keyed.emplace_back(s.score > 0 ? std::pow(u, 1.0 / s.score) : 0.0, s);
        }
        std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
        for (size_t i = 0; i < v.size(); ++i) v[i] = keyed[i].second;
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
  EPP_RETURN_IF_ERROR(params.CheckKeys({"maxNumOfEndpoints"}));
  EPP_ASSIGN_OR_RETURN(int64_t n, params.GetInt("maxNumOfEndpoints", 1));
  // GIE: an invalid (non-positive) count falls back to 1.
  if (n <= 0) n = 1;
  if (!ctx.rng) return absl::InvalidArgumentError(absl::StrCat("plugin '", name, "' needs a random number generator"));
  return std::make_unique<BasicPicker>(TN(type, name), kind, static_cast<int>(std::min<int64_t>(n, 1 << 20)), ctx.rng);
}

// epp's own: candidates in turn (a shared counter modulo the candidate count), for baselines.
class RoundRobinPicker : public Plugin, public Picker {
 public:
  RoundRobinPicker(TypedName tn, int max_endpoints) : Plugin(std::move(tn)), max_(max_endpoints) {}
  const Picker* AsPicker() const override { return this; }
  Params EffectiveParams() const override {
    Params p = Params::Map();
    p.Set("maxNumOfEndpoints", Params::Int(max_));
    return p;
  }
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

class SingleProfileHandler : public Plugin, public ProfileHandler {
 public:
  using Plugin::Plugin;
  const ProfileHandler* AsProfileHandler() const override { return this; }
  std::vector<std::string> PickProfiles(const SchedulingContext&, std::span<const std::string> profiles,
                                        std::span<const std::string> done) const override {
    if (!done.empty()) return {};
    return std::vector<std::string>(profiles.begin(), profiles.end());
  }
  absl::StatusOr<std::string> PrimaryProfile(std::span<const std::string> ran) const override {
    if (ran.size() != 1)
      return absl::InvalidArgumentError(
          absl::StrCat("single-profile-handler needs exactly one profile, got ", ran.size()));
    return ran.front();
  }
};

// GIE's utilization detector (flowcontrol/saturationdetector/utilization).
class UtilizationDetector : public Plugin, public SaturationDetector, public Filter {
 public:
  struct Options {
    double queue_threshold = 5;
    double kv_threshold = 0.8;
    int64_t staleness_us = 200000;  // 200 ms
    double headroom = 0;
  };
  UtilizationDetector(TypedName tn, Options o) : Plugin(std::move(tn)), o_(o) {}
  const SaturationDetector* AsSaturationDetector() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kWaitingQueue, PluginInput::kKvCacheUsage}; }
  const Filter* AsFilter() const override { return this; }
  Params EffectiveParams() const override {
    Params p = Params::Map();
    p.Set("queueDepthThreshold", Params::Number(o_.queue_threshold));
    p.Set("kvCacheUtilThreshold", Params::Number(o_.kv_threshold));
    p.Set("metricsStalenessThreshold", Params::String(absl::StrCat(o_.staleness_us / 1000.0, "ms")));
    p.Set("headroom", Params::Number(o_.headroom));
    return p;
  }

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

// A plugin type that names what epp does anyway; its parameters are kept verbatim.
class PassivePlugin : public Plugin {
 public:
  PassivePlugin(TypedName tn, Params params) : Plugin(std::move(tn)), params_(std::move(params)) {}
  Params EffectiveParams() const override { return params_.is_null() ? Params::Map() : params_; }

 private:
  Params params_;
};

}  // namespace

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
  EPP_RETURN_IF_ERROR(params.CheckKeys({"maxNumOfEndpoints"}));
  EPP_ASSIGN_OR_RETURN(int64_t n, params.GetInt("maxNumOfEndpoints", 1));
  if (n <= 0) n = 1;
  return std::make_unique<RoundRobinPicker>(TN(kRoundRobinPickerType, name), static_cast<int>(std::min<int64_t>(n, 1 << 20)));
}

PluginOr CreateSingleProfileHandler(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(params.CheckKeys({}));
  return std::make_unique<SingleProfileHandler>(TN(kSingleProfileHandlerType, name));
}

PluginOr CreateUtilizationDetector(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(params.CheckKeys({"queueDepthThreshold", "kvCacheUtilThreshold", "metricsStalenessThreshold", "headroom"}));
  UtilizationDetector::Options o;
  EPP_ASSIGN_OR_RETURN(o.queue_threshold, params.GetDouble("queueDepthThreshold", o.queue_threshold));
  EPP_ASSIGN_OR_RETURN(o.kv_threshold, params.GetDouble("kvCacheUtilThreshold", o.kv_threshold));
  EPP_ASSIGN_OR_RETURN(o.staleness_us, params.GetDurationMicros("metricsStalenessThreshold", o.staleness_us));
  EPP_ASSIGN_OR_RETURN(o.headroom, params.GetDouble("headroom", o.headroom));
  if (!(o.queue_threshold > 0))
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ".queueDepthThreshold: must be > 0"));
  if (!(o.kv_threshold > 0 && o.kv_threshold <= 1))
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ".kvCacheUtilThreshold: must be in (0, 1]"));
  if (!(o.headroom >= 0)) return absl::InvalidArgumentError(absl::StrCat(params.path(), ".headroom: must be >= 0"));
  if (o.staleness_us <= 0)
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ".metricsStalenessThreshold: must be > 0"));
  return std::make_unique<UtilizationDetector>(TN(kUtilizationDetectorType, name), o);
}

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

}  // namespace epp::plugins
