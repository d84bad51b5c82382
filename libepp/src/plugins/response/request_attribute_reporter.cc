// request-attribute-reporter (llm-d's): one number computed from the response's token usage with
// an expression (usage_expr.h, the CEL subset its configs use), returned to the gateway as
// ext_proc dynamic metadata `namespace` / `name` (default namespace envoy.lb) on the response's
// last body message, e.g. a request cost for a rate limiter. As in llm-d: exactly one attribute;
// an optional condition decides whether to report; the value is truncated to an integer and 0 is
// not written; an expression that fails on this usage (a missing field without has(), a string)
// writes nothing. A deviation: -1 is written (llm-d loses it to an internal error marker).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "epp/scheduling.h"
#include "plugins/response/usage_expr.h"
#include "plugins/response/response.h"

namespace epp::plugins {
namespace {

struct ReporterOptions {
  std::string ns, key;
  std::optional<UsageExpression> expr;  // nullopt only until `attributes` is read (it is required)
  std::optional<UsageExpression> cond;
};

// attributes: [{key: {namespace, name}, expression, condition}], exactly one entry.
absl::Status ReadAttributes(const Params& list, ReporterOptions& o) {
  if (list.kind() != Params::Kind::kList || list.items().size() != 1)
    return absl::InvalidArgumentError(absl::StrCat(list.path(), ": must contain exactly one entry"));
  const Params& a = list.items()[0];
  EPP_RETURN_IF_ERROR(a.CheckKeys({"key", "expression", "condition"}));
  const Params* key = a.Find("key");
  if (!key || key->kind() != Params::Kind::kMap) return absl::InvalidArgumentError(absl::StrCat(a.path(), ".key: expected {namespace, name}"));
  EPP_RETURN_IF_ERROR(key->CheckKeys({"namespace", "name"}));
  EPP_ASSIGN_OR_RETURN(o.ns, key->GetString("namespace", ""));
  if (o.ns.empty()) o.ns = "envoy.lb";
  EPP_ASSIGN_OR_RETURN(o.key, key->GetString("name", ""));
  if (o.key.empty()) return absl::InvalidArgumentError(absl::StrCat(key->path(), ".name: must not be empty"));
  EPP_ASSIGN_OR_RETURN(std::string expr_text, a.GetString("expression", ""));
  if (expr_text.empty()) return absl::InvalidArgumentError(absl::StrCat(a.path(), ".expression: must not be empty"));
  absl::StatusOr<UsageExpression> expr = UsageExpression::Compile(expr_text);
  if (!expr.ok())
    return absl::InvalidArgumentError(absl::StrCat(a.path(), ".expression '", expr_text, "': ", expr.status().message()));
  o.expr = std::move(*expr);
  EPP_ASSIGN_OR_RETURN(std::string cond_text, a.GetString("condition", ""));
  if (!cond_text.empty()) {
    absl::StatusOr<UsageExpression> c = UsageExpression::Compile(cond_text);
    if (!c.ok())
      return absl::InvalidArgumentError(absl::StrCat(a.path(), ".condition '", cond_text, "': ", c.status().message()));
    o.cond = std::move(*c);
  }
  return absl::OkStatus();
}

Params WriteAttributes(const ReporterOptions& o) {
  if (!o.expr) return Params();
  Params a = Params::Map();
  a.Set("key", Params::Map().Set("namespace", Params::String(o.ns)).Set("name", Params::String(o.key)));
  a.Set("expression", Params::String(o.expr->text()));
  if (o.cond) a.Set("condition", Params::String(o.cond->text()));
  Params list = Params::List();
  list.Append(std::move(a));
  return list;
}

const ParamTable<ReporterOptions>& Table() {
  static const auto* t = &(*new ParamTable<ReporterOptions>())
                              .Custom("attributes", ParamType::kList,
                                      "exactly one {key: {namespace (envoy.lb), name}, expression, condition}: the "
                                      "value computed from the response's usage and where it is written (required)",
                                      ReadAttributes, WriteAttributes);
  return *t;
}

class RequestAttributeReporter : public Plugin, public ResponseMetadataSource {
 public:
  RequestAttributeReporter(TypedName tn, ReporterOptions o)
      : Plugin(std::move(tn)), o_(o), ns_(std::move(o.ns)), key_(std::move(o.key)), expr_(std::move(*o.expr)), cond_(std::move(o.cond)) {}
  const ResponseMetadataSource* AsResponseMetadataSource() const override { return this; }

  Params EffectiveParams() const override { return Table().Effective(o_); }

  void ResponseMetadata(const ResponseUsage& usage, std::vector<ResponseMetadataEntry>& out) const override {
    if (cond_) {
      absl::StatusOr<UsageValue> c = cond_->Evaluate(usage);
      if (!c.ok() || !std::holds_alternative<bool>(*c) || !std::get<bool>(*c)) return;
    }
    absl::StatusOr<UsageValue> v = expr_.Evaluate(usage);
    if (!v.ok() || !std::holds_alternative<double>(*v)) return;
    const double x = std::get<double>(*v);
    if (!std::isfinite(x) || std::fabs(x) >= 9.2e18) return;
    const int64_t n = static_cast<int64_t>(x);  // truncated, as llm-d does
    if (n == 0) return;
    out.push_back(ResponseMetadataEntry{ns_, key_, static_cast<double>(n)});
  }

 private:
  ReporterOptions o_;  // as configured, for EffectiveParams
  std::string ns_, key_;
  UsageExpression expr_;
  std::optional<UsageExpression> cond_;
};

}  // namespace

PluginOr CreateRequestAttributeReporter(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(ReporterOptions o, Table().Read(params));
  if (!o.expr) return absl::InvalidArgumentError(absl::StrCat(params.path(), ".attributes: must contain exactly one entry"));
  return std::make_unique<RequestAttributeReporter>(TN(kRequestAttributeReporterType, name), std::move(o));
}

PluginSchema RequestAttributeReporterSchema() { return Table().Schema(); }

}  // namespace epp::plugins
