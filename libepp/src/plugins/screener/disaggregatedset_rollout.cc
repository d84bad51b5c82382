// disaggregatedset-rollout-screener (llm-d Router): keeps a disaggregated request on one rollout
// revision of a DisaggregatedSet, so that a prefill server of one revision never hands its KV
// cache to a decode server of another (the revisions may differ in KV layout, transfer protocol
// or driver).
//
// It is a Screener (scheduling.h): it runs once per request before every profile, so the prefill
// and the decode profile see the same single revision. Per request:
//   - revision gating (mode sum or max-role): a revision counts only when every role in
//     requireRoles has a Ready Pod; without a strict header, one counted revision is drawn at
//     random with weight = its Ready Pods over the required roles (sum), or its Ready Pods of the
//     role with the most Ready Pods over all counted revisions (max-role, ties to the first listed
//     role); only that revision's candidates are kept. No counted revision: none kept (503).
//   - strict header selectors: a request carrying the selector's header keeps only the
//     candidates whose label labelKey equals it; none: none kept (503), counted in
//     llm_d_epp_disaggregatedset_strict_header_no_match_total.
//   - every selector (strict or prefer) stamps its header on the client's response with the
//     primary endpoint's value of its label, so a client (or a second EPP) can pin the revision.
// Mode disabled keeps the selectors and the stamping and drops the gating.
// llm_d_epp_disaggregatedset_revision_gating_share reports each observed revision's share.
//
// Differences from llm-d, on purpose: llm-d counts Ready Pods from a Pod watch of its own
// (scope.labelSelector over the namespace); epp counts them from the pool it serves (the Ready
// Pods of the InferencePool, or the endpoints file), filtered by scope.labelSelector, one Pod per
// IP whatever its ports. A deployment whose prefill and decode Pods are in different pools (two
// EPPs) therefore sees no complete revision: use mode disabled with a strict revision header
// there. The random draw uses the scheduler's Rng (seeded in tests and replays).
#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "epp/runtime/kube.h"
#include "epp/scheduling.h"
#include "plugins/screener/screener.h"

namespace epp::plugins {
namespace {

struct HeaderSelector {
  std::string name;
  std::string header;  // lower-cased
  std::string label;
  bool strict = false;
};

struct RolloutOptions {
  std::string scope_text;
  LabelSelector scope;
  std::vector<HeaderSelector> selectors;
  std::string mode;  // sum, max-role, disabled
  std::vector<std::string> roles;
  bool roles_given = false;
  std::string revision_label = std::string(kDisaggregatedSetRevisionLabel);
  std::string role_label = std::string(kDisaggregatedSetRoleLabel);
  bool gating_given = false;

  bool Gating() const { return mode == "sum" || mode == "max-role"; }
};

absl::Status At(const Params& v, std::string_view key, std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(v.path().empty() ? std::string("parameters") : v.path(), ".",
                                                 std::string(key), ": ", std::string(message)));
}

absl::StatusOr<std::string> RequiredString(const Params& map, std::string_view key) {
  const Params* v = map.Find(key);
  if (v == nullptr || v->is_null()) return At(map, key, "is required");
  EPP_ASSIGN_OR_RETURN(std::string s, v->AsString());
  if (s.empty()) return At(map, key, "is required");
  return s;
}

absl::Status ReadScope(const Params& v, RolloutOptions& o) {
  if (!v.is_map()) return absl::InvalidArgumentError(absl::StrCat(v.path(), ": expected a map with labelSelector"));
  EPP_RETURN_IF_ERROR(v.CheckKeys({"labelSelector"}));
  EPP_ASSIGN_OR_RETURN(o.scope_text, RequiredString(v, "labelSelector"));
  absl::StatusOr<LabelSelector> sel = ParseLabelSelector(o.scope_text);
  if (!sel.ok()) return At(v, "labelSelector", std::string(sel.status().message()));
  o.scope = *std::move(sel);
  return absl::OkStatus();
}

absl::Status ReadSelectors(const Params& v, RolloutOptions& o) {
  if (v.kind() != Params::Kind::kList)
    return absl::InvalidArgumentError(absl::StrCat(v.path(), ": expected a list of header selectors"));
  std::set<std::string> names, headers;
  for (const Params& item : v.items()) {
    if (!item.is_map()) return absl::InvalidArgumentError(absl::StrCat(item.path(), ": expected a map"));
    EPP_RETURN_IF_ERROR(item.CheckKeys({"name", "headerName", "labelKey", "mode"}));
    HeaderSelector s;
    EPP_ASSIGN_OR_RETURN(s.name, RequiredString(item, "name"));
    EPP_ASSIGN_OR_RETURN(s.header, RequiredString(item, "headerName"));
    EPP_ASSIGN_OR_RETURN(s.label, RequiredString(item, "labelKey"));
    EPP_ASSIGN_OR_RETURN(std::string mode, RequiredString(item, "mode"));
    if (mode != "strict" && mode != "prefer") return At(item, "mode", absl::StrCat("must be strict or prefer, got '", mode, "'"));
    s.strict = mode == "strict";
    // Request headers arrive lower-cased; compare them so.
    for (char& c : s.header) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!names.insert(s.name).second) return At(item, "name", absl::StrCat("duplicate selector name '", s.name, "'"));
    if (!headers.insert(s.header).second) return At(item, "headerName", absl::StrCat("duplicate header '", s.header, "'"));
    o.selectors.push_back(std::move(s));
  }
  return absl::OkStatus();
}

absl::Status ReadGating(const Params& v, RolloutOptions& o) {
  if (!v.is_map()) return absl::InvalidArgumentError(absl::StrCat(v.path(), ": expected a map"));
  EPP_RETURN_IF_ERROR(v.CheckKeys({"mode", "requireRoles", "revisionLabelKey", "roleLabelKey"}));
  o.gating_given = true;
  EPP_ASSIGN_OR_RETURN(o.mode, RequiredString(v, "mode"));
  if (o.mode != "sum" && o.mode != "max-role" && o.mode != "disabled")
    return At(v, "mode", absl::StrCat("must be sum, max-role or disabled, got '", o.mode, "'"));
  EPP_ASSIGN_OR_RETURN(std::string rev, v.GetString("revisionLabelKey", ""));
  EPP_ASSIGN_OR_RETURN(std::string role, v.GetString("roleLabelKey", ""));
  if (!rev.empty()) o.revision_label = rev;
  if (!role.empty()) o.role_label = role;
  const Params* rr = v.Find("requireRoles");
  if (rr == nullptr || rr->is_null()) return absl::OkStatus();
  if (!rr->is_map()) return absl::InvalidArgumentError(absl::StrCat(rr->path(), ": expected a map with values"));
  EPP_RETURN_IF_ERROR(rr->CheckKeys({"values"}));
  o.roles_given = true;
  const Params* values = rr->Find("values");
  if (values == nullptr || values->is_null()) return absl::OkStatus();
  if (values->kind() != Params::Kind::kList)
    return absl::InvalidArgumentError(absl::StrCat(values->path(), ": expected a list of roles"));
  for (const Params& r : values->items()) {
    EPP_ASSIGN_OR_RETURN(std::string role_name, r.AsString());
    if (role_name.empty()) return absl::InvalidArgumentError(absl::StrCat(r.path(), ": must not be empty"));
    if (std::find(o.roles.begin(), o.roles.end(), role_name) != o.roles.end())
      return absl::InvalidArgumentError(absl::StrCat(r.path(), ": duplicate role '", role_name, "'"));
    o.roles.push_back(std::move(role_name));
  }
  return absl::OkStatus();
}

const ParamTable<RolloutOptions>& Table() {
  static const auto* t =
      &(*new ParamTable<RolloutOptions>())
           .Custom("scope", ParamType::kMap,
                   "{labelSelector}: the Pods counted for revision coverage (required; Kubernetes selector syntax)",
                   ReadScope,
                   [](const RolloutOptions& o) {
                     return Params::Map().Set("labelSelector", Params::String(o.scope_text));
                   })
           .Custom("headerSelectors", ParamType::kList,
                   "[{name, headerName, labelKey, mode: strict|prefer}]: strict keeps only endpoints whose label "
                   "equals the request header; every selector stamps the chosen endpoint's label on the response",
                   ReadSelectors,
                   [](const RolloutOptions& o) {
                     Params list = Params::List();
                     for (const HeaderSelector& s : o.selectors)
                       list.Append(Params::Map()
                                       .Set("name", Params::String(s.name))
                                       .Set("headerName", Params::String(s.header))
                                       .Set("labelKey", Params::String(s.label))
                                       .Set("mode", Params::String(s.strict ? "strict" : "prefer")));
                     return list;
                   })
           .Custom("revisionGating", ParamType::kMap,
                   "{mode: sum|max-role|disabled, requireRoles: {values}, revisionLabelKey, roleLabelKey} (required)",
                   ReadGating, [](const RolloutOptions& o) {
                     Params g = Params::Map();
                     g.Set("mode", Params::String(o.mode));
                     if (o.roles_given) {
                       Params values = Params::List();
                       for (const std::string& r : o.roles) values.Append(Params::String(r));
                       g.Set("requireRoles", Params::Map().Set("values", std::move(values)));
                     }
                     g.Set("revisionLabelKey", Params::String(o.revision_label));
                     g.Set("roleLabelKey", Params::String(o.role_label));
                     return g;
                   });
  return *t;
}

// Ready Pods per revision and role, and each revision's share of traffic.
struct Distribution {
  std::map<std::string, std::map<std::string, std::set<std::string>>> pods;  // revision -> role -> Pod IPs
  std::map<std::string, double> shares;                                       // every observed revision
};

std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

const std::string* Label(const Endpoint& e, const std::string& key) {
  auto it = e.labels.find(key);
  return it == e.labels.end() || it->second.empty() ? nullptr : &it->second;
}

class RolloutScreener : public Plugin, public Screener, public ResponseHeaderSource, public MetricsSource {
 public:
  RolloutScreener(TypedName tn, RolloutOptions o) : Plugin(std::move(tn)), o_(std::move(o)) {}
  const Screener* AsScreener() const override { return this; }
  const ResponseHeaderSource* AsResponseHeaderSource() const override { return this; }
  const MetricsSource* AsMetricsSource() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kLabels}; }
  Params EffectiveParams() const override { return Table().Effective(o_); }

  std::vector<const Endpoint*> Screen(const SchedulingContext& ctx, Candidates candidates) const override {
    std::vector<const Endpoint*> cur(candidates.begin(), candidates.end());
    if (o_.Gating()) {
      const Distribution d = Compute(ctx.endpoints);
      Publish(d);
      std::map<std::string, double> allowed;  // revisions among the candidates that may serve
      for (const Endpoint* e : cur)
        if (const std::string* rev = Label(*e, o_.revision_label))
          if (auto it = d.shares.find(*rev); it != d.shares.end() && it->second > 0) allowed[*rev] = it->second;
      std::string chosen;
      if (!HasStrictHeader(*ctx.request)) chosen = Draw(allowed, ctx.rng ? ctx.rng->Uniform() : 0.0);
      std::erase_if(cur, [&](const Endpoint* e) {
        const std::string* rev = Label(*e, o_.revision_label);
        return rev == nullptr || !allowed.contains(*rev) || (!chosen.empty() && *rev != chosen);
      });
      if (cur.empty()) return cur;
    }
    for (const HeaderSelector& s : o_.selectors) {
      if (!s.strict) continue;
      const std::optional<std::string_view> want = ctx.request->header(s.header);
      if (!want || want->empty()) continue;
      std::erase_if(cur, [&](const Endpoint* e) {
        const std::string* v = Label(*e, s.label);
        return v == nullptr || *v != *want;
      });
      if (cur.empty()) {
        std::lock_guard<std::mutex> lock(mu_);
        ++no_match_[s.name];
        return cur;
      }
    }
    return cur;
  }

  void ResponseHeaders(const SchedulingContext&, std::span<const ProfileRun> runs, std::string_view primary_profile,
                       std::vector<std::pair<std::string, std::string>>& out) const override {
    for (const ProfileRun& r : runs) {
      if (r.profile != primary_profile || r.picked.empty()) continue;
      for (const HeaderSelector& s : o_.selectors)
        if (const std::string* v = Label(*r.picked.front(), s.label)) out.emplace_back(s.header, *v);
      return;
    }
  }

  void CollectMetrics(std::vector<PluginMetric>& out) const override {
    std::lock_guard<std::mutex> lock(mu_);
    const std::pair<std::string, std::string> type{"plugin_type", std::string(kDisaggregatedSetRolloutScreenerType)};
    const std::pair<std::string, std::string> plugin{"plugin_name", name()};
    for (const HeaderSelector& s : o_.selectors) {
      if (!s.strict) continue;
      PluginMetric m;
      m.name = "llm_d_epp_disaggregatedset_strict_header_no_match_total";
      m.type = "counter";
      m.help = "Strict header selections that matched no endpoint (the request failed closed).";
      m.labels = {type, plugin, {"selector", s.name}};
      auto it = no_match_.find(s.name);
      m.value = it == no_match_.end() ? 0 : static_cast<double>(it->second);
      out.push_back(std::move(m));
    }
    for (const auto& [revision, share] : shares_) {
      PluginMetric m;
      m.name = "llm_d_epp_disaggregatedset_revision_gating_share";
      m.type = "gauge";
      m.help = "Share of traffic (0 to 1) revision gating gives each observed revision; 0 while a required role has "
               "no Ready Pod.";
      m.labels = {type, plugin, {"mode", o_.mode}, {"revision", revision}};
      m.value = share;
      out.push_back(std::move(m));
    }
  }

  Distribution Compute(std::span<const Endpoint> pool) const {
    Distribution d;
    for (const Endpoint& e : pool) {
      if (!o_.scope.Matches(e.labels)) continue;
      const std::string* rev = Label(e, o_.revision_label);
      const std::string* role = Label(e, o_.role_label);
      if (rev && role) d.pods[*rev][*role].insert(HostOf(e.address));
    }
    auto count = [&](const std::map<std::string, std::set<std::string>>& by_role, const std::string& role) {
      auto it = by_role.find(role);
      return it == by_role.end() ? int64_t{0} : static_cast<int64_t>(it->second.size());
    };
    std::map<std::string, int64_t> weights;
    for (const auto& [rev, by_role] : d.pods) {
      int64_t sum = 0;
      bool covered = true;
      for (const std::string& role : o_.roles) {
        covered = covered && count(by_role, role) > 0;
        sum += count(by_role, role);
      }
      if (covered) weights[rev] = sum;
    }
    if (o_.mode == "max-role") {
      std::string dominant;
      int64_t best = -1;
      for (const std::string& role : o_.roles) {
        int64_t total = 0;
        for (const auto& [rev, w] : weights) total += count(d.pods[rev], role);
        if (total > best) best = total, dominant = role;
      }
      for (auto& [rev, w] : weights) w = count(d.pods[rev], dominant);
    }
    int64_t total = 0;
    for (const auto& [rev, w] : weights) total += w;
    for (const auto& [rev, by_role] : d.pods) {
      auto it = weights.find(rev);
      d.shares[rev] = total > 0 && it != weights.end() ? static_cast<double>(it->second) / static_cast<double>(total) : 0.0;
    }
    return d;
  }

 private:
  bool HasStrictHeader(const InferenceRequest& r) const {
    for (const HeaderSelector& s : o_.selectors)
      if (s.strict)
        if (std::optional<std::string_view> v = r.header(s.header); v && !v->empty()) return true;
    return false;
  }

  // One revision drawn with probability proportional to its share (revisions in name order).
  static std::string Draw(const std::map<std::string, double>& shares, double u) {
    double total = 0;
    for (const auto& [rev, s] : shares) total += s;
    if (total <= 0) return {};
    double x = u * total;
    for (const auto& [rev, s] : shares) {
      if (x < s) return rev;
      x -= s;
    }
    return shares.rbegin()->first;
  }

  void Publish(const Distribution& d) const {
    std::lock_guard<std::mutex> lock(mu_);
    shares_ = d.shares;  // a revision that left the pool leaves the gauge too
  }

  RolloutOptions o_;
  mutable std::mutex mu_;
  mutable std::map<std::string, int64_t> no_match_;
  mutable std::map<std::string, double> shares_;
};

}  // namespace

PluginSchema DisaggregatedSetRolloutScreenerSchema() { return Table().Schema(); }

PluginOr CreateDisaggregatedSetRolloutScreener(const std::string& name, const Params& params, const PluginContext&) {
  const std::string at = params.path().empty() ? std::string("parameters") : params.path();
  if (params.is_null() || (params.is_map() && params.entries().empty()))
    return absl::InvalidArgumentError(absl::StrCat(at, ": disaggregatedset-rollout-screener requires parameters"));
  EPP_ASSIGN_OR_RETURN(RolloutOptions o, Table().Read(params));
  if (o.scope_text.empty()) return absl::InvalidArgumentError(absl::StrCat(at, ".scope.labelSelector: is required"));
  if (!o.gating_given) return absl::InvalidArgumentError(absl::StrCat(at, ".revisionGating: is required"));
  if (o.Gating()) {
    if (!o.roles_given)
      return absl::InvalidArgumentError(
          absl::StrCat(at, ".revisionGating.requireRoles: is required when revisionGating.mode is ", o.mode));
    if (o.roles.empty())
      return absl::InvalidArgumentError(absl::StrCat(at, ".revisionGating.requireRoles.values: must name at least one role"));
  }
  return std::make_unique<RolloutScreener>(TN(kDisaggregatedSetRolloutScreenerType, name), std::move(o));
}

}  // namespace epp::plugins
