// Metric and load scorers: queue-scorer, running-requests-size-scorer,
// kv-cache-utilization-scorer, lora-affinity-scorer, token-load-scorer, prefix-cache-scorer.
// Formulas follow GIE (docs/scheduling.md gives each with its source).
// llm-d's multicluster-queue-scorer, multicluster-kv-cache-utilization-scorer and
// multicluster-prefix-cache-scorer are the same scorers over cluster endpoints: the first two read
// the pool aggregates multicluster-metrics-extractor writes (Endpoint::attributes) instead of a
// server's own metrics, and, as in llm-d, a configuration without that extractor fails to load
// rather than scoring 0 everywhere; the prefix scorer is unchanged (its index already keys by
// endpoint).
#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "plugins/producer/producer.h"
#include "plugins/datalayer/datalayer.h"
#include "plugins/scorer/scorer.h"
#include "epp/scheduling.h"

namespace epp::plugins {
namespace {

using internal::Num;

// For the multicluster scorers: the pool aggregate `attribute` they read exists only with a
// multicluster-metrics-extractor in the configuration (llm-d's required data dependency).
absl::Status RequireAggregateProducer(const Plugin& self, std::string_view attribute, const PluginReferences& refs) {
  for (const Plugin* p : refs.all)
    if (p->type() == kMulticlusterMetricsExtractorType) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("plugin '", self.name(), "' (", self.type(), ") reads ", std::string(attribute),
                                                 ", which only a ", std::string(kMulticlusterMetricsExtractorType),
                                                 " produces: configure one (bound to a multicluster-metrics-data-source)"));
}

// Min-max normalisation shared by the queue and running-requests scorers: the smallest value
// scores 1, the largest 0, all equal -> 1 (GIE's queuedepth / runningrequests). Endpoints
// without the metric score 0 and do not take part in min/max.
class MinMaxScorer : public Plugin, public Scorer {
 public:
  using Getter = std::optional<double> (*)(const Endpoint&);
  // `aggregate`: the pool attribute a multicluster variant reads ("" for a server's metric).
  MinMaxScorer(TypedName tn, Getter get, const char* what, PluginInputs inputs, std::string_view aggregate = {})
      : Plugin(std::move(tn)), get_(get), what_(what), inputs_(inputs), aggregate_(aggregate) {}
  const Scorer* AsScorer() const override { return this; }
  bool HasReferences() const override { return !aggregate_.empty(); }
  absl::Status Resolve(const PluginReferences& refs) override { return RequireAggregateProducer(*this, aggregate_, refs); }
  PluginInputs Consumes() const override { return inputs_; }
  ScorerCategory category() const override { return ScorerCategory::kDistribution; }

  void Score(const SchedulingContext&, Candidates candidates, std::span<double> scores) const override {
    double lo = 0, hi = 0;
    const bool any = Range(candidates, lo, hi);
    for (size_t i = 0; i < candidates.size(); ++i) {
      const auto v = get_(*candidates[i]);
      if (!v || !any) {
        scores[i] = 0;
      } else {
        scores[i] = hi == lo ? 1.0 : (hi - *v) / (hi - lo);
      }
    }
  }
  std::string Explain(const SchedulingContext&, const Endpoint& e) const override {
    const auto v = get_(e);
    if (!v) return absl::StrCat("no ", what_, " metric");
    return absl::StrCat(what_, " ", Num(*v));
  }

 private:
  bool Range(Candidates candidates, double& lo, double& hi) const {
    bool any = false;
    for (const Endpoint* e : candidates) {
      const auto v = get_(*e);
      if (!v) continue;
      if (!any) {
        lo = hi = *v;
        any = true;
      } else {
        lo = std::min(lo, *v);
        hi = std::max(hi, *v);
      }
    }
    return any;
  }
  Getter get_;
  const char* what_;
  PluginInputs inputs_;
  std::string_view aggregate_;
};

// 1 - the KV-cache fraction in use; 0 without one. `get` reads a server's metric, or a pool's
// aggregate (multicluster); `what` names it in explanations.
class KvCacheScorer : public Plugin, public Scorer {
 public:
  using Getter = std::optional<double> (*)(const Endpoint&);
  KvCacheScorer(TypedName tn, Getter get, const char* what, const char* missing, PluginInputs inputs,
                std::string_view aggregate = {})
      : Plugin(std::move(tn)), get_(get), what_(what), missing_(missing), inputs_(inputs), aggregate_(aggregate) {}
  const Scorer* AsScorer() const override { return this; }
  bool HasReferences() const override { return !aggregate_.empty(); }
  absl::Status Resolve(const PluginReferences& refs) override { return RequireAggregateProducer(*this, aggregate_, refs); }
  PluginInputs Consumes() const override { return inputs_; }
  ScorerCategory category() const override { return ScorerCategory::kDistribution; }
  void Score(const SchedulingContext&, Candidates candidates, std::span<double> scores) const override {
    for (size_t i = 0; i < candidates.size(); ++i) {
      const auto kv = get_(*candidates[i]);
      scores[i] = kv ? 1.0 - *kv : 0.0;
    }
  }
  std::string Explain(const SchedulingContext&, const Endpoint& e) const override {
    const auto kv = get_(e);
    return kv ? absl::StrCat(what_, " ", Num(*kv * 100), "% used") : std::string(missing_);
  }

 private:
  Getter get_;
  const char* what_;
  const char* missing_;
  PluginInputs inputs_;
  std::string_view aggregate_;
};

class LoraAffinityScorer : public Plugin, public Scorer {
 public:
  using Plugin::Plugin;
  const Scorer* AsScorer() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kLora}; }
  ScorerCategory category() const override { return ScorerCategory::kAffinity; }
  void Score(const SchedulingContext& ctx, Candidates candidates, std::span<double> scores) const override {
    for (size_t i = 0; i < candidates.size(); ++i) scores[i] = Value(ctx, *candidates[i]).first;
  }
  std::string Explain(const SchedulingContext& ctx, const Endpoint& e) const override { return Value(ctx, e).second; }

 private:
  // GIE's order: active, then free slot, then waiting (the capacity test precedes the waiting one).
  // Slots in use are the distinct adapters (llm-d #2625), not the sum of vLLM's two lists, which
  // name an adapter with running and waiting requests twice. Where the server publishes
  // vllm:lora_adapter_loaded, an adapter resident on the GPU is active even with no request in
  // flight, and one held in CPU memory ranks with the waiting ones (it loads without the disk).
  static std::pair<double, const char*> Value(const SchedulingContext& ctx, const Endpoint& e) {
    if (!e.metrics.lora) return {0.0, "no LoRA metric"};
    const LoraInfo& l = *e.metrics.lora;
    const std::string& m = ctx.request->model;
    auto has = [&](const std::vector<std::string>& v) { return std::find(v.begin(), v.end(), m) != v.end(); };
    if (has(l.running)) return {1.0, "adapter active"};
    if (has(l.loaded)) return {1.0, "adapter resident on the GPU"};
    if (l.SlotsInUse() < l.max_lora) return {0.8, "free adapter slot"};
    if (has(l.waiting)) return {0.6, "adapter waiting to load"};
    if (has(l.loaded_cpu)) return {0.6, "adapter in CPU memory, no free slot"};
    return {0.0, "adapter absent and no free slot"};
  }
};

// GIE's default: 4 Mi tokens in flight saturate the score (tokenload/token_load.go).
struct TokenLoadOptions {
  int64_t threshold = 4194304;
};

const ParamTable<TokenLoadOptions>& TokenLoadTable() {
  static const auto* t = &(*new ParamTable<TokenLoadOptions>())
                              .Int("queueThresholdTokens", &TokenLoadOptions::threshold, Range::Above(0),
                                   "tokens in flight at which an endpoint scores 0");
  return *t;
}

class TokenLoadScorer : public Plugin, public Scorer {
 public:
  TokenLoadScorer(TypedName tn, TokenLoadOptions o) : Plugin(std::move(tn)), o_(o) {}
  const Scorer* AsScorer() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kInflightLoad}; }
  ScorerCategory category() const override { return ScorerCategory::kDistribution; }
  Params EffectiveParams() const override { return TokenLoadTable().Effective(o_); }
  void Score(const SchedulingContext& ctx, Candidates candidates, std::span<double> scores) const override {
    for (size_t i = 0; i < candidates.size(); ++i) {
      const double t = static_cast<double>(ctx.InflightTokens(candidates[i]));
      scores[i] = 1.0 - std::min(1.0, t / static_cast<double>(o_.threshold));
    }
  }
  std::string Explain(const SchedulingContext& ctx, const Endpoint& e) const override {
    return absl::StrCat(ctx.InflightTokens(&e), " tokens in flight of ", o_.threshold);
  }

 private:
  TokenLoadOptions o_;
};

struct PrefixCacheOptions {
  double weight = 0.0;
  int64_t scale_tokens = 8192;
  std::string producer;
};

// GIE's prefix scorer, with llm-d's match-length weighting (0: GIE's plain ratio).
const ParamTable<PrefixCacheOptions>& PrefixCacheTable() {
  static const auto* t =
      &(*new ParamTable<PrefixCacheOptions>())
           .Number("matchLengthWeight", &PrefixCacheOptions::weight, Range::Closed(0, 1),
                   "share of the score given to the matched length (squared, up to matchLengthScaleTokens); "
                   "0: the match ratio alone")
           .Int("matchLengthScaleTokens", &PrefixCacheOptions::scale_tokens, Range::Above(0),
                "matched tokens that count as a full-length match")
           .String("prefixMatchInfoProducerName", &PrefixCacheOptions::producer,
                   "the prefix producer whose matches are read; must name the one in use")
           .OmitEmpty();
  return *t;
}

class PrefixCacheScorer : public Plugin, public Scorer {
 public:
  PrefixCacheScorer(TypedName tn, PrefixCacheOptions o) : Plugin(std::move(tn)), o_(std::move(o)) {}
  const Scorer* AsScorer() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kPrefixMatch}; }
  ScorerCategory category() const override { return ScorerCategory::kAffinity; }
  Params EffectiveParams() const override { return PrefixCacheTable().Effective(o_); }
  void Score(const SchedulingContext& ctx, Candidates candidates, std::span<double> scores) const override {
    for (size_t i = 0; i < candidates.size(); ++i) scores[i] = Value(ctx, candidates[i]);
  }
  std::string Explain(const SchedulingContext& ctx, const Endpoint& e) const override {
    if (!ctx.prefix.computed) return "no prefix data";
    const int total = static_cast<int>(ctx.prefix.hashes.size());
    if (total == 0) return "prompt shorter than one block";
    const int m = ctx.PrefixMatchBlocks(&e);
    return absl::StrCat(m, "/", total, " blocks cached (", static_cast<int64_t>(m) * ctx.prefix.block_size_tokens,
                        " tokens)");
  }

 private:
  double Value(const SchedulingContext& ctx, const Endpoint* e) const {
    const int total = static_cast<int>(ctx.prefix.hashes.size());
    if (!ctx.prefix.computed || total == 0) return 0.0;
    const int m = ctx.PrefixMatchBlocks(e);
    const double ratio = PrefixRatio(m, total);
    if (o_.weight <= 0) return ratio;
    const double len = std::min(1.0, static_cast<double>(m) * ctx.prefix.block_size_tokens /
                                         static_cast<double>(o_.scale_tokens));
    return o_.weight * len * len + (1.0 - o_.weight) * ratio;
  }
  PrefixCacheOptions o_;
};

}  // namespace

double PrefixRatio(int match_blocks, int total_blocks) {
  return total_blocks <= 0 ? 0.0 : static_cast<double>(match_blocks) / static_cast<double>(total_blocks);
}

PluginOr CreateQueueScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<MinMaxScorer>(
      TN(kQueueScorerType, name), [](const Endpoint& e) { return e.metrics.waiting_queue_size; }, "queue",
      PluginInputs{PluginInput::kWaitingQueue});
}

// llm-d's: the shortest pool queue scores 1, the longest 0, all equal 1; an endpoint without the
// aggregate scores 0 (llm-d leaves it unscored, which its profile counts as 0).
PluginOr CreateMultiClusterQueueScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<MinMaxScorer>(
      TN(kMultiClusterQueueScorerType, name),
      [](const Endpoint& e) { return e.attributes.Find(kMulticlusterQueueAttribute); }, "pool queue", PluginInputs{},
      kMulticlusterQueueAttribute);
}

PluginOr CreateRunningRequestsScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<MinMaxScorer>(
      TN(kRunningRequestsScorerType, name), [](const Endpoint& e) { return e.metrics.running_requests; },
      "running", PluginInputs{PluginInput::kRunningRequests});
}

PluginOr CreateKvCacheScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<KvCacheScorer>(
      TN(kKvCacheScorerType, name), [](const Endpoint& e) { return e.metrics.kv_cache_usage; }, "KV cache",
      "no KV-cache metric", PluginInputs{PluginInput::kKvCacheUsage});
}

PluginOr CreateMultiClusterKvCacheScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<KvCacheScorer>(
      TN(kMultiClusterKvCacheScorerType, name),
      [](const Endpoint& e) { return e.attributes.Find(kMulticlusterKvCacheAttribute); }, "pool KV cache",
      "no llm-d.ai/multicluster-kv-cache-utilization attribute", PluginInputs{}, kMulticlusterKvCacheAttribute);
}

PluginOr CreateLoraAffinityScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<LoraAffinityScorer>(TN(kLoraAffinityScorerType, name));
}

PluginOr CreateTokenLoadScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(TokenLoadOptions o, TokenLoadTable().Read(params));
  return std::make_unique<TokenLoadScorer>(TN(kTokenLoadScorerType, name), o);
}

// llm-d v0.2's prefix-cache-scorer chose its implementation with `mode`: estimate (GIE's
// approximate scorer, the default) or cache_tracking (what precise-prefix-cache-scorer became in
// v0.3, taking the same indexerConfig / kvEventsConfig / tokenProcessorConfig). Read as that
// choice, with the rest of the parameters. (llm-d v0.3 to v0.5 took the type from GIE, whose
// decoder dropped `mode` and the precise blocks silently: such configs ran approximate there.)
static PluginOr CreateLegacyModePrefixScorer(const std::string& name, const Params& params, const Params& mode,
                                             const PluginContext& ctx) {
  EPP_ASSIGN_OR_RETURN(std::string m, mode.AsString());
  if (m != "estimate" && m != "cache_tracking")
    return absl::InvalidArgumentError(absl::StrCat(mode.path(), ": expected estimate or cache_tracking, got '", m, "'"));
  Params rest = Params::Map(params.path());
  rest.set_line(params.line());
  for (const auto& [k, v] : params.entries())
    if (k != "mode") rest.Set(k, v);
  if (ctx.warnings != nullptr)
    ctx.warnings->push_back(absl::StrCat(
        mode.path(), ": llm-d v0.2's form; ",
        m == "estimate" ? "estimate is what prefix-cache-scorer does: delete mode"
                        : "read as precise-prefix-cache-scorer (declare a precise-prefix-cache-producer with these "
                          "parameters and a prefix-cache-scorer reading it)"));
  if (m == "cache_tracking") return CreatePrecisePrefixScorer(name, rest, ctx);
  return CreatePrefixCacheScorer(name, rest, ctx);
}

PluginOr CreatePrefixCacheScorer(const std::string& name, const Params& params, const PluginContext& ctx) {
  if (const Params* mode = params.Find("mode"); mode != nullptr && !mode->is_null())
    return CreateLegacyModePrefixScorer(name, params, *mode, ctx);
  EPP_ASSIGN_OR_RETURN(PrefixCacheOptions o, PrefixCacheTable().Read(params));
  return std::make_unique<PrefixCacheScorer>(TN(kPrefixCacheScorerType, name), std::move(o));
}

PluginOr CreateMultiClusterPrefixCacheScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(PrefixCacheOptions o, PrefixCacheTable().Read(params));
  return std::make_unique<PrefixCacheScorer>(TN(kMultiClusterPrefixCacheScorerType, name), std::move(o));
}

PluginSchema TokenLoadScorerSchema() { return TokenLoadTable().Schema(); }
PluginSchema PrefixCacheScorerSchema() { return PrefixCacheTable().Schema(); }

}  // namespace epp::plugins
