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
  // Set at load when `producer` names a data-layer extractor (dcgm-extractor, ...): its values
  // in Endpoint::attributes are read instead of the custom metrics.
  std::string data_producer;

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

// After Read(): the attribute is required, and a '/' in it needs an explicit producer.
absl::Status CheckAttributeKey(const Params& params, const AttributeKey& k, const char* key_param, const char* what) {
  if (k.attribute.empty())
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ".", key_param, ": ", what, " requires a non-empty ", key_param));
  if (!k.producer && k.attribute.find('/') != std::string::npos)
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ".", key_param, ": attribute '", k.attribute,
                                                   "' contains '/' but no producer is set; give the producer "
                                                   "separately (producer: ...)"));
  return absl::OkStatus();
}

// The endpoint-attribute plugins report their parameters as written (llm-d's nested algorithm
// blocks included): each reader records the value in `written`, each writer returns it.
template <class O>
typename ParamTable<O>::Reader Recorded(std::string name, typename ParamTable<O>::Reader read) {
  return [name, read](const Params& v, O& o) {
    o.written.Set(name, v);
    return read(v, o);
  };
}
template <class O>
typename ParamTable<O>::Writer AsWritten(std::string name) {
  return [name](const O& o) {
    const Params* v = o.written.Find(name);
    return v != nullptr ? *v : Params();
  };
}

// attribute / attributeKey and producer, shared by both tables.
template <class O>
void DeclareAttributeKey(ParamTable<O>& t, const char* key_param) {
  t.Custom(key_param, ParamType::kString, "the endpoint attribute read: a customMetrics attributeKey (required)",
           Recorded<O>(key_param,
                       [](const Params& v, O& o) -> absl::Status {
                         EPP_ASSIGN_OR_RETURN(o.key.attribute, v.AsString());
                         return absl::OkStatus();
                       }),
           AsWritten<O>(key_param))
      .Custom("producer", ParamType::kString,
              "the plugin producing the attribute; only core-metrics-extractor's are endpoint attributes",
              Recorded<O>("producer",
                          [](const Params& v, O& o) -> absl::Status {
                            EPP_ASSIGN_OR_RETURN(std::string producer, v.AsString());
                            o.key.producer = producer;
                            return absl::OkStatus();
                          }),
              AsWritten<O>("producer"));
}

// At load: whether the attribute can ever be present, with a warning when it cannot.
bool ResolveAttribute(AttributeKey& key, const PluginReferences& refs, const std::string& plugin) {
  if (!key.FromCoreMetrics(&refs)) {
    // llm-d keys an extractor's attributes by its type (GPUUtilization/dcgm-extractor); a plugin
    // name is taken too.
    const Plugin* p = refs.plugin(*key.producer);
    for (size_t i = 0; p == nullptr && i < refs.all.size(); ++i)
      if (refs.all[i]->type() == *key.producer && dynamic_cast<const ExtractorPlugin*>(refs.all[i])) p = refs.all[i];
    if (p != nullptr) {
      if (auto* ex = dynamic_cast<const ExtractorPlugin*>(p)) {
        const std::vector<std::string> keys = ex->Produces();
        if (std::find(keys.begin(), keys.end(), key.attribute) != keys.end()) {
          key.data_producer = p->name();
          return true;
        }
        if (refs.warnings)
          refs.warnings->push_back(absl::StrCat("plugin '", plugin, "': attribute ", key.ToString(), ": '", p->name(), "' (",
                                                p->type(), ") does not produce it; every endpoint misses it"));
        return false;
      }
    }
    if (refs.warnings)
      refs.warnings->push_back(absl::StrCat("plugin '", plugin, "': attribute ", key.ToString(),
                                            ": epp has no such producer (core-metrics-extractor's customMetrics or a configured "
                                            "data-layer extractor such as dcgm-extractor); every endpoint misses it"));
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
  if (!key.data_producer.empty()) return e.attributes.Find(key.attribute, key.data_producer);
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

struct AttributeFilterOptions {
  AttributeKey key;
  bool fail_on_missing = false;
  bool fallback_on_empty = false;
  bool has_algorithm = false;
  Op op = Op::kLt;
  double threshold = 0;
  Params written = Params::Map();
};

const ParamTable<AttributeFilterOptions>& AttributeFilterTable();

class EndpointAttributeFilter : public Plugin, public Filter {
 public:
  using Options = AttributeFilterOptions;
  EndpointAttributeFilter(TypedName tn, Options o) : Plugin(std::move(tn)), o_(std::move(o)) {}
  const Filter* AsFilter() const override { return this; }
  Params EffectiveParams() const override { return AttributeFilterTable().Effective(o_); }
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
  bool available_ = true;
};

struct AttributeScorerOptions {
  AttributeKey key;
  bool has_algorithm = false;
  bool lower_is_better = true;
  std::optional<std::pair<double, double>> fixed;  // nullopt: adaptive over the candidates
  Params written = Params::Map();
};

const ParamTable<AttributeScorerOptions>& AttributeScorerTable();

class EndpointAttributeScorer : public Plugin, public Scorer {
 public:
  using Options = AttributeScorerOptions;
  EndpointAttributeScorer(TypedName tn, Options o) : Plugin(std::move(tn)), o_(std::move(o)) {}
  const Scorer* AsScorer() const override { return this; }
  ScorerCategory category() const override { return ScorerCategory::kDistribution; }
  Params EffectiveParams() const override { return AttributeScorerTable().Effective(o_); }
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
  bool available_ = true;
};

// ---- topology affinity

struct TopologyOptions {
  TopologyLevel min = TopologyLevel::kHost;  // minAffinity (the filter only)
  std::string producer = std::string(kTopologyExtractorType);
};

// minAffinity: a level name; empty means host.
absl::Status ReadLevel(const Params& v, TopologyOptions& o) {
  EPP_ASSIGN_OR_RETURN(std::string text, v.AsString());
  if (text.empty()) return absl::OkStatus();
  for (TopologyLevel l : {TopologyLevel::kHost, TopologyLevel::kRack, TopologyLevel::kZone, TopologyLevel::kRegion})
    if (text == TopologyLevelName(l)) {
      o.min = l;
      return absl::OkStatus();
    }
  return absl::InvalidArgumentError(
      absl::StrCat(v.path(), ": invalid topology level '", text, "', must be one of host, rack, zone, region"));
}

ParamTable<TopologyOptions>& DeclareTopologyProducer(ParamTable<TopologyOptions>& t) {
  return t.Custom(
      "topologyProducerName", ParamType::kString, "the topology-extractor read; empty means topology-extractor",
      [](const Params& v, TopologyOptions& o) -> absl::Status {
        EPP_ASSIGN_OR_RETURN(std::string producer, v.AsString());
        if (!producer.empty()) o.producer = std::move(producer);
        return absl::OkStatus();
      },
      [](const TopologyOptions& o) { return Params::String(o.producer); });
}

const ParamTable<TopologyOptions>& TopologyFilterTable() {
  static const auto* t = &DeclareTopologyProducer(
      (*new ParamTable<TopologyOptions>())
          .Custom("minAffinity", ParamType::kString,
                  "the farthest level (host, rack, zone, region) a candidate may share with the peer", ReadLevel,
                  [](const TopologyOptions& o) { return Params::String(TopologyLevelName(o.min)); }));
  return *t;
}

const ParamTable<TopologyOptions>& TopologyScorerTable() {
  static const auto* t = &DeclareTopologyProducer(*new ParamTable<TopologyOptions>());
  return *t;
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
  TopologyBase(TypedName tn, TopologyOptions o) : Plugin(std::move(tn)), o_(std::move(o)) {}
  bool HasReferences() const override { return true; }
  PluginInputs Consumes() const override { return {PluginInput::kLabels}; }
  absl::Status Resolve(const PluginReferences& refs) override {
    source_ = ResolveTopology(refs, o_.producer, name());
    return absl::OkStatus();
  }

 protected:
  std::optional<Topology> Of(const Endpoint* e) const {
    if (source_ == nullptr || e == nullptr) return std::nullopt;
    return source_->TopologyOf(*e);
  }
  TopologyOptions o_;
  const TopologySource* source_ = nullptr;
};

class TopologyAffinityFilter : public TopologyBase, public Filter {
 public:
  using TopologyBase::TopologyBase;
  const Filter* AsFilter() const override { return this; }
  Params EffectiveParams() const override { return TopologyFilterTable().Effective(o_); }
  std::vector<const Endpoint*> Apply(const SchedulingContext& ctx, Candidates candidates) const override {
    const std::optional<Topology> peer = Of(ctx.peer);
    if (!peer) return {candidates.begin(), candidates.end()};
    std::vector<const Endpoint*> out;
    for (const Endpoint* e : candidates) {
      const std::optional<Topology> t = Of(e);
      if (t && CompareTopology(*peer, *t) <= o_.min) out.push_back(e);
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
                        TopologyLevelName(level), " (minAffinity ", TopologyLevelName(o_.min), ")");
  }
};

class TopologyAffinityScorer : public TopologyBase, public Scorer {
 public:
  using TopologyBase::TopologyBase;
  const Scorer* AsScorer() const override { return this; }
  ScorerCategory category() const override { return ScorerCategory::kAffinity; }
  Params EffectiveParams() const override { return TopologyScorerTable().Effective(o_); }
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
absl::Status ReadOnMissing(const Params& v, AttributeFilterOptions& o) {
  EPP_ASSIGN_OR_RETURN(std::string text, v.AsString());
  if (text.empty() || text == "Pass") {
    o.fail_on_missing = false;
  } else if (text == "Fail") {
    o.fail_on_missing = true;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(v.path(), ": must be \"Pass\" or \"Fail\", got \"", text, "\""));
  }
  return absl::OkStatus();
}

// {type: threshold, threshold: {operator, value}}
absl::Status ReadFilterAlgorithm(const Params& alg, AttributeFilterOptions& o) {
  o.has_algorithm = true;
  EPP_RETURN_IF_ERROR(alg.CheckKeys({"type", "threshold"}));
  EPP_ASSIGN_OR_RETURN(std::string type, alg.GetString("type", ""));
  if (type != "threshold")
    return absl::InvalidArgumentError(absl::StrCat(alg.path(), ".type: must be \"threshold\", got \"", type, "\""));
  const Params* th = alg.Find("threshold");
  if (th == nullptr || th->is_null())
    return absl::InvalidArgumentError(absl::StrCat(alg.path(), ".threshold: required with type threshold"));
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
  return absl::OkStatus();
}

// {type: linear_lower_is_better | linear_higher_is_better, normalization: {fixedRange: {min, max}} | {adaptiveRange: {}}}
absl::Status ReadScorerAlgorithm(const Params& alg, AttributeScorerOptions& o) {
  o.has_algorithm = true;
  EPP_RETURN_IF_ERROR(alg.CheckKeys({"type", "normalization"}));
  EPP_ASSIGN_OR_RETURN(std::string type, alg.GetString("type", ""));
  if (type == "linear_lower_is_better") o.lower_is_better = true;
  else if (type == "linear_higher_is_better") o.lower_is_better = false;
  else
    return absl::InvalidArgumentError(absl::StrCat(alg.path(), ".type: must be linear_lower_is_better or "
                                                   "linear_higher_is_better, got \"", type, "\""));
  if (const Params* norm = alg.Find("normalization"); norm != nullptr && !norm->is_null()) {
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
  return absl::OkStatus();
}

const ParamTable<AttributeFilterOptions>& AttributeFilterTable() {
  using O = AttributeFilterOptions;
  static const auto* t = [] {
    auto* t = new ParamTable<O>();
    DeclareAttributeKey(*t, "attribute");
    t->Custom("onMissing", ParamType::kString, "Pass (keep endpoints without the attribute, the default) or Fail",
              Recorded<O>("onMissing", ReadOnMissing), AsWritten<O>("onMissing"))
        .Custom("fallbackOnEmpty", ParamType::kBool, "keep every candidate when none passes",
                Recorded<O>("fallbackOnEmpty",
                            [](const Params& v, O& o) -> absl::Status {
                              EPP_ASSIGN_OR_RETURN(o.fallback_on_empty, v.AsBool());
                              return absl::OkStatus();
                            }),
                AsWritten<O>("fallbackOnEmpty"))
        .Custom("algorithm", ParamType::kMap,
                "{type: threshold, threshold: {operator: LessThan|LessThanOrEqual|GreaterThan|GreaterThanOrEqual|Equal|"
                "NotEqual, value}} (required)",
                Recorded<O>("algorithm", ReadFilterAlgorithm), AsWritten<O>("algorithm"));
    return t;
  }();
  return *t;
}

const ParamTable<AttributeScorerOptions>& AttributeScorerTable() {
  using O = AttributeScorerOptions;
  static const auto* t = [] {
    auto* t = new ParamTable<O>();
    DeclareAttributeKey(*t, "attributeKey");
    t->Custom("algorithm", ParamType::kMap,
              "{type: linear_lower_is_better|linear_higher_is_better, normalization: {fixedRange: {min, max}} or "
              "{adaptiveRange: {}}} (required; adaptive by default)",
              Recorded<O>("algorithm", ReadScorerAlgorithm), AsWritten<O>("algorithm"));
    return t;
  }();
  return *t;
}

}  // namespace

PluginOr CreateEndpointAttributeFilter(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(AttributeFilterOptions o, AttributeFilterTable().Read(params));
  EPP_RETURN_IF_ERROR(CheckAttributeKey(params, o.key, "attribute", "endpoint attribute filter"));
  if (!o.has_algorithm)
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ".algorithm: required (type: threshold)"));
  return std::make_unique<EndpointAttributeFilter>(TN(kEndpointAttributeFilterType, name), std::move(o));
}

PluginOr CreateEndpointAttributeScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(AttributeScorerOptions o, AttributeScorerTable().Read(params));
  EPP_RETURN_IF_ERROR(CheckAttributeKey(params, o.key, "attributeKey", "endpoint attribute scorer"));
  if (!o.has_algorithm)
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ".algorithm: required (type: linear_lower_is_better or linear_higher_is_better)"));
  return std::make_unique<EndpointAttributeScorer>(TN(kEndpointAttributeScorerType, name), std::move(o));
}

PluginOr CreateTopologyAffinityFilter(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(TopologyOptions o, TopologyFilterTable().Read(params));
  return std::make_unique<TopologyAffinityFilter>(TN(kTopologyAffinityFilterType, name), std::move(o));
}

PluginOr CreateTopologyAffinityScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(TopologyOptions o, TopologyScorerTable().Read(params));
  return std::make_unique<TopologyAffinityScorer>(TN(kTopologyAffinityScorerType, name), std::move(o));
}

PluginSchema EndpointAttributeFilterSchema() { return AttributeFilterTable().Schema(); }
PluginSchema EndpointAttributeScorerSchema() { return AttributeScorerTable().Schema(); }
PluginSchema TopologyAffinityFilterSchema() { return TopologyFilterTable().Schema(); }
PluginSchema TopologyAffinityScorerSchema() { return TopologyScorerTable().Schema(); }

}  // namespace epp::plugins
