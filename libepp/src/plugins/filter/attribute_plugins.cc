// llm-d's endpoint-attribute-filter / -scorer (one numeric endpoint attribute: here a
// customMetrics attribute of core-metrics-extractor, EndpointMetrics::custom) and
// topology-affinity-filter / -scorer (candidates close to the peer endpoint, from
// topology-extractor's labels). Facts: llm-d-router's filter/endpointattribute,
// scorer/endpointattribute, filter/topologyaffinity, scorer/topologyaffinity and
// util/topology.
#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "epp/scheduling.h"
#include "plugins/datalayer/datalayer.h"
#include "plugins/filter/filter.h"

namespace epp::plugins {
namespace {

using internal::Num;

// ---- the attribute both endpoint-attribute plugins read

struct AttributeKey {
  std::string attribute;
  std::optional<std::string> producer;  // nullopt: core-metrics-extractor's custom metrics

  // llm-d keys custom metrics by (attribute, "core-metrics-extractor"); a producer naming a
  // configured core-metrics-extractor instance means the same.
  bool FromCoreMetrics(const PluginReferences* refs) const {
    if (!producer || *producer == kCoreMetricsExtractorType) return true;
    if (refs == nullptr) return false;
    const Plugin* p = refs->plugin(*producer);
    return p != nullptr && p->type() == kCoreMetricsExtractorType;
  }
  std::string ToString() const { return producer ? absl::StrCat(attribute, " (producer '", *producer, "')") : attribute; }
};

absl::StatusOr<AttributeKey> ReadAttributeKey(const Params& params, const char* key_param, const char* what) {
  AttributeKey k;
  EPP_ASSIGN_OR_RETURN(k.attribute, params.GetString(key_param, ""));
  if (k.attribute.empty())
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ".", key_param, ": ", what, " requires a non-empty ", key_param));
  if (const Params* p = params.Find("producer"); p != nullptr && !p->is_null()) {
    EPP_ASSIGN_OR_RETURN(std::string producer, p->AsString());
    k.producer = producer;
  }
  if (!k.producer && k.attribute.find('/') != std::string::npos)
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ".", key_param, ": attribute '", k.attribute,
                                                   "' contains '/' but no producer is set; give the producer "
                                                   "separately (producer: ...)"));
  return k;
}

// At load: whether the attribute can ever be present, with a warning when it cannot.
bool ResolveAttribute(const AttributeKey& key, const PluginReferences& refs, const std::string& plugin) {
  if (!key.FromCoreMetrics(&refs)) {
    if (refs.warnings)
      refs.warnings->push_back(absl::StrCat("plugin '", plugin, "': attribute ", key.ToString(),
                                            ": epp has no such producer (only core-metrics-extractor's customMetrics "
                                            "are endpoint attributes); every endpoint misses it"));
    return false;
  }
  bool declared = false;
  for (const Plugin* p : refs.all)
    if (auto* src = dynamic_cast<const ScrapeSettingsSource*>(p); src && src->DeclaresAttribute(key.attribute)) declared = true;
  if (!declared && refs.warnings)
    refs.warnings->push_back(absl::StrCat("plugin '", plugin, "': attribute '", key.attribute,
                                          "' is in no core-metrics-extractor's customMetrics; every endpoint misses it"));
  return true;
}

std::optional<double> ValueOf(const Endpoint& e, const AttributeKey& key, bool available) {
  if (!available) return std::nullopt;
  return e.metrics.Custom(key.attribute);
}

enum class Op { kLt, kLe, kGt, kGe, kEq, kNe };

struct OpName {
  const char* name;
  const char* symbol;
  Op op;
};
constexpr OpName kOps[] = {{"LessThan", "<", Op::kLt},    {"LessThanOrEqual", "<=", Op::kLe},
                           {"GreaterThan", ">", Op::kGt}, {"GreaterThanOrEqual", ">=", Op::kGe},
                           {"Equal", "==", Op::kEq},      {"NotEqual", "!=", Op::kNe}};

bool Holds(Op op, double v, double t) {
  switch (op) {
    case Op::kLt: return v < t;
    case Op::kLe: return v <= t;
    case Op::kGt: return v > t;
    case Op::kGe: return v >= t;
    case Op::kEq: return v == t;
    case Op::kNe: return v != t;
  }
  return false;
}

const char* Symbol(Op op) {
  for (const OpName& o : kOps)
    if (o.op == op) return o.symbol;
  return "?";
}

class EndpointAttributeFilter : public Plugin, public Filter {
 public:
  struct Options {
    AttributeKey key;
    bool fail_on_missing = false;
    bool fallback_on_empty = false;
    Op op = Op::kLt;
    double threshold = 0;
  };
  EndpointAttributeFilter(TypedName tn, Options o, Params params)
      : Plugin(std::move(tn)), o_(std::move(o)), params_(std::move(params)) {}
  const Filter* AsFilter() const override { return this; }
  Params EffectiveParams() const override { return params_; }
  bool HasReferences() const override { return true; }
  absl::Status Resolve(const PluginReferences& refs) override {
    available_ = ResolveAttribute(o_.key, refs, name());
    return absl::OkStatus();
  }

  std::vector<const Endpoint*> Apply(const SchedulingContext&, Candidates candidates) const override {
    std::vector<const Endpoint*> out;
    out.reserve(candidates.size());
    for (const Endpoint* e : candidates)
      if (Keeps(*e)) out.push_back(e);
    if (out.empty() && o_.fallback_on_empty) return {candidates.begin(), candidates.end()};
    return out;
  }
  std::string WhyRemoved(const SchedulingContext&, const Endpoint& e) const override {
    const std::optional<double> v = ValueOf(e, o_.key, available_);
    if (!v) return absl::StrCat(o_.key.ToString(), " missing (onMissing: Fail)");
    return absl::StrCat(o_.key.attribute, " = ", Num(*v), ", not ", Symbol(o_.op), " ", Num(o_.threshold));
  }

 private:
  bool Keeps(const Endpoint& e) const {
    const std::optional<double> v = ValueOf(e, o_.key, available_);
    if (!v) return !o_.fail_on_missing;
    return Holds(o_.op, *v, o_.threshold);
  }
  Options o_;
  Params params_;
  bool available_ = true;
};

class EndpointAttributeScorer : public Plugin, public Scorer {
 public:
  struct Options {
    AttributeKey key;
    bool lower_is_better = true;
    std::optional<std::pair<double, double>> fixed;  // nullopt: adaptive over the candidates
  };
  EndpointAttributeScorer(TypedName tn, Options o, Params params)
      : Plugin(std::move(tn)), o_(std::move(o)), params_(std::move(params)) {}
  const Scorer* AsScorer() const override { return this; }
  ScorerCategory category() const override { return ScorerCategory::kDistribution; }
  Params EffectiveParams() const override { return params_; }
  bool HasReferences() const override { return true; }
  absl::Status Resolve(const PluginReferences& refs) override {
    available_ = ResolveAttribute(o_.key, refs, name());
    return absl::OkStatus();
  }

  void Score(const SchedulingContext&, Candidates candidates, std::span<double> scores) const override {
    double lo = 0, hi = 0;
    if (o_.fixed) {
      std::tie(lo, hi) = *o_.fixed;
    } else {
      lo = INFINITY;
      hi = -INFINITY;
      for (const Endpoint* e : candidates)
        if (std::optional<double> v = ValueOf(*e, o_.key, available_)) {
          lo = std::min(lo, *v);
          hi = std::max(hi, *v);
        }
    }
    for (size_t i = 0; i < candidates.size(); ++i) scores[i] = ScoreOf(ValueOf(*candidates[i], o_.key, available_), lo, hi);
  }
  std::string Explain(const SchedulingContext&, const Endpoint& e) const override {
    const std::optional<double> v = ValueOf(e, o_.key, available_);
    if (!v) return absl::StrCat(o_.key.ToString(), " missing");
    return absl::StrCat(o_.key.attribute, " = ", Num(*v), o_.lower_is_better ? " (lower is better" : " (higher is better",
                        o_.fixed ? absl::StrCat(", range ", Num(o_.fixed->first), "..", Num(o_.fixed->second), ")")
                                 : std::string(", range of the candidates)"));
  }

 private:
  double ScoreOf(std::optional<double> v, double lo, double hi) const {
    if (!v) return 0;
    double n;
    if (o_.fixed) {
      n = std::clamp((*v - lo) / (hi - lo), 0.0, 1.0);
    } else {
      if (!(hi > lo)) return 1.0;  // one value among the candidates: neutral
      n = (*v - lo) / (hi - lo);
    }
    return o_.lower_is_better ? 1.0 - n : n;
  }
  Options o_;
  Params params_;
  bool available_ = true;
};

// ---- topology affinity

absl::StatusOr<TopologyLevel> ParseLevel(const Params& params, const char* key, TopologyLevel def) {
  EPP_ASSIGN_OR_RETURN(std::string text, params.GetString(key, ""));
  if (text.empty()) return def;
  for (TopologyLevel l : {TopologyLevel::kHost, TopologyLevel::kRack, TopologyLevel::kZone, TopologyLevel::kRegion})
    if (text == TopologyLevelName(l)) return l;
  return absl::InvalidArgumentError(absl::StrCat(params.path(), ".", key, ": invalid topology level '", text,
                                                 "', must be one of host, rack, zone, region"));
}

// Finds the extractor named `producer`; warns when there is none (topology is optional in llm-d:
// without it the filter keeps everyone and the scorer gives 0).
const TopologySource* ResolveTopology(const PluginReferences& refs, const std::string& producer, const std::string& plugin) {
  const Plugin* p = refs.plugin(producer);
  const TopologySource* src = p ? dynamic_cast<const TopologySource*>(p) : nullptr;
  if (src == nullptr && refs.warnings)
    refs.warnings->push_back(absl::StrCat("plugin '", plugin, "': ",
                                          p ? absl::StrCat("'", producer, "' is not a topology-extractor")
                                            : absl::StrCat("no topology-extractor named '", producer, "'"),
                                          "; no endpoint has a topology, so it has no effect"));
  return src;
}

class TopologyBase : public Plugin {
 public:
  TopologyBase(TypedName tn, std::string producer) : Plugin(std::move(tn)), producer_(std::move(producer)) {}
  bool HasReferences() const override { return true; }
  PluginInputs Consumes() const override { return {PluginInput::kLabels}; }
  absl::Status Resolve(const PluginReferences& refs) override {
    source_ = ResolveTopology(refs, producer_, name());
    return absl::OkStatus();
  }

 protected:
  std::optional<Topology> Of(const Endpoint* e) const {
    if (source_ == nullptr || e == nullptr) return std::nullopt;
    return source_->TopologyOf(*e);
  }
  std::string producer_;
  const TopologySource* source_ = nullptr;
};

class TopologyAffinityFilter : public TopologyBase, public Filter {
 public:
  TopologyAffinityFilter(TypedName tn, std::string producer, TopologyLevel min)
      : TopologyBase(std::move(tn), std::move(producer)), min_(min) {}
  const Filter* AsFilter() const override { return this; }
  Params EffectiveParams() const override {
    Params p = Params::Map();
    p.Set("minAffinity", Params::String(TopologyLevelName(min_)));
    p.Set("topologyProducerName", Params::String(producer_));
    return p;
  }
  std::vector<const Endpoint*> Apply(const SchedulingContext& ctx, Candidates candidates) const override {
    const std::optional<Topology> peer = Of(ctx.peer);
    if (!peer) return {candidates.begin(), candidates.end()};
    std::vector<const Endpoint*> out;
    for (const Endpoint* e : candidates) {
      const std::optional<Topology> t = Of(e);
      if (t && CompareTopology(*peer, *t) <= min_) out.push_back(e);
    }
    if (out.empty()) return {candidates.begin(), candidates.end()};  // fail open, as llm-d
    return out;
  }
  std::string WhyRemoved(const SchedulingContext& ctx, const Endpoint& e) const override {
    const std::optional<Topology> t = Of(&e);
    if (!t) return "no topology labels";
    const std::optional<Topology> peer = Of(ctx.peer);
    const TopologyLevel level = peer ? CompareTopology(*peer, *t) : TopologyLevel::kNone;
    return absl::StrCat("closest level shared with peer ", ctx.peer ? ctx.peer->address : "?", ": ",
                        TopologyLevelName(level), " (minAffinity ", TopologyLevelName(min_), ")");
  }

 private:
  TopologyLevel min_;
};

class TopologyAffinityScorer : public TopologyBase, public Scorer {
 public:
  using TopologyBase::TopologyBase;
  const Scorer* AsScorer() const override { return this; }
  ScorerCategory category() const override { return ScorerCategory::kAffinity; }
  Params EffectiveParams() const override {
    Params p = Params::Map();
    p.Set("topologyProducerName", Params::String(producer_));
    return p;
  }
  // llm-d's fixed scores: host (NVLink) 1, rack (one switch) 0.2, zone 0.05, region 0.02.
  static double LevelScore(TopologyLevel l) {
    switch (l) {
      case TopologyLevel::kHost: return 1.0;
      case TopologyLevel::kRack: return 0.20;
      case TopologyLevel::kZone: return 0.05;
      case TopologyLevel::kRegion: return 0.02;
      case TopologyLevel::kNone: break;
    }
    return 0;
  }
  void Score(const SchedulingContext& ctx, Candidates candidates, std::span<double> scores) const override {
    const std::optional<Topology> peer = Of(ctx.peer);
    for (size_t i = 0; i < candidates.size(); ++i) {
      const std::optional<Topology> t = peer ? Of(candidates[i]) : std::nullopt;
      scores[i] = t ? LevelScore(CompareTopology(*peer, *t)) : 0.0;
    }
  }
  std::string Explain(const SchedulingContext& ctx, const Endpoint& e) const override {
    const std::optional<Topology> peer = Of(ctx.peer);
    if (!peer) return ctx.peer ? "peer has no topology" : "no peer endpoint";
    const std::optional<Topology> t = Of(&e);
    if (!t) return "no topology labels";
    return absl::StrCat(TopologyLevelName(CompareTopology(*peer, *t)), " shared with peer ", ctx.peer->address);
  }
};

// onMissing: "Pass" (the default, also when empty) or "Fail".
absl::StatusOr<bool> OnMissingFails(const Params& params) {
  const Params* v = params.Find("onMissing");
  if (v == nullptr || v->is_null()) return false;
  absl::StatusOr<std::string> text = v->AsString();
  if (!text.ok()) return text.status();
  if (text->empty() || *text == "Pass") return false;
  if (*text == "Fail") return true;
  return absl::InvalidArgumentError(absl::StrCat(params.path(), ".onMissing: must be \"Pass\" or \"Fail\", got \"", *text, "\""));
}

}  // namespace

PluginOr CreateEndpointAttributeFilter(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(params.CheckKeys({"attribute", "producer", "onMissing", "fallbackOnEmpty", "algorithm"}));
  EndpointAttributeFilter::Options o;
  EPP_ASSIGN_OR_RETURN(o.key, ReadAttributeKey(params, "attribute", "endpoint attribute filter"));
  EPP_ASSIGN_OR_RETURN(o.fail_on_missing, OnMissingFails(params));
  EPP_ASSIGN_OR_RETURN(o.fallback_on_empty, params.GetBool("fallbackOnEmpty", false));
  const Params* alg = params.Find("algorithm");
  if (alg == nullptr || alg->is_null())
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ".algorithm: required (type: threshold)"));
  EPP_RETURN_IF_ERROR(alg->CheckKeys({"type", "threshold"}));
  EPP_ASSIGN_OR_RETURN(std::string type, alg->GetString("type", ""));
  if (type != "threshold")
    return absl::InvalidArgumentError(absl::StrCat(alg->path(), ".type: must be \"threshold\", got \"", type, "\""));
  const Params* th = alg->Find("threshold");
  if (th == nullptr || th->is_null())
    return absl::InvalidArgumentError(absl::StrCat(alg->path(), ".threshold: required with type threshold"));
  EPP_RETURN_IF_ERROR(th->CheckKeys({"operator", "value"}));
  EPP_ASSIGN_OR_RETURN(std::string op, th->GetString("operator", ""));
  bool known = false;
  for (const OpName& n : kOps)
    if (op == n.name) {
      o.op = n.op;
      known = true;
    }
  if (!known)
    return absl::InvalidArgumentError(absl::StrCat(th->path(), ".operator: '", op, "' is not one of LessThan, LessThanOrEqual, "
                                                   "GreaterThan, GreaterThanOrEqual, Equal, NotEqual"));
  EPP_ASSIGN_OR_RETURN(o.threshold, th->GetDouble("value", 0));
  if (!std::isfinite(o.threshold)) return absl::InvalidArgumentError(absl::StrCat(th->path(), ".value: must be finite"));
  return std::make_unique<EndpointAttributeFilter>(TN(kEndpointAttributeFilterType, name), std::move(o), params.is_null() ? Params::Map() : params);
}

PluginOr CreateEndpointAttributeScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(params.CheckKeys({"attributeKey", "producer", "algorithm"}));
  EndpointAttributeScorer::Options o;
  EPP_ASSIGN_OR_RETURN(o.key, ReadAttributeKey(params, "attributeKey", "endpoint attribute scorer"));
  const Params* alg = params.Find("algorithm");
  if (alg == nullptr || alg->is_null())
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ".algorithm: required (type: linear_lower_is_better or linear_higher_is_better)"));
  EPP_RETURN_IF_ERROR(alg->CheckKeys({"type", "normalization"}));
  EPP_ASSIGN_OR_RETURN(std::string type, alg->GetString("type", ""));
  if (type == "linear_lower_is_better") o.lower_is_better = true;
  else if (type == "linear_higher_is_better") o.lower_is_better = false;
  else
    return absl::InvalidArgumentError(absl::StrCat(alg->path(), ".type: must be linear_lower_is_better or "
                                                   "linear_higher_is_better, got \"", type, "\""));
  if (const Params* norm = alg->Find("normalization"); norm != nullptr && !norm->is_null()) {
    EPP_RETURN_IF_ERROR(norm->CheckKeys({"fixedRange", "adaptiveRange"}));
    const Params* fixed = norm->Find("fixedRange");
    const Params* adaptive = norm->Find("adaptiveRange");
    if (fixed && !fixed->is_null() && adaptive && !adaptive->is_null())
      return absl::InvalidArgumentError(absl::StrCat(norm->path(), ": give fixedRange or adaptiveRange, not both"));
    if (adaptive && !adaptive->is_null()) EPP_RETURN_IF_ERROR(adaptive->CheckKeys({}));
    if (fixed && !fixed->is_null()) {
      EPP_RETURN_IF_ERROR(fixed->CheckKeys({"min", "max"}));
      EPP_ASSIGN_OR_RETURN(double lo, fixed->GetDouble("min", 0));
      EPP_ASSIGN_OR_RETURN(double hi, fixed->GetDouble("max", 0));
      if (!(std::isfinite(lo) && std::isfinite(hi) && lo < hi))
        return absl::InvalidArgumentError(absl::StrCat(fixed->path(), ": min (", Num(lo), ") must be less than max (", Num(hi), ")"));
      o.fixed = std::pair{lo, hi};
    }
  }
  return std::make_unique<EndpointAttributeScorer>(TN(kEndpointAttributeScorerType, name), std::move(o), params.is_null() ? Params::Map() : params);
}

PluginOr CreateTopologyAffinityFilter(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(params.CheckKeys({"minAffinity", "topologyProducerName"}));
  EPP_ASSIGN_OR_RETURN(TopologyLevel min, ParseLevel(params, "minAffinity", TopologyLevel::kHost));
  EPP_ASSIGN_OR_RETURN(std::string producer, params.GetString("topologyProducerName", std::string(kTopologyExtractorType)));
  if (producer.empty()) producer = kTopologyExtractorType;
  return std::make_unique<TopologyAffinityFilter>(TN(kTopologyAffinityFilterType, name), std::move(producer), min);
}

PluginOr CreateTopologyAffinityScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(params.CheckKeys({"topologyProducerName"}));
  EPP_ASSIGN_OR_RETURN(std::string producer, params.GetString("topologyProducerName", std::string(kTopologyExtractorType)));
  if (producer.empty()) producer = kTopologyExtractorType;
  return std::make_unique<TopologyAffinityScorer>(TN(kTopologyAffinityScorerType, name), std::move(producer));
}

}  // namespace epp::plugins
