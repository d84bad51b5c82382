// Filters: label-selector-filter (and the deprecated by-label-selector / by-label), llm-d's role
// filters (decode-filter, prefill-filter, encode-filter) and prefix-cache-affinity-filter.
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/strings.h"
#include "epp/scheduling.h"
#include "plugins/filter/filter.h"
#include "plugins/scorer/scorer.h"  // PrefixRatio

namespace epp::plugins {
namespace {

using internal::Num;

// A Kubernetes label selector: matchLabels AND every matchExpression.
struct Requirement {
  std::string key;
  std::string op;  // In, NotIn, Exists, DoesNotExist
  std::vector<std::string> values;
};

struct Selector {
  std::vector<std::pair<std::string, std::string>> match_labels;
  std::vector<Requirement> expressions;

  // Empty string when `labels` match, else the first reason they do not.
  std::string Mismatch(const std::map<std::string, std::string>& labels) const {
    for (const auto& [k, v] : match_labels) {
      auto it = labels.find(k);
      if (it == labels.end()) return absl::StrCat("label ", k, " missing (want ", v, ")");
      if (it->second != v) return absl::StrCat("label ", k, "=", it->second, " (want ", v, ")");
    }
    for (const Requirement& r : expressions) {
      auto it = labels.find(r.key);
      const bool has = it != labels.end();
      const bool in = has && std::find(r.values.begin(), r.values.end(), it->second) != r.values.end();
      if (r.op == "Exists" && !has) return absl::StrCat("label ", r.key, " missing");
      if (r.op == "DoesNotExist" && has) return absl::StrCat("label ", r.key, " present");
      if (r.op == "In" && !in)
        return absl::StrCat("label ", r.key, has ? "=" + it->second : " missing", " not in [",
                            absl::StrJoin(r.values, ", "), "]");
      if (r.op == "NotIn" && in) return absl::StrCat("label ", r.key, "=", it->second, " is excluded");
    }
    return {};
  }
};

class SelectorFilter : public Plugin, public Filter {
 public:
  SelectorFilter(TypedName tn, Selector sel, Params effective)
      : Plugin(std::move(tn)), sel_(std::move(sel)), effective_(std::move(effective)) {}
  const Filter* AsFilter() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kLabels}; }
  Params EffectiveParams() const override { return effective_; }
  std::vector<const Endpoint*> Apply(const SchedulingContext&, Candidates candidates) const override {
    std::vector<const Endpoint*> out;
    out.reserve(candidates.size());
    for (const Endpoint* e : candidates)
      if (sel_.Mismatch(e->labels).empty()) out.push_back(e);
    return out;
  }
  std::string WhyRemoved(const SchedulingContext&, const Endpoint& e) const override { return sel_.Mismatch(e.labels); }

 private:
  Selector sel_;
  Params effective_;
};

// llm-d's role filters: keep endpoints whose llm-d.ai/role is one of `roles` (and, for decode,
// endpoints with no role label at all).
class RoleFilter : public Plugin, public Filter {
 public:
  RoleFilter(TypedName tn, std::set<std::string> roles, bool keep_unlabeled)
      : Plugin(std::move(tn)), roles_(std::move(roles)), keep_unlabeled_(keep_unlabeled) {}
  const Filter* AsFilter() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kLabels}; }
  std::vector<const Endpoint*> Apply(const SchedulingContext&, Candidates candidates) const override {
    std::vector<const Endpoint*> out;
    for (const Endpoint* e : candidates)
      if (Keeps(*e)) out.push_back(e);
    return out;
  }
  std::string WhyRemoved(const SchedulingContext&, const Endpoint& e) const override {
    auto it = e.labels.find(std::string(kRoleLabel));
    if (it == e.labels.end()) return absl::StrCat("no ", ToAbsl(kRoleLabel), " label");
    return absl::StrCat(ToAbsl(kRoleLabel), "=", it->second, " (want one of ", absl::StrJoin(roles_, ", "), ")");
  }

 private:
  bool Keeps(const Endpoint& e) const {
    auto it = e.labels.find(std::string(kRoleLabel));
    if (it == e.labels.end()) return keep_unlabeled_;
    return roles_.count(it->second) > 0;
  }
  std::set<std::string> roles_;
  bool keep_unlabeled_;
};

// Keeps the "sticky" endpoints (prefix match ratio >= affinityThreshold) when there are any,
// unless exploring (probability explorationProbability) or the best sticky endpoint's TTFT
// exceeds the best other one's by more than maxTTFTPenaltyMs. The TTFT comes from ttftSource:
// prefillThroughput estimates it as in-flight tokens / peakPrefillThroughput; latencyPredictor
// reads predicted-latency-producer's prediction (an endpoint without one counts as infinitely
// slow). llm-d-router's defaults.
struct PrefixAffinityOptions {
  double threshold = 0.80;
  double exploration = 0.0;
  double max_ttft_penalty_ms = 18000;
  std::string ttft_source = "prefillThroughput";
  double peak_prefill_tokens_per_s = 15928;
  std::string prefix_producer;
  std::string prediction_producer;
  std::string inflight_producer;
  bool UsesPredictor() const { return ttft_source == "latencyPredictor"; }
};

const ParamTable<PrefixAffinityOptions>& PrefixAffinityTable() {
  static const auto* t =
      &(*new ParamTable<PrefixAffinityOptions>())
           .Number("affinityThreshold", &PrefixAffinityOptions::threshold, Range::Closed(0, 1),
                   "prefix match ratio from which an endpoint is sticky")
           .Number("explorationProbability", &PrefixAffinityOptions::exploration, Range::Closed(0, 1),
                   "chance of keeping every candidate anyway")
           .Number("maxTTFTPenaltyMs", &PrefixAffinityOptions::max_ttft_penalty_ms, Range::AtLeast(0),
                   "TTFT the best sticky endpoint may exceed the best other one by (0: no load gate)")
           .String("ttftSource", &PrefixAffinityOptions::ttft_source,
                   "where the load gate reads an endpoint's TTFT: prefillThroughput (in-flight tokens / "
                   "peakPrefillThroughput) or latencyPredictor (predicted-latency-producer's prediction)",
                   {"prefillThroughput", "latencyPredictor"})
           .Number("peakPrefillThroughput", &PrefixAffinityOptions::peak_prefill_tokens_per_s, Range::Above(0),
                   "prefill tokens per second the prefillThroughput estimate assumes")
           .String("prefixMatchInfoProducerName", &PrefixAffinityOptions::prefix_producer,
                   "the prefix producer read; empty: the default one")
           .OmitEmpty()
           .String("latencyPredictionInfoProducerName", &PrefixAffinityOptions::prediction_producer,
                   "the predicted-latency-producer read with ttftSource latencyPredictor; empty: the default one")
           .OmitEmpty()
           .String("inFlightLoadProducerName", &PrefixAffinityOptions::inflight_producer,
                   "the in-flight load producer read with ttftSource prefillThroughput; empty: the default one")
           .OmitEmpty();
  return *t;
}

class PrefixAffinityFilter : public Plugin, public Filter {
 public:
  using Options = PrefixAffinityOptions;
  PrefixAffinityFilter(TypedName tn, Options o, Rng* rng) : Plugin(std::move(tn)), o_(o), rng_(rng) {}
  const Filter* AsFilter() const override { return this; }
  PluginInputs Consumes() const override {
    if (o_.max_ttft_penalty_ms <= 0) return {PluginInput::kPrefixMatch};
    if (o_.UsesPredictor()) return {PluginInput::kPrefixMatch, PluginInput::kLatencyPrediction};
    return {PluginInput::kPrefixMatch, PluginInput::kInflightLoad};
  }
  Params EffectiveParams() const override { return PrefixAffinityTable().Effective(o_); }
  std::vector<const Endpoint*> Apply(const SchedulingContext& ctx, Candidates candidates) const override {
    std::vector<const Endpoint*> all(candidates.begin(), candidates.end());
    if (!ctx.prefix.computed || ctx.prefix.hashes.empty()) return all;
    if (o_.exploration > 0) {
      Rng* rng = ctx.rng ? ctx.rng : rng_;
      if (rng && rng->Uniform() < o_.exploration) return all;
    }
    std::vector<const Endpoint*> sticky;
    double best_sticky = 1e300, best_other = 1e300;
    for (const Endpoint* e : candidates) {
      const double ttft_ms = TtftMs(ctx, *e);
      if (Sticky(ctx, e)) {
        sticky.push_back(e);
        best_sticky = std::min(best_sticky, ttft_ms);
      } else {
        best_other = std::min(best_other, ttft_ms);
      }
    }
    if (sticky.empty()) return all;
    if (o_.max_ttft_penalty_ms > 0 && best_other < 1e300 && best_sticky - best_other > o_.max_ttft_penalty_ms)
      return all;
    return sticky;
  }
  std::string WhyRemoved(const SchedulingContext& ctx, const Endpoint& e) const override {
    return absl::StrCat("prefix match ", Num(Ratio(ctx, &e)), " < affinityThreshold ", Num(o_.threshold),
                        " while other endpoints hold the prefix");
  }

 private:
  static double Ratio(const SchedulingContext& ctx, const Endpoint* e) {
    return PrefixRatio(ctx.PrefixMatchBlocks(e), static_cast<int>(ctx.prefix.hashes.size()));
  }
  bool Sticky(const SchedulingContext& ctx, const Endpoint* e) const { return Ratio(ctx, e) >= o_.threshold; }
  double TtftMs(const SchedulingContext& ctx, const Endpoint& e) const {
    if (!o_.UsesPredictor()) return 1000.0 * static_cast<double>(ctx.InflightTokens(&e)) / o_.peak_prefill_tokens_per_s;
    const bool ours = ctx.latency.computed &&
                      (o_.prediction_producer.empty() || o_.prediction_producer == ctx.latency.producer);
    const LatencyInfo* li = ours ? ctx.Latency(&e) : nullptr;
    return li ? li->ttft_ms : 1e299;  // no prediction: slower than any predicted endpoint
  }
  Options o_;
  Rng* rng_;
};


absl::Status ReadStringList(const Params& list, std::vector<std::string>& out) {
  if (list.kind() != Params::Kind::kList) return absl::InvalidArgumentError(absl::StrCat(list.path(), ": expected a list"));
  for (const Params& item : list.items()) {
    EPP_ASSIGN_OR_RETURN(std::string s, item.AsString());
    out.push_back(std::move(s));
  }
  return absl::OkStatus();
}

absl::Status ReadMatchLabels(const Params& ml, Selector& sel) {
  if (!ml.is_map()) return absl::InvalidArgumentError(absl::StrCat(ml.path(), ": expected a map of label: value"));
  for (const auto& [k, v] : ml.entries()) {
    EPP_ASSIGN_OR_RETURN(std::string s, v.AsString());
    sel.match_labels.emplace_back(k, s);
  }
  return absl::OkStatus();
}

absl::Status ReadMatchExpressions(const Params& me, Selector& sel) {
  if (me.kind() != Params::Kind::kList) return absl::InvalidArgumentError(absl::StrCat(me.path(), ": expected a list"));
  for (const Params& item : me.items()) {
    EPP_RETURN_IF_ERROR(item.CheckKeys({"key", "operator", "values"}));
    Requirement r;
    EPP_ASSIGN_OR_RETURN(r.key, item.GetString("key", ""));
    EPP_ASSIGN_OR_RETURN(r.op, item.GetString("operator", ""));
    if (r.key.empty()) return absl::InvalidArgumentError(absl::StrCat(item.path(), ".key: required"));
    if (r.op != "In" && r.op != "NotIn" && r.op != "Exists" && r.op != "DoesNotExist")
      return absl::InvalidArgumentError(absl::StrCat(item.path(), ".operator: '", r.op,
                                                     "' is not one of In, NotIn, Exists, DoesNotExist"));
    if (const Params* vals = item.Find("values"); vals && !vals->is_null()) EPP_RETURN_IF_ERROR(ReadStringList(*vals, r.values));
    if ((r.op == "In" || r.op == "NotIn") && r.values.empty())
      return absl::InvalidArgumentError(absl::StrCat(item.path(), ".values: required for operator ", r.op));
    sel.expressions.push_back(std::move(r));
  }
  return absl::OkStatus();
}

// label-selector-filter takes the selector at the top level of its parameters or under
// `selector`; either way the parameters are reported as written.
struct SelectorOptions {
  Selector sel;
  Params match_labels, match_expressions, selector;  // as written, for EffectiveParams
};

const ParamTable<SelectorOptions>& SelectorTable() {
  static const auto* t =
      &(*new ParamTable<SelectorOptions>())
           .Custom("matchLabels", ParamType::kMap, "label: value pairs an endpoint must all have",
                   [](const Params& v, SelectorOptions& o) {
                     o.match_labels = v;
                     return ReadMatchLabels(v, o.sel);
                   },
                   [](const SelectorOptions& o) { return o.match_labels; })
           .Custom("matchExpressions", ParamType::kList,
                   "[{key, operator: In|NotIn|Exists|DoesNotExist, values}] an endpoint must all satisfy",
                   [](const Params& v, SelectorOptions& o) {
                     o.match_expressions = v;
                     return ReadMatchExpressions(v, o.sel);
                   },
                   [](const SelectorOptions& o) { return o.match_expressions; })
           .Custom("selector", ParamType::kMap, "{matchLabels, matchExpressions}: the same selector, nested (alone)",
                   [](const Params& v, SelectorOptions& o) -> absl::Status {
                     o.selector = v;
                     EPP_RETURN_IF_ERROR(v.CheckKeys({"matchLabels", "matchExpressions"}));
                     if (const Params* ml = v.Find("matchLabels"); ml && !ml->is_null())
                       EPP_RETURN_IF_ERROR(ReadMatchLabels(*ml, o.sel));
                     if (const Params* me = v.Find("matchExpressions"); me && !me->is_null())
                       EPP_RETURN_IF_ERROR(ReadMatchExpressions(*me, o.sel));
                     return absl::OkStatus();
                   },
                   [](const SelectorOptions& o) { return o.selector; });
  return *t;
}

}  // namespace

PluginOr CreateLabelSelectorFilter(const std::string& name, const Params& params, const PluginContext&) {
  // A nested selector stands alone.
  if (params.Has("selector")) EPP_RETURN_IF_ERROR(params.CheckKeys({"selector"}));
  EPP_ASSIGN_OR_RETURN(SelectorOptions o, SelectorTable().Read(params));
  if (o.sel.match_labels.empty() && o.sel.expressions.empty())
    return absl::InvalidArgumentError(absl::StrCat(params.path().empty() ? name : params.path(),
                                                   ": a label selector needs matchLabels or matchExpressions"));
  Params effective = SelectorTable().Effective(o);
  return std::make_unique<SelectorFilter>(TN(kLabelSelectorFilterType, name), std::move(o.sel), std::move(effective));
}

// by-label (deprecated in llm-d): keep endpoints whose `label` has one of `validValues` (any
// value when none are listed); unlabeled endpoints pass only with allowsNoLabel.
namespace {

struct ByLabelOptions {
  std::string label;
  std::vector<std::string> values;
  bool allow_missing = false;
};

const ParamTable<ByLabelOptions>& ByLabelTable() {
  static const auto* t =
      &(*new ParamTable<ByLabelOptions>())
           .String("label", &ByLabelOptions::label, "the label read (required)")
           .Custom("validValues", ParamType::kStringList, "values kept; empty: any value",
                   [](const Params& v, ByLabelOptions& o) { return ReadStringList(v, o.values); },
                   [](const ByLabelOptions& o) {
                     Params vals = Params::List();
                     for (const auto& v : o.values) vals.Append(Params::String(v));
                     return vals;
                   })
           .Bool("allowsNoLabel", &ByLabelOptions::allow_missing, "keep endpoints without the label");
  return *t;
}

class ByLabelFilter : public Plugin, public Filter {
 public:
  ByLabelFilter(TypedName tn, ByLabelOptions o)
      : Plugin(std::move(tn)), label_(std::move(o.label)), values_(std::move(o.values)), allow_missing_(o.allow_missing) {}
  const Filter* AsFilter() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kLabels}; }
  Params EffectiveParams() const override { return ByLabelTable().Effective(ByLabelOptions{label_, values_, allow_missing_}); }
  std::vector<const Endpoint*> Apply(const SchedulingContext& ctx, Candidates candidates) const override {
    std::vector<const Endpoint*> out;
    for (const Endpoint* e : candidates)
      if (WhyRemoved(ctx, *e).empty()) out.push_back(e);
    return out;
  }
  std::string WhyRemoved(const SchedulingContext&, const Endpoint& e) const override {
    auto it = e.labels.find(label_);
    if (it == e.labels.end()) return allow_missing_ ? "" : absl::StrCat("label ", label_, " missing");
    if (values_.empty() || std::find(values_.begin(), values_.end(), it->second) != values_.end()) return "";
    return absl::StrCat("label ", label_, "=", it->second, " not in [", absl::StrJoin(values_, ", "), "]");
  }

 private:
  std::string label_;
  std::vector<std::string> values_;
  bool allow_missing_;
};

}  // namespace

PluginOr CreateByLabelFilter(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(ByLabelOptions o, ByLabelTable().Read(params));
  if (o.label.empty()) return absl::InvalidArgumentError(absl::StrCat(params.path(), ".label: required"));
  return std::make_unique<ByLabelFilter>(TN(kByLabelFilterType, name), std::move(o));
}

PluginOr CreateDecodeFilter(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<RoleFilter>(TN(kDecodeFilterType, name),
                                      std::set<std::string>{"decode", "prefill-decode", "both", "encode-prefill-decode"},
                                      /*keep_unlabeled=*/true);
}

PluginOr CreatePrefillFilter(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<RoleFilter>(
      TN(kPrefillFilterType, name),
      std::set<std::string>{"prefill", "encode-prefill", "prefill-decode", "both", "encode-prefill-decode"},
      /*keep_unlabeled=*/false);
}

PluginOr CreateEncodeFilter(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<RoleFilter>(TN(kEncodeFilterType, name),
                                      std::set<std::string>{"encode", "encode-prefill", "encode-prefill-decode"},
                                      /*keep_unlabeled=*/false);
}

PluginOr CreatePrefixAffinityFilter(const std::string& name, const Params& params, const PluginContext& ctx) {
  EPP_ASSIGN_OR_RETURN(PrefixAffinityOptions o, PrefixAffinityTable().Read(params));
  return std::make_unique<PrefixAffinityFilter>(TN(kPrefixAffinityFilterType, name), o, ctx.rng);
}

PluginSchema LabelSelectorFilterSchema() { return SelectorTable().Schema(); }
PluginSchema ByLabelFilterSchema() { return ByLabelTable().Schema(); }
PluginSchema PrefixAffinityFilterSchema() { return PrefixAffinityTable().Schema(); }

}  // namespace epp::plugins
